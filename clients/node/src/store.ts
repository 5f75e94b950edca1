/**
 * The store (SPEC "Names": the seam a limiter reaches Redis through) and the ONE guarded
 * call every command of a limiter goes through: a check's TB.TAKE / TB.MTAKE / TB.WINDOW /
 * TB.ACQUIRE, a refund's TB.REFUND, a lease's TB.RELEASE and TB.RENEW, a hold's TB.HOLD,
 * TB.RENEW and TB.SETTLE.
 *
 * The guarded call (SPEC B1-B5, L5, K6):
 * - sent only while the breaker is closed, or as the one probe after the cool-down (B2,
 *   B3); kept from Redis, it rejects with {@link StoreUnavailableError}: nothing sent,
 *   nothing counted;
 * - bounded by the limiter's timeout and made once, never retried (L5);
 * - an answer closes the breaker (B3); a connection error or a timeout opens it for the
 *   cool-down, an error reply does not (B1); either is counted in `storeErrors` and
 *   logged at most once a second (B5), then rethrown for the caller to decide;
 * - a `CROSSSLOT` reply is K6's configuration error: rethrown, not a store error (not
 *   counted, the breaker untouched);
 * - a call whose caller went away (its signal aborted, SPEC R4) rejects without counting;
 * - every call that reached Redis is timed for `metrics.redisCall`.
 */
import { performance } from 'node:perf_hooks';
import { Breaker } from './breaker.js';
import type { Clock } from './clock.js';
import { Deadlines } from './deadline.js';
import {
  RedisTbError, RedisTbTimeoutError, StoreUnavailableError, UnexpectedReplyError, describeError,
} from './errors.js';
import type { LimiterMetrics } from './metrics.js';
import type {
  Acquired, Charge, HoldReply, LeaseReply, MultiReply, Reply, SettleReply, WindowMode,
} from './replies.js';
import type { LimiterStats } from './stats.js';

/**
 * The module's commands a limiter sends. {@link TbClient} is one (over node-redis, ioredis
 * or a `sendCommand` function); anything with these methods may stand in for it.
 */
export interface Store {
  /** `host:port`, for messages */
  readonly server: string;
  take(key: string, capacity: number, rate: number, n?: number, opts?: { now?: number }): Promise<Reply>;
  mtake(charges: readonly Charge[], opts?: { now?: number }): Promise<MultiReply>;
  window(key: string, limit: number, seconds: number, n?: number, opts?: { now?: number; mode?: WindowMode }): Promise<Reply>;
  acquire(key: string, limit: number, leaseMs: number, charges?: readonly Charge[]): Promise<Acquired>;
  release(key: string, id: string): Promise<LeaseReply>;
  renew(key: string, id: string, ms: number): Promise<LeaseReply>;
  hold(key: string, capacity: number, rate: number, estimate: number, ttlMs: number): Promise<HoldReply>;
  settle(key: string, capacity: number, rate: number, id: string, actual: number, maxWait?: number): Promise<SettleReply>;
  refundMany(charges: readonly Charge[], opts?: { now?: number }): Promise<Reply[]>;
}

export interface Logger {
  warn(message: string): void;
  /** SPEC E6: the backend's line at startup (`warn` when there is no `info`) */
  info?(message: string): void;
}

/** What a guarded store reads of its limiter. */
export interface GuardedStoreOptions {
  /** the limiter's metrics name */
  name: string;
  failOpen: boolean;
  timeoutMs: number;
  cooldownMs: number;
  stats: LimiterStats;
  metrics: LimiterMetrics | null;
  logger: Logger;
  clock: Clock;
}

/** SPEC K6, L5: Redis refused a call whose keys are in different cluster slots. */
export function isCrossSlot(err: unknown): boolean {
  return err instanceof RedisTbError && /^CROSSSLOT\b/.test(err.serverMessage);
}

/** A store behind one limiter's breaker, timeout and counters: {@link call}. */
export class GuardedStore {
  readonly store: Store;
  readonly name: string;
  readonly stats: LimiterStats;
  readonly metrics: LimiterMetrics | null;
  readonly logger: Logger;
  readonly clock: Clock;
  private readonly failOpen: boolean;
  private readonly timeoutMs: number;
  private readonly cooldownMs: number;
  /** SPEC B1-B3: one breaker for every call of the limiter */
  private readonly breaker: Breaker;
  /** the timeouts of the limiter's calls (one timer for all of them) */
  private readonly deadlines: Deadlines;
  private lastLog = -Infinity;
  private unlogged = 0;

  constructor(store: Store, options: GuardedStoreOptions) {
    this.store = store;
    this.name = options.name;
    this.stats = options.stats;
    this.metrics = options.metrics;
    this.logger = options.logger;
    this.clock = options.clock;
    this.failOpen = options.failOpen;
    this.timeoutMs = options.timeoutMs;
    this.cooldownMs = options.cooldownMs;
    this.breaker = new Breaker(options.cooldownMs);
    this.deadlines = new Deadlines(options.timeoutMs);
  }

  /** SPEC R6: whether a call could go to Redis now (claims nothing). */
  mayCall(now: number): boolean {
    return this.breaker.mayCall(now);
  }

  /**
   * The one guarded call: `send(store)` through the breaker, bounded by the timeout, made
   * once (see the file's comment). `signal`: the caller went away (a cancelled check).
   */
  async call<T>(command: string, send: (store: Store) => Promise<T>, signal?: AbortSignal): Promise<T> {
    const pass = this.breaker.enter(this.clock.monotonicMs());
    if (pass === null) throw new StoreUnavailableError(command, this.store.server);
    const started = this.metrics ? performance.now() : 0; // the duration is only for metrics
    try {
      const out = await this.deadlines.bound(send(this.store), command, signal);
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      this.breaker.answered(); // SPEC B3: an answer closes the breaker
      return out;
    } catch (err) {
      if (signal?.aborted) throw err; // cancelled: not a store error
      this.metrics?.redisCall(this.name, (performance.now() - started) / 1000);
      if (!isCrossSlot(err)) this.failed(err, command);
      throw err;
    } finally {
      this.breaker.leave(pass);
    }
  }

  /** SPEC B1, B5: a failed call; a connection error or a timeout opens the breaker, an error reply does not. */
  private failed(err: unknown, command: string): void {
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
      `redis-tb: ${command} on ${this.store.server} failed (${reason}); ` +
        `failing ${this.failOpen ? 'open: requests pass unlimited' : 'closed: requests get 503'}` +
        `${opens ? `, Redis skipped for ${this.cooldownMs / 1000} s` : ''}; ` +
        `store errors so far: ${this.stats.storeErrors}${this.unlogged ? ` (${this.unlogged} not logged)` : ''}`,
    );
    this.lastLog = now;
    this.unlogged = 0;
  }
}
