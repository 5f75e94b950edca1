/**
 * The rate limiter: it owns its policies and tells the story of one check (SPEC L, D), the
 * way express-rate-limit's middleware reads, each step in its own file:
 *
 *   1. scope        which of the limiter's policies apply to the request's route (L1, K5) - plan.ts
 *   2. identities   each policy's identity: the client address, a header, a fixed value or
 *                   the application's function (A, I) - plan.ts, address.ts, keys.ts
 *   3. plan         each policy's key, limit and cost, checked (K, L2, L3) - plan.ts
 *   4. deny cache   a refusal answered without Redis (R2-R4) - denyCache.ts
 *   5. guarded call one TB.TAKE / TB.MTAKE / TB.WINDOW / TB.ACQUIRE through the breaker and
 *                   the timeout (L4, L5, B) - plan.ts, store.ts
 *   6. decision     the results, counted, remembered by the deny cache, with the request's
 *                   lease (D, S, R1, R5, N) - decision.ts, lease.ts
 *
 * Framework-neutral: an adapter (Express, Fastify) hands {@link RateLimiter.check} a
 * {@link RequestContext} and sends {@link RateLimiter.respond}'s answer. Also here: the
 * limiter's settings (C4, C7; C1, C10, C11 for its policies), startup (U), the automatic
 * refunds (F2) and `refund()` (F1).
 */
import { ClientIpConfig } from './address.js';
import { type RedisLike, TbClient } from './client.js';
import { type Clock, systemClock } from './clock.js';
import { Decision, type PolicyResult, type Response, type SettleTarget, type TakeHold } from './decision.js';
import { DenyCache, type DenyCacheOptions } from './denyCache.js';
import { StoreUnavailableError } from './errors.js';
import { type HeaderOptions, type LegacyReset, decisionHeaders } from './headers.js';
import { holdOps, takeHold } from './hold.js';
import { type Bytes, bucketKey } from './keys.js';
import { type LeaseOps, LeaseRun, leaseOps } from './lease.js';
import type { LimiterMetrics } from './metrics.js';
import { type Answer, type Plan, Planner, type RequestContext, type Stop, callOf, resultsOf } from './plan.js';
import { type AnyRequest, type Policy, RouteSet, checkDistinctNames, checkPolicyKinds } from './policy.js';
import { respond } from './problem.js';
import { RateLog } from './ratelog.js';
import { startup } from './startup.js';
import { type BackendSetting, type Chosen, backendSetting } from './backend.js';
import { type LimiterStats, newStats } from './stats.js';
import { GuardedStore, type Logger, isCrossSlot } from './store.js';

export type { LimiterStats } from './stats.js';
export { type Clock, systemClock } from './clock.js';
export type { RequestContext } from './plan.js';
export type { Logger } from './store.js';

/** SPEC C4 */
const PREFIX = /^[A-Za-z0-9_.:-]{1,64}$/;

/** SPEC C4: whether a key prefix is valid. */
export function validPrefix(prefix: unknown): prefix is string {
  return typeof prefix === 'string' && PREFIX.test(prefix);
}

/** SPEC F2: the statuses whose responses are refunded automatically (a list, or a predicate). */
export type RefundOn = readonly number[] | ((status: number) => boolean);

export interface RateLimiterOptions<Req = AnyRequest> {
  /** the limiter's policies, checked together in one call (SPEC C1, C10, C11) */
  policies: readonly Policy<Req>[];
  /** SPEC L1: `'METHOD /template'` (or `'* /template'`) routes never limited, e.g. `['GET /healthz']` */
  exclude?: string | readonly string[];
  /** SPEC L1: limit requests that match no route (by the policies of every route); default false */
  limitUnmatched?: boolean;
  /** SPEC F2: status codes (or a predicate) whose responses are refunded automatically, e.g. 5xx */
  refundOn?: RefundOn;
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
  /**
   * SPEC E1: the store's backend: `auto` (default: the module where `COMMAND INFO tb.take`
   * finds it, else the script library), `module`, or `scripts`.
   */
  backend?: BackendSetting;
}

/** SPEC F2: a refundOn setting as a predicate; null: no automatic refund. */
function refundPredicate(refundOn: RefundOn | undefined): ((status: number) => boolean) | null {
  if (refundOn === undefined) return null;
  if (typeof refundOn === 'function') return refundOn;
  const set = new Set(refundOn);
  return set.size ? (status) => set.has(status) : null;
}

/** SPEC L4: no policy applies: no call, no headers. */
function notLimited(): Decision {
  return new Decision({ outcome: 'not_limited', allowed: true });
}

/** Checks a request against its policies in one call to Redis, all or nothing. */
export class RateLimiter<Req = AnyRequest> {
  readonly client: TbClient;
  readonly policies: readonly Policy<Req>[];
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
  /** SPEC E1 */
  readonly backend: BackendSetting;
  readonly stats: LimiterStats = newStats();
  /** SPEC L1, I, K, L2, L3: the scope and plans of this limiter's requests */
  private readonly planner: Planner<Req>;
  /** SPEC B1-B5, L5: every call of this limiter (checks, refunds, leases, holds) */
  private readonly store: GuardedStore;
  /** SPEC N4-N7: the calls and counters of leases */
  private readonly leaseOps: LeaseOps;
  /** SPEC G1-G6: TB.HOLD and the hold's calls */
  private readonly takeHold: TakeHold;
  private readonly refundOn: ((status: number) => boolean) | null;
  /** SPEC S2, L3: one line a second per policy; K6: per limiter */
  private readonly shadowLog = new RateLog();
  private readonly invalidLog = new RateLog();
  private readonly crossSlotLog = new RateLog();
  private readonly headerOpts: HeaderOptions;
  private readonly refunder = (d: Decision): Promise<boolean> => this.refund(d);

  constructor(client: RedisLike, options: RateLimiterOptions<Req>) {
    this.client = TbClient.from(client);
    // SPEC C1, C10, C11: the policies of one limiter, checked once, here
    if (!options || !Array.isArray(options.policies)) throw new TypeError('a RateLimiter needs its policies: new RateLimiter(redis, { policies })');
    checkDistinctNames(options.policies);
    checkPolicyKinds(options.policies);
    this.policies = Object.freeze([...options.policies]);
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
    this.backend = backendSetting(options.backend ?? 'auto');
    this.refundOn = refundPredicate(options.refundOn);
    this.planner = new Planner<Req>({
      prefix: this.prefix, clientIp: this.clientIp, hashTag: this.hashTag, shadow: this.shadow, policies: this.policies,
      exclude: new RouteSet(options.exclude ?? []), limitUnmatched: options.limitUnmatched ?? false,
    });
    this.store = new GuardedStore(this.client, {
      name: this.name, failOpen: this.failOpen, timeoutMs: this.timeoutMs, cooldownMs: this.cooldownMs,
      stats: this.stats, metrics: this.metrics, logger: this.logger, clock: this.clock,
    });
    this.leaseOps = leaseOps(this.store);
    const holds = holdOps(this.store, (result) => this.respond(Decision.fromResults([result])));
    this.takeHold = (target, estimate, ttl) => takeHold(holds, target, estimate, ttl);
    this.headerOpts = Object.freeze({ legacyHeaders: this.legacyHeaders, legacyReset: this.legacyReset });
  }

  // -- the check --------------------------------------------------------------------

  /** SPEC L, D: the decision for one request. */
  async check(ctx: RequestContext<Req>): Promise<Decision> {
    // 1. scope (L1, K5)
    const policies = this.planner.scope(ctx.route);
    if (policies === null || policies.length === 0) return notLimited();
    // 2. identities and 3. plan (A, I, K, L2, L3)
    const plans = this.planner.planStatic(ctx, policies) ?? await this.planner.plan(ctx, policies);
    if (!Array.isArray(plans)) return this.stopped(plans);
    // SPEC G1: settleLater policies are resolved now (key and limit), not in the call
    const settle = settleTargets(plans);
    const called = settle === null ? plans : plans.filter((pl) => !pl.settleLater);
    const decision = called.length === 0 ? notLimited() : await this.charge(called, ctx.signal, settle);
    return settle === null || decision.lease !== null ? decision : decision.attach(null, this.takeHold, settle);
  }

  /** 4. the deny cache (R2-R6), then 5. the guarded call. */
  private async charge(plans: Plan[], signal: AbortSignal | undefined, settle: Map<string, SettleTarget> | null): Promise<Decision> {
    this.stats.checks += 1;
    const cache = this.denyCache;
    if (cache === null) return this.call(plans, signal, settle);
    const now = this.clock.monotonicMs();
    const cached = cache.refusal(plans, now);
    if (cached !== null) return this.fromCache(cached);
    // SPEC R6: while the breaker is open no probe is claimed (the entries stay as they are)
    const probes = this.store.mayCall(now) ? cache.claimProbes(plans, now) : [];
    try {
      return await this.call(plans, signal, settle);
    } finally {
      for (const pr of probes) cache.endProbe(pr);
    }
  }

  /** 5. the guarded call (L4, L5, B, K6), then 6. the decision. */
  private async call(plans: Plan[], signal: AbortSignal | undefined, settle: Map<string, SettleTarget> | null): Promise<Decision> {
    const { command, send } = callOf(plans, this.redisNow?.());
    let answer: Answer;
    try {
      answer = await this.store.call(command, send, signal);
    } catch (err) {
      if (signal?.aborted) throw err; // cancelled: not a store error
      // SPEC B2: kept from Redis by the open breaker: the failure mode, nothing sent
      if (err instanceof StoreUnavailableError) return this.degraded(undefined);
      // SPEC K6, L5: a configuration error, never the failure mode; the breaker untouched
      if (isCrossSlot(err)) return this.crossSlot(plans);
      return this.degraded(err);
    }
    return this.decide(plans, answer, settle);
  }

  /** 6. the decision of Redis's answer (D, S, R1, R5, N3, M). */
  private decide(plans: Plan[], answer: Answer, settle: Map<string, SettleTarget> | null): Decision {
    const results = resultsOf(plans, answer);
    if (answer.reply.allowed) return this.admitted(plans, results, answer, settle);
    const decision = Decision.fromResults(results);
    const shadowRefused = decision.shadowLimited;
    if (shadowRefused.length) this.stats.shadowLimited += 1;
    for (const name of shadowRefused) this.noteShadow(name);
    if (decision.outcome !== 'limited') {
      // SPEC S2, D1: only shadow policies refused: the outcome is allowed, but nothing was
      // charged (all or nothing): not counted in stats.allowed, no refund, no lease
      return decision;
    }
    this.stats.limited += 1;
    for (const r of results) if (!r.allowed && !r.shadow) this.metrics?.limited(this.name, r.name);
    this.denyCache?.rememberRefusals(results, this.clock.monotonicMs());
    return decision;
  }

  /** SPEC D1, R5, N2, M2: Redis admitted (and charged) the request, with its lease when it took one. */
  private admitted(plans: Plan[], results: PolicyResult[], answer: Answer, settle: Map<string, SettleTarget> | null): Decision {
    this.stats.allowed += 1;
    for (const r of results) this.metrics?.allowed(this.name, r.name);
    this.denyCache?.rememberSpent(results, this.clock.monotonicMs());
    const slot = plans.find((pl) => pl.kind === 'in_flight');
    const id = answer.acquired?.id ?? null;
    if (slot === undefined || id === null) {
      return new Decision({ outcome: 'allowed', allowed: true, results, charged: true, refunder: this.refunder, refundOn: this.refundOn });
    }
    const lease = { key: slot.key, id, policy: slot.policy.name };
    // SPEC M2: up at a grant
    this.stats.leasesInFlight += 1;
    this.metrics?.leaseGranted?.(this.name, slot.policy.name);
    const d = new Decision({
      outcome: 'allowed', allowed: true, results, charged: true, refunder: this.refunder, refundOn: this.refundOn, lease,
    });
    // SPEC N7: the request's max_duration counts from here, its grant
    return d.attach(new LeaseRun(lease, slot.inFlight!.leaseMs, slot.inFlight!.maxDurationMs, this.leaseOps), this.takeHold, settle);
  }

  /** SPEC R2, R3, H6: a refusal from the deny cache. */
  private fromCache(results: PolicyResult[]): Decision {
    this.stats.limited += 1;
    this.stats.denyCacheHits += 1;
    for (const r of results) {
      this.metrics?.denyCacheHit(this.name, r.name);
      this.metrics?.limited(this.name, r.name);
    }
    return new Decision({ outcome: 'limited', allowed: false, results, fromCache: true });
  }

  /** SPEC I2 (400) and L3 (500): planning stopped; L3 is counted and logged at most once a second per policy, never the value. */
  private stopped(stop: Stop): Decision {
    this.stats.checks += 1;
    if (stop.outcome === 'invalid_input') {
      this.stats.invalidInputs += 1;
      this.metrics?.invalidInput?.(this.name, stop.culprit);
      const count = this.invalidLog.note(stop.culprit, this.clock.monotonicMs());
      if (count) {
        this.logger.warn(
          `redis-tb: policy '${stop.culprit}' got an out-of-range cost or limit from the application; answering 500 (${count} since the last line)`,
        );
      }
    }
    return new Decision({ outcome: stop.outcome, allowed: false, culprit: stop.culprit });
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

  /** SPEC B4, D1: the failure mode decides (fail-open admits without headers, fail-closed refuses). */
  private degraded(error: unknown): Decision {
    this.stats.degraded += 1;
    this.metrics?.degraded(this.name);
    return new Decision({ outcome: 'store_error', allowed: this.failOpen, error });
  }

  /** SPEC S2: logged at most once a second per policy. */
  private noteShadow(policy: string): void {
    this.metrics?.shadowLimited(this.name, policy);
    const count = this.shadowLog.note(policy, this.clock.monotonicMs());
    if (count) this.logger.warn(`redis-tb: shadow policy '${policy}' would have limited a request (${count} since the last line)`);
  }

  /** SPEC F1, F3, B2, B3, R8: TB.REFUND now on every bucket the request was charged on. */
  private async refund(decision: Decision): Promise<boolean> {
    // SPEC F3: window and in-flight policies are never refunded
    const charged = decision.results.filter((r): r is PolicyResult & { rate: number } => r.cost > 0 && r.kind === undefined && r.rate !== null);
    if (!charged.length) return false;
    const charges = charged.map((r) => ({ key: r.key, capacity: r.capacity, rate: r.rate, cost: r.cost }));
    try {
      // SPEC B3: after the cool-down a refund may be the probe; B2: while open, nothing is sent
      await this.store.call('TB.REFUND', (s) => s.refundMany(charges, { now: this.redisNow?.() }));
    } catch {
      this.stats.refundErrors += 1;
      return false;
    }
    this.stats.refunds += 1;
    for (const r of charged) {
      this.metrics?.refunded(this.name, r.name);
      // Tokens came back: a remembered refusal of this bucket may be wrong now.
      this.denyCache?.drop(r.key);
    }
    return true;
  }

  // -- the response -------------------------------------------------------------------

  /** SPEC F2: whether this limiter refunds some responses automatically (`refundOn`). */
  get autoRefunds(): boolean {
    return this.refundOn !== null;
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

  /** The status, headers and body an adapter sends for a decision of this limiter (SPEC H, P, B4). */
  respond(decision: Decision): Response {
    return respond(decision, this.optsNow());
  }

  // -- keys and startup -----------------------------------------------------------------

  /**
   * SPEC K1-K4: the bucket key of `identity` under `policy` (the one key builder), with
   * the request's hash tag and the route of a per-route policy; `bytes: 'latin1'` for a
   * header value as received.
   */
  key(policy: string, identity: string, opts: { route?: string | null; tag?: string | null; bytes?: Bytes } = {}): string {
    return bucketKey(this.prefix, opts.tag, policy, opts.route, identity, opts.bytes ?? 'utf8');
  }

  /**
   * Call at startup (SPEC U1-U4): `COMMAND INFO tb.take`, then, when the limiter can send
   * several keys in one call and has no hash-tag function, `HELLO`. Rejects with one line
   * (the error's message, no stack needed) when the module is missing
   * ({@link ModuleNotLoadedError}), the user may not run COMMAND INFO
   * ({@link NoPermissionError}), the store is a Redis Cluster that would refuse the calls
   * ({@link ClusterKeysError}), or Redis cannot be reached ({@link RedisUnreachableError})
   * unless `startDegraded` is set: then it logs one line and resolves, and the failure
   * mode handles each request until Redis answers.
   */
  startup(): Promise<void> {
    return startup({
      client: this.client, name: this.name, timeoutMs: this.timeoutMs, startDegraded: this.startDegraded,
      hashTag: this.hashTag, logger: this.logger, policies: this.policies,
      backend: this.backend, wallMs: () => this.clock.wallMs(), chosen: (c) => this.chosen(c),
    });
  }

  /** SPEC E6: the backend chosen: one line, `stats.backend`, the gauge. */
  private chosen(c: Chosen): void {
    this.stats.backend = c.name;
    this.metrics?.backend?.(this.name, c.name);
    if (this.logger.info) this.logger.info(c.line);
    else this.logger.warn(c.line);
  }

  /** Alias of `client.checkModule()`: throws when the module is missing or Redis unreachable. */
  checkModule(): Promise<void> {
    return this.client.checkModule();
  }
}

/** SPEC G1: the key and limit of each settleLater plan, by policy name; null when none. */
function settleTargets(plans: readonly Plan[]): Map<string, SettleTarget> | null {
  let out: Map<string, SettleTarget> | null = null;
  for (const pl of plans) {
    if (pl.settleLater) (out ??= new Map()).set(pl.policy.name, { policy: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate });
  }
  return out;
}
