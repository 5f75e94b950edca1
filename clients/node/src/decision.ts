/** What the limiter decided for one request, as handlers see it (SPEC D). */

/** SPEC D1 */
export type Outcome = 'allowed' | 'limited' | 'store_error' | 'not_limited' | 'invalid_input' | 'bad_request';

/** One policy's bucket after this request (allowed), or as it stands (refused). */
export interface PolicyResult {
  name: string;
  key: string;
  capacity: number;
  rate: number;
  cost: number;
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
  private readonly refunder: Refunder | undefined;

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
