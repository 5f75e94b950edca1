/** What the limiter decided for one request, as handlers see it (SPEC D, N, G). */
import type { Response } from './headers.js';
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
  refund(): Promise<boolean>;
  /** SPEC N6: the lease of this request's in-flight policy, null when none was taken */
  readonly lease: Lease | null;
  /** SPEC G1: take a hold of `estimate` on a settleLater policy (ttl in seconds, default 60) */
  hold(policy: string, estimate: number, ttl?: number): Promise<Hold>;
  /** SPEC N4: the response ended: release the lease (once; later calls do nothing) */
  finish(): Promise<void>;
  /** SPEC N5: renew the lease now; false when nothing was renewed (no lease, lost or ended) */
  renew(): Promise<boolean>;
  /** SPEC N5: renew the lease every lease / 2 (an unref'd timer) until {@link finish} */
  keepAlive(): void;
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
}

/** The limiter's side of leases and holds (SPEC N4, N5, G1). */
export interface LeaseOps {
  /** N4: the lease ended; `lost`: a renewal found it gone (no release is sent) */
  end(lease: Lease, lost: boolean): Promise<void>;
  /**
   * N5: true renewed, false lost, null a failed call (the next tick tries again); `live`
   * says whether the lease is still this request's when the answer comes (a renewal
   * answered after the response ended is not a lost lease).
   */
  renew(lease: Lease, leaseMs: number, live: () => boolean): Promise<boolean | null>;
  /** G1 */
  hold(target: SettleTarget, estimate: number, ttl: number): Promise<Hold>;
}

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
  lease?: Lease | null;
  leaseMs?: number;
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
  /** SPEC N6 */
  readonly lease: Lease | null;
  private readonly refunder: Refunder | undefined;
  private readonly leaseMs: number;
  private leaseState: 'held' | 'lost' | 'ended' = 'held';
  private renewing = false;
  private timer: ReturnType<typeof setInterval> | null = null;
  private ops: LeaseOps | null = null;
  private settleTargets: ReadonlyMap<string, SettleTarget> | null = null;

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
    this.lease = init.lease ?? null;
    this.leaseMs = init.leaseMs ?? 0;
  }

  /** The limiter attaches its lease and hold operations, and the settleLater targets (SPEC G1). */
  attach(ops: LeaseOps, settle: ReadonlyMap<string, SettleTarget> | null): this {
    this.ops = ops;
    this.settleTargets = settle;
    return this;
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
    return this.ops.hold(target, estimate, ttl);
  }

  /** SPEC N4: the lease ends exactly once; later calls (and calls without a lease) do nothing. */
  finish(): Promise<void> {
    if (this.lease === null || this.ops === null || this.leaseState === 'ended') return Promise.resolve();
    const lost = this.leaseState === 'lost';
    this.leaseState = 'ended';
    this.stopTimer();
    return this.ops.end(this.lease, lost);
  }

  /** SPEC N5: one renewal now (the timer of {@link keepAlive} calls it every lease / 2). */
  async renew(): Promise<boolean> {
    if (this.lease === null || this.ops === null || this.leaseState !== 'held' || this.renewing) return false;
    this.renewing = true;
    let out: boolean | null;
    try {
      out = await this.ops.renew(this.lease, this.leaseMs, () => this.leaseState === 'held');
    } finally {
      this.renewing = false;
    }
    if (out === false && this.leaseState === 'held') {
      // lost: renewals stop and no release is sent
      this.leaseState = 'lost';
      this.stopTimer();
    }
    return out === true;
  }

  /** SPEC N5: renew every lease / 2 until the lease ends (the timer never keeps the process alive). */
  keepAlive(): void {
    if (this.lease === null || this.leaseState !== 'held' || this.timer !== null) return;
    this.timer = setInterval(() => {
      void this.renew();
    }, Math.max(1, this.leaseMs / 2));
    this.timer.unref();
  }

  private stopTimer(): void {
    if (this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
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
