/**
 * The rate-limit headers of a decision (SPEC H1-H6): `RateLimit-Policy` / `RateLimit`
 * (IETF httpapi ratelimit-headers, draft -10/-11 syntax, serialized with
 * `structured-headers`), the optional legacy `X-RateLimit-*` (H4) and `Retry-After` (H3).
 * The problem bodies and the whole response are problem.ts's.
 *
 * SPEC H2: q, w, r, t; SPEC H1: shadow policies are left out of every header.
 */
import { type Item, serializeItem } from 'structured-headers';
import type { Decision, PolicyResult } from './decision.js';

export const SF_INT_MAX = 999_999_999_999_999;

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
