/** What the limiter decided for one request, as handlers see it (SPEC D, N, G). */
import type { Response } from './headers.js';
import { type LeaseOps, LeaseRun } from './lease.js';
import type { LimitKind } from './policy.js';

/** SPEC D1 */
export type Outcome = 'allowed' | 'limited' | 'store_error' | 'not_limited' | 'invalid_input' | 'bad_request';

/** One policy's bucket after this request (allowed), or as it stands (refused). */
export interface PolicyResult {
  name: string;
  key: string;
  /** a window's limit (W2), an in-flight policy's n (N3) */
  capacity: number;
  /** tokens per second; a window's limit / seconds (W2); null for an in-flight policy (N3) */
  rate: number | null;
  cost: number;
  /** absent: a bucket (SPEC C10 names the kinds) */
  kind?: LimitKind;
  /** a window policy's window in seconds (SPEC W2: the header's w is its ceiling) */
  window?: number;
  /** this bucket alone had `cost` tokens */
  allowed: boolean;
  remaining: number;
  /** 0 when this bucket had enough, -1 when it never will (cost > capacity) */
  retryAfter: number;
  resetAfter: number;
  /** the policy is in shadow mode (observed, not enforced) */
  shadow: boolean;
}

/** The public surface of a {@link Decision} (what request/response objects are typed with). */
export interface DecisionView {
  readonly outcome: Outcome;
  readonly allowed: boolean;
  readonly results: readonly PolicyResult[];
  readonly error: unknown;
  readonly shadowLimited: readonly string[];
  readonly fromCache: boolean;
  readonly charged: boolean;
  refunded: boolean;
  readonly limited: boolean;
  readonly storeError: boolean;
  readonly cached: boolean;
  readonly violated: string[];
  readonly remaining: number | null;
  readonly retryAfter: number | null;
  readonly resetAfter: number | null;
  /** invalid_input: the policy whose cost or limit was out of range; bad_request: the header */
  readonly culprit: string | null;
  /** SPEC K6: invalid_input of a call Redis answered CROSSSLOT: the policies of that call */
  readonly crossSlot: readonly string[] | null;
  refund(): Promise<boolean>;
  /** SPEC N6: the lease of this request's in-flight policy, null when none was taken */
  readonly lease: Lease | null;
  /** SPEC G1: take a hold of `estimate` on a settleLater policy (ttl in seconds, default 60) */
  hold(policy: string, estimate: number, ttl?: number): Promise<Hold>;
  /** SPEC N4, G5: the response ended: release the lease (once; later calls do nothing), stop renewing holds */
  finish(): Promise<void>;
  /** SPEC N5, N7: renew the lease now (or end the request past its max_duration); false when nothing was renewed */
  renew(): Promise<boolean>;
  /** SPEC N5, N7: renew the lease every lease / 2 (an unref'd timer) until {@link finish} or max_duration */
  keepAlive(): void;
  /** SPEC N7: the limiter ended this request at its in-flight policy's max_duration */
  readonly timedOut: boolean;
  /**
   * SPEC N7: aborted when the limiter ends the request at its max_duration (the adapters
   * then end the response); pass it on to work the response waits for.
   */
  readonly signal: AbortSignal;
}

/** SPEC N6: one request's lease of an in-flight policy. */
export interface Lease {
  readonly key: string;
  readonly id: string;
  readonly policy: string;
}

/** SPEC G1: what a check resolved for a settleLater policy (its key and limit for this request). */
export interface SettleTarget {
  readonly policy: string;
  readonly key: string;
  readonly capacity: number;
  readonly rate: number;
}

/** SPEC G3: the answer of `hold.settle(actual)`. */
export interface Settlement {
  /** false for a hold settled already, expired or refused: nothing changed */
  readonly settled: boolean;
  readonly remaining: number;
  /** actual minus estimate, as the module bounded it (0 when not settled) */
  readonly charged: number;
  readonly resetAfter: number;
}

/** SPEC G2: a hold taken on a settleLater policy. */
export interface Hold {
  readonly policy: string;
  readonly key: string;
  readonly allowed: boolean;
  readonly remaining: number;
  readonly retryAfter: number;
  readonly resetAfter: number;
  /** null when refused */
  readonly id: string | null;
  readonly estimate: number;
  /** the policy's part of it, as a PolicyResult (SPEC G2: the 429's headers and body) */
  readonly result: PolicyResult;
  /** SPEC G2: the 429 the adapters send for a refused hold (null when allowed) */
  readonly response: Response | null;
  /** SPEC G3: settle with the actual cost; a second call sends nothing and says settled false */
  settle(actual: number): Promise<Settlement>;
  /**
   * SPEC G5: one renewal now (TB.RENEW key id ttl_ms; the hold's timer does it every
   * ttl / 2); false when nothing was renewed (refused, settled, lost, its response ended,
   * or the call failed)
   */
  renew(): Promise<boolean>;
}

/** A hold as the decision keeps it: its renewals start and stop with the response (G5). */
export interface RunningHold extends Hold {
  start(): void;
  stop(): void;
}

/** The limiter's side of a decision's lease and holds (SPEC N4-N7, G1). */
export interface DecisionOps extends LeaseOps {
  /** G1 */
  hold(target: SettleTarget, estimate: number, ttl: number): Promise<RunningHold>;
}

/** A signal never aborted (a decision without a lease). */
const NEVER = new AbortController().signal;

export type Refunder = (decision: Decision) => Promise<boolean>;

export interface DecisionInit {
  outcome: Outcome;
  allowed: boolean;
  results?: readonly PolicyResult[];
  error?: unknown;
  refunder?: Refunder;
  shadowLimited?: readonly string[];
  fromCache?: boolean;
  /** whether the request's tokens were taken (allowed by Redis) */
  charged?: boolean;
  culprit?: string | null;
  crossSlot?: readonly string[] | null;
  lease?: Lease | null;
  leaseMs?: number;
  /** SPEC N7 */
  maxDurationMs?: number;
}

/**
 * The typed decision for one request. `allowed` says whether the request goes on (for a
 * store error: the failure mode). `results` has one entry per applied policy, in order
 * (empty for a store error or when no policy applied; for a deny-cache hit, the cached
 * violated policies only).
 */
export class Decision implements DecisionView {
  readonly outcome: Outcome;
  readonly allowed: boolean;
  readonly results: readonly PolicyResult[];
  /** the Redis error behind a store_error (undefined during the cool-down after one) */
  readonly error: unknown;
  /** shadow policies that refused this request (it went on: nothing was charged) */
  readonly shadowLimited: readonly string[];
  /** refused by the local deny cache, without asking Redis */
  readonly fromCache: boolean;
  /** whether tokens were taken for this request */
  readonly charged: boolean;
  refunded = false;
  /** invalid_input: the policy whose cost or limit was out of range; bad_request: the header */
  readonly culprit: string | null;
  /** SPEC K6 */
  readonly crossSlot: readonly string[] | null;
  /** SPEC N6 */
  readonly lease: Lease | null;
  private readonly refunder: Refunder | undefined;
  private readonly leaseMs: number;
  private readonly maxDurationMs: number;
  private run: LeaseRun | null = null;
  private ops: DecisionOps | null = null;
  private settleTargets: ReadonlyMap<string, SettleTarget> | null = null;
  /** SPEC G5: the holds taken on this decision, renewed until the response ends */
  private holds: RunningHold[] | null = null;
  private finished = false;

  constructor(init: DecisionInit) {
    this.outcome = init.outcome;
    this.allowed = init.allowed;
    this.results = init.results ?? [];
    this.error = init.error;
    this.refunder = init.refunder;
    this.shadowLimited = init.shadowLimited ?? [];
    this.fromCache = init.fromCache ?? false;
    this.charged = init.charged ?? false;
    this.culprit = init.culprit ?? null;
    this.crossSlot = init.crossSlot ?? null;
    this.lease = init.lease ?? null;
    this.leaseMs = init.leaseMs ?? 0;
    this.maxDurationMs = init.maxDurationMs ?? 300_000;
  }

  /**
   * The limiter attaches its lease and hold operations, and the settleLater targets
   * (SPEC G1); a lease's max_duration (N7) counts from here, its grant.
   */
  attach(ops: DecisionOps, settle: ReadonlyMap<string, SettleTarget> | null): this {
    this.ops = ops;
    this.settleTargets = settle;
    if (this.lease !== null && this.run === null) this.run = new LeaseRun(this.lease, this.leaseMs, this.maxDurationMs, ops);
    return this;
  }

  /** SPEC N4, G5: whether the end of the response matters (a lease to release, holds to stop renewing). */
  get tracksResponse(): boolean {
    return this.run !== null || this.settleTargets !== null;
  }

  /** SPEC N7 */
  get timedOut(): boolean {
    return this.run?.timedOut ?? false;
  }

  /** SPEC N7: aborted when the limiter ends this request at its max_duration. */
  get signal(): AbortSignal {
    return this.run?.signal ?? NEVER;
  }

  /**
   * SPEC G1: TB.HOLD `estimate` on the settleLater policy `policy` (its key and limit as
   * this check resolved them), for `ttl` seconds (default 60). Throws (sending nothing)
   * for an estimate that is not a cost > 0, a bad ttl, or a policy name that is not a
   * settleLater policy of this check; a failed call rejects with the store's error.
   */
  async hold(policy: string, estimate: number, ttl = 60): Promise<Hold> {
    const target = this.settleTargets?.get(policy);
    if (target === undefined || this.ops === null) {
      throw new RangeError(`'${String(policy)}' is not a settleLater policy of this check (or it was skipped for this request)`);
    }
    if (!(typeof estimate === 'number' && estimate > 0 && estimate <= 2 ** 53)) {
      throw new RangeError(`policy '${policy}': a hold's estimate must be > 0 and <= 2^53, got ${String(estimate)}`);
    }
    if (!(typeof ttl === 'number' && Number.isFinite(ttl) && ttl > 0 && Math.ceil(ttl * 1000) <= 31536000000)) {
      throw new RangeError(`policy '${policy}': a hold's ttl must be > 0 and <= 31536000 seconds, got ${String(ttl)}`);
    }
    const hold = await this.ops.hold(target, estimate, ttl);
    // SPEC G5: renewed while the request runs (not once its response ended)
    if (!this.finished && !this.timedOut) {
      (this.holds ??= []).push(hold);
      hold.start();
    }
    return hold;
  }

  /**
   * SPEC N4, G5: the response ended (sent, disconnected, raised or cancelled): the lease
   * ends exactly once, and the holds taken on this decision are no longer renewed. Later
   * calls (and calls without a lease) do nothing.
   */
  finish(): Promise<void> {
    this.stopHolds();
    return this.run === null ? Promise.resolve() : this.run.finish();
  }

  /** SPEC N5, N7: one tick of the lease's renewal timer (every lease / 2, and at max_duration). */
  async renew(): Promise<boolean> {
    if (this.run === null) return false;
    const out = await this.run.renew();
    // SPEC N7: the request ended at its max_duration: its holds are no longer renewed
    if (this.run.timedOut) this.stopHolds();
    return out;
  }

  /** SPEC N5, N7: renew every lease / 2 until the lease ends (the timer never keeps the process alive). */
  keepAlive(): void {
    this.run?.keepAlive(() => this.renew());
  }

  private stopHolds(): void {
    this.finished = true;
    if (this.holds === null) return;
    for (const h of this.holds) h.stop();
    this.holds = null;
  }

  /**
   * The decision of per-policy results (SPEC D1, D3, D4, S2, S3): limited when an enforced
   * policy refused, else allowed (charged only when Redis admitted every policy).
   */
  static fromResults(results: readonly PolicyResult[], init: { charged?: boolean; refunder?: Refunder; fromCache?: boolean } = {}): Decision {
    let enforcedRefused = false;
    let shadowLimited: string[] | undefined;
    for (let i = 0; i < results.length; i++) {
      const r = results[i]!;
      if (r.allowed) continue;
      if (r.shadow) (shadowLimited ??= []).push(r.name);
      else enforcedRefused = true;
    }
    if (enforcedRefused) {
      return new Decision({ outcome: 'limited', allowed: false, results, shadowLimited, fromCache: init.fromCache ?? false });
    }
    const charged = (init.charged ?? false) && shadowLimited === undefined;
    return new Decision({
      outcome: 'allowed', allowed: true, results, shadowLimited, charged, refunder: charged ? init.refunder : undefined,
    });
  }

  get limited(): boolean {
    return this.outcome === 'limited';
  }

  get storeError(): boolean {
    return this.outcome === 'store_error';
  }

  /** @deprecated the SPEC's name is `fromCache` */
  get cached(): boolean {
    return this.fromCache;
  }

  /** SPEC D4: the enforced policies that refused this request, in policy order. */
  get violated(): string[] {
    if (this.outcome !== 'limited') return [];
    return this.results.filter((r) => !r.allowed && !r.shadow).map((r) => r.name);
  }

  /** SPEC D3: the smallest remaining of the enforced policies (null when none applied). */
  get remaining(): number | null {
    let out: number | null = null;
    for (const r of this.results) if (!r.shadow && (out === null || r.remaining < out)) out = r.remaining;
    return out;
  }

  /**
   * SPEC D3: the largest wait among the enforced violated policies; null when one of them
   * can never pass, or none refused.
   */
  get retryAfter(): number | null {
    if (this.outcome !== 'limited') return null;
    let out: number | null = null;
    for (const r of this.results) {
      if (r.allowed || r.shadow) continue;
      if (r.retryAfter < 0) return null;
      if (out === null || r.retryAfter > out) out = r.retryAfter;
    }
    return out;
  }

  /** SPEC D3: the largest reset of the enforced policies (null when none applied). */
  get resetAfter(): number | null {
    let out: number | null = null;
    for (const r of this.results) if (!r.shadow && (out === null || r.resetAfter > out)) out = r.resetAfter;
    return out;
  }

  /**
   * SPEC F1: give this request's tokens back now (TB.REFUND on every bucket it was charged
   * on); true when every refund succeeded. Idempotent; false (a no-op) for a request that
   * was not charged (refused, shadow-limited, from the cache, store error, not limited).
   * Never rejects for a store error (it is logged and counted).
   */
  async refund(): Promise<boolean> {
    if (this.refunded || this.outcome !== 'allowed' || !this.charged || !this.refunder) return false;
    this.refunded = true;
    return this.refunder(this);
  }

  toString(): string {
    return `Decision(${this.outcome}, allowed=${this.allowed}, [${this.results.map((r) => `${r.name}:${r.remaining}`).join(', ')}])`;
  }
}
