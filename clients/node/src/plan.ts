/**
 * The plan of one request: which of the limiter's policies apply to it (SPEC L1, K5: its
 * scope), each one's identity (A, I1-I3), key (K1-K4), limit (L2) and cost, checked against
 * C2/C3 (L3); then the one call the plan is (L4, W2, N2) and its answer as one
 * `PolicyResult` per policy (D2, N3).
 */
import type { ClientIpConfig } from './address.js';
import type { PolicyResult } from './decision.js';
import { BAD, boundedPart, escapePart, headerIdentity, joinKey } from './keys.js';
import {
  type AnyRequest, InFlightLimit, Limit, type LimitKind, type LimitLike, type Policy, RouteSet, WindowLimit, validCost, validLimit,
} from './policy.js';
import type { Acquired, Charge, MultiReply } from './replies.js';
import type { Store } from './store.js';

/** What a framework adapter knows about a request. */
export interface RequestContext<Req = AnyRequest> {
  /** the framework's request, passed to key/cost/limit functions */
  request: Req;
  /** the TCP peer's address */
  peer: string | undefined | null;
  /** the lines of a request header (lower-case name), in the order received */
  header(name: string): readonly string[];
  /** `'METHOD /template'` of the route the request matched, or null (it matched none) */
  route: string | null;
  /** aborted when the client went away: the check rejects and a deny-cache probe ends (SPEC R4) */
  signal?: AbortSignal;
}

/** One applied policy of one request. */
export interface Plan {
  policy: Policy;
  key: string;
  /** a window's limit, an in-flight policy's n */
  capacity: number;
  /** a window's limit / seconds; an in-flight policy's 0 (never sent) */
  rate: number;
  cost: number;
  shadow: boolean;
  kind: LimitKind;
  /** SPEC W2 */
  window?: WindowLimit;
  /** SPEC N2 */
  inFlight?: InFlightLimit;
  /** SPEC G1: not in the call */
  settleLater: boolean;
}

/** Why planning stopped: SPEC I2 (bad_request: the header) or L3 (invalid_input: the policy). */
export interface Stop {
  outcome: 'bad_request' | 'invalid_input';
  culprit: string;
}

/** What a planner reads of its limiter. */
export interface PlannerOptions<Req> {
  prefix: string;
  clientIp: ClientIpConfig;
  /** SPEC K4 */
  hashTag: ((request: Req) => string | null | undefined | Promise<string | null | undefined>) | undefined;
  /** SPEC S1: the whole limiter is in shadow mode */
  shadow: boolean;
  policies: readonly Policy<Req>[];
  /** SPEC L1: routes never limited */
  exclude: RouteSet;
  /** SPEC L1: requests that match no route are limited (by the policies of every route) */
  limitUnmatched: boolean;
}

/** The routes kept as they appear in keys, and the policies of each route (both bounded). */
const CACHE_CAP = 4096;

/** The scope and the plans of one limiter's requests. */
export class Planner<Req = AnyRequest> {
  private readonly prefix: string;
  private readonly clientIp: ClientIpConfig;
  private readonly hashTag: PlannerOptions<Req>['hashTag'];
  private readonly shadow: boolean;
  private readonly policies: readonly Policy<Req>[];
  private readonly exclude: RouteSet;
  private readonly limitUnmatched: boolean;
  /** routes as they appear in keys (SPEC K2), escaped once per route */
  private readonly routeParts = new Map<string, string>();
  /** SPEC L1: the policies of each route, found once per route */
  private readonly routePolicies = new Map<string, readonly Policy<Req>[] | null>();
  /** SPEC L1: the policies of a request that matched no route (limitUnmatched) */
  private readonly unmatched: readonly Policy<Req>[];

  constructor(options: PlannerOptions<Req>) {
    this.prefix = options.prefix;
    this.clientIp = options.clientIp;
    this.hashTag = options.hashTag;
    this.shadow = options.shadow;
    this.policies = options.policies;
    this.exclude = options.exclude;
    this.limitUnmatched = options.limitUnmatched;
    this.unmatched = this.policies.filter((p) => p.appliesTo(null));
  }

  /**
   * SPEC L1, K5: the policies that apply to a request of `route` (`'METHOD /template'`, or
   * null: it matched none), in policy order; null when the request is not limited at all
   * (an excluded route, or no route without `limitUnmatched`).
   */
  scope(route: string | null): readonly Policy<Req>[] | null {
    if (route === null) return this.limitUnmatched ? this.unmatched : null;
    let out = this.routePolicies.get(route);
    if (out === undefined) {
      out = this.exclude.has(route) ? null : this.policies.filter((p) => p.appliesTo(route));
      if (this.routePolicies.size >= CACHE_CAP) this.routePolicies.clear();
      this.routePolicies.set(route, out);
    }
    return out;
  }

  /** SPEC K2: a route as it appears in a per-route key, escaped once. */
  routePart(route: string): string {
    let out = this.routeParts.get(route);
    if (out === undefined) {
      out = escapePart(route, 'utf8', true);
      if (this.routeParts.size >= CACHE_CAP) this.routeParts.clear();
      this.routeParts.set(route, out);
    }
    return out;
  }

  /**
   * The plans without an await, when every policy in scope is static (a fixed Limit, a
   * numeric cost, a client-address, fixed or header identity, not settleLater) and there is
   * no tag function; null: some policy needs {@link plan}. A named fast path: most
   * requests of most apps take it, and it spares them the promises of an async plan.
   */
  planStatic(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Plan[] | Stop | null {
    if (this.hashTag) return null;
    let ip: string | null | undefined;
    const out: Plan[] = [];
    for (const p of policies) {
      const src = p.keySource;
      if (src.kind === 'fn' || !(p.limit instanceof Limit) || typeof p.cost !== 'number' || p.settleLater) return null;
      let id: string | null;
      if (src.kind === 'client_ip') id = ip === undefined ? (ip = this.addressIdentity(ctx)) : ip;
      else {
        const got = this.syncIdentity(ctx, p);
        if (got !== null && typeof got !== 'string') return got;
        id = got;
      }
      if (id === null || id === '') continue; // SPEC I1
      out.push(this.bucketPlan(p, ctx, null, id, p.limit.capacity, p.limit.rate, p.cost));
    }
    return out;
  }

  /** SPEC I, K, L2, L3: the plans of the policies in scope, awaiting the application's functions. */
  async plan(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Promise<Plan[] | Stop> {
    const rawTag = this.hashTag ? await this.hashTag(ctx.request) : null;
    // SPEC K4: an empty tag is no tag; K2/K3: escaped and bounded
    const tag = rawTag ? boundedPart(String(rawTag)) : null;
    let ip: string | null | undefined;
    const out: Plan[] = [];
    for (const p of policies) {
      let id: string | null | Stop;
      const src = p.keySource;
      if (src.kind === 'fn') {
        const v = await src.fn(ctx.request);
        id = v === null || v === undefined ? null : boundedPart(String(v));
      } else if (src.kind === 'client_ip') id = ip === undefined ? (ip = this.addressIdentity(ctx)) : ip;
      else id = this.syncIdentity(ctx, p);
      if (id === null || id === '') continue; // SPEC I1
      if (typeof id !== 'string') return id;
      const limit = typeof p.limit !== 'function' ? p.limit : await p.limitFor(ctx.request);
      if (limit === null) continue; // SPEC L2
      const isBucket = !(limit instanceof WindowLimit || limit instanceof InFlightLimit);
      // SPEC G1: a settleLater policy is charged by its hold, not by the check; C9: an
      // in-flight policy costs one slot
      const cost = p.settleLater || limit instanceof InFlightLimit ? 0
        : typeof p.cost === 'number' ? p.cost : await p.costFor(ctx.request);
      // SPEC L3: out-of-range values from the application are its error, never an admission
      if (isBucket && !(limit instanceof Limit) && !validLimit(limit.capacity, limit.rate)) return { outcome: 'invalid_input', culprit: p.name };
      if (!validCost(cost)) return { outcome: 'invalid_input', culprit: p.name };
      out.push(this.planOf(p, ctx, tag, id, limit, cost));
    }
    return out;
  }

  /** SPEC A9: the client address's identity (never needs escaping: digits, hex, '.', ':', '/'). */
  private addressIdentity(ctx: RequestContext<Req>): string | null {
    return this.clientIp.identity(ctx.peer, this.clientIp.trusted.length ? ctx.header(this.clientIp.header) : []);
  }

  /** SPEC I2, I3: the escaped identity of a header or fixed key source; a Stop for a control byte. */
  private syncIdentity(ctx: RequestContext<Req>, p: Policy<Req>): string | null | Stop {
    const src = p.keySource;
    if (src.kind === 'fixed') return boundedPart(src.value);
    if (src.kind !== 'header') throw new TypeError(`policy ${p.name}: no synchronous identity for a ${src.kind} key`);
    const v = headerIdentity(ctx.header(src.name));
    if (v === BAD) return { outcome: 'bad_request', culprit: src.name };
    return v === null ? null : boundedPart(v, 'latin1');
  }

  private bucketPlan(p: Policy<Req>, ctx: RequestContext<Req>, tag: string | null, id: string, capacity: number, rate: number, cost: number): Plan {
    // SPEC K1, K5: a per-route key names the request's own route
    const route = p.perRoute && ctx.route != null ? this.routePart(ctx.route) : null;
    return {
      policy: p as Policy, key: joinKey(this.prefix, tag, p.name, route, id), capacity, rate, cost,
      shadow: this.shadow || p.shadow, kind: 'bucket', settleLater: p.settleLater,
    };
  }

  /** The plan of a policy's limit of any kind (SPEC W2, N2, G1). */
  private planOf(
    p: Policy<Req>, ctx: RequestContext<Req>, tag: string | null, id: string, limit: LimitLike | WindowLimit | InFlightLimit, cost: number,
  ): Plan {
    if (limit instanceof WindowLimit) {
      return { ...this.bucketPlan(p, ctx, tag, id, limit.limit, limit.rate, cost), kind: 'window', window: limit };
    }
    if (limit instanceof InFlightLimit) {
      // SPEC C9, N3: an in-flight policy's cost is one slot
      return { ...this.bucketPlan(p, ctx, tag, id, limit.limit, 0, 1), kind: 'in_flight', inFlight: limit };
    }
    return this.bucketPlan(p, ctx, tag, id, limit.capacity, limit.rate, cost);
  }
}

/** A call's answer: the buckets' (TB.TAKE's and TB.WINDOW's as one key of TB.MTAKE's), and TB.ACQUIRE's. */
export interface Answer {
  reply: MultiReply;
  acquired: Acquired | null;
}

/**
 * SPEC L4, W2, N2: the one call of a request's plans: TB.TAKE for one policy (its reply is
 * the aggregate), TB.MTAKE for several, TB.WINDOW for a window, TB.ACQUIRE (with TAKE and
 * the buckets in policy order) when an in-flight policy applies. `now`: the module's `now`
 * argument of TB.TAKE / TB.MTAKE (tests on a fixed time), undefined: the server's clock.
 */
export function callOf(plans: readonly Plan[], now: number | undefined): { command: string; send: (store: Store) => Promise<Answer> } {
  const slot = plans.find((pl) => pl.kind === 'in_flight');
  if (slot !== undefined) {
    const charges = plans.filter((pl) => pl !== slot).map(chargeOf);
    return {
      command: 'TB.ACQUIRE',
      send: async (store) => {
        const a = await store.acquire(slot.key, slot.capacity, slot.inFlight!.leaseMs, charges);
        return { reply: { allowed: a.granted, remaining: 0, retryAfter: 0, resetAfter: 0, keys: a.take ? a.take.keys : [] }, acquired: a };
      },
    };
  }
  if (plans.length > 1) {
    const charges = plans.map(chargeOf);
    return { command: 'TB.MTAKE', send: async (store) => ({ reply: await store.mtake(charges, { now }), acquired: null }) };
  }
  const pl = plans[0]!;
  const win = pl.window;
  if (win !== undefined) {
    // SPEC W2: on the server's clock
    const mode = win.mode === 'fixed' ? 'FIXED' : 'SLIDING';
    return {
      command: 'TB.WINDOW',
      send: async (store) => {
        const r = await store.window(pl.key, win.limit, win.seconds, pl.cost, { mode });
        return { reply: { ...r, keys: [r] }, acquired: null };
      },
    };
  }
  return {
    command: 'TB.TAKE',
    send: async (store) => {
      const r = await store.take(pl.key, pl.capacity, pl.rate, pl.cost, { now });
      return { reply: { ...r, keys: [r] }, acquired: null };
    },
  };
}

function chargeOf(pl: Plan): Charge {
  return { key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost };
}

/** SPEC D2, W2, N3: one PolicyResult per plan, in policy order, from the call's answer. */
export function resultsOf(plans: readonly Plan[], answer: Answer): PolicyResult[] {
  const { reply, acquired } = answer;
  let k = 0;
  return plans.map((pl) => {
    if (pl.kind === 'in_flight' && acquired !== null) {
      // SPEC N3: the slot was refused when not granted and in_flight >= n
      const n = pl.capacity;
      const free = acquired.granted || acquired.inFlight < n;
      const wait = free ? 0 : Math.max(0, acquired.ms) / 1000;
      return {
        name: pl.policy.name, key: pl.key, capacity: n, rate: null, cost: 1, kind: 'in_flight',
        allowed: free, remaining: Math.max(0, n - acquired.inFlight), retryAfter: wait, resetAfter: wait, shadow: pl.shadow,
      };
    }
    const r = reply.keys[k++]!;
    return {
      name: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost,
      ...(pl.window ? { kind: 'window' as const, window: pl.window.seconds } : {}),
      allowed: r.allowed, remaining: r.remaining, retryAfter: r.retryAfter, resetAfter: r.resetAfter,
      shadow: pl.shadow,
    };
  });
}
