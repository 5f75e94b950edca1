/** The module's replies as typed values, and the argument lists of its commands. */
import { UnexpectedReplyError } from './errors.js';

/** One bucket's answer: `[allowed, remaining, retry_after, reset_after]`. */
export interface TbReply {
  /** Whether the tokens were taken (TB.MTAKE per key: this bucket alone had enough). */
  allowed: boolean;
  /** Tokens left after this call (negative while TB.RESERVE debt is outstanding). */
  remaining: number;
  /** 0 when allowed, -1 when never (n > capacity), else seconds until the same call is admitted. */
  retryAfter: number;
  /** Seconds until the bucket is full (the window's whole limit is back). */
  resetAfter: number;
}

/** TB.MTAKE: the aggregate, then one reply per key in key order. */
export interface MultiReply extends TbReply {
  keys: TbReply[];
}

/** TB.RESERVE: when allowed, `wait` is the time to wait before going ahead (0 when refused). */
export interface ReserveReply extends TbReply {
  wait: number;
}

/** TB.THROTTLE (CL.THROTTLE's five integers). */
export interface ThrottleReply {
  allowed: boolean;
  /** CL.THROTTLE's first field: 1 = limited. */
  limited: boolean;
  /** max_burst + 1 */
  limit: number;
  remaining: number;
  /** -1 when allowed, else whole seconds until a retry is admitted. */
  retryAfter: number;
  /** whole seconds until the bucket is full */
  resetAfter: number;
}

/** One key of a TB.MTAKE / refund: the key, its shape and the tokens to take. */
export interface Bucket {
  key: string;
  capacity: number;
  rate: number;
  /** tokens; default 1 */
  n?: number;
}

export type WindowMode = 'FIXED' | 'SLIDING' | 'LOG';

export function num(value: unknown): number {
  let out: number;
  if (typeof value === 'number') out = value;
  else if (typeof value === 'string') out = value.trim() === '' ? NaN : Number(value);
  else if (value instanceof Uint8Array) out = Number(Buffer.from(value).toString('ascii'));
  else if (typeof value === 'bigint') out = Number(value);
  else out = NaN;
  if (Number.isNaN(out)) throw new UnexpectedReplyError(`not a number in a TB reply: ${String(value)}`);
  return out;
}

export function parseReply(raw: unknown): TbReply {
  if (!Array.isArray(raw) || raw.length !== 4) {
    throw new UnexpectedReplyError(`expected a 4-element TB reply, got ${JSON.stringify(raw)}`);
  }
  return {
    allowed: num(raw[0]) === 1,
    remaining: num(raw[1]),
    retryAfter: num(raw[2]),
    resetAfter: num(raw[3]),
  };
}

export function parseMultiReply(raw: unknown, numkeys: number): MultiReply {
  if (!Array.isArray(raw) || raw.length !== 5) {
    throw new UnexpectedReplyError(`expected a 5-element TB.MTAKE reply, got ${JSON.stringify(raw)}`);
  }
  const perKey: unknown = raw[4];
  if (!Array.isArray(perKey) || perKey.length !== numkeys) {
    throw new UnexpectedReplyError(`expected ${numkeys} per-key replies, got ${JSON.stringify(perKey)}`);
  }
  return { ...parseReply(raw.slice(0, 4)), keys: perKey.map(parseReply) };
}

export function parseReserveReply(raw: unknown): ReserveReply {
  const r = parseReply(raw);
  return { ...r, wait: r.allowed ? r.retryAfter : 0 };
}

export function parseThrottleReply(raw: unknown): ThrottleReply {
  if (!Array.isArray(raw) || raw.length !== 5) {
    throw new UnexpectedReplyError(`expected a 5-element TB.THROTTLE reply, got ${JSON.stringify(raw)}`);
  }
  const limited = num(raw[0]) === 1;
  return {
    allowed: !limited,
    limited,
    limit: num(raw[1]),
    remaining: num(raw[2]),
    retryAfter: num(raw[3]),
    resetAfter: num(raw[4]),
  };
}

/** A number as the module reads it: the shortest round-trip text (no exponent for integers). */
export function arg(x: number): string {
  if (!Number.isFinite(x)) throw new RangeError(`not a finite number: ${x}`);
  if (Number.isInteger(x) && Math.abs(x) < 1e21) return x.toFixed(0);
  return String(x);
}

function nowArgs(now: number | undefined): string[] {
  return now === undefined ? [] : [arg(now)];
}

export function takeArgs(key: string, capacity: number, rate: number, n: number, now?: number): string[] {
  return ['TB.TAKE', key, arg(capacity), arg(rate), arg(n), ...nowArgs(now)];
}

export function mtakeArgs(buckets: readonly Bucket[], now?: number): string[] {
  if (buckets.length === 0) throw new RangeError('mtake needs at least one bucket');
  const out = ['TB.MTAKE', String(buckets.length)];
  for (const b of buckets) out.push(b.key);
  for (const b of buckets) out.push(arg(b.capacity), arg(b.rate), arg(b.n ?? 1));
  return out.concat(nowArgs(now));
}

export function reserveArgs(
  key: string, capacity: number, rate: number, n: number, maxWait: number, now?: number,
): string[] {
  return ['TB.RESERVE', key, arg(capacity), arg(rate), arg(n), arg(maxWait), ...nowArgs(now)];
}

export function peekArgs(key: string, capacity: number, rate: number, now?: number): string[] {
  return ['TB.PEEK', key, arg(capacity), arg(rate), ...nowArgs(now)];
}

export function refundArgs(key: string, capacity: number, rate: number, n: number, now?: number): string[] {
  return ['TB.REFUND', key, arg(capacity), arg(rate), arg(n), ...nowArgs(now)];
}

export function windowArgs(
  key: string, limit: number, window: number, n: number, now?: number, mode?: WindowMode,
): string[] {
  return ['TB.WINDOW', key, arg(limit), arg(window), arg(n), ...nowArgs(now), ...(mode ? [mode] : [])];
}

export function throttleArgs(
  key: string, maxBurst: number, countPerPeriod: number, period: number, quantity: number,
): string[] {
  return ['TB.THROTTLE', key, arg(maxBurst), arg(countPerPeriod), arg(period), arg(quantity)];
}
