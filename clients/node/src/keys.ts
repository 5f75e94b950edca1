/**
 * The identity of a header (SPEC I2: {@link headerIdentity}) and the one key builder
 * (SPEC K1-K5): every path that makes a bucket key (the limiter, its
 * refunds, the deny cache, `RateLimiter.key`) goes through {@link bucketKey}.
 *
 * `<prefix>:` then `{<tag>}:` (a non-empty tag, SPEC K4), `<policy>`, `@<route>` (a
 * per-route policy), `:<identity>`. The tag, the route and the identity are escaped
 * (SPEC K2): every byte outside 0x21..0x7E and each of `%`, `{`, `}` (the route also `:`
 * and `@`) is written `%XX`. An escaped identity or tag longer than 128 bytes is replaced
 * by `%h` and the first 32 lowercase hex digits of the SHA-256 of its unescaped bytes
 * (SPEC K3).
 *
 * The common case costs a scan: a string with nothing to escape is returned as it is, and
 * hashing only happens above the bound.
 */
import { createHash } from 'node:crypto';

/** SPEC K3: the longest escaped identity or tag kept as it is, in bytes. */
export const MAX_PART = 128;

const HEX = '0123456789ABCDEF';

/**
 * How the characters of a string map to bytes: `'utf8'` (a string from the application:
 * its UTF-8 bytes) or `'latin1'` (a header value as Node hands it over: one character per
 * byte received).
 */
export type Bytes = 'utf8' | 'latin1';

function mustEscape(c: number, route: boolean): boolean {
  // 0x21..0x7E except % { } (and : @ in a route)
  if (c < 0x21 || c > 0x7e) return true;
  if (c === 0x25 || c === 0x7b || c === 0x7d) return true;
  return route && (c === 0x3a || c === 0x40);
}

function escapeBytes(bytes: Uint8Array, route: boolean): string {
  let out = '';
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    out += mustEscape(b, route) ? `%${HEX[b >> 4]}${HEX[b & 15]}` : String.fromCharCode(b);
  }
  return out;
}

function toBytes(s: string, bytes: Bytes): Uint8Array {
  if (bytes === 'latin1') {
    // a header value holds only U+0000..U+00FF; anything above (an application string
    // passed as bytes by mistake) is taken as UTF-8 rather than truncated
    for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0xff) return Buffer.from(s, 'utf8');
    return Buffer.from(s, 'latin1');
  }
  return Buffer.from(s, 'utf8');
}

/** SPEC K2: `s` escaped (the route rules when `route`); `s` itself when nothing needs it. */
export function escapePart(s: string, bytes: Bytes = 'utf8', route = false): string {
  let i = 0;
  for (; i < s.length; i++) if (mustEscape(s.charCodeAt(i), route)) break;
  if (i === s.length) return s;
  return escapeBytes(toBytes(s, bytes), route);
}

function hashed(s: string, bytes: Bytes): string {
  return `%h${createHash('sha256').update(toBytes(s, bytes)).digest('hex').slice(0, 32)}`;
}

/** SPEC K2 + K3: an identity or tag, escaped, or hashed when the escaped form is over 128 bytes. */
export function boundedPart(s: string, bytes: Bytes = 'utf8'): string {
  // escaping never shortens: more than 128 characters is always over the bound
  if (s.length > MAX_PART) return hashed(s, bytes);
  const e = escapePart(s, bytes);
  return e.length > MAX_PART ? hashed(s, bytes) : e;
}

/**
 * SPEC K1: the key of `identity` (already escaped and bounded: {@link boundedPart}) under
 * `policy`, with the request's tag (escaped, bounded; empty: no tag) and the per-route
 * route (escaped with {@link escapePart}`(route, 'utf8', true)`; null: not per-route).
 */
export function joinKey(prefix: string, tagPart: string | null, policy: string, routePart: string | null, idPart: string): string {
  const head = tagPart ? `${prefix}:{${tagPart}}:${policy}` : `${prefix}:${policy}`;
  return routePart === null ? `${head}:${idPart}` : `${head}@${routePart}:${idPart}`;
}

/**
 * SPEC K1-K4: the key of one (tag, policy, route, identity). `tag` empty or null: no tag;
 * `route` null: not a per-route policy; `bytes` says how the identity's characters are
 * bytes (`'latin1'` for a header value).
 */
export function bucketKey(
  prefix: string, tag: string | null | undefined, policy: string, route: string | null | undefined,
  identity: string, bytes: Bytes = 'utf8',
): string {
  return joinKey(
    prefix, tag ? boundedPart(tag) : null, policy, route == null ? null : escapePart(route, 'utf8', true),
    boundedPart(identity, bytes),
  );
}

/** SPEC I2: control bytes (0x00-0x08, 0x0A-0x1F, 0x7F); a tab is kept */
function hasControlByte(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if ((c < 0x20 && c !== 0x09) || c === 0x7f) return true;
  }
  return false;
}

/** SPEC I2: optional white space (space, tab) trimmed at both ends. */
function trimOws(s: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && (s.charCodeAt(a) === 0x20 || s.charCodeAt(a) === 0x09)) a++;
  while (b > a && (s.charCodeAt(b - 1) === 0x20 || s.charCodeAt(b - 1) === 0x09)) b--;
  return a === 0 && b === s.length ? s : s.slice(a, b);
}

/**
 * SPEC I2: the identity of `Key.header`: the lines joined with ', ', trimmed; null when
 * absent or empty (the policy is skipped); `BAD` when a line holds a control byte.
 */
export function headerIdentity(lines: readonly string[]): string | null | typeof BAD {
  if (lines.length === 0) return null;
  const joined = lines.length === 1 ? lines[0]! : lines.join(', ');
  if (hasControlByte(joined)) return BAD;
  const v = trimOws(joined);
  return v === '' ? null : v;
}

/** {@link headerIdentity}: a control byte */
export const BAD: unique symbol = Symbol('redis-tb.bad-request');
