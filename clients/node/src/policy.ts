/**
 * Policies: a named limit (capacity and rate, fixed or chosen per request), whose bucket
 * a request's identity picks, charged a cost per request, on some routes.
 */

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyRequest = any;

type MaybePromise<T> = T | Promise<T>;

/** request -> identity (a user id, an API key, a tenant), or null to skip the policy. */
export type KeyFunc<Req = AnyRequest> = (request: Req) => MaybePromise<string | null | undefined>;
/** request -> tokens this request costs (>= 0). */
export type CostFunc<Req = AnyRequest> = (request: Req) => MaybePromise<number>;
/** request -> the limit for this request (plan tiers), or null to skip the policy. */
export type LimitFunc<Req = AnyRequest> = (request: Req) => MaybePromise<Limit | null | undefined>;

const NAME = /^[a-z0-9_-]+$/;
const MAX = 2 ** 53;

/** A bucket's shape: `capacity` tokens (the burst), refilled at `rate` per second. */
export class Limit {
  readonly capacity: number;
  readonly rate: number;

  constructor(capacity: number, rate: number) {
    // The module's ranges, checked here so a typo fails at startup, not per request.
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
}

/** Normalise `'METHOD /template'` strings (the method upper-cased). */
export function routeSet(routes: string | readonly string[] | undefined | null): ReadonlySet<string> | null {
  if (routes === undefined || routes === null) return null;
  const list = typeof routes === 'string' ? [routes] : routes;
  const out = new Set<string>();
  for (const r of list) {
    const t = r.trim();
    const sp = t.indexOf(' ');
    const path = sp < 0 ? '' : t.slice(sp + 1).trim();
    if (sp < 0 || !path.startsWith('/')) throw new RangeError(`a route is 'METHOD /template', got ${JSON.stringify(r)}`);
    out.add(`${t.slice(0, sp).toUpperCase()} ${path}`);
  }
  return out;
}

export interface PolicyOptions<Req = AnyRequest> {
  /** a token of `[a-z0-9_-]+`, used in the bucket key and in the headers */
  name: string;
  /** a Limit, or a function of the request returning one (plan tiers) or null (skip) */
  limit: Limit | LimitFunc<Req>;
  /** the identity; default: the limiter's client IP. null skips the policy */
  key?: KeyFunc<Req>;
  /** tokens per request: a number or a function of the request; default 1 */
  cost?: number | CostFunc<Req>;
  /** `'METHOD /template'` strings this policy applies to; default: every route */
  routes?: string | readonly string[];
  /** one bucket per route (the route is part of the key) */
  perRoute?: boolean;
  /** observed, not enforced: charged as usual, a refusal lets the request go on */
  shadow?: boolean;
}

/** One named limit. */
export class Policy<Req = AnyRequest> {
  readonly name: string;
  readonly limit: Limit | LimitFunc<Req>;
  readonly key: KeyFunc<Req> | undefined;
  readonly cost: number | CostFunc<Req>;
  readonly routes: ReadonlySet<string> | null;
  readonly perRoute: boolean;
  readonly shadow: boolean;

  constructor(options: PolicyOptions<Req>) {
    if (!NAME.test(options.name)) {
      throw new RangeError(`a policy name is a token of [a-z0-9_-]+, got ${JSON.stringify(options.name)}`);
    }
    const cost = options.cost ?? 1;
    if (typeof cost === 'number' && !(cost >= 0 && cost <= MAX)) {
      throw new RangeError(`cost must be >= 0 and <= 2^53, got ${cost}`);
    }
    if (!(options.limit instanceof Limit) && typeof options.limit !== 'function') {
      throw new TypeError(`policy ${options.name}: limit must be a Limit or a function`);
    }
    this.name = options.name;
    this.limit = options.limit;
    this.key = options.key;
    this.cost = cost;
    this.routes = routeSet(options.routes);
    this.perRoute = options.perRoute ?? false;
    this.shadow = options.shadow ?? false;
  }

  appliesTo(route: string | null): boolean {
    if (this.routes === null) return true;
    return route !== null && this.routes.has(route);
  }

  async limitFor(request: Req): Promise<Limit | null> {
    if (this.limit instanceof Limit) return this.limit;
    const out = await this.limit(request);
    if (out === null || out === undefined) return null;
    if (!(out instanceof Limit)) throw new TypeError(`policy ${this.name}: the limit function returned ${String(out)}`);
    return out;
  }

  async costFor(request: Req): Promise<number> {
    if (typeof this.cost === 'number') return this.cost;
    const out = await this.cost(request);
    if (!(typeof out === 'number' && out >= 0 && out <= MAX)) {
      throw new RangeError(`policy ${this.name}: cost must be >= 0 and <= 2^53, got ${String(out)}`);
    }
    return out;
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
  tiers: Readonly<Record<string, Limit | null>>,
  tier: (request: Req) => MaybePromise<string | null | undefined>,
  opts: PerOptions<Req> & { default?: string } = {},
): Policy<Req> {
  const table = new Map(Object.entries(tiers));
  const { default: fallback, ...rest } = opts;
  if (fallback !== undefined && !table.has(fallback)) {
    throw new RangeError(`default tier ${JSON.stringify(fallback)} is not in the tiers`);
  }
  const limit = async (request: Req): Promise<Limit | null> => {
    let plan = await tier(request);
    if (plan === null || plan === undefined || !table.has(plan)) plan = fallback;
    return plan === undefined ? null : (table.get(plan) ?? null);
  };
  return new Policy<Req>({ ...rest, name, limit });
}
