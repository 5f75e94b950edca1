/**
 * The request-path limiter: policies -> keys -> one TB.MTAKE -> a Decision, with an
 * explicit failure mode for when Redis is down or slow.
 *
 * Failure handling (the same in the Python and Rust integrations):
 * - every call is bounded by `timeoutMs` (default 50) and made at most once;
 * - after a connection error or timeout, Redis is left alone for `cooldownMs` (default
 *   1000) and the failure mode applies directly; then a single request probes it again
 *   while the others keep the failure mode;
 * - fail-open (the default) lets requests through unlimited, without rate-limit headers;
 *   `failOpen: false` answers 503 with `Retry-After: 1`;
 * - one log line per second at most, and counters in `limiter.stats`.
 */
import { performance } from 'node:perf_hooks';
import { type RedisLike, TbClient } from './client.js';
import { Deadlines, boundOnce } from './deadline.js';
import { Decision, type PolicyResult } from './decision.js';
import { DenyCache, type DenyCacheOptions, type DenyProbe } from './denycache.js';
import {
  ModuleNotLoadedError, RedisTbError, RedisTbTimeoutError, UnexpectedReplyError,
} from './errors.js';
import { type HeaderOptions, type LegacyReset, decisionHeaders } from './headers.js';
import { ClientIp } from './ip.js';
import type { LimiterMetrics } from './metrics.js';
import { type AnyRequest, Limit, type Policy } from './policy.js';
import type { Bucket, MultiReply, TbReply } from './replies.js';

export interface Logger {
  warn(message: string): void;
}

export interface LimiterStats {
  /** requests checked against Redis (or meant to be) */
  checks: number;
  /** requests admitted by Redis (charged) */
  allowed: number;
  /** requests refused with 429 (deny-cache hits included) */
  limited: number;
  /** Redis calls that failed: connection errors, timeouts, error replies */
  storeErrors: number;
  /** requests decided by the failure mode (store errors + cool-down skips) */
  degraded: number;
  refunds: number;
  refundErrors: number;
  /** requests that a shadow policy refused (they went on, or an enforced policy refused them too) */
  shadowLimited: number;
  /** requests refused by the local deny cache */
  denyCacheHits: number;
}

export interface RateLimiterOptions<Req = AnyRequest> {
  prefix?: string;
  clientIp?: ClientIp;
  hashTag?: (request: Req) => string | null | undefined | Promise<string | null | undefined>;
  failOpen?: boolean;
  timeoutMs?: number;
  cooldownMs?: number;
  legacyHeaders?: boolean;
  legacyReset?: LegacyReset;
  shadow?: boolean;
  denyCache?: DenyCacheOptions;
  metrics?: LimiterMetrics;
  name?: string;
  logger?: Logger;
  /** () => epoch seconds passed as `now`; default: the Redis server's clock */
  clock?: () => number;
}

/** What a framework adapter knows about a request. */
export interface RequestContext<Req = AnyRequest> {
  /** the framework's request, passed to key/cost/limit functions */
  request: Req;
  /** the TCP peer's address */
  peer: string | undefined | null;
  /** the lines of a request header (lower-case name) */
  header(name: string): string[];
  /** `'METHOD /template'` or null (matched no route) */
  route: string | null;
}

interface Plan {
  policy: Policy;
  key: string;
  capacity: number;
  rate: number;
  cost: number;
  shadow: boolean;
}

function routePart(route: string): string {
  // A '{' in a key starts a Redis Cluster hash tag: keep templates' braces out.
  return route.replace(/\{/g, '<').replace(/\}/g, '>');
}


/** Checks a request against policies in one TB.MTAKE, all or nothing. */
export class RateLimiter<Req = AnyRequest> {
  readonly client: TbClient;
  readonly prefix: string;
  readonly clientIp: ClientIp;
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
  readonly clock: (() => number) | undefined;
  readonly stats: LimiterStats = {
    checks: 0, allowed: 0, limited: 0, storeErrors: 0, degraded: 0,
    refunds: 0, refundErrors: 0, shadowLimited: 0, denyCacheHits: 0,
  };
  private openUntil = 0;
  private probing = false;
  private lastLog = -Infinity;
  private unlogged = 0;
  private readonly shadowLog = new Map<string, { last: number; count: number }>();
  /** the timeouts of this limiter's Redis calls (one timer for all of them) */
  private readonly deadlines: Deadlines;
  private readonly headerOpts: HeaderOptions;
  private readonly refunder = (d: Decision): Promise<boolean> => this.refund(d);

  constructor(client: RedisLike, options: RateLimiterOptions<Req> = {}) {
    this.client = TbClient.from(client);
    this.prefix = options.prefix ?? 'rl';
    this.clientIp = options.clientIp ?? new ClientIp();
    this.hashTag = options.hashTag;
    this.failOpen = options.failOpen ?? true;
    this.timeoutMs = options.timeoutMs ?? 50;
    this.cooldownMs = options.cooldownMs ?? 1000;
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
    this.clock = options.clock;
    this.deadlines = new Deadlines(this.timeoutMs);
    this.headerOpts = Object.freeze({ legacyHeaders: this.legacyHeaders, legacyReset: this.legacyReset });
  }

  // -- lifecycle -----------------------------------------------------------------

  /**
   * Call at startup: throws {@link ModuleNotLoadedError} when the server answers without
   * the module. An unreachable Redis is logged, not thrown: the failure mode handles it
   * per request, and the app can start before Redis does.
   */
  async startup(): Promise<void> {
    try {
      await boundOnce(this.client.checkModule(), Math.max(this.timeoutMs, 1000), 'COMMAND INFO');
    } catch (err) {
      if (err instanceof ModuleNotLoadedError || err instanceof RedisTbError) throw err;
      this.logger.warn(
        `redis-tb: cannot reach Redis at ${this.client.server} to check the module (${describeError(err)}); ` +
          `failing ${this.failOpen ? 'open' : 'closed'} until it answers`,
      );
    }
  }

  /** Alias of `client.checkModule()`: throws when the module is missing or Redis unreachable. */
  checkModule(): Promise<void> {
    return this.client.checkModule();
  }

  /** The headers options of this limiter (legacy headers and their reset format). */
  get headerOptions(): HeaderOptions {
    return this.headerOpts;
  }

  /** Every rate-limit header for a decision of this limiter. */
  headers(decision: Decision): Array<[string, string]> {
    return decisionHeaders(decision, this.headerOpts);
  }

  // -- keys ----------------------------------------------------------------------

  /** The bucket key of `identity` under `policy`. */
  key(policy: string, identity: string, opts: { route?: string | null; tag?: string | null } = {}): string {
    const id = opts.route != null ? `${routePart(opts.route)}:${identity}` : identity;
    if (opts.tag != null) return `${this.prefix}:{${opts.tag}}:${policy}:${id}`;
    return `${this.prefix}:${policy}:${id}`;
  }

  /**
   * The plans without an await when every applicable policy is static (a fixed Limit, a
   * numeric cost, the client-IP identity) and there is no hash-tag function; null: some
   * policy needs {@link plans}.
   */
  private staticPlans(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Plan[] | null {
    if (this.hashTag) return null;
    let identity: string | null | undefined;
    const out: Plan[] = [];
    for (let i = 0; i < policies.length; i++) {
      const p = policies[i]!;
      if (!p.appliesTo(ctx.route)) continue;
      if (p.key || !(p.limit instanceof Limit) || typeof p.cost !== 'number') return null;
      if (identity === undefined) {
        identity = this.clientIp.identity(ctx.peer, this.clientIp.trusted.length ? ctx.header(this.clientIp.header) : []);
      }
      if (identity === null) continue;
      const id = p.perRoute && ctx.route != null ? `${routePart(ctx.route)}:${identity}` : identity;
      out.push({
        policy: p as Policy, key: `${this.prefix}:${p.name}:${id}`, capacity: p.limit.capacity, rate: p.limit.rate,
        cost: p.cost, shadow: this.shadow || p.shadow,
      });
    }
    if (out.length > 1 && new Set(out.map((pl) => pl.key)).size !== out.length) {
      throw new RangeError('two policies of one request map to the same key: give them distinct names');
    }
    return out;
  }

  private async plans(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Promise<Plan[]> {
    const tag = this.hashTag ? await this.hashTag(ctx.request) : null;
    const out: Plan[] = [];
    for (const p of policies) {
      if (!p.appliesTo(ctx.route)) continue;
      // fixed limits, costs and the client-IP identity are read without an await
      const identity = p.key
        ? await p.key(ctx.request)
        : this.clientIp.identity(ctx.peer, this.clientIp.trusted.length ? ctx.header(this.clientIp.header) : []);
      if (identity === null || identity === undefined) continue;
      const limit = p.limit instanceof Limit ? p.limit : await p.limitFor(ctx.request);
      if (limit === null) continue;
      const cost = typeof p.cost === 'number' ? p.cost : await p.costFor(ctx.request);
      const id = p.perRoute && ctx.route != null ? `${routePart(ctx.route)}:${identity}` : identity;
      const key = tag != null ? `${this.prefix}:{${tag}}:${p.name}:${id}` : `${this.prefix}:${p.name}:${id}`;
      out.push({ policy: p as Policy, key, capacity: limit.capacity, rate: limit.rate, cost, shadow: this.shadow || p.shadow });
    }
    if (out.length > 1 && new Set(out.map((pl) => pl.key)).size !== out.length) {
      throw new RangeError('two policies of one request map to the same key: give them distinct names');
    }
    return out;
  }

  // -- the request path ----------------------------------------------------------

  /** Charge the request on every applicable policy in one TB.MTAKE. */
  async check(ctx: RequestContext<Req>, policies: readonly Policy<Req>[]): Promise<Decision> {
    const plans = this.staticPlans(ctx, policies) ?? await this.plans(ctx, policies);
    if (!plans.length) return new Decision({ outcome: 'not_limited', allowed: true });
    this.stats.checks += 1;
    if (this.denyCache) {
      const cached = this.fromDenyCache(plans);
      if (cached) return cached;
      // Single flight: this request is the one probe of every expired entry it found; the
      // others are refused by fromDenyCache until the answer ends the probes.
      const probes = this.claimProbes(plans);
      if (probes.length) {
        try {
          return await this.call(plans);
        } finally {
          for (const pr of probes) this.denyCache.endProbe(pr);
        }
      }
    }
    return this.call(plans);
  }

  private claimProbes(plans: Plan[]): DenyProbe[] {
    const cache = this.denyCache!;
    const now = performance.now();
    const probes: DenyProbe[] = [];
    for (const pl of plans) {
      if (pl.shadow) continue;
      const pr = cache.claimProbe(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (pr) probes.push(pr);
    }
    return probes;
  }

  /** One TB.TAKE / TB.MTAKE (unless Redis is being skipped after a failure). */
  private async call(plans: Plan[]): Promise<Decision> {
    if (!this.mayCall()) return this.degraded(undefined);
    const probe = this.openUntil !== 0;
    if (probe) this.probing = true;
    let reply: MultiReply;
    // One policy: TB.TAKE, the same decision as TB.MTAKE over one key (whose aggregate is
    // that key's reply), with a 4-value reply instead of 9 to parse.
    const single = plans.length === 1;
    const command = single ? 'TB.TAKE' : 'TB.MTAKE';
    const started = this.metrics ? performance.now() : 0; // the call's duration is only for metrics
    try {
      if (single) {
        const pl = plans[0]!;
        const r: TbReply = await this.deadlines.bound(
          this.client.take(pl.key, pl.capacity, pl.rate, pl.cost, { now: this.now() }), command,
        );
        reply = { allowed: r.allowed, remaining: r.remaining, retryAfter: r.retryAfter, resetAfter: r.resetAfter, keys: [r] };
      } else {
        const buckets: Bucket[] = plans.map((pl) => ({ key: pl.key, capacity: pl.capacity, rate: pl.rate, n: pl.cost }));
        reply = await this.deadlines.bound(this.client.mtake(buckets, { now: this.now() }), command);
      }
    } catch (err) {
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      this.failed(err, command);
      return this.degraded(err);
    } finally {
      if (probe) this.probing = false;
    }
    this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
    this.openUntil = 0;
    return this.decide(plans, reply);
  }

  private now(): number | undefined {
    return this.clock ? this.clock() : undefined;
  }

  private mayCall(): boolean {
    if (this.openUntil === 0) return true;
    // Cooling down after a failure: skip Redis; afterwards one probe at a time.
    return performance.now() >= this.openUntil && !this.probing;
  }

  private fromDenyCache(plans: Plan[]): Decision | null {
    const cache = this.denyCache!;
    const now = performance.now();
    const results: PolicyResult[] = [];
    for (const pl of plans) {
      if (pl.shadow) continue; // shadow policies always reach Redis
      const e = cache.lookup(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (!e) continue;
      results.push({
        name: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost,
        allowed: false, remaining: 0,
        // 0 while the entry's probe is waiting for Redis (Retry-After: 1)
        retryAfter: Math.max(0, e.denyUntil - now) / 1000,
        resetAfter: Math.max(0, (e.resetAt - now) / 1000),
        shadow: false,
      });
    }
    if (!results.length) return null;
    this.stats.limited += 1;
    this.stats.denyCacheHits += 1;
    for (const r of results) {
      this.metrics?.denyCacheHit(this.name, r.name);
      this.metrics?.limited(this.name, r.name);
    }
    return new Decision({ outcome: 'limited', allowed: false, results, fromCache: true });
  }

  private decide(plans: Plan[], reply: MultiReply): Decision {
    const results: PolicyResult[] = plans.map((pl, i) => {
      const r = reply.keys[i]!;
      return {
        name: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost,
        allowed: r.allowed, remaining: r.remaining, retryAfter: r.retryAfter, resetAfter: r.resetAfter,
        shadow: pl.shadow,
      };
    });
    if (reply.allowed) {
      this.stats.allowed += 1;
      for (const r of results) this.metrics?.allowed(this.name, r.name);
      if (this.denyCache) this.rememberSpent(results);
      return new Decision({
        outcome: 'allowed', allowed: true, results, charged: true, refunder: this.refunder,
      });
    }
    const shadowRefused = results.filter((r) => !r.allowed && r.shadow);
    if (shadowRefused.length) this.stats.shadowLimited += 1;
    for (const r of shadowRefused) this.noteShadow(r.name);
    const enforced = results.filter((r) => !r.allowed && !r.shadow);
    if (!enforced.length) {
      // Only shadow policies refused: nothing was charged (all or nothing), the request
      // goes on. Not counted in stats.allowed (Redis admitted nothing), as in Rust.
      return new Decision({
        outcome: 'allowed', allowed: true, results, charged: false, shadowLimited: shadowRefused.map((r) => r.name),
      });
    }
    this.stats.limited += 1;
    for (const r of enforced) this.metrics?.limited(this.name, r.name);
    if (this.denyCache) {
      const now = performance.now();
      for (const r of enforced) {
        if (!(r.retryAfter > 0)) continue;
        this.denyCache.remember(r.key, {
          policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
          denyUntil: now + r.retryAfter * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
        }, now);
      }
    }
    return new Decision({
      outcome: 'limited', allowed: false, results, shadowLimited: shadowRefused.map((r) => r.name),
    });
  }

  /**
   * Redis admitted the request: every charged (enforced) bucket it left with fewer tokens
   * than this request's cost would refuse a request of that cost (or more) until
   * (cost - remaining) / rate has passed, absent refunds, so cache exactly that refusal.
   * Without it, an admitted probe removed the entry and the requests in flight behind it
   * all went to Redis. A bucket left with enough tokens caches nothing; a probe admitted
   * with enough left still removes its entry (`endProbe`).
   */
  private rememberSpent(results: PolicyResult[]): void {
    const cache = this.denyCache!;
    const now = performance.now();
    for (const r of results) {
      if (r.shadow || !(r.cost > 0) || !(r.remaining < r.cost)) continue;
      const wait = (r.cost - r.remaining) / r.rate;
      if (!(wait > 0 && Number.isFinite(wait))) continue;
      cache.remember(r.key, {
        policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
        denyUntil: now + wait * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
      }, now);
    }
  }

  private noteShadow(policy: string): void {
    this.metrics?.shadowLimited(this.name, policy);
    const now = performance.now();
    const s = this.shadowLog.get(policy) ?? { last: -Infinity, count: 0 };
    s.count += 1;
    if (now - s.last >= 1000) {
      this.logger.warn(`redis-tb: shadow policy '${policy}' would have limited a request (${s.count} since the last line)`);
      s.last = now;
      s.count = 0;
    }
    this.shadowLog.set(policy, s);
  }

  private degraded(error: unknown): Decision {
    this.stats.degraded += 1;
    this.metrics?.degraded(this.name);
    return new Decision({ outcome: 'store_error', allowed: this.failOpen, error });
  }

  private failed(err: unknown, what: string): void {
    this.stats.storeErrors += 1;
    this.metrics?.storeError(this.name);
    const unknown = err instanceof RedisTbError && err.serverMessage.toLowerCase().includes('unknown command');
    const serverWide = unknown || !(err instanceof RedisTbError || err instanceof UnexpectedReplyError);
    const now = performance.now();
    if (serverWide) this.openUntil = now + this.cooldownMs;
    if (now - this.lastLog < 1000) {
      this.unlogged += 1;
      return;
    }
    let reason = err instanceof RedisTbTimeoutError ? `no answer within ${this.timeoutMs} ms` : describeError(err);
    if (unknown) reason += ' (is the redis-tb module loaded?)';
    this.logger.warn(
      `redis-tb: ${what} on ${this.client.server} failed (${reason}); ` +
        `failing ${this.failOpen ? 'open: requests pass unlimited' : 'closed: requests get 503'}` +
        `${serverWide ? `, Redis skipped for ${this.cooldownMs / 1000} s` : ''}; ` +
        `store errors so far: ${this.stats.storeErrors}${this.unlogged ? ` (${this.unlogged} not logged)` : ''}`,
    );
    this.lastLog = now;
    this.unlogged = 0;
  }

  private async refund(decision: Decision): Promise<boolean> {
    const charged = decision.results.filter((r) => r.cost > 0);
    if (!charged.length) return false;
    if (!this.mayCall()) {
      this.stats.refundErrors += 1;
      return false;
    }
    const started = performance.now();
    try {
      await this.deadlines.bound(
        this.client.refundMany(charged.map((r) => ({ key: r.key, capacity: r.capacity, rate: r.rate, n: r.cost })), { now: this.now() }),
        'TB.REFUND',
      );
    } catch (err) {
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      this.stats.refundErrors += 1;
      this.failed(err, 'TB.REFUND');
      return false;
    }
    this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
    this.stats.refunds += 1;
    for (const r of charged) {
      this.metrics?.refunded(this.name, r.name);
      // Tokens came back: a remembered refusal of this bucket may be wrong now.
      this.denyCache?.drop(r.key);
    }
    return true;
  }
}

function describeError(err: unknown): string {
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  return String(err);
}
