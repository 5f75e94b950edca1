/** What the limiter decided for one request, as handlers see it. */

export type Outcome = 'allowed' | 'limited' | 'store_error' | 'not_limited';

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
  readonly remaining: number | undefined;
  readonly retryAfter: number | undefined;
  readonly resetAfter: number | undefined;
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
  }

  get limited(): boolean {
    return this.outcome === 'limited';
  }

  get storeError(): boolean {
    return this.outcome === 'store_error';
  }

  /** Alias of `fromCache`. */
  get cached(): boolean {
    return this.fromCache;
  }

  /** Names of the enforced policies that refused this request. */
  get violated(): string[] {
    if (this.outcome !== 'limited') return [];
    return this.results.filter((r) => !r.allowed && !r.shadow).map((r) => r.name);
  }

  /** The smallest remaining of the applied policies (undefined if none applied). */
  get remaining(): number | undefined {
    return this.results.length ? Math.min(...this.results.map((r) => r.remaining)) : undefined;
  }

  /**
   * 0 when allowed; -1 when a violated (enforced) policy can never admit the request; else
   * the largest wait of the violated policies. undefined when Redis was not asked.
   */
  get retryAfter(): number | undefined {
    if (!this.results.length) return undefined;
    if (this.outcome !== 'limited') return 0;
    const waits = this.results.filter((r) => !r.allowed && !r.shadow).map((r) => r.retryAfter);
    if (waits.some((w) => w < 0)) return -1;
    return waits.length ? Math.max(...waits) : 0;
  }

  /** The largest resetAfter of the applied policies. */
  get resetAfter(): number | undefined {
    return this.results.length ? Math.max(...this.results.map((r) => r.resetAfter)) : undefined;
  }

  /**
   * Give this request's tokens back (TB.REFUND on every bucket it was charged on).
   * Idempotent; false (a no-op) for a request that was not charged (refused, shadow-limited,
   * store error). Never rejects for a store error (it is logged and counted).
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
