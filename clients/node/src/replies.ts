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

/** TB.ACQUIRE: `[granted, in_flight, id or null, ms]`, then with TAKE the aggregate and one reply per bucket. */
export interface AcquireReply {
  granted: boolean;
  inFlight: number;
  /** the lease id (16 hex digits), null when refused */
  id: string | null;
  /** granted: the lease's ms; refused: ms until the earliest lease expires (an upper bound of the wait) */
  ms: number;
  /** with TAKE: the buckets' aggregate and their replies in order (null without TAKE) */
  take: MultiReply | null;
}

/** TB.RELEASE `[released, in_flight]` and TB.RENEW `[renewed, in_flight, ms]`. */
export interface LeaseReply {
  ok: boolean;
  inFlight: number;
  ms: number;
}

/** TB.HOLD: TB.TAKE's four fields and the hold id (null when refused). */
export interface HoldReply extends TbReply {
  id: string | null;
}

/** TB.SETTLE `[settled, remaining, charged, reset_after]`. */
export interface SettleReply {
  settled: boolean;
  remaining: number;
  charged: number;
  resetAfter: number;
}

function idOf(value: unknown): string | null {
  if (value === null || value === undefined) return null;
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return Buffer.from(value).toString('ascii');
  throw new UnexpectedReplyError(`not an id in a TB reply: ${String(value)}`);
}

function takeParts(aggregate: unknown, perKey: unknown): unknown[] {
  if (!Array.isArray(aggregate)) throw new UnexpectedReplyError(`expected TB.ACQUIRE's TAKE aggregate, got ${JSON.stringify(aggregate)}`);
  return [...(aggregate as unknown[]), perKey];
}

export function parseAcquireReply(raw: unknown, numkeys: number): AcquireReply {
  const want = numkeys ? 6 : 4;
  if (!Array.isArray(raw) || raw.length !== want) {
    throw new UnexpectedReplyError(`expected a ${want}-element TB.ACQUIRE reply, got ${JSON.stringify(raw)}`);
  }
  const granted = num(raw[0]) === 1;
  const id = idOf(raw[2]);
  if (granted && id === null) throw new UnexpectedReplyError('TB.ACQUIRE granted a lease without an id');
  return {
    granted, inFlight: num(raw[1]), id, ms: num(raw[3]),
    take: numkeys ? parseMultiReply(takeParts(raw[4], raw[5]), numkeys) : null,
  };
}

export function parseLeaseReply(raw: unknown, command: 'TB.RELEASE' | 'TB.RENEW'): LeaseReply {
  const want = command === 'TB.RELEASE' ? 2 : 3;
  if (!Array.isArray(raw) || raw.length !== want) {
    throw new UnexpectedReplyError(`expected a ${want}-element ${command} reply, got ${JSON.stringify(raw)}`);
  }
  return { ok: num(raw[0]) === 1, inFlight: num(raw[1]), ms: want === 3 ? num(raw[2]) : 0 };
}

export function parseHoldReply(raw: unknown): HoldReply {
  if (!Array.isArray(raw) || raw.length !== 5) {
    throw new UnexpectedReplyError(`expected a 5-element TB.HOLD reply, got ${JSON.stringify(raw)}`);
  }
  const r = parseReply(raw.slice(0, 4));
  const id = idOf(raw[4]);
  if (r.allowed && id === null) throw new UnexpectedReplyError('TB.HOLD took a hold without an id');
  return { ...r, id: r.allowed ? id : null };
}

export function parseSettleReply(raw: unknown): SettleReply {
  if (!Array.isArray(raw) || raw.length !== 4) {
    throw new UnexpectedReplyError(`expected a 4-element TB.SETTLE reply, got ${JSON.stringify(raw)}`);
  }
  return { settled: num(raw[0]) === 1, remaining: num(raw[1]), charged: num(raw[2]), resetAfter: num(raw[3]) };
}

/** SPEC N2: `TB.ACQUIRE key n lease_ms`, with `TAKE numkeys keys... capacity rate cost...` when buckets apply. */
export function acquireArgs(key: string, limit: number, leaseMs: number, buckets: readonly Bucket[] = []): string[] {
  const out = ['TB.ACQUIRE', key, arg(limit), arg(leaseMs)];
  if (buckets.length) {
    out.push('TAKE', String(buckets.length));
    for (const b of buckets) out.push(b.key);
    for (const b of buckets) out.push(arg(b.capacity), arg(b.rate), arg(b.n ?? 1));
  }
  return out;
}

export function holdArgs(key: string, capacity: number, rate: number, estimate: number, ttlMs: number): string[] {
  return ['TB.HOLD', key, arg(capacity), arg(rate), arg(estimate), arg(ttlMs)];
}

/** SPEC G3: `TB.SETTLE key capacity rate id actual [max_wait]`. */
export function settleArgs(key: string, capacity: number, rate: number, id: string, actual: number, maxWait?: number): string[] {
  const out = ['TB.SETTLE', key, arg(capacity), arg(rate), id, arg(actual)];
  if (maxWait !== undefined) out.push(arg(maxWait));
  return out;
}
