/**
 * TbClient (SPEC "Names"): typed calls of all twelve module commands (TB.TAKE, MTAKE,
 * RESERVE, PEEK with its LEASES and HOLDS forms, REFUND, THROTTLE, WINDOW, ACQUIRE with
 * TAKE, RELEASE, RENEW, HOLD, SETTLE) over the Redis client you already have
 * (node-redis v4/v5, ioredis) or a `sendCommand`-style function. It never opens a
 * connection of its own.
 */
import type { Backend } from './backend.js';
import { ModuleNotLoadedError, RedisTbError, UnexpectedReplyError, isReplyError } from './errors.js';
import {
  type Charge, type MultiReply, type Reservation, type Reply, type Throttle, type WindowMode,
  mtakeArgs, parseMultiReply, parseReply, parseReserveReply, parseThrottleReply, peekArgs,
  refundArgs, reserveArgs, takeArgs, throttleArgs, windowArgs, acquireArgs, holdArgs, settleArgs, parseAcquireReply,
  parseLeaseReply, parseHoldReply, parseSettleReply, arg, num, type Acquired, type LeaseReply, type HoldReply, type SettleReply,
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

/** An ioredis client's connection state, read only to wait for `ready` at startup. */
interface IoRedisState {
  status?: unknown;
  once?(event: string, listener: (...args: unknown[]) => void): unknown;
  off?(event: string, listener: (...args: unknown[]) => void): unknown;
  connect?(): Promise<unknown>;
  options?: { enableOfflineQueue?: unknown; lazyConnect?: unknown };
}

/**
 * Until an ioredis client is `ready`: with `enableOfflineQueue: false` (the setting the
 * README recommends, so a request never queues behind a dead connection) a command sent
 * before the connection is up is rejected at once, and the startup check never reached
 * the server (issue 26). Resolves when ready; rejects with the last connection error (or
 * the wait) after `ms`.
 */
function ioredisReady(io: IoRedisState, ms: number): Promise<void> {
  if (io.status === 'ready' || typeof io.once !== 'function') return Promise.resolve();
  if (io.status === 'end') return Promise.reject(new Error('the ioredis client was closed (quit/disconnect)'));
  if (io.status === 'wait' && typeof io.connect === 'function') {
    // lazyConnect: nothing connects it before the first queued command
    io.connect().catch(() => undefined);
  }
  return new Promise<void>((resolve, reject) => {
    let last: unknown;
    const onError = (err: unknown): void => {
      last = err;
    };
    const done = (err?: unknown): void => {
      clearTimeout(timer);
      io.off?.('ready', onReady);
      io.off?.('error', onError);
      io.off?.('end', onEnd);
      if (err === undefined) resolve();
      else reject(err);
    };
    const onReady = (): void => done();
    const onEnd = (): void => done(last ?? new Error('the connection ended'));
    const timer = setTimeout(() => {
      done(last ?? new Error(`not connected within ${ms} ms`));
    }, ms);
    io.once!('ready', onReady);
    (io as { on?: (e: string, l: (...a: unknown[]) => void) => unknown }).on?.('error', onError);
    io.once!('end', onEnd);
  });
}

export class TbClient {
  /** `host:port` of the server (for messages). */
  readonly server: string;
  private readonly sendFn: SendCommand;
  /** the ioredis client behind this TbClient, if it is one (startup waits for `ready`) */
  private readonly io: IoRedisState | null = null;
  /**
   * SPEC E: the backend TB.* calls go through; null (the module's commands as they are)
   * until a limiter's startup chooses one, or {@link useBackend} sets it.
   */
  backend: Backend | null = null;
  private readonly sendBound = (args: string[]): Promise<unknown> => this.send(args);
  private readonly moduleInfo = (): Promise<boolean> => this.hasModule();

  constructor(client: NodeRedisLike | IoRedisLike | SendCommand, options: TbClientOptions = {}) {
    if (typeof client === 'function') {
      this.sendFn = client;
    } else if (isIoRedis(client)) {
      this.sendFn = (args) => client.call(args[0]!, ...args.slice(1));
      this.io = client as unknown as IoRedisState;
    } else if (typeof (client as NodeRedisLike).sendCommand === 'function') {
      this.sendFn = (args) => (client as NodeRedisLike).sendCommand(args);
    } else if (typeof (client as unknown as IoRedisLike).call === 'function') {
      const io = client as unknown as IoRedisLike;
      this.sendFn = (args) => io.call(args[0]!, ...args.slice(1));
      this.io = client as unknown as IoRedisState;
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
  async send(args: string[]): Promise<unknown> {
    try {
      return await this.sendFn(args);
    } catch (err) {
      throw replyError(args, err);
    }
  }

  /** SPEC E: send the TB.* calls through `backend` (chosen, or to be chosen before the first call). */
  useBackend(backend: Backend): void {
    this.backend = backend;
  }

  /**
   * One TB.* call, built by `build` from the client's clock where the scripts need it (E5:
   * `now` of a bucket or window call; undefined otherwise), through the backend.
   */
  private async tb(build: (now: number | undefined) => string[]): Promise<unknown> {
    const b = this.backend;
    if (b === null) return this.send(build(undefined));
    if (b.current === null) await b.ready(this.sendBound, this.moduleInfo);
    return b.call(this.sendBound, build(b.clientNow()), this.moduleInfo);
  }

  async take(key: string, capacity: number, rate: number, n = 1, opts: NowOption = {}): Promise<Reply> {
    return parseReply(await this.tb((now) => takeArgs(key, capacity, rate, n, opts.now ?? now)));
  }

  async mtake(charges: readonly Charge[], opts: NowOption = {}): Promise<MultiReply> {
    return parseMultiReply(await this.tb((now) => mtakeArgs(charges, opts.now ?? now)), charges.length);
  }

  async reserve(
    key: string, capacity: number, rate: number, n: number, maxWait: number, opts: NowOption = {},
  ): Promise<Reservation> {
    return parseReserveReply(await this.tb((now) => reserveArgs(key, capacity, rate, n, maxWait, opts.now ?? now)));
  }

  async peek(key: string, capacity: number, rate: number, opts: NowOption = {}): Promise<Reply> {
    return parseReply(await this.tb((now) => peekArgs(key, capacity, rate, opts.now ?? now)));
  }

  async refund(key: string, capacity: number, rate: number, n = 1, opts: NowOption = {}): Promise<Reply> {
    return parseReply(await this.tb((now) => refundArgs(key, capacity, rate, n, opts.now ?? now)));
  }

  /** TB.REFUND on each bucket, sent together (pipelined by the client, no transaction). */
  async refundMany(buckets: readonly Charge[], opts: NowOption = {}): Promise<Reply[]> {
    const replies = await Promise.all(
      buckets.map((b) => this.tb((now) => refundArgs(b.key, b.capacity, b.rate, b.cost ?? 1, opts.now ?? now))),
    );
    return replies.map(parseReply);
  }

  async window(
    key: string, limit: number, windowSeconds: number, n = 1, opts: NowOption & { mode?: WindowMode } = {},
  ): Promise<Reply> {
    return parseReply(await this.tb((now) => windowArgs(key, limit, windowSeconds, n, opts.now ?? now, opts.mode)));
  }

  /** SPEC N2: TB.ACQUIRE, with TAKE when `buckets` are given (all or nothing). */
  async acquire(key: string, limit: number, leaseMs: number, buckets: readonly Charge[] = []): Promise<Acquired> {
    return parseAcquireReply(await this.tb(() => acquireArgs(key, limit, leaseMs, buckets)), buckets.length);
  }

  /** SPEC N4: TB.RELEASE `[released, in_flight]`. */
  async release(key: string, id: string): Promise<LeaseReply> {
    return parseLeaseReply(await this.tb(() => ['TB.RELEASE', key, id]), 'TB.RELEASE');
  }

  /** SPEC N5, G5: TB.RENEW of a lease, or of a hold on a bucket (`ms` its ttl): `[renewed, in_flight, ms]`. */
  async renew(key: string, id: string, leaseMs: number): Promise<LeaseReply> {
    return parseLeaseReply(await this.tb(() => ['TB.RENEW', key, id, arg(leaseMs)]), 'TB.RENEW');
  }

  /** TB.PEEK key LEASES: `[in_flight, ms]`. */
  async peekLeases(key: string): Promise<{ inFlight: number; ms: number }> {
    const raw = await this.tb(() => ['TB.PEEK', key, 'LEASES']);
    if (!Array.isArray(raw) || raw.length !== 2) throw new UnexpectedReplyError(`expected a 2-element TB.PEEK LEASES reply, got ${JSON.stringify(raw)}`);
    return { inFlight: num(raw[0]), ms: num(raw[1]) };
  }

  /** TB.PEEK key HOLDS: a bucket's live holds, the sum they charged, and the ms until the earliest expires (0 when none). */
  async peekHolds(key: string): Promise<{ holds: number; amount: number; ms: number }> {
    const raw = await this.tb(() => ['TB.PEEK', key, 'HOLDS']);
    if (!Array.isArray(raw) || raw.length !== 3) throw new UnexpectedReplyError(`expected a 3-element TB.PEEK HOLDS reply, got ${JSON.stringify(raw)}`);
    return { holds: num(raw[0]), amount: num(raw[1]), ms: num(raw[2]) };
  }

  /** SPEC G1: TB.HOLD. */
  async hold(key: string, capacity: number, rate: number, estimate: number, ttlMs: number): Promise<HoldReply> {
    return parseHoldReply(await this.tb(() => holdArgs(key, capacity, rate, estimate, ttlMs)));
  }

  /**
   * SPEC G3: TB.SETTLE; `maxWait` (seconds) bounds the debt an excess may leave to
   * `maxWait x rate` (the limiter sends capacity / rate: at most one bucket).
   */
  async settle(key: string, capacity: number, rate: number, id: string, actual: number, maxWait?: number): Promise<SettleReply> {
    return parseSettleReply(await this.tb(() => settleArgs(key, capacity, rate, id, actual, maxWait)));
  }

  async throttle(
    key: string, maxBurst: number, countPerPeriod: number, period: number, quantity = 1,
  ): Promise<Throttle> {
    return parseThrottleReply(await this.send(throttleArgs(key, maxBurst, countPerPeriod, period, quantity)));
  }

  /**
   * SPEC U1: throws {@link ModuleNotLoadedError} unless TB.TAKE exists on the server
   * (`COMMAND INFO tb.take` answers a nil entry for an unknown command). An ioredis
   * client is first given `readyWithinMs` (default 2000) to connect. Connection errors
   * are passed through.
   */
  async checkModule(opts: { readyWithinMs?: number } = {}): Promise<void> {
    if (!(await this.hasModule(opts))) throw new ModuleNotLoadedError(this.server);
  }

  /**
   * SPEC U1, E1: whether TB.TAKE exists on the server (`COMMAND INFO tb.take` has an entry
   * for it); an ioredis client is first given `readyWithinMs` (default 2000) to connect.
   */
  async hasModule(opts: { readyWithinMs?: number } = {}): Promise<boolean> {
    if (this.io !== null) await ioredisReady(this.io, opts.readyWithinMs ?? 2000);
    const info = await this.send(['COMMAND', 'INFO', 'tb.take']);
    return !(!Array.isArray(info) || info.length === 0 || info[0] === null || info[0] === undefined);
  }
}
