/**
 * From a decision to HTTP (SPEC H, P): `RateLimit-Policy` / `RateLimit` (IETF httpapi
 * ratelimit-headers, draft -10/-11 syntax, serialized with `structured-headers`), optional
 * legacy `X-RateLimit-*` (H4), `Retry-After` (H3) and the RFC 9457 problem bodies (P1-P6),
 * and {@link respond}: the status, headers and body every adapter sends.
 *
 * SPEC H2: q, w, r, t; SPEC H1: shadow policies are left out of every header.
 */
import { type Item, serializeItem } from 'structured-headers';
import type { Decision, PolicyResult } from './decision.js';

export const SF_INT_MAX = 999_999_999_999_999;
export const PROBLEM_TYPE = 'application/problem+json';

function sfInt(x: number): number {
  if (Number.isNaN(x)) throw new RangeError('NaN in a rate-limit header value');
  return Math.min(Math.max(x, 0), SF_INT_MAX);
}

/** q: floor(capacity) */
export function quota(capacity: number): number {
  return sfInt(Math.floor(Math.min(capacity, SF_INT_MAX)));
}

/** w: seconds to refill the whole quota, ceil(capacity / rate), >= 1 */
export function windowSeconds(capacity: number, rate: number): number {
  let x = capacity / rate;
  if (x >= SF_INT_MAX) return SF_INT_MAX;
  const nearest = Math.round(x);
  if (Math.abs(x - nearest) <= 1e-9 * Math.max(1, x)) x = nearest;
  return sfInt(Math.max(1, Math.ceil(x)));
}

/** r: max(0, floor(remaining)) */
export function remainingUnits(remaining: number): number {
  return sfInt(Math.floor(Math.min(Math.max(remaining, 0), SF_INT_MAX)));
}

/** t: ceil(resetAfter), 0 when full */
export function resetSeconds(resetAfter: number): number {
  return sfInt(Math.ceil(Math.min(Math.max(resetAfter, 0), SF_INT_MAX)));
}

/** SPEC H3: whole seconds for Retry-After, max(1, ceil(retryAfter)); null for null or -1 (never). */
export function retryAfterSeconds(retryAfter: number | null): number | null {
  if (retryAfter === null || retryAfter < 0) return null;
  return Math.max(1, Math.ceil(Math.min(retryAfter, SF_INT_MAX)));
}

function item(name: string, params: Record<string, number>): Item {
  return [name, new Map(Object.entries(params))];
}

// The structured-field items are serialized by the library once and kept: a policy's
// `RateLimit-Policy` item per shape (name, capacity, rate), and its name as an sf-string
// (the start of its `RateLimit` item). Names are tokens of [a-z0-9_-]+ (Policy checks),
// so the number of entries is bounded by the app's policies; the caps only guard misuse.
const CACHE_CAP = 4096;

interface PolicyItem {
  capacity: number;
  /** the item's w; null: none (an in-flight policy, SPEC N3) */
  w: number | null;
  text: string;
}

const policyItems = new Map<string, PolicyItem[]>();
const nameItems = new Map<string, string>();

/**
 * A policy's w (SPEC H2, W2, N3): a bucket's `ceil(capacity / rate)`, a window's
 * `ceil(seconds)` (at least 1), none for an in-flight policy.
 */
export function policyWindow(r: Pick<PolicyResult, 'capacity' | 'rate' | 'kind' | 'window'>): number | null {
  if (r.kind === 'in_flight' || r.rate === null) return null;
  if (r.kind === 'window' && r.window !== undefined) return sfInt(Math.max(1, Math.ceil(Math.min(r.window, SF_INT_MAX))));
  return windowSeconds(r.capacity, r.rate);
}

/** One policy's `RateLimit-Policy` item, `"ip";q=10;w=1` (`"conc";q=4` without w), serialized once per shape. */
export function policyItem(name: string, capacity: number, w: number | null): string {
  let shapes = policyItems.get(name);
  if (shapes !== undefined) {
    for (let i = 0; i < shapes.length; i++) {
      const s = shapes[i]!;
      if (s.capacity === capacity && s.w === w) return s.text;
    }
  } else {
    if (policyItems.size >= CACHE_CAP) policyItems.clear();
    shapes = [];
    policyItems.set(name, shapes);
  }
  const params: Record<string, number> = w === null ? { q: quota(capacity) } : { q: quota(capacity), w };
  const text = serializeItem(item(name, params));
  if (shapes.length >= 64) shapes.length = 0; // limit functions with ever-changing shapes
  shapes.push({ capacity, w, text });
  return text;
}

/** The policy name as the library serializes it (an sf-string: `"ip"`). */
function nameItem(name: string): string {
  let out = nameItems.get(name);
  if (out === undefined) {
    out = serializeItem([name, new Map()]);
    if (nameItems.size >= CACHE_CAP) nameItems.clear();
    nameItems.set(name, out);
  }
  return out;
}

/**
 * One policy's `RateLimit` item, `"ip";r=9;t=1`: the library's serialization of the name
 * followed by the two integer parameters, which are what the library writes for an
 * sf-integer (decimal digits; r and t are whole numbers in 0..999,999,999,999,999).
 */
export function ratelimitItem(name: string, remaining: number, resetAfter: number): string {
  return `${nameItem(name)};r=${remainingUnits(remaining)};t=${resetSeconds(resetAfter)}`;
}

/** `RateLimit-Policy: "ip";q=10;w=1, "user";q=100;w=3600` */
export function ratelimitPolicy(results: readonly PolicyResult[]): string {
  let out = '';
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    const text = policyItem(r.name, r.capacity, policyWindow(r));
    out = i === 0 ? text : `${out}, ${text}`;
  }
  return out;
}

/** `RateLimit: "ip";r=9;t=1, "user";r=99;t=36` */
export function ratelimit(results: readonly PolicyResult[]): string {
  let out = '';
  for (let i = 0; i < results.length; i++) {
    const r = results[i]!;
    const text = ratelimitItem(r.name, r.remaining, r.resetAfter);
    out = i === 0 ? text : `${out}, ${text}`;
  }
  return out;
}

export type LegacyReset = 'unix' | 'delta';

export interface HeaderOptions {
  legacyHeaders?: boolean;
  legacyReset?: LegacyReset;
  /** epoch milliseconds, for the Unix-time X-RateLimit-Reset (default Date.now()) */
  nowMs?: number;
}

/**
 * `X-RateLimit-Limit/Remaining/Reset` of the policy with the smallest remaining (ties: the
 * first). Reset: `ceil(now_unix + resetAfter)` (default) or the delta seconds t.
 */
export function legacyHeaders(results: readonly PolicyResult[], opts: HeaderOptions = {}): Array<[string, string]> {
  if (!results.length) return [];
  let tight = results[0]!;
  for (const r of results) if (r.remaining < tight.remaining) tight = r;
  const reset = (opts.legacyReset ?? 'unix') === 'delta'
    ? resetSeconds(tight.resetAfter)
    : Math.ceil((opts.nowMs ?? Date.now()) / 1000 + Math.max(0, tight.resetAfter));
  return [
    ['X-RateLimit-Limit', String(quota(tight.capacity))],
    ['X-RateLimit-Remaining', String(remainingUnits(tight.remaining))],
    ['X-RateLimit-Reset', String(reset)],
  ];
}

/** SPEC H3: `Retry-After` for a refused decision, null when allowed or never admissible. */
export function retryAfterHeader(decision: Decision): string | null {
  if (!decision.limited) return null;
  const secs = retryAfterSeconds(decision.retryAfter);
  return secs === null ? null : String(secs);
}

/** Every rate-limit header for a decision (empty when Redis was not consulted). */
export function decisionHeaders(decision: Decision, opts: HeaderOptions = {}): Array<[string, string]> {
  const all = decision.results;
  let anyShadow = false;
  for (let i = 0; i < all.length; i++) if (all[i]!.shadow) anyShadow = true;
  const shown = anyShadow ? all.filter((r) => !r.shadow) : all;
  const headers: Array<[string, string]> = [];
  if (shown.length) {
    headers.push(['RateLimit-Policy', ratelimitPolicy(shown)], ['RateLimit', ratelimit(shown)]);
    if (opts.legacyHeaders) headers.push(...legacyHeaders(shown, opts));
  }
  const retry = retryAfterHeader(decision);
  if (retry !== null) headers.push(['Retry-After', retry]);
  return headers;
}

const BODY_MAX = 999_999_999_999;

/**
 * SPEC P5: the one number format of problem bodies and details: clamped to
 * 0..999999999999, rounded up to the millisecond (a product within 1e-9 relative of a
 * whole number of milliseconds is that number), written without exponent or trailing
 * zeros: `35.99`, `999999.5`, `0.001`, `36`.
 */
export function bodyNumber(x: number): string {
  const v = Number.isNaN(x) ? 0 : Math.min(Math.max(x, 0), BODY_MAX);
  const t = v * 1000;
  const near = Math.round(t);
  const m = Math.abs(t - near) <= 1e-9 * Math.max(1, t) ? near : Math.ceil(t);
  const whole = Math.floor(m / 1000);
  const frac = m - whole * 1000;
  if (frac === 0) return String(whole);
  return `${whole}.${String(frac).padStart(3, '0').replace(/0+$/, '')}`;
}

export interface ProblemBody {
  type: 'about:blank';
  title: string;
  status: number;
  detail: string;
  violated_policies?: string[];
  retry_after?: number | null;
}

/** SPEC P1, P2: the RFC 9457 body of a 429, naming the same policies and wait as the headers. */
export function problem(decision: Decision): ProblemBody {
  const violated = decision.violated;
  const wait = decision.retryAfter;
  const never = decision.results.filter((r) => !r.allowed && !r.shadow && r.retryAfter < 0);
  let detail: string;
  let retry: number | null;
  if (never.length || wait === null) {
    detail = never
      .map((r) => `this request costs ${bodyNumber(r.cost)} but policy '${r.name}' allows at most ${bodyNumber(r.capacity)} at once: it can never succeed`)
      .join('; ');
    retry = null;
  } else {
    detail = `rate limit exceeded for ${violated.map((n) => `'${n}'`).join(', ')}: retry after ${retryAfterSeconds(wait)} s`;
    // the P5 text is the JSON number's text (no exponent: at least 0.001, at most 999999999999)
    retry = Number(bodyNumber(wait));
  }
  return {
    type: 'about:blank',
    title: 'Too Many Requests',
    status: 429,
    detail,
    violated_policies: violated,
    retry_after: retry,
  };
}

/** SPEC P3: the RFC 9457 body of the 503 a fail-closed limiter answers when Redis fails. */
export function storeErrorProblem(): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Service Unavailable',
    status: 503,
    detail: "the rate limiter's store is unavailable; retry shortly",
  };
}

/** SPEC P4: the 400 of a header identity with a control byte (I2). */
export function badRequestProblem(header: string): ProblemBody {
  return { type: 'about:blank', title: 'Bad Request', status: 400, detail: `header '${header}' holds a control byte` };
}

/** SPEC P4: the 500 of an out-of-range cost or limit from the application (L3); never the value. */
export function invalidInputProblem(policy: string): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Internal Server Error',
    status: 500,
    detail: `rate limit policy '${policy}' got an invalid cost or limit from the application`,
  };
}

/**
 * SPEC P4, K6: the 500 of a call a Redis Cluster refused (CROSSSLOT): the policies of the
 * call, in policy order.
 */
export function crossSlotProblem(policies: readonly string[]): ProblemBody {
  return {
    type: 'about:blank',
    title: 'Internal Server Error',
    status: 500,
    detail: `rate limit policies ${policies.map((p) => `'${p}'`).join(', ')} have keys in different cluster slots: give the limiter a hash tag`,
  };
}

/** What an adapter sends for a decision: `body` null means the request goes on to the handler. */
export interface Response {
  status: number;
  headers: Array<[string, string]>;
  /** the problem body's compact JSON text (SPEC P6), or null */
  body: string | null;
}

/**
 * The response for a decision (SPEC H, P, B4): 200 (go on, with the rate-limit headers),
 * 429, 503 (fail-closed), 500 (L3, K6), 400 (I2).
 */
export function respond(decision: Decision, opts: HeaderOptions = {}): Response {
  switch (decision.outcome) {
    case 'limited':
      return { status: 429, headers: decisionHeaders(decision, opts), body: JSON.stringify(problem(decision)) };
    case 'invalid_input':
      if (decision.crossSlot !== null) return { status: 500, headers: [], body: JSON.stringify(crossSlotProblem(decision.crossSlot)) };
      return { status: 500, headers: [], body: JSON.stringify(invalidInputProblem(decision.culprit ?? '')) };
    case 'bad_request':
      return { status: 400, headers: [], body: JSON.stringify(badRequestProblem(decision.culprit ?? '')) };
    case 'store_error':
      if (!decision.allowed) return { status: 503, headers: [['Retry-After', '1']], body: JSON.stringify(storeErrorProblem()) };
      return { status: 200, headers: [], body: null };
    default:
      return { status: 200, headers: decisionHeaders(decision, opts), body: null };
  }
}
