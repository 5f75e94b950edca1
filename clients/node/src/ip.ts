/**
 * Who is calling: the client address behind trusted proxies, grouped by prefix.
 *
 * The rules (shared with the Python and Rust integrations):
 * - The TCP peer is the client unless it is inside a trusted CIDR; forwarding headers
 *   from any other peer are ignored.
 * - From a trusted peer, `X-Forwarded-For` (or RFC 7239 `Forwarded: for=`) is walked
 *   right to left, skipping trusted addresses; the first untrusted one is the client.
 *   Every hop trusted: the leftmost. A malformed entry stops the walk: the last good
 *   address seen is the client.
 * - IPv4-mapped IPv6 (`::ffff:1.2.3.4`) is IPv4. IPv6 is grouped by /64 (default),
 *   IPv4 by /32: identities `203.0.113.7`, `2001:db8:1:2::/64`.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** An address as 4 or 16 bytes. */
export interface Addr {
  v6: boolean;
  bytes: Uint8Array;
}

function parseV4(text: string): Addr | null {
  if (!isIPv4(text)) return null;
  const parts = text.split('.');
  if (parts.some((p) => p.length > 1 && p.startsWith('0'))) return null;
  return { v6: false, bytes: Uint8Array.from(parts.map(Number)) };
}

function parseV6(input: string): Addr | null {
  if (!isIPv6(input) || input.includes('%')) return null;
  let text = input;
  const lastColon = text.lastIndexOf(':');
  if (text.slice(lastColon + 1).includes('.')) {
    // an embedded IPv4 (::ffff:1.2.3.4): as its two groups
    const v4 = parseV4(text.slice(lastColon + 1));
    if (!v4) return null;
    const b = v4.bytes;
    text = `${text.slice(0, lastColon + 1)}${((b[0]! << 8) | b[1]!).toString(16)}:${((b[2]! << 8) | b[3]!).toString(16)}`;
  }
  const dbl = text.indexOf('::');
  const split = (s: string): string[] => (s === '' ? [] : s.split(':'));
  const l = dbl < 0 ? split(text) : split(text.slice(0, dbl));
  const r = dbl < 0 ? [] : split(text.slice(dbl + 2));
  const fill = dbl < 0 ? 0 : 8 - l.length - r.length;
  if (fill < 0) return null;
  const all = [...l, ...Array<string>(fill).fill('0'), ...r].map((g) => parseInt(g, 16));
  if (all.length !== 8 || all.some((g) => Number.isNaN(g))) return null;
  const bytes = new Uint8Array(16);
  all.forEach((g, i) => {
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  });
  return { v6: true, bytes };
}

function unmap(a: Addr): Addr {
  if (a.v6 && a.bytes.slice(0, 10).every((b) => b === 0) && a.bytes[10] === 0xff && a.bytes[11] === 0xff) {
    return { v6: false, bytes: a.bytes.slice(12) };
  }
  return a;
}

/**
 * An address as proxies write it: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
 * `[2001:db8::1]` or `[2001:db8::1]:443`. Anything else (`unknown`, obfuscated
 * `_node` names, zone ids, garbage) is null.
 */
export function parseAddress(input: string): Addr | null {
  let text = input.trim();
  if (!text) return null;
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    if (end < 0) return null;
    const rest = text.slice(end + 1);
    if (rest && !/^:\d+$/.test(rest)) return null;
    text = text.slice(1, end);
    if (!text.includes(':')) return null;
  } else if (text.split(':').length === 2) {
    const [host, port] = text.split(':') as [string, string];
    if (!/^\d+$/.test(port)) return null;
    text = host;
  }
  if (text.includes('%')) return null;
  const a = text.includes(':') ? parseV6(text) : parseV4(text);
  return a ? unmap(a) : null;
}

function mask(bytes: Uint8Array, prefix: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.max(0, Math.min(8, prefix - 8 * i));
    out[i] = bytes[i]! & ((0xff << (8 - bits)) & 0xff);
  }
  return out;
}

/** The text form: dotted quad, or RFC 5952 IPv6 (the longest run of 2+ zero groups as `::`). */
export function formatAddress(a: Addr): string {
  if (!a.v6) return Array.from(a.bytes).join('.');
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push((a.bytes[2 * i]! << 8) | a.bytes[2 * i + 1]!);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestLen < 2) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

export interface Network {
  v6: boolean;
  bytes: Uint8Array;
  prefix: number;
}

/** A CIDR (`10.0.0.0/8`, `2001:db8::/32`) or a single address. */
export function parseNetwork(text: string): Network {
  const [addr, len, extra] = text.trim().split('/') as [string, string | undefined, string | undefined];
  const a = parseAddress(addr);
  if (!a || extra !== undefined) throw new RangeError(`not an address or CIDR: ${JSON.stringify(text)}`);
  const written6 = addr.includes(':'); // ::ffff:a.b.c.d/n is unmapped to IPv4 with n - 96
  const full = written6 ? 128 : 32;
  let prefix = len === undefined ? full : Number(len);
  if (len === '' || !Number.isInteger(prefix) || prefix < 0 || prefix > full) {
    throw new RangeError(`bad prefix length in ${JSON.stringify(text)}`);
  }
  if (written6 && !a.v6) prefix = Math.max(0, prefix - 96);
  return { v6: a.v6, bytes: mask(a.bytes, prefix), prefix };
}

function contains(net: Network, a: Addr): boolean {
  if (net.v6 !== a.v6) return false;
  const m = mask(a.bytes, net.prefix);
  return m.every((b, i) => b === net.bytes[i]);
}

/** Split a comma-separated header, keeping commas inside double quotes. */
function splitList(value: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  let escaped = false;
  for (const ch of value) {
    if (escaped) {
      cur += ch;
      escaped = false;
    } else if (quoted && ch === '\\') {
      cur += ch;
      escaped = true;
    } else if (ch === '"') {
      cur += ch;
      quoted = !quoted;
    } else if (ch === ',' && !quoted) {
      out.push(cur);
      cur = '';
    } else {
      cur += ch;
    }
  }
  out.push(cur);
  return out;
}

/** The `for=` value of one RFC 7239 element, unquoted; null when absent. */
function forwardedFor(element: string): string | null {
  for (const pair of element.split(';')) {
    const eq = pair.indexOf('=');
    if (eq < 0) continue;
    if (pair.slice(0, eq).trim().toLowerCase() !== 'for') continue;
    let value = pair.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) {
      value = value.slice(1, -1).replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    }
    return value;
  }
  return null;
}

export interface ClientIpOptions {
  /** CIDRs (or addresses) of your load balancers / reverse proxies; empty: headers never read. */
  trustedProxies?: readonly string[];
  /** `'x-forwarded-for'` (default) or `'forwarded'` (RFC 7239 `for=`). */
  header?: 'x-forwarded-for' | 'forwarded';
  ipv4Prefix?: number;
  ipv6Prefix?: number;
}

/** The default key function: the client's address, grouped; null when the peer is unknown. */
export class ClientIp {
  readonly trusted: readonly Network[];
  readonly header: 'x-forwarded-for' | 'forwarded';
  readonly ipv4Prefix: number;
  readonly ipv6Prefix: number;

  constructor(options: ClientIpOptions = {}) {
    const header = options.header ?? 'x-forwarded-for';
    if (header !== 'x-forwarded-for' && header !== 'forwarded') {
      throw new RangeError(`header must be 'x-forwarded-for' or 'forwarded', got ${JSON.stringify(header)}`);
    }
    this.ipv4Prefix = options.ipv4Prefix ?? 32;
    this.ipv6Prefix = options.ipv6Prefix ?? 64;
    if (!Number.isInteger(this.ipv4Prefix) || this.ipv4Prefix < 0 || this.ipv4Prefix > 32) {
      throw new RangeError(`ipv4Prefix must be 0..32, got ${this.ipv4Prefix}`);
    }
    if (!Number.isInteger(this.ipv6Prefix) || this.ipv6Prefix < 0 || this.ipv6Prefix > 128) {
      throw new RangeError(`ipv6Prefix must be 0..128, got ${this.ipv6Prefix}`);
    }
    this.header = header;
    this.trusted = (options.trustedProxies ?? []).map(parseNetwork);
  }

  isTrusted(a: Addr): boolean {
    return this.trusted.some((n) => contains(n, a));
  }

  /** The client's address given the peer and the forwarding header's lines. */
  clientAddress(peer: string | undefined | null, headerValues: readonly string[]): Addr | null {
    let addr = peer ? parseAddress(peer) : null;
    if (addr === null || !this.isTrusted(addr)) return addr;
    const entries = headerValues.flatMap(splitList);
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      const hop = this.header === 'x-forwarded-for' ? parseAddress(entry) : parseAddress(forwardedFor(entry) ?? '');
      if (hop === null) return addr; // malformed: keep the last good address
      addr = hop;
      if (!this.isTrusted(hop)) return hop;
    }
    return addr; // every hop trusted: the leftmost
  }

  /** The identity of an address: itself at /32 (/128), else its network (`2001:db8::/64`). */
  group(a: Addr): string {
    const [prefix, full] = a.v6 ? [this.ipv6Prefix, 128] : [this.ipv4Prefix, 32];
    if (prefix === full) return formatAddress(a);
    return `${formatAddress({ v6: a.v6, bytes: mask(a.bytes, prefix) })}/${prefix}`;
  }

  identity(peer: string | undefined | null, headerValues: readonly string[]): string | null {
    const a = this.clientAddress(peer, this.trusted.length ? headerValues : []);
    return a === null ? null : this.group(a);
  }
}
