/**
 * Policies: a named limit (capacity and rate, fixed or chosen per request), whose bucket
 * a request's identity picks, charged a cost per request, on some routes.
 */

/**
 * The framework's request type when none is given. `any` on purpose: an application's key,
 * cost and limit functions read their framework's request; the adapters narrow it
 * (`Policy<Request>` for Express, `Policy<FastifyRequest>` for Fastify).
 */
export type AnyRequest = any;

type MaybePromise<T> = T | Promise<T>;

/** request -> identity (a user id, an API key, a tenant), or null/'' to skip the policy (SPEC I1). */
export type KeyFunc<Req = AnyRequest> = (request: Req) => MaybePromise<string | null | undefined>;
/** request -> tokens this request costs (>= 0; out of range: SPEC L3). */
export type CostFunc<Req = AnyRequest> = (request: Req) => MaybePromise<number>;
/** The shape a limit function may return: a {@link Limit}, or `{ capacity, rate }` (checked per request, SPEC L3). */
export interface LimitLike {
  readonly capacity: number;
  readonly rate: number;
}
/** request -> the limit for this request (plan tiers), or null to skip the policy. */
export type LimitFunc<Req = AnyRequest> = (request: Req) => MaybePromise<LimitLike | WindowLimit | InFlightLimit | null | undefined>;

/** SPEC C11: the most policies one limiter holds (the module's bound on the keys of one call) */
export const MAX_POLICIES = 64;

/** SPEC C1 */
const NAME = /^[a-z0-9_-]{1,64}$/;
const MAX = 2 ** 53;

/** SPEC C2: whether a capacity and a rate are in the module's ranges. */
export function validLimit(capacity: unknown, rate: unknown): boolean {
  return typeof capacity === 'number' && capacity > 0 && capacity <= MAX
    && typeof rate === 'number' && rate >= 1e-9 && rate <= MAX;
}

/** SPEC C3: whether a cost is in range. */
export function validCost(cost: unknown): cost is number {
  return typeof cost === 'number' && cost >= 0 && cost <= MAX;
}

/** SPEC C1: a policy name. */
export function validPolicyName(name: unknown): name is string {
  return typeof name === 'string' && NAME.test(name);
}

/** A limit function's kind (the tiers' of `tiered`), SPEC C10. */
const TIER_KIND: unique symbol = Symbol('redis-tb.tier-kind');

/**
 * SPEC C10: the kinds of one limiter's policies mix only as the module can check them in
 * one call: at most one in-flight policy, and a window policy alone (throws RangeError
 * naming the policies).
 */
export function checkPolicyKinds(policies: readonly { name: string; kind: LimitKind }[]): void {
  // SPEC C11: the module takes at most 64 buckets in one call
  if (policies.length > MAX_POLICIES) {
    throw new RangeError(`a limiter holds at most ${MAX_POLICIES} policies (the module takes at most ${MAX_POLICIES} keys in one call), got ${policies.length}`);
  }
  const inFlight = policies.filter((p) => p.kind === 'in_flight');
  if (inFlight.length > 1) {
    throw new RangeError(`a limiter has at most one in-flight policy, got ${inFlight.map((p) => p.name).join(', ')}`);
  }
  const windows = policies.filter((p) => p.kind === 'window');
  if (windows.length && policies.length > 1) {
    throw new RangeError(
      `a window policy is the only policy of its limiter (put ${windows.map((p) => p.name).join(', ')} in a limiter of its own), got ${policies.map((p) => p.name).join(', ')}`,
    );
  }
}

/** SPEC C1: the names of one limiter's policies are distinct (throws RangeError). */
export function checkDistinctNames(policies: readonly { name: string }[]): void {
  const names = policies.map((p) => p.name);
  if (new Set(names).size !== names.length) throw new RangeError(`policy names must be distinct: ${names.join(', ')}`);
}

/** Where a policy's identity comes from (SPEC "Names": `Key.clientIp()`, `Key.header`, `Key.fixed`, `Key.fromFn`). */
export type KeySource<Req = AnyRequest> =
  | { readonly kind: 'client_ip' }
  | { readonly kind: 'header'; readonly name: string }
  | { readonly kind: 'fixed'; readonly value: string }
  | { readonly kind: 'fn'; readonly fn: KeyFunc<Req> };

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Key sources of a policy (SPEC I1-I3). */
export const Key = {
  /** the client's address (SPEC A), the default */
  clientIp(): KeySource<never> {
    return { kind: 'client_ip' };
  },
  /** a request header's value (SPEC I2): lines joined with ', ', white space trimmed, control bytes a 400 */
  header(name: string): KeySource<never> {
    if (typeof name !== 'string' || !HEADER_NAME.test(name)) {
      throw new RangeError(`Key.header needs a header name, got ${JSON.stringify(name)}`);
    }
    return { kind: 'header', name: name.toLowerCase() };
  },
  /** the same identity for every request: one bucket for the route or the service (SPEC I3) */
  fixed(value: string): KeySource<never> {
    if (typeof value !== 'string' || value === '') throw new RangeError(`Key.fixed needs a non-empty value, got ${JSON.stringify(value)}`);
    return { kind: 'fixed', value };
  },
  /** a function of the request (SPEC I1) */
  fromFn<Req = AnyRequest>(fn: KeyFunc<Req>): KeySource<Req> {
    if (typeof fn !== 'function') throw new TypeError('Key.fromFn needs a function');
    return { kind: 'fn', fn };
  },
} as const;

/** SPEC W1: how a window counts. */
export type WindowModeName = 'sliding' | 'fixed';

/** The kind of a limit (SPEC C10): a token bucket, a window (W) or an in-flight limit (N). */
export type LimitKind = 'bucket' | 'window' | 'in_flight';

const MAX_WINDOW_SECONDS = 1e12;
const MAX_IN_FLIGHT = 10000;
const MAX_LEASE_SECONDS = 31536000;

/**
 * SPEC W1, C8: at most `limit` requests (costs) per window of `seconds`, aligned to
 * multiples of `seconds` since the epoch, checked with TB.WINDOW (W2).
 */
export class WindowLimit {
  readonly kind = 'window' as const;
  readonly limit: number;
  readonly seconds: number;
  readonly mode: WindowModeName;

  constructor(limit: number, seconds: number, mode: WindowModeName = 'sliding') {
    if (!(typeof limit === 'number' && Number.isInteger(limit) && limit >= 1 && limit <= MAX)) {
      throw new RangeError(`a window limit must be a whole number >= 1 and <= 2^53, got ${String(limit)}`);
    }
    if (!(typeof seconds === 'number' && Number.isFinite(seconds) && seconds >= 0.000001 && seconds <= MAX_WINDOW_SECONDS)) {
      throw new RangeError(`a window must be >= 0.000001 and <= 1e12 seconds, got ${String(seconds)}`);
    }
    if (mode !== 'sliding' && mode !== 'fixed') {
      throw new RangeError(`a window mode is 'sliding' or 'fixed', got ${JSON.stringify(mode)}`);
    }
    this.limit = limit;
    this.seconds = seconds;
    this.mode = mode;
  }

  /** SPEC D2, W2: a window's capacity is its limit */
  get capacity(): number {
    return this.limit;
  }

  /** SPEC D2, W2: a window's rate is limit / seconds */
  get rate(): number {
    return this.limit / this.seconds;
  }
}

/** SPEC C9: seconds as whole milliseconds, rounded up (`0.0015` is 2 ms). */
function wholeMs(seconds: number): number {
  // the product may land just above a whole number (0.0015 * 1000 = 1.5; 0.001 * 1000 = 1)
  const t = seconds * 1000;
  const near = Math.round(t);
  return Math.abs(t - near) <= 1e-9 * Math.max(1, t) ? near : Math.ceil(t);
}

/** SPEC N7: the default max_duration, in seconds */
export const DEFAULT_MAX_DURATION = 300;

/**
 * SPEC N1, C9: at most `limit` requests of a key in progress at once, each holding a lease
 * of `lease` seconds (whole milliseconds, rounded up), renewed while it runs (N5) but for
 * at most `maxDuration` seconds after its grant (N7: then the request is ended), and
 * released when its response ends (N4).
 */
export class InFlightLimit {
  readonly kind = 'in_flight' as const;
  readonly limit: number;
  /** seconds, as given */
  readonly lease: number;
  /** SPEC C9: ceil(lease x 1000) */
  readonly leaseMs: number;
  /** SPEC N7: seconds, as given (default 300) */
  readonly maxDuration: number;
  /** SPEC C9: ceil(maxDuration x 1000) */
  readonly maxDurationMs: number;

  constructor(limit: number, lease = 30, maxDuration = DEFAULT_MAX_DURATION) {
    if (!(typeof limit === 'number' && Number.isInteger(limit) && limit >= 1 && limit <= MAX_IN_FLIGHT)) {
      throw new RangeError(`an in-flight limit must be a whole number >= 1 and <= 10000, got ${String(limit)}`);
    }
    if (!(typeof lease === 'number' && Number.isFinite(lease) && lease >= 0.001 && lease <= MAX_LEASE_SECONDS)) {
      throw new RangeError(`a lease must be >= 0.001 and <= 31536000 seconds, got ${String(lease)}`);
    }
    if (!(typeof maxDuration === 'number' && Number.isFinite(maxDuration) && maxDuration >= 0.001 && maxDuration <= MAX_LEASE_SECONDS)) {
      throw new RangeError(`a max_duration must be >= 0.001 and <= 31536000 seconds, got ${String(maxDuration)}`);
    }
    this.limit = limit;
    this.lease = lease;
    this.leaseMs = wholeMs(lease);
    this.maxDuration = maxDuration;
    this.maxDurationMs = wholeMs(maxDuration);
  }

  /** SPEC N3: an in-flight policy's capacity is its limit */
  get capacity(): number {
    return this.limit;
  }
}

/** Any limit a policy may have (SPEC C10 names the kinds). */
export type AnyLimit = Limit | WindowLimit | InFlightLimit;

/** The kind of a limit. */
export function limitKind(limit: AnyLimit | LimitLike): LimitKind {
  if (limit instanceof WindowLimit) return 'window';
  if (limit instanceof InFlightLimit) return 'in_flight';
  return 'bucket';
}

/** A bucket's shape: `capacity` tokens (the burst), refilled at `rate` per second. */
export class Limit {
  readonly kind = 'bucket' as const;
  readonly capacity: number;
  readonly rate: number;

  constructor(capacity: number, rate: number) {
    // SPEC C2: the module's ranges, checked here so a typo fails at startup, not per request.
    if (!(typeof capacity === 'number' && capacity > 0 && capacity <= MAX)) {
      throw new RangeError(`capacity must be > 0 and <= 2^53, got ${capacity}`);
    }
    if (!(typeof rate === 'number' && rate >= 1e-9 && rate <= MAX)) {
      throw new RangeError(`rate must be >= 1e-9 and <= 2^53 per second, got ${rate}`);
    }
    this.capacity = capacity;
    this.rate = rate;
  }

  /** `n` per `seconds`: a burst of `n`, refilled evenly over the period. */
  static perPeriod(n: number, seconds: number): Limit {
    return new Limit(n, n / seconds);
  }
  static perSecond(n: number): Limit {
    return Limit.perPeriod(n, 1);
  }
  static perMinute(n: number): Limit {
    return Limit.perPeriod(n, 60);
  }
  static perHour(n: number): Limit {
    return Limit.perPeriod(n, 3600);
  }
  static perDay(n: number): Limit {
    return Limit.perPeriod(n, 86400);
  }

  /** SPEC W1: at most `n` per window of `seconds` (TB.WINDOW), `sliding` (default) or `fixed`. */
  static window(n: number, seconds: number, mode: WindowModeName = 'sliding'): WindowLimit {
    return new WindowLimit(n, seconds, mode);
  }
  static windowPerSecond(n: number, mode: WindowModeName = 'sliding'): WindowLimit {
    return new WindowLimit(n, 1, mode);
  }
  static windowPerMinute(n: number, mode: WindowModeName = 'sliding'): WindowLimit {
    return new WindowLimit(n, 60, mode);
  }
  static windowPerHour(n: number, mode: WindowModeName = 'sliding'): WindowLimit {
    return new WindowLimit(n, 3600, mode);
  }
  static windowPerDay(n: number, mode: WindowModeName = 'sliding'): WindowLimit {
    return new WindowLimit(n, 86400, mode);
  }

  /**
   * SPEC N1, N7: at most `n` in progress at once, each with a lease of `lease` seconds
   * (default 30), and each ended `maxDuration` seconds after its grant (default 300).
   */
  static inFlight(n: number, lease = 30, maxDuration = DEFAULT_MAX_DURATION): InFlightLimit {
    return new InFlightLimit(n, lease, maxDuration);
  }
}

/**
 * A set of routes (SPEC K5): `'METHOD /template'` (the method upper-cased) or
 * `'* /template'`, which matches every method.
 */
export class RouteSet {
  /** `'METHOD /template'` entries */
  readonly exact: ReadonlySet<string>;
  /** the templates of `'* /template'` entries */
  readonly anyMethod: ReadonlySet<string>;

  constructor(routes: string | readonly string[]) {
    const list = typeof routes === 'string' ? [routes] : routes;
    const exact = new Set<string>();
    const any = new Set<string>();
    for (const r of list) {
      const t = String(r).trim();
      const sp = t.indexOf(' ');
      const path = sp < 0 ? '' : t.slice(sp + 1).trim();
      const method = sp < 0 ? '' : t.slice(0, sp).toUpperCase();
      if (sp < 0 || !path.startsWith('/') || !/^(\*|[A-Z]+)$/.test(method)) {
        throw new RangeError(`a route is 'METHOD /template' or '* /template', got ${JSON.stringify(r)}`);
      }
      if (method === '*') any.add(path);
      else exact.add(`${method} ${path}`);
    }
    this.exact = exact;
    this.anyMethod = any;
  }

  get size(): number {
    return this.exact.size + this.anyMethod.size;
  }

  /** Whether `route` (`'METHOD /template'` of a request) is in the set. */
  has(route: string): boolean {
    if (this.exact.has(route)) return true;
    if (this.anyMethod.size === 0) return false;
    const sp = route.indexOf(' ');
    return sp >= 0 && this.anyMethod.has(route.slice(sp + 1));
  }
}

/** The routes of a policy (null: every route). */
export function routeSet(routes: string | readonly string[] | undefined | null): RouteSet | null {
  if (routes === undefined || routes === null) return null;
  return new RouteSet(routes);
}

export interface PolicyOptions<Req = AnyRequest> {
  /** a token of `[a-z0-9_-]+`, used in the bucket key and in the headers */
  name: string;
  /** a Limit (a bucket, `Limit.window`, `Limit.inFlight`), or a function of the request returning one (plan tiers) or null (skip) */
  limit: AnyLimit | LimitFunc<Req>;
  /** the identity: a {@link Key} source or a function; default `Key.clientIp()`. null / '' skips the policy */
  key?: KeySource<Req> | KeyFunc<Req>;
  /** tokens per request: a number or a function of the request; default 1 */
  cost?: number | CostFunc<Req>;
  /** `'METHOD /template'` strings this policy applies to; default: every route */
  routes?: string | readonly string[];
  /** one bucket per route (the route is part of the key) */
  perRoute?: boolean;
  /** observed, not enforced: charged as usual, a refusal lets the request go on */
  shadow?: boolean;
  /**
   * SPEC G1: not charged by the check; the handler takes a hold on it
   * (`decision.hold(name, estimate)`) and settles the actual cost. A bucket limit only (C10).
   */
  settleLater?: boolean;
}

/** One named limit. */
export class Policy<Req = AnyRequest> {
  readonly name: string;
  readonly limit: AnyLimit | LimitFunc<Req>;
  /** the kind of the policy's limit (SPEC C10); a limit function's is its tiers' (or bucket) */
  readonly kind: LimitKind;
  /** SPEC G1 */
  readonly settleLater: boolean;
  /** where the identity comes from (SPEC I) */
  readonly keySource: KeySource<Req>;
  readonly cost: number | CostFunc<Req>;
  readonly routes: RouteSet | null;
  readonly perRoute: boolean;
  readonly shadow: boolean;

  constructor(options: PolicyOptions<Req>) {
    if (!validPolicyName(options.name)) {
      throw new RangeError(`a policy name matches [a-z0-9_-]{1,64}, got ${JSON.stringify(options.name)}`);
    }
    const cost = options.cost ?? 1;
    if (typeof cost !== 'function' && !validCost(cost)) {
      throw new RangeError(`policy ${options.name}: cost must be >= 0 and <= 2^53, got ${String(cost)}`);
    }
    const limit = options.limit;
    if (!(limit instanceof Limit || limit instanceof WindowLimit || limit instanceof InFlightLimit) && typeof limit !== 'function') {
      throw new TypeError(`policy ${options.name}: limit must be a Limit or a function`);
    }
    const kind: LimitKind = typeof limit === 'function' ? ((limit as { [TIER_KIND]?: LimitKind })[TIER_KIND] ?? 'bucket') : limit.kind;
    // SPEC C9: an in-flight policy's cost is one slot
    if (kind === 'in_flight' && options.cost !== undefined) {
      throw new RangeError(`policy ${options.name}: an in-flight policy has no cost (its cost is one slot), got cost ${typeof options.cost === 'function' ? 'a function' : String(options.cost)}`);
    }
    // SPEC C10: a settle_later policy has a bucket limit
    if (options.settleLater && kind !== 'bucket') {
      throw new RangeError(`policy ${options.name}: a settleLater policy needs a bucket limit, got a ${kind} limit`);
    }
    this.kind = kind;
    this.settleLater = options.settleLater ?? false;
    this.name = options.name;
    this.limit = options.limit;
    const key = options.key;
    if (key === undefined) this.keySource = { kind: 'client_ip' };
    else if (typeof key === 'function') this.keySource = { kind: 'fn', fn: key };
    else if (key && typeof key === 'object' && ['client_ip', 'header', 'fixed', 'fn'].includes((key as { kind?: unknown }).kind as string)) {
      this.keySource = key;
    } else throw new TypeError(`policy ${options.name}: key must be a Key source or a function`);
    this.cost = cost;
    this.routes = routeSet(options.routes);
    this.perRoute = options.perRoute ?? false;
    this.shadow = options.shadow ?? false;
  }

  /** The key function of a `Key.fromFn` policy (undefined for the other key sources). */
  get key(): KeyFunc<Req> | undefined {
    return this.keySource.kind === 'fn' ? this.keySource.fn : undefined;
  }

  appliesTo(route: string | null): boolean {
    if (this.routes === null) return true;
    return route !== null && this.routes.has(route);
  }

  /** The limit for this request, unchecked (SPEC L3 checks it); null skips the policy. */
  async limitFor(request: Req): Promise<LimitLike | WindowLimit | InFlightLimit | null> {
    if (typeof this.limit !== 'function') return this.limit;
    const out = await this.limit(request);
    return out === null || out === undefined ? null : out;
  }

  /** The cost of this request, unchecked (SPEC L3 checks it). */
  async costFor(request: Req): Promise<number> {
    if (typeof this.cost === 'number') return this.cost;
    return this.cost(request);
  }
}

export type PerOptions<Req = AnyRequest> = Omit<PolicyOptions<Req>, 'name' | 'limit'>;

function per<Req>(seconds: number, name: string, n: number, opts: PerOptions<Req>): Policy<Req> {
  return new Policy<Req>({ ...opts, name, limit: Limit.perPeriod(n, seconds) });
}

/** `n` per second: capacity `n`, rate `n`/s. */
export function perSecond<Req = AnyRequest>(name: string, n: number, opts: PerOptions<Req> = {}): Policy<Req> {
  return per(1, name, n, opts);
}
/** `n` per minute: capacity `n`, rate `n`/60 per second. */
export function perMinute<Req = AnyRequest>(name: string, n: number, opts: PerOptions<Req> = {}): Policy<Req> {
  return per(60, name, n, opts);
}
/** `n` per hour: capacity `n`, rate `n`/3600 per second. */
export function perHour<Req = AnyRequest>(name: string, n: number, opts: PerOptions<Req> = {}): Policy<Req> {
  return per(3600, name, n, opts);
}
/** `n` per day: capacity `n`, rate `n`/86400 per second. */
export function perDay<Req = AnyRequest>(name: string, n: number, opts: PerOptions<Req> = {}): Policy<Req> {
  return per(86400, name, n, opts);
}

/**
 * A policy whose limit depends on the caller's plan: `tier(request)` names the plan;
 * unknown or missing plans use `default`; a plan mapped to null is not limited by this
 * policy. The bucket key does not include the plan (a client that changes plan keeps its
 * bucket; the module clamps tokens above a lowered capacity).
 */
export function tiered<Req = AnyRequest>(
  name: string,
  tiers: Readonly<Record<string, AnyLimit | null>>,
  tier: (request: Req) => MaybePromise<string | null | undefined>,
  opts: PerOptions<Req> & { default?: string } = {},
): Policy<Req> {
  const table = new Map(Object.entries(tiers));
  const { default: fallback, ...rest } = opts;
  if (fallback !== undefined && !table.has(fallback)) {
    throw new RangeError(`default tier ${JSON.stringify(fallback)} is not in the tiers`);
  }
  // SPEC C10: a tiered policy's tiers are all of one kind
  const kinds = new Set<LimitKind>();
  for (const l of table.values()) if (l !== null) kinds.add(l.kind);
  if (kinds.size > 1) throw new RangeError(`policy ${name}: the tiers of a tiered policy are all of one kind, got ${[...kinds].join(', ')}`);
  const limit = async (request: Req): Promise<AnyLimit | null> => {
    let plan = await tier(request);
    if (plan === null || plan === undefined || !table.has(plan)) plan = fallback;
    return plan === undefined ? null : (table.get(plan) ?? null);
  };
  Object.defineProperty(limit, TIER_KIND, { value: [...kinds][0] ?? 'bucket' });
  return new Policy<Req>({ ...rest, name, limit });
}
