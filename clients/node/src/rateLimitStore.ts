/**
 * An express-rate-limit (v7/v8) store on TB.WINDOW: `rateLimit({ store: new RedisTbStore({ client }) })`.
 *
 * Mode LOG (default): a sliding log, exact in every window-long interval, where
 * rate-limit-redis's fixed window (INCR + PEXPIRE, the window starting at the key's first
 * hit) lets up to 2 x limit through across a window boundary. Each increment is one
 * TB.WINDOW call, atomic on the server; a refusal writes nothing. Mode SLIDING: the
 * module's sliding-window estimate, bounded state (two counters) for large limits, where
 * `totalHits` is the weighted estimate rounded up.
 *
 * decrement (express-rate-limit calls it for `skipSuccessfulRequests` /
 * `skipFailedRequests`): LOG removes the newest entry of the key's log with ZPOPMAX (one
 * atomic command): the count goes down by exactly one, but the entry removed is the newest
 * one, which is this request's own only when no other request of that key was admitted
 * in between (otherwise the log frees the later slot and keeps this request's earlier
 * one, which leaves the window sooner). SLIDING cannot un-count (its counters are one
 * field of the module's state, there is no command for it): decrement rejects, and init
 * refuses the skip options in that mode.
 */
import { type RedisLike, type SendCommand, TbClient } from './client.js';
import type { Reply } from './replies.js';

export interface RedisTbStoreOptions {
  /** a node-redis / ioredis client or a TbClient */
  client?: RedisLike;
  /** or a function sending one command: `(args) => redis.sendCommand(args)` */
  sendCommand?: SendCommand;
  /** key prefix, default `'erl:'` */
  prefix?: string;
  /** `'LOG'` (default, exact) or `'SLIDING'` */
  mode?: 'LOG' | 'SLIDING';
}

/** The part of express-rate-limit's options the store reads. */
export interface StoreInitOptions {
  windowMs: number;
  limit?: unknown;
  max?: unknown;
  skipFailedRequests?: boolean;
  skipSuccessfulRequests?: boolean;
}

export interface ClientRateLimitInfo {
  totalHits: number;
  resetTime: Date | undefined;
}

export class RedisTbStore {
  readonly prefix: string;
  readonly mode: 'LOG' | 'SLIDING';
  /** keys live in Redis, shared by every instance */
  readonly localKeys = false;
  private readonly tb: TbClient;
  private windowSeconds = 0;
  private limit = 0;
  private initError: Error | null = new Error('RedisTbStore: init() was not called by express-rate-limit');

  constructor(options: RedisTbStoreOptions) {
    const source = options.client ?? options.sendCommand;
    if (!source) throw new TypeError('RedisTbStore needs `client` or `sendCommand`');
    this.tb = TbClient.from(source);
    this.prefix = options.prefix ?? 'erl:';
    this.mode = options.mode ?? 'LOG';
    if (this.mode !== 'LOG' && this.mode !== 'SLIDING') throw new RangeError(`mode must be 'LOG' or 'SLIDING', got ${String(this.mode)}`);
  }

  init(options: StoreInitOptions): void {
    const limit = options.limit ?? options.max;
    if (typeof limit !== 'number' || !(limit > 0)) {
      this.initError = new TypeError('RedisTbStore needs a numeric `limit` (TB.WINDOW decides against it on the server)');
      throw this.initError;
    }
    if (this.mode === 'LOG' && !Number.isInteger(limit)) {
      this.initError = new RangeError('RedisTbStore LOG mode needs a whole `limit`');
      throw this.initError;
    }
    if (this.mode === 'SLIDING' && (options.skipFailedRequests || options.skipSuccessfulRequests)) {
      this.initError = new RangeError('RedisTbStore SLIDING mode cannot decrement: use mode LOG with skipFailedRequests/skipSuccessfulRequests');
      throw this.initError;
    }
    this.windowSeconds = options.windowMs / 1000;
    this.limit = limit;
    this.initError = null;
  }

  private ready(): void {
    if (this.initError) throw this.initError;
  }

  private hits(r: Reply): number {
    const used = this.limit - r.remaining;
    return Math.min(this.limit, Math.max(0, Math.ceil(used - 1e-9)));
  }

  async get(key: string): Promise<ClientRateLimitInfo | undefined> {
    this.ready();
    const r = await this.tb.window(this.prefix + key, this.limit, this.windowSeconds, 0, { mode: this.mode });
    const totalHits = this.hits(r);
    if (totalHits === 0) return undefined;
    return { totalHits, resetTime: new Date(Date.now() + r.resetAfter * 1000) };
  }

  /**
   * Count a hit: TB.WINDOW with n = 1. Allowed: totalHits is the count in the window
   * (this hit included), resetTime when the whole limit is back. Refused (nothing
   * written): totalHits is limit + 1 and resetTime the exact time a hit will be admitted.
   */
  async increment(key: string): Promise<ClientRateLimitInfo> {
    this.ready();
    const r = await this.tb.window(this.prefix + key, this.limit, this.windowSeconds, 1, { mode: this.mode });
    const now = Date.now();
    if (r.allowed) return { totalHits: Math.max(1, this.hits(r)), resetTime: new Date(now + r.resetAfter * 1000) };
    return { totalHits: this.limit + 1, resetTime: new Date(now + Math.max(0, r.retryAfter) * 1000) };
  }

  async decrement(key: string): Promise<void> {
    this.ready();
    if (this.mode !== 'LOG') {
      throw new Error('RedisTbStore: decrement is not possible in SLIDING mode (use LOG)');
    }
    await this.tb.send(['ZPOPMAX', this.prefix + key, '1']);
  }

  async resetKey(key: string): Promise<void> {
    await this.tb.send(['DEL', this.prefix + key]);
  }
}
