/**
 * TbClient: typed calls of every TB.* command over the Redis client you already have
 * (node-redis v4/v5, ioredis) or a `sendCommand`-style function. It never opens a
 * connection of its own.
 */
import { ModuleNotLoadedError, RedisTbError, isReplyError } from './errors.js';
import {
  type Bucket, type MultiReply, type ReserveReply, type TbReply, type ThrottleReply, type WindowMode,
  mtakeArgs, parseMultiReply, parseReply, parseReserveReply, parseThrottleReply, peekArgs,
  refundArgs, reserveArgs, takeArgs, throttleArgs, windowArgs,
} from './replies.js';

/** `(args) => reply`: e.g. `(args) => redis.sendCommand(args)`. */
export type SendCommand = (args: string[]) => Promise<unknown>;

/** A node-redis client (v4/v5): `sendCommand(args)`. */
export interface NodeRedisLike {
  sendCommand(args: string[]): Promise<unknown>;
  options?: unknown;
}

/** An ioredis client: `call(command, ...args)`. */
export interface IoRedisLike {
  call(command: string, ...args: string[]): Promise<unknown>;
  options?: unknown;
}

/** Anything a TbClient can be made from. */
export type RedisLike = TbClient | NodeRedisLike | IoRedisLike | SendCommand;

export interface TbClientOptions {
  /** `host:port` for messages (read from the client's options when not given). */
  server?: string;
}

export interface NowOption {
  /** Seconds since the Unix epoch; default: the Redis server's clock. */
  now?: number;
}

function describe(client: unknown): string {
  const opts = (client as { options?: Record<string, unknown> } | null)?.options;
  if (!opts || typeof opts !== 'object') return 'unknown';
  // ioredis: { host, port, path }; node-redis: { url, socket: { host, port, path } }
  const socket = (opts['socket'] ?? {}) as Record<string, unknown>;
  const path = opts['path'] ?? socket['path'];
  if (typeof path === 'string' && path) return path;
  const url = opts['url'];
  if (typeof url === 'string' && url) {
    try {
      const u = new URL(url);
      return `${u.hostname || 'localhost'}:${u.port || 6379}`;
    } catch {
      /* fall through */
    }
  }
  const host = (opts['host'] ?? socket['host'] ?? 'localhost') as string;
  const port = (opts['port'] ?? socket['port'] ?? 6379) as number;
  return `${host}:${port}`;
}

function isIoRedis(c: unknown): c is IoRedisLike {
  return typeof (c as IoRedisLike).call === 'function' && typeof (c as { pipeline?: unknown }).pipeline === 'function'
    && typeof (c as { sendCommand?: unknown }).sendCommand === 'function'
    && (c as { isCluster?: unknown }).isCluster !== undefined;
}

function replyError(args: string[], err: unknown): unknown {
  return isReplyError(err) ? new RedisTbError(args[0]!.toUpperCase(), err.message, { cause: err }) : err;
}

export class TbClient {
  /** `host:port` of the server (for messages). */
  readonly server: string;
  private readonly sendFn: SendCommand;

  constructor(client: NodeRedisLike | IoRedisLike | SendCommand, options: TbClientOptions = {}) {
    if (typeof client === 'function') {
      this.sendFn = client;
    } else if (isIoRedis(client)) {
      this.sendFn = (args) => client.call(args[0]!, ...args.slice(1));
    } else if (typeof (client as NodeRedisLike).sendCommand === 'function') {
      this.sendFn = (args) => (client as NodeRedisLike).sendCommand(args);
    } else if (typeof (client as unknown as IoRedisLike).call === 'function') {
      const io = client as unknown as IoRedisLike;
      this.sendFn = (args) => io.call(args[0]!, ...args.slice(1));
    } else {
      throw new TypeError('TbClient needs a node-redis or ioredis client, or a sendCommand function');
    }
    this.server = options.server ?? (typeof client === 'function' ? 'unknown' : describe(client));
  }

  /** A TbClient as it is, or one made from a Redis client / function. */
  static from(client: RedisLike, options?: TbClientOptions): TbClient {
    return client instanceof TbClient ? client : new TbClient(client, options);
  }

  /** One raw command; an error reply rejects with {@link RedisTbError}. */
  send(args: string[]): Promise<unknown> {
    // (a plain promise chain, not an async function: one promise fewer per call)
    let sent: Promise<unknown>;
    try {
      sent = Promise.resolve(this.sendFn(args));
    } catch (err) {
      return Promise.reject(replyError(args, err));
    }
    return sent.then(undefined, (err: unknown) => {
      throw replyError(args, err);
    });
  }

  take(key: string, capacity: number, rate: number, n = 1, opts: NowOption = {}): Promise<TbReply> {
    return this.send(takeArgs(key, capacity, rate, n, opts.now)).then(parseReply);
  }

  async mtake(buckets: readonly Bucket[], opts: NowOption = {}): Promise<MultiReply> {
    return parseMultiReply(await this.send(mtakeArgs(buckets, opts.now)), buckets.length);
  }

  async reserve(
    key: string, capacity: number, rate: number, n: number, maxWait: number, opts: NowOption = {},
  ): Promise<ReserveReply> {
    return parseReserveReply(await this.send(reserveArgs(key, capacity, rate, n, maxWait, opts.now)));
  }

  async peek(key: string, capacity: number, rate: number, opts: NowOption = {}): Promise<TbReply> {
    return parseReply(await this.send(peekArgs(key, capacity, rate, opts.now)));
  }

  async refund(key: string, capacity: number, rate: number, n = 1, opts: NowOption = {}): Promise<TbReply> {
    return parseReply(await this.send(refundArgs(key, capacity, rate, n, opts.now)));
  }

  /** TB.REFUND on each bucket, sent together (pipelined by the client, no transaction). */
  async refundMany(buckets: readonly Bucket[], opts: NowOption = {}): Promise<TbReply[]> {
    const replies = await Promise.all(
      buckets.map((b) => this.send(refundArgs(b.key, b.capacity, b.rate, b.n ?? 1, opts.now))),
    );
    return replies.map(parseReply);
  }

  async window(
    key: string, limit: number, windowSeconds: number, n = 1, opts: NowOption & { mode?: WindowMode } = {},
  ): Promise<TbReply> {
    return parseReply(await this.send(windowArgs(key, limit, windowSeconds, n, opts.now, opts.mode)));
  }

  async throttle(
    key: string, maxBurst: number, countPerPeriod: number, period: number, quantity = 1,
  ): Promise<ThrottleReply> {
    return parseThrottleReply(await this.send(throttleArgs(key, maxBurst, countPerPeriod, period, quantity)));
  }

  /**
   * Throws {@link ModuleNotLoadedError} unless TB.MTAKE exists on the server
   * (`COMMAND INFO tb.mtake` answers a nil entry for an unknown command).
   * Connection errors are passed through.
   */
  async checkModule(): Promise<void> {
    const info = await this.send(['COMMAND', 'INFO', 'tb.mtake']);
    if (!Array.isArray(info) || info.length === 0 || info[0] === null || info[0] === undefined) {
      throw new ModuleNotLoadedError(this.server);
    }
  }
}
