/** Errors of the redis-tb package. */

/** The module (or Redis) answered a TB.* command with an error reply. */
export class RedisTbError extends Error {
  /** The command, upper-cased: `'TB.TAKE'`, `'TB.MTAKE'`, ... */
  readonly command: string;
  /** The server's text, e.g. `ERR capacity must be > 0 and <= 9007199254740992`. */
  readonly serverMessage: string;

  constructor(command: string, serverMessage: string, options?: { cause?: unknown }) {
    super(`${command}: ${serverMessage}`, options);
    this.name = 'RedisTbError';
    this.command = command;
    this.serverMessage = serverMessage;
  }
}

/** SPEC U1: the server answers, but the redis-tb module is not loaded there. */
export class ModuleNotLoadedError extends Error {
  readonly where: string;

  constructor(where: string) {
    super(`redis-tb module not loaded on ${where}: load libredis_tb.so with loadmodule`);
    this.name = 'ModuleNotLoadedError';
    this.where = where;
  }
}

/** SPEC U1: the user may not run COMMAND INFO, so startup cannot check the module. */
export class NoPermissionError extends Error {
  readonly where: string;

  constructor(where: string, options?: { cause?: unknown }) {
    super(`redis-tb: user cannot run COMMAND INFO on ${where}: grant +command|info (see docs/operations.md)`, options);
    this.name = 'NoPermissionError';
    this.where = where;
  }
}

/** SPEC U2: Redis cannot be reached at startup (and `startDegraded` is not set). */
export class RedisUnreachableError extends Error {
  readonly where: string;

  constructor(where: string, reason: string, options?: { cause?: unknown }) {
    super(`redis-tb: cannot reach Redis at ${where} (${reason}): start it, or set startDegraded to start failing open`, options);
    this.name = 'RedisUnreachableError';
    this.where = where;
  }
}

/**
 * SPEC U3, K6: the store is a Redis Cluster and the limiter sends several keys in one call
 * without a tag function: the cluster would refuse every such call (CROSSSLOT).
 */
export class ClusterKeysError extends Error {
  /** the limiter's metrics name */
  readonly limiter: string;
  /** its policies that are not settleLater, in policy order */
  readonly policies: readonly string[];

  constructor(limiter: string, policies: readonly string[]) {
    super(
      `redis-tb: limiter '${limiter}' sends several keys in one call (policies ${policies.map((p) => `'${p}'`).join(', ')}), ` +
        'which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)',
    );
    this.name = 'ClusterKeysError';
    this.limiter = limiter;
    this.policies = policies;
  }
}

/** The server answered something that is not a TB.* reply. */
export class UnexpectedReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UnexpectedReplyError';
  }
}

/** A Redis call of the limiter did not answer within its timeout. */
export class RedisTbTimeoutError extends Error {
  readonly timeoutMs: number;

  constructor(what: string, timeoutMs: number) {
    super(`${what}: no answer within ${timeoutMs} ms`);
    this.name = 'RedisTbTimeoutError';
    this.timeoutMs = timeoutMs;
  }
}

/**
 * SPEC B2: the limiter's breaker is open (Redis failed moments ago), so a hold or a
 * settlement (SPEC G) is not sent; the caller takes the failure mode.
 */
export class StoreUnavailableError extends Error {
  readonly command: string;

  constructor(command: string, where: string) {
    super(`${command}: not sent: Redis at ${where} failed moments ago (the limiter's cool-down)`);
    this.name = 'StoreUnavailableError';
    this.command = command;
  }
}

/** Scheduler: the booked slot would be further away than `maxWait`. */
export class SchedulerWaitTooLongError extends Error {
  readonly key: string;
  /** Seconds after which the same booking would be accepted; -1: never (cost > capacity). */
  readonly retryAfter: number;
  readonly maxWait: number;

  constructor(key: string, retryAfter: number, maxWait: number) {
    super(
      retryAfter < 0
        ? `scheduler '${key}': a call costs more than the bucket's capacity: it can never run`
        : `scheduler '${key}': the next free slot is more than ${maxWait} s away (retry after ${retryAfter} s)`,
    );
    this.name = 'SchedulerWaitTooLongError';
    this.key = key;
    this.retryAfter = retryAfter;
    this.maxWait = maxWait;
  }
}

const REPLY_ERROR_NAMES = new Set(['ErrorReply', 'ReplyError', 'SimpleError', 'BlobError']);

/** Whether `err` is an error reply of the server (node-redis ErrorReply, ioredis ReplyError). */
export function isReplyError(err: unknown): err is Error {
  if (!(err instanceof Error)) return false;
  for (let proto: unknown = Object.getPrototypeOf(err); proto && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    const ctor = (proto as { constructor?: { name?: string } }).constructor;
    if (ctor?.name && REPLY_ERROR_NAMES.has(ctor.name)) return true;
  }
  return REPLY_ERROR_NAMES.has(err.name);
}
