/**
 * The request-path limiter (SPEC L, D, R, B, F, S, T, U): policies -> keys -> one TB.TAKE
 * (one policy) or TB.MTAKE (several) -> a Decision, with an explicit failure mode for
 * when Redis is down or slow. Framework-neutral: the adapters (Express, Fastify) hand it a
 * {@link RequestContext} and send {@link respond}'s answer.
 *
 * - SPEC L5: every call is bounded by `timeoutMs` (default 50) and made at most once;
 * - SPEC B1-B5: after a connection error or timeout, Redis is left alone for `cooldownMs`
 *   (default 1000) and the failure mode applies; then one call (a check, a refund, a
 *   lease's or a hold's call) probes it while the others keep the failure mode;
 * - SPEC K6, L5: a CROSSSLOT reply is a configuration error (500), never the failure mode;
 * - SPEC T1: every rule that reads time reads `clock` (monotonic for R and B, wall for H4);
 * - one log line per second at most, and counters in `limiter.stats`.
 */
import { performance } from 'node:perf_hooks';
import { Breaker } from './breaker.js';
import { type RedisLike, TbClient } from './client.js';
import { Deadlines } from './deadline.js';
import {
  Decision, type DecisionOps, type Lease, type PolicyResult, type SettleTarget,
} from './decision.js';
import { DenyCache, type DenyCacheOptions, type DenyProbe } from './denycache.js';
import { RedisTbError, RedisTbTimeoutError, StoreUnavailableError, UnexpectedReplyError } from './errors.js';
import { type HeaderOptions, type LegacyReset, type Response, decisionHeaders, respond } from './headers.js';
import { holdOps, takeHold } from './hold.js';
import { leaseOps } from './lease.js';
import { ClientIpConfig } from './ip.js';
import { type Bytes, boundedPart, escapePart, joinKey } from './keys.js';
import type { LimiterMetrics } from './metrics.js';
import type { LimiterParts } from './parts.js';
import {
  type AnyRequest, InFlightLimit, Limit, type LimitKind, type LimitLike, type Policy, WindowLimit, checkDistinctNames,
  checkPolicyKinds, validCost, validLimit,
} from './policy.js';
import { RateLog } from './ratelog.js';
import type { AcquireReply, Bucket, MultiReply, TbReply } from './replies.js';
import { describeError, startup } from './startup.js';
import { type LimiterStats, newStats } from './stats.js';

export type { LimiterStats } from './stats.js';

export interface Logger {
  warn(message: string): void;
}

/** SPEC T1: the limiter's time source; tests replace it. */
export interface Clock {
  /** monotonic milliseconds (deny cache, breaker, log rate) */
  monotonicMs(): number;
  /** milliseconds since the Unix epoch (the legacy `X-RateLimit-Reset`, SPEC H4) */
  wallMs(): number;
}

/** The system's clocks: `performance.now()` and `Date.now()`. */
export const systemClock: Clock = Object.freeze({
  monotonicMs: () => performance.now(),
  wallMs: () => Date.now(),
});

/** SPEC C4 */
const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

/** SPEC C4: whether a key prefix is valid. */
export function validPrefix(prefix: unknown): prefix is string {
  return typeof prefix === 'string' && PREFIX.test(prefix);
}

export interface RateLimiterOptions<Req = AnyRequest> {
  /** the key prefix (SPEC C4), default `rl` */
  prefix?: string;
  /** how the client address is found (SPEC A) */
  clientIp?: ClientIpConfig;
  /** the request's Redis Cluster hash tag (SPEC K4): an empty tag is no tag */
  hashTag?: (request: Req) => string | null | undefined | Promise<string | null | undefined>;
  failOpen?: boolean;
  /** SPEC C7: > 0, default 50 */
  timeoutMs?: number;
  /** SPEC C7: >= 0, default 1000 */
  cooldownMs?: number;
  /** SPEC U2: an unreachable Redis at startup logs one line and starts in the failure mode instead of failing */
  startDegraded?: boolean;
  legacyHeaders?: boolean;
  legacyReset?: LegacyReset;
  shadow?: boolean;
  denyCache?: DenyCacheOptions;
  metrics?: LimiterMetrics;
  name?: string;
  logger?: Logger;
  /** SPEC T1: the limiter's clock; default {@link systemClock} */
  clock?: Clock;
  /**
   * () => epoch seconds sent as the module's `now` argument (tests that run Redis on a
   * fixed time); default: none, the Redis server's clock. (Before SPEC T1 this was `clock`.)
   */
  redisNow?: () => number;
}

/** What a framework adapter knows about a request. */
export interface RequestContext<Req = AnyRequest> {
  /** the framework's request, passed to key/cost/limit functions */
  request: Req;
  /** the TCP peer's address */
  peer: string | undefined | null;
  /** the lines of a request header (lower-case name), in the order received */
  header(name: string): readonly string[];
  /** `'METHOD /template'` or null (matched no route) */
  route: string | null;
  /** aborted when the client went away: the check rejects and a deny-cache probe ends (SPEC R4) */
  signal?: AbortSignal;
}

interface Plan {
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

/** SPEC I2: control bytes (0x00-0x08, 0x0A-0x1F, 0x7F); a tab is kept */
function hasControlByte(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true;
  }
  return false;
}

/** SPEC I2: optional white space (space, tab) trimmed at both ends. */
function trimOws(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && (s.charCodeAt(a) === 0x20 || s.charCodeAt(a) === 0x09)) a++;
  while (b > a && (s.charCodeAt(b - 1) === 0x20 || s.charCodeAt(b - 1) === 0x09)) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/**
 * SPEC I2: the identity of `Key.header`: the lines joined with ', ', trimmed; null when
 * absent or empty (the policy is skipped); `BAD` when a line holds a control byte.
 */
export function headerIdentity(lines: readonly string[]): string | null | typeof BAD {
  if (lines.length === 0) return null;
  const joined = lines.length === 1 ? lines[0]! : lines.join(', ');
  if (hasControlByte(joined)) return BAD;
  const v = trimOws(joined);
  return v === '' ? null : v;
}

/** {@link headerIdentity}: a control byte */
export const BAD: unique symbol = Symbol('redis-tb.bad-request');

/** Why the plans stopped: SPEC I2 (bad_request) or L3 (invalid_input). */
interface Stop {
  outcome: 'bad_request' | 'invalid_input';
  culprit: string;
}


const ROUTE_CACHE_CAP = 4096;

/** Checks a request against policies in one TB.TAKE / TB.MTAKE, all or nothing. */
export class RateLimiter<Req = AnyRequest> {
  readonly client: TbClient;
  readonly prefix: string;
  readonly clientIp: ClientIpConfig;
  readonly hashTag: RateLimiterOptions<Req>['hashTag'];
  readonly failOpen: boolean;
  readonly timeoutMs: number;
  readonly cooldownMs: number;
  readonly legacyHeaders: boolean;
  readonly legacyReset: LegacyReset;
  readonly shadow: boolean;
  readonly denyCache: DenyCache | null;
  readonly metrics: LimiterMetrics | null;
  readonly name: string;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly redisNow: (() => number) | undefined;
  readonly startDegraded: boolean;
  readonly stats: LimiterStats = newStats();
  /** SPEC B1-B3: one breaker for every call of this limiter */
  private readonly breaker: Breaker;
  /** SPEC N4-N7, G1-G6: the calls of leases and holds, through {@link guard} */
  private readonly decisionOps: DecisionOps;
  private lastLog = -Infinity;
  private unlogged = 0;
  /** SPEC S2, L3, N5, N7, G5: one line a second per policy (K6: per limiter) */
  private readonly shadowLog = new RateLog();
  private readonly invalidLog = new RateLog();
  private readonly crossSlotLog = new RateLog();
  /** SPEC U3: the policy lists the adapters check with this limiter */
  private readonly policySets: (readonly Policy<Req>[])[] = [];
  /** routes as they appear in keys (SPEC K2), escaped once per route */
  private readonly routeParts = new Map<string, string>();
  /** the timeouts of this limiter's Redis calls (one timer for all of them) */
  private readonly deadlines: Deadlines;
  private readonly headerOpts: HeaderOptions;
  private readonly refunder = (d: Decision): Promise<boolean> => this.refund(d);

  constructor(client: RedisLike, options: RateLimiterOptions<Req> = {}) {
    this.client = TbClient.from(client);
    this.prefix = options.prefix ?? 'rl';
    if (!validPrefix(this.prefix)) {
      throw new RangeError(`prefix must match [A-Za-z0-9_.:-]{1,64} (no braces, spaces or control bytes), got ${JSON.stringify(this.prefix)}`);
    }
    this.clientIp = options.clientIp ?? new ClientIpConfig();
    this.hashTag = options.hashTag;
    this.failOpen = options.failOpen ?? true;
    this.timeoutMs = options.timeoutMs ?? 50;
    this.cooldownMs = options.cooldownMs ?? 1000;
    // SPEC C7
    if (!(typeof this.timeoutMs === 'number' && this.timeoutMs > 0 && Number.isFinite(this.timeoutMs))) {
      throw new RangeError(`timeoutMs must be > 0, got ${String(this.timeoutMs)}`);
    }
    if (!(typeof this.cooldownMs === 'number' && this.cooldownMs >= 0 && Number.isFinite(this.cooldownMs))) {
      throw new RangeError(`cooldownMs must be >= 0, got ${String(this.cooldownMs)}`);
    }
    this.legacyHeaders = options.legacyHeaders ?? false;
    this.legacyReset = options.legacyReset ?? 'unix';
    if (this.legacyReset !== 'unix' && this.legacyReset !== 'delta') {
      throw new RangeError(`legacyReset must be 'unix' or 'delta', got ${String(this.legacyReset)}`);
    }
    this.shadow = options.shadow ?? false;
    // a probe of an expired deny-cache entry that has not answered within 2x the call
    // timeout is lost: the next request probes
    this.denyCache = options.denyCache ? new DenyCache(options.denyCache, 2 * this.timeoutMs) : null;
    this.metrics = options.metrics ?? null;
    this.name = options.name ?? 'default';
    this.logger = options.logger ?? console;
    this.clock = options.clock ?? systemClock;
    this.redisNow = options.redisNow;
    this.startDegraded = options.startDegraded ?? false;
    this.breaker = new Breaker(this.cooldownMs);
    this.deadlines = new Deadlines(this.timeoutMs);
    const parts: LimiterParts = {
      name: this.name, client: this.client, stats: this.stats, metrics: this.metrics, logger: this.logger,
      now: () => this.clock.monotonicMs(),
      guard: (command, send) => this.guard(command, send),
    };
    const holds = holdOps(parts, (result) => this.respond(Decision.fromResults([result])));
    this.decisionOps = { ...leaseOps(parts), hold: (target, estimate, ttl) => takeHold(holds, target, estimate, ttl) };
    this.headerOpts = Object.freeze({ legacyHeaders: this.legacyHeaders, legacyReset: this.legacyReset });
  }

  // -- lifecycle -----------------------------------------------------------------

  /**
   * Call at startup (SPEC U1-U4): `COMMAND INFO tb.take`, then, when a registered policy
   * list can send several keys in one call and there is no hash-tag function, `HELLO`.
   * Rejects with one line (the error's message, no stack needed) when the module is
   * missing ({@link ModuleNotLoadedError}), the user may not run COMMAND INFO
   * ({@link NoPermissionError}), the store is a Redis Cluster that would refuse the calls
   * ({@link ClusterKeysError}), or Redis cannot be reached ({@link RedisUnreachableError})
   * unless `startDegraded` is set: then it logs one line and resolves, and the failure
   * mode handles each request until Redis answers.
   */
  startup(): Promise<void> {
    return startup({
      client: this.client, name: this.name, timeoutMs: this.timeoutMs, startDegraded: this.startDegraded,
      hashTag: this.hashTag, logger: this.logger, policySets: this.policySets,
    });
  }

  /**
   * The policies a caller checks with this limiter (the adapters register theirs when they
   * are built): checked against SPEC C1, C10, C11, and read by {@link startup} (U3).
   */
  register(policies: readonly Policy<Req>[]): void {
    checkDistinctNames(policies);
    checkPolicyKinds(policies);
    this.policySets.push([...policies]);
  }

  /** Alias of `client.checkModule()`: throws when the module is missing or Redis unreachable. */
  checkModule(): Promise<void> {
    return this.client.checkModule();
  }

  /** The headers options of this limiter (legacy headers and their reset format). */
  get headerOptions(): HeaderOptions {
    return this.headerOpts;
  }

  private optsNow(): HeaderOptions {
    // the wall clock is read only for the Unix-time X-RateLimit-Reset (SPEC H4, T1)
    if (!this.legacyHeaders || this.legacyReset !== 'unix') return this.headerOpts;
    return { legacyHeaders: true, legacyReset: 'unix', nowMs: this.clock.wallMs() };
  }

  /** Every rate-limit header for a decision of this limiter (SPEC H). */
  headers(decision: Decision): Array<[string, string]> {
    return decisionHeaders(decision, this.optsNow());
  }

  /** The status, headers and body an adapter sends for a decision of this limiter. */
  respond(decision: Decision): Response {
    return respond(decision, this.optsNow());
  }

  // -- keys ----------------------------------------------------------------------

  /**
   * SPEC K1-K4: the bucket key of `identity` under `policy` (the one key builder), with
   * the request's hash tag and the route of a per-route policy; `bytes: 'latin1'` for a
   * header value as received.
   */
  key(policy: string, identity: string, opts: { route?: string | null; tag?: string | null; bytes?: Bytes } = {}): string {
    const tag = opts.tag ? boundedPart(opts.tag) : null;
    const route = opts.route == null ? null : this.routePart(opts.route);
    return joinKey(this.prefix, tag, policy, route, boundedPart(identity, opts.bytes ?? 'utf8'));
  }

  private routePart(route: string): string {
    let out = this.routeParts.get(route);
    if (out === undefined) {
      out = escapePart(route, 'utf8', true);
      if (this.routeParts.size >= ROUTE_CACHE_CAP) this.routeParts.clear();
      this.routeParts.set(route, out);
    }
    return out;
  }

  /** The escaped identity part of a sync key source; undefined: a function (async path). */
  private syncIdentity(ctx: RequestContext<Req>, p: Policy<Req>, ipCache: { v?: string | null }): string | null | undefined | Stop {
    const src = p.keySource;
    switch (src.kind) {
      case 'client_ip':
        // an address identity never needs escaping (digits, hex, '.', ':', '/')
        if (ipCache.v === undefined) {
          ipCache.v = this.clientIp.identity(ctx.peer, this.clientIp.trusted.length ? ctx.header(this.clientIp.header) : []);
        }
        return ipCache.v;
      case 'fixed':
        return boundedPart(src.value);
      case 'header': {
        const v = headerIdentity(ctx.header(src.name));
        if (v === BAD) return { outcome: 'bad_request', culprit: src.name };
        return v === null ? null : boundedPart(v, 'latin1');
      }
      default:
        return undefined;
    }
  }

  private plan(p: Policy<Req>, ctx: RequestContext<Req>, tag: string | null, id: string, capacity: number, rate: number, cost: number): Plan {
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
      const pl = this.plan(p, ctx, tag, id, limit.limit, limit.rate, cost);
      pl.kind = 'window';
      pl.window = limit;
      return pl;
    }
    if (limit instanceof InFlightLimit) {
      // SPEC C9, N3: an in-flight policy's cost is one slot
      const pl = this.plan(p, ctx, tag, id, limit.limit, 0, 1);
      pl.kind = 'in_flight';
      pl.inFlight = limit;
      return pl;
    }
    return this.plan(p, ctx, tag, id, limit.capacity, limit.rate, cost);
  }

  /**
   * The plans without an await when every applicable policy is static (a fixed Limit, a
   * numeric cost, a client-IP, fixed or header identity) and there is no hash-tag
   * function; null: some policy needs {@link plans}.
   */
  private staticPlans(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Plan[] | Stop | null {
    if (this.hashTag) return null;
    let ip: { v?: string | null } | undefined;
    let ipId: string | null | undefined;
    const out: Plan[] = [];
    for (let i = 0; i < policies.length; i++) {
      const p = policies[i]!;
      if (!p.appliesTo(ctx.route)) continue;
      const kind = p.keySource.kind;
      if (kind === 'fn' || !(p.limit instanceof Limit) || typeof p.cost !== 'number' || p.settleLater) return null;
      let id: string | null | undefined | Stop;
      if (kind === 'client_ip') {
        // the common case without an allocation: the address identity, read once
        if (ipId === undefined) {
          ipId = this.clientIp.identity(ctx.peer, this.clientIp.trusted.length ? ctx.header(this.clientIp.header) : []);
        }
        id = ipId;
      } else {
        id = this.syncIdentity(ctx, p, (ip ??= {}));
      }
      if (id === null || id === undefined || id === '') continue;
      if (typeof id !== 'string') return id;
      out.push(this.plan(p, ctx, null, id, p.limit.capacity, p.limit.rate, p.cost));
    }
    return checkKeys(out);
  }

  private async plans(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Promise<Plan[] | Stop> {
    const rawTag = this.hashTag ? await this.hashTag(ctx.request) : null;
    // SPEC K4: an empty tag is no tag; K2/K3: escaped and bounded
    const tag = rawTag ? boundedPart(String(rawTag)) : null;
    const ip: { v?: string | null } = {};
    const out: Plan[] = [];
    for (const p of policies) {
      if (!p.appliesTo(ctx.route)) continue;
      let id = this.syncIdentity(ctx, p, ip);
      if (id === undefined) {
        const src = p.keySource as { fn: (r: Req) => unknown };
        const v = await src.fn(ctx.request);
        id = v === null || v === undefined ? null : boundedPart(String(v));
      }
      if (id === null || id === '') continue; // SPEC I1
      if (typeof id !== 'string') return id;
      const limit = typeof p.limit !== 'function' ? p.limit : await p.limitFor(ctx.request);
      if (limit === null) continue; // SPEC L2
      const isBucket = !(limit instanceof WindowLimit || limit instanceof InFlightLimit);
      // SPEC G1: a settleLater policy is charged by its hold, not by the check; C9: an
      // in-flight policy costs one slot
      const cost = p.settleLater || !isBucket && limit instanceof InFlightLimit ? 0
        : typeof p.cost === 'number' ? p.cost : await p.costFor(ctx.request);
      // SPEC L3: out-of-range values from the application are its error, never an admission
      if (isBucket && !(limit instanceof Limit) && !validLimit(limit.capacity, limit.rate)) return this.invalid(p.name);
      if (!validCost(cost)) return this.invalid(p.name);
      out.push(this.planOf(p, ctx, tag, id, limit, cost));
    }
    return checkKeys(out);
  }

  /** SPEC L3: counted, logged at most once a second per policy, never the value. */
  private invalid(policy: string): Stop {
    this.stats.invalidInputs += 1;
    this.metrics?.invalidInput?.(this.name, policy);
    const count = this.invalidLog.note(policy, this.clock.monotonicMs());
    if (count) {
      this.logger.warn(
        `redis-tb: policy '${policy}' got an out-of-range cost or limit from the application; answering 500 (${count} since the last line)`,
      );
    }
    return { outcome: 'invalid_input', culprit: policy };
  }

  // -- the request path ----------------------------------------------------------

  /** SPEC L4: charge the request on every applicable policy in one TB.TAKE / TB.MTAKE. */
  async check(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Promise<Decision> {
    const all = this.staticPlans(ctx, policies) ?? await this.plans(ctx, policies);
    if (!Array.isArray(all)) {
      this.stats.checks += 1;
      return new Decision({ outcome: all.outcome, allowed: false, culprit: all.culprit });
    }
    // SPEC G1: settleLater policies are resolved now (key and limit), not in the call
    let plans = all;
    let settle: Map<string, SettleTarget> | null = null;
    for (const pl of all) {
      if (!pl.settleLater) continue;
      (settle ??= new Map()).set(pl.policy.name, { policy: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate });
    }
    if (settle !== null) plans = all.filter((pl) => !pl.settleLater);
    const decision = await this.checkPlans(plans, ctx);
    return settle === null && decision.lease === null ? decision : decision.attach(this.decisionOps, settle);
  }

  private async checkPlans(plans: Plan[], ctx: RequestContext<Req>): Promise<Decision> {
    if (!plans.length) return new Decision({ outcome: 'not_limited', allowed: true });
    checkPlanKinds(plans);
    this.stats.checks += 1;
    if (this.denyCache) {
      const now = this.clock.monotonicMs();
      const cached = this.fromDenyCache(plans, now);
      if (cached) return cached;
      // SPEC R6: while the breaker is open no probe is claimed (the entries stay as they are)
      if (this.breaker.mayCall(now)) {
        // SPEC R4, single flight: this request is the one probe of every expired entry it
        // found; the others are refused by fromDenyCache until the answer ends the probes.
        const probes = this.claimProbes(plans, now);
        if (probes.length) {
          try {
            return await this.call(plans, ctx.signal);
          } finally {
            for (const pr of probes) this.denyCache.endProbe(pr);
          }
        }
      }
    }
    return this.call(plans, ctx.signal);
  }

  private claimProbes(plans: Plan[], now: number): DenyProbe[] {
    const cache = this.denyCache!;
    const probes: DenyProbe[] = [];
    for (const pl of plans) {
      if (pl.shadow || pl.kind === 'in_flight') continue; // SPEC R10
      const pr = cache.claimProbe(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (pr) probes.push(pr);
    }
    return probes;
  }

  /** One TB.TAKE / TB.MTAKE (unless the breaker is open, SPEC B2). */
  private async call(plans: Plan[], signal: AbortSignal | undefined): Promise<Decision> {
    const pass = this.breaker.enter(this.clock.monotonicMs());
    if (pass === null) return this.degraded(undefined);
    let reply: MultiReply;
    let acquired: AcquireReply | null = null;
    // SPEC L4: one policy is TB.TAKE (its reply is the aggregate), several one TB.MTAKE; a
    // window is TB.WINDOW (W2); an in-flight policy makes it one TB.ACQUIRE (N2)
    const single = plans.length === 1;
    const slot = plans.find((pl) => pl.kind === 'in_flight');
    const win = single && plans[0]!.window ? plans[0]!.window : undefined;
    const command = slot ? 'TB.ACQUIRE' : win ? 'TB.WINDOW' : single ? 'TB.TAKE' : 'TB.MTAKE';
    const started = this.metrics ? performance.now() : 0; // the call's duration is only for metrics
    try {
      if (slot) {
        const buckets: Bucket[] = plans.filter((pl) => pl !== slot)
          .map((pl) => ({ key: pl.key, capacity: pl.capacity, rate: pl.rate, n: pl.cost }));
        const a = await this.deadlines.bound(this.client.acquire(slot.key, slot.capacity, slot.inFlight!.leaseMs, buckets), command, signal);
        acquired = a;
        reply = {
          allowed: a.granted, remaining: 0, retryAfter: 0, resetAfter: 0, keys: a.take ? a.take.keys : [],
        };
      } else if (win) {
        // SPEC W2: on the server's clock
        const pl = plans[0]!;
        const r: TbReply = await this.deadlines.bound(
          this.client.window(pl.key, win.limit, win.seconds, pl.cost, { mode: win.mode === 'fixed' ? 'FIXED' : 'SLIDING' }), command, signal,
        );
        reply = { ...r, keys: [r] };
      } else if (single) {
        const pl = plans[0]!;
        const r: TbReply = await this.deadlines.bound(
          this.client.take(pl.key, pl.capacity, pl.rate, pl.cost, { now: this.redisNow?.() }), command, signal,
        );
        reply = { allowed: r.allowed, remaining: r.remaining, retryAfter: r.retryAfter, resetAfter: r.resetAfter, keys: [r] };
      } else {
        const buckets: Bucket[] = plans.map((pl) => ({ key: pl.key, capacity: pl.capacity, rate: pl.rate, n: pl.cost }));
        reply = await this.deadlines.bound(this.client.mtake(buckets, { now: this.redisNow?.() }), command, signal);
      }
    } catch (err) {
      if (signal?.aborted) throw err; // cancelled: not a store error
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      // SPEC K6, L5: a configuration error, never the failure mode; the breaker untouched
      if (isCrossSlot(err)) return this.crossSlot(plans);
      this.failed(err, command);
      return this.degraded(err);
    } finally {
      this.breaker.leave(pass);
    }
    this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
    this.breaker.answered(); // SPEC B3: success closes the breaker
    return this.decide(plans, reply, acquired);
  }

  /**
   * SPEC K6: Redis refused a call whose keys are in different cluster slots: invalid_input,
   * a 500 naming the call's policies, nothing admitted, counted in invalidInputs, logged
   * at most once a second per limiter.
   */
  private crossSlot(plans: Plan[]): Decision {
    const names = plans.map((pl) => pl.policy.name);
    this.stats.invalidInputs += 1;
    for (const n of names) this.metrics?.invalidInput?.(this.name, n);
    const count = this.crossSlotLog.note('', this.clock.monotonicMs());
    if (count) {
      this.logger.warn(
        `redis-tb: limiter '${this.name}': Redis refused a call of policies ${names.map((n) => `'${n}'`).join(', ')} (CROSSSLOT: ` +
          `their keys are in different cluster slots); answering 500: give the limiter a hash tag (${count} since the last line)`,
      );
    }
    return new Decision({ outcome: 'invalid_input', allowed: false, culprit: names[0] ?? null, crossSlot: names });
  }

  /** SPEC R2, R3, R4, H6: a refusal from the deny cache, or null. */
  private fromDenyCache(plans: Plan[], now: number): Decision | null {
    const cache = this.denyCache!;
    let results: PolicyResult[] | null = null;
    for (const pl of plans) {
      // shadow policies always reach Redis; SPEC R10: in-flight refusals are never cached
      if (pl.shadow || pl.kind === 'in_flight') continue;
      const e = cache.lookup(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (!e) continue;
      (results ??= []).push({
        name: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost,
        ...(pl.window ? { kind: 'window' as const, window: pl.window.seconds } : {}),
        allowed: false, remaining: 0,
        // 0 while the entry's probe is waiting for Redis (Retry-After: 1)
        retryAfter: Math.max(0, e.denyUntil - now) / 1000,
        resetAfter: Math.max(0, (e.resetAt - now) / 1000),
        shadow: false,
      });
    }
    if (results === null) return null;
    this.stats.limited += 1;
    this.stats.denyCacheHits += 1;
    for (const r of results) {
      this.metrics?.denyCacheHit(this.name, r.name);
      this.metrics?.limited(this.name, r.name);
    }
    return new Decision({ outcome: 'limited', allowed: false, results, fromCache: true });
  }

  private decide(plans: Plan[], reply: MultiReply, acquired: AcquireReply | null): Decision {
    let k = 0;
    let slot: Plan | undefined;
    const results: PolicyResult[] = plans.map((pl) => {
      if (pl.kind === 'in_flight' && acquired) {
        slot = pl;
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
    if (reply.allowed) {
      this.stats.allowed += 1;
      for (const r of results) this.metrics?.allowed(this.name, r.name);
      if (this.denyCache) this.rememberSpent(results);
      let lease: Lease | null = null;
      if (slot && acquired && acquired.id !== null) {
        lease = { key: slot.key, id: acquired.id, policy: slot.policy.name };
        // SPEC M2: up at a grant
        this.stats.leasesInFlight += 1;
        this.metrics?.leaseGranted?.(this.name, slot.policy.name);
      }
      const d = new Decision({
        outcome: 'allowed', allowed: true, results, charged: true, refunder: this.refunder,
        lease, leaseMs: slot?.inFlight?.leaseMs ?? 0, maxDurationMs: slot?.inFlight?.maxDurationMs,
      });
      // SPEC N7: the request's max_duration counts from here, its grant
      return lease === null ? d : d.attach(this.decisionOps, null);
    }
    const decision = Decision.fromResults(results);
    const shadowRefused = decision.shadowLimited;
    if (shadowRefused.length) this.stats.shadowLimited += 1;
    for (const name of shadowRefused) this.noteShadow(name);
    if (decision.outcome !== 'limited') {
      // SPEC S2: only shadow policies refused: nothing was charged (all or nothing), the
      // request goes on. Not counted in stats.allowed (Redis admitted nothing).
      return decision;
    }
    this.stats.limited += 1;
    const enforced = results.filter((r) => !r.allowed && !r.shadow);
    for (const r of enforced) this.metrics?.limited(this.name, r.name);
    if (this.denyCache) {
      // SPEC R1: each enforced violated policy with a wait; R10: never an in-flight one
      const now = this.clock.monotonicMs();
      for (const r of enforced) {
        if (!(r.retryAfter > 0) || r.rate === null || r.kind === 'in_flight') continue;
        this.denyCache.remember(r.key, {
          policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
          denyUntil: now + r.retryAfter * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
        }, now);
      }
    }
    return decision;
  }

  /**
   * SPEC R5: Redis admitted the request: every charged (enforced) bucket it left with fewer
   * tokens than this request's cost would refuse a request of that cost (or more) until
   * (cost - remaining) / rate has passed, absent refunds, so cache exactly that refusal.
   * A bucket left with enough tokens caches nothing; a probe admitted with enough left
   * still removes its entry (`endProbe`).
   */
  private rememberSpent(results: PolicyResult[]): void {
    const cache = this.denyCache!;
    const now = this.clock.monotonicMs();
    for (const r of results) {
      // SPEC R5 is for buckets only (W3, R10)
      if (r.shadow || r.kind !== undefined || r.rate === null || !(r.cost > 0) || !(r.remaining < r.cost)) continue;
      const wait = (r.cost - r.remaining) / r.rate;
      if (!(wait > 0 && Number.isFinite(wait))) continue;
      cache.remember(r.key, {
        policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
        denyUntil: now + wait * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
      }, now);
    }
  }

  /** SPEC S2: logged at most once a second per policy. */
  private noteShadow(policy: string): void {
    this.metrics?.shadowLimited(this.name, policy);
    const count = this.shadowLog.note(policy, this.clock.monotonicMs());
    if (count) this.logger.warn(`redis-tb: shadow policy '${policy}' would have limited a request (${count} since the last line)`);
  }

  private degraded(error: unknown): Decision {
    this.stats.degraded += 1;
    this.metrics?.degraded(this.name);
    return new Decision({ outcome: 'store_error', allowed: this.failOpen, error });
  }

  /** SPEC B1, B5: a failed call; a connection error or a timeout opens the breaker, an error reply does not. */
  private failed(err: unknown, what: string): void {
    this.stats.storeErrors += 1;
    this.metrics?.storeError(this.name);
    const unknown = err instanceof RedisTbError && err.serverMessage.toLowerCase().includes('unknown command');
    const opens = !(err instanceof RedisTbError || err instanceof UnexpectedReplyError);
    const now = this.clock.monotonicMs();
    if (opens) this.breaker.open(now);
    if (now - this.lastLog < 1000) {
      this.unlogged += 1;
      return;
    }
    let reason = err instanceof RedisTbTimeoutError ? `no answer within ${this.timeoutMs} ms` : describeError(err);
    if (unknown) reason += ' (is the redis-tb module loaded?)';
    this.logger.warn(
      `redis-tb: ${what} on ${this.client.server} failed (${reason}); ` +
        `failing ${this.failOpen ? 'open: requests pass unlimited' : 'closed: requests get 503'}` +
        `${opens ? `, Redis skipped for ${this.cooldownMs / 1000} s` : ''}; ` +
        `store errors so far: ${this.stats.storeErrors}${this.unlogged ? ` (${this.unlogged} not logged)` : ''}`,
    );
    this.lastLog = now;
    this.unlogged = 0;
  }

  // -- leases (SPEC N4, N5) and holds (SPEC G) -------------------------------------

  /**
   * SPEC B2, B3, L5: one call of a lease or a hold through the breaker, like a check's:
   * sent only while the breaker is closed or as the one probe after the cool-down, bounded
   * by the timeout, made once. A failure is counted (B1, B5) and rethrown; a call the
   * breaker keeps from Redis rejects with {@link StoreUnavailableError}, nothing sent and
   * nothing counted.
   */
  private async guard<T>(command: string, send: () => Promise<T>): Promise<T> {
    const pass = this.breaker.enter(this.clock.monotonicMs());
    if (pass === null) throw new StoreUnavailableError(command, this.client.server);
    const started = this.metrics ? performance.now() : 0;
    try {
      const out = await this.deadlines.bound(send(), command);
      this.breaker.answered();
      return out;
    } catch (err) {
      this.failed(err, command);
      throw err;
    } finally {
      this.breaker.leave(pass);
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
    }
  }

  /** SPEC F1, B2, B3, R8: TB.REFUND now on every bucket the request was charged on. */
  private async refund(decision: Decision): Promise<boolean> {
    // SPEC F3: window and in-flight policies are never refunded
    const charged = decision.results.filter((r): r is PolicyResult & { rate: number } => r.cost > 0 && r.kind === undefined && r.rate !== null);
    if (!charged.length) return false;
    // SPEC B3: after the cool-down a refund may be the probe
    const pass = this.breaker.enter(this.clock.monotonicMs());
    if (pass === null) {
      this.stats.refundErrors += 1;
      return false;
    }
    const started = performance.now();
    try {
      await this.deadlines.bound(
        this.client.refundMany(
          charged.map((r) => ({ key: r.key, capacity: r.capacity, rate: r.rate, n: r.cost })), { now: this.redisNow?.() },
        ),
        'TB.REFUND',
      );
    } catch (err) {
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      this.stats.refundErrors += 1;
      this.failed(err, 'TB.REFUND');
      return false;
    } finally {
      this.breaker.leave(pass);
    }
    this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
    this.breaker.answered();
    this.stats.refunds += 1;
    for (const r of charged) {
      this.metrics?.refunded(this.name, r.name);
      // Tokens came back: a remembered refusal of this bucket may be wrong now.
      this.denyCache?.drop(r.key);
    }
    return true;
  }
}

/** SPEC C10, for policies handed to `check` without an adapter's check at build time. */
function checkPlanKinds(plans: Plan[]): void {
  if (plans.length < 2) return;
  let slots = 0;
  for (const pl of plans) {
    if (pl.kind === 'window') throw new RangeError(`a window policy is the only policy of its limiter: ${pl.policy.name}`);
    if (pl.kind === 'in_flight') slots += 1;
  }
  if (slots > 1) throw new RangeError(`a limiter has at most one in-flight policy: ${plans.filter((p) => p.kind === 'in_flight').map((p) => p.policy.name).join(', ')}`);
}

/** Two policies of one request must not share a key. */
function checkKeys(out: Plan[]): Plan[] {
  if (out.length > 1) {
    for (let i = 1; i < out.length; i++) {
      for (let j = 0; j < i; j++) {
        if (out[i]!.key === out[j]!.key) throw new RangeError('two policies of one request map to the same key: give them distinct names');
      }
    }
  }
  return out;
}

/** SPEC K6, L5: Redis refused a call whose keys are in different cluster slots. */
function isCrossSlot(err: unknown): boolean {
  return err instanceof RedisTbError && /^CROSSSLOT\b/.test(err.serverMessage);
}
