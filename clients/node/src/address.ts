/**
 * Who is calling (SPEC A, C5, C6): the client address behind trusted proxies, grouped by
 * prefix. {@link ClientIpConfig} is the configuration; {@link ClientIp} the resolved
 * address and identity of one request.
 *
 * - SPEC A1: the TCP peer is the client unless it is a trusted proxy.
 * - SPEC A2, A3, A6: from a trusted peer, the configured header's lines are one list,
 *   walked right to left, trusted entries skipped; a malformed entry stops the walk.
 * - SPEC A4 (`X-Forwarded-For` entries, ports dropped), A5 (RFC 7239 `Forwarded`, strict).
 * - SPEC A7: IPv4-mapped IPv6 is IPv4; A8: a peer's zone id is dropped; A9: identities.
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

/** A plain address, `1.2.3.4` or `2001:db8::1` (no brackets, port or zone id), unmapped (SPEC A7). */
export function parsePlainAddress(text: string): Addr | null {
  if (!text || text.includes('%')) return null;
  const a = text.includes(':') ? parseV6(text) : parseV4(text);
  return a ? unmap(a) : null;
}

const PORT = /^:\d{1,5}$/;

/**
 * SPEC A4: an `X-Forwarded-For` entry: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
 * `[2001:db8::1]` or `[2001:db8::1]:443` (a port of 1 to 5 digits is dropped). Anything
 * else (`unknown`, obfuscated `_node` names, zone ids, an empty port, garbage) is null.
 */
export function parseAddress(input: string): Addr | null {
  let text = input.trim();
  if (!text) return null;
  if (text.startsWith('[')) {
    const end = text.indexOf(']');
    if (end < 0) return null;
    const rest = text.slice(end + 1);
    if (rest && !PORT.test(rest)) return null;
    text = text.slice(1, end);
    if (!text.includes(':')) return null;
  } else {
    const colon = text.indexOf(':');
    if (colon >= 0 && text.indexOf(':', colon + 1) < 0) {
      // a.b.c.d:port
      if (!PORT.test(text.slice(colon))) return null;
      text = text.slice(0, colon);
      if (text.includes(':')) return null;
    }
  }
  return parsePlainAddress(text);
}

/** SPEC A8: the TCP peer's address, its zone id (`fe80::1%eth0`) dropped; null when it has none. */
export function parsePeer(peer: string | undefined | null): Addr | null {
  if (!peer) return null;
  const pct = peer.indexOf('%');
  const text = pct >= 0 && peer.includes(':') ? peer.slice(0, pct) : peer;
  return parsePlainAddress(text);
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

/**
 * SPEC C5: a trusted proxy, a CIDR (`10.0.0.0/8`, `2001:db8::/32`) or a single address;
 * host bits are masked; a range inside `::ffff:0:0/96` is unmapped (`::ffff:10.0.0.0/104`
 * is `10.0.0.0/8`). Anything else throws a RangeError naming the value.
 */
export function parseNetwork(text: string): Network {
  if (typeof text !== 'string') throw new RangeError(`a trusted proxy is an address or CIDR, got ${String(text)}`);
  const [addr, len, extra] = text.trim().split('/') as [string, string | undefined, string | undefined];
  const a = parsePlainAddress(addr);
  if (!a || extra !== undefined) throw new RangeError(`a trusted proxy is an address or CIDR, got ${JSON.stringify(text)}`);
  const written6 = addr.includes(':'); // ::ffff:a.b.c.d/n is unmapped to IPv4 with n - 96
  const full = written6 ? 128 : 32;
  let prefix = len === undefined ? full : Number(len);
  if (len === '' || (len !== undefined && !/^\d{1,3}$/.test(len)) || !Number.isInteger(prefix) || prefix < 0 || prefix > full) {
    throw new RangeError(`bad prefix length in trusted proxy ${JSON.stringify(text)}`);
  }
  if (written6 && !a.v6) {
    if (prefix < 96) throw new RangeError(`trusted proxy ${JSON.stringify(text)} is wider than the IPv4-mapped range`);
    prefix -= 96;
  }
  return { v6: a.v6, bytes: mask(a.bytes, prefix), prefix };
}

/** SPEC C5: a network as text, `10.0.0.0/8`, `2001:db8::1/128`. */
export function formatNetwork(n: Network): string {
  return `${formatAddress({ v6: n.v6, bytes: n.bytes })}/${n.prefix}`;
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

/** Split on `sep` outside double quotes (a `\\` escapes the next character inside them). */
function splitOutsideQuotes(value: string, sep: string): string[] {
  const out: string[] = [];
  let cur = '';
  let quoted = false;
  let escaped = false;
  for (const ch of value) {
    if (escaped) {
      escaped = false;
    } else if (quoted && ch === '\\') {
      escaped = true;
    } else if (ch === '"') {
      quoted = !quoted;
    } else if (ch === sep && !quoted) {
      out.push(cur);
      cur = '';
      continue;
    }
    cur += ch;
  }
  out.push(cur);
  return out;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * SPEC A5: the address of one RFC 7239 element's `for=` node; null when the element is
 * malformed (a pair without `=`, no `for=` or more than one, a node that is not an
 * address: `unknown`, `_obfuscated`, an IPv6 address not quoted and bracketed).
 */
function forwardedFor(element: string): Addr | null {
  let node: string | null = null;
  let quoted = false;
  for (const raw of splitOutsideQuotes(element, ';')) {
    const pair = raw.trim();
    const eq = pair.indexOf('=');
    if (eq <= 0) return null;
    const name = pair.slice(0, eq).trim();
    if (!TOKEN.test(name)) return null;
    let value = pair.slice(eq + 1).trim();
    let q = false;
    if (value.startsWith('"')) {
      if (value.length < 2 || !value.endsWith('"')) return null;
      value = value.slice(1, -1).replace(/\\(.)/g, '$1');
      q = true;
    } else if (!TOKEN.test(value) && !/^[0-9A-Za-z.:\[\]_-]+$/.test(value)) {
      return null;
    }
    if (name.toLowerCase() !== 'for') continue;
    if (node !== null) return null; // two for= (RFC 7239: one per element)
    node = value;
    quoted = q;
  }
  if (node === null) return null;
  if (node.startsWith('[')) {
    // IPv6: quoted and bracketed, with an optional port
    return quoted ? parseAddress(node) : null;
  }
  // IPv4, bare or quoted, with an optional port (never a bare IPv6)
  const colon = node.indexOf(':');
  if (colon >= 0 && node.indexOf(':', colon + 1) >= 0) return null;
  const a = parseAddress(node);
  return a !== null && !a.v6 ? a : null;
}

export interface ClientIpOptions {
  /** CIDRs (or addresses) of your load balancers / reverse proxies (SPEC C5); empty: headers never read. */
  trustedProxies?: readonly string[];
  /** `'x-forwarded-for'` (default) or `'forwarded'` (RFC 7239 `for=`). */
  header?: 'x-forwarded-for' | 'forwarded';
  ipv4Prefix?: number;
  ipv6Prefix?: number;
}

/**
 * A canonical dotted quad (`203.0.113.7`: four decimal octets 0-255, no leading zeros, no
 * spaces) as an unsigned 32-bit integer; -1 for anything else. The text of such an address
 * is already its canonical form, so it can be the identity as it is.
 */
export function parseV4Int(s: string): number {
  const n = s.length;
  if (n < 7 || n > 15) return -1;
  let out = 0;
  let octet = 0;
  let digits = 0;
  let dots = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c === 46) {
      if (digits === 0 || dots === 3) return -1;
      out = out * 256 + octet;
      octet = 0;
      digits = 0;
      dots++;
    } else if (c >= 48 && c <= 57) {
      if (digits === 1 && octet === 0) return -1; // a leading zero
      octet = octet * 10 + (c - 48);
      digits++;
      if (octet > 255) return -1;
    } else {
      return -1;
    }
  }
  if (dots !== 3 || digits === 0) return -1;
  return out * 256 + octet;
}

function v4Text(n: number): string {
  return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

function v4Mask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

/** A trusted IPv4 network as integers: `(addr & mask) === net`. */
interface Net4 {
  net: number;
  mask: number;
}

const MAPPED = '::ffff:';

/** The resolved address and identity of one request (SPEC A9): null when the peer has no address. */
export interface ClientIp {
  /** the client's address (`203.0.113.9`, `2001:db8::1`) */
  readonly address: string | null;
  /** what it is limited under (`203.0.113.9`, `2001:db8::/64`) */
  readonly identity: string | null;
}

/** How the client address is found (SPEC A, C5, C6): the default key source's configuration. */
export class ClientIpConfig {
  readonly trusted: readonly Network[];
  readonly header: 'x-forwarded-for' | 'forwarded';
  readonly ipv4Prefix: number;
  readonly ipv6Prefix: number;
  /** the IPv4 trusted networks as integer masks (the fast path) */
  private readonly trusted4: readonly Net4[];
  private readonly mask4: number;

  constructor(options: ClientIpOptions = {}) {
    const header = options.header ?? 'x-forwarded-for';
    if (header !== 'x-forwarded-for' && header !== 'forwarded') {
      throw new RangeError(`header must be 'x-forwarded-for' or 'forwarded', got ${JSON.stringify(header)}`);
    }
    this.ipv4Prefix = options.ipv4Prefix ?? 32;
    this.ipv6Prefix = options.ipv6Prefix ?? 64;
    // SPEC C6
    if (!Number.isInteger(this.ipv4Prefix) || this.ipv4Prefix < 0 || this.ipv4Prefix > 32) {
      throw new RangeError(`ipv4Prefix must be 0..32, got ${this.ipv4Prefix}`);
    }
    if (!Number.isInteger(this.ipv6Prefix) || this.ipv6Prefix < 0 || this.ipv6Prefix > 128) {
      throw new RangeError(`ipv6Prefix must be 0..128, got ${this.ipv6Prefix}`);
    }
    this.header = header;
    this.trusted = (options.trustedProxies ?? []).map(parseNetwork);
    this.trusted4 = this.trusted
      .filter((n) => !n.v6)
      .map((n) => {
        const mask = v4Mask(n.prefix);
        const net = (((n.bytes[0]! << 24) | (n.bytes[1]! << 16) | (n.bytes[2]! << 8) | n.bytes[3]!) & mask) >>> 0;
        return { net, mask };
      });
    this.mask4 = v4Mask(this.ipv4Prefix);
  }

  private trustedV4(n: number): boolean {
    const t = this.trusted4;
    for (let i = 0; i < t.length; i++) if (((n & t[i]!.mask) >>> 0) === t[i]!.net) return true;
    return false;
  }

  private groupV4(text: string, n: number): string {
    if (this.ipv4Prefix === 32) return text;
    return `${v4Text((n & this.mask4) >>> 0)}/${this.ipv4Prefix}`;
  }

  /**
   * The IPv4 fast path of {@link identity}: a dotted-quad peer (or `::ffff:` + one), and an
   * `X-Forwarded-For` of dotted quads without quotes. undefined: not that case, the general
   * path decides (it gives the same answer for every input the fast path answers).
   */
  private identityV4(peer: string, headerValues: readonly string[]): string | null | undefined {
    let text = peer;
    let n = parseV4Int(text);
    if (n < 0) {
      if (!peer.startsWith(MAPPED)) return undefined;
      text = peer.slice(MAPPED.length);
      n = parseV4Int(text);
      if (n < 0) return undefined;
    }
    if (this.trusted4.length === 0 || !this.trustedV4(n)) return this.groupV4(text, n);
    if (headerValues.length === 0) return this.groupV4(text, n);
    if (this.header !== 'x-forwarded-for') return undefined;
    // right to left over the lines, then over each line's entries
    for (let l = headerValues.length - 1; l >= 0; l--) {
      const line = headerValues[l]!;
      if (line.includes('"')) return undefined;
      const hops = line.split(',');
      for (let i = hops.length - 1; i >= 0; i--) {
        const hop = hops[i]!.trim();
        const h = parseV4Int(hop);
        if (h < 0) return undefined; // IPv6, a port, garbage: the general path
        text = hop;
        n = h;
        if (!this.trustedV4(h)) return this.groupV4(text, n);
      }
    }
    return this.groupV4(text, n); // every hop trusted: the leftmost
  }

  isTrusted(a: Addr): boolean {
    return this.trusted.some((n) => contains(n, a));
  }

  /** The trusted proxies as normalized text (SPEC C5): `10.0.0.0/8`, `2001:db8::1/128`. */
  get trustedProxies(): string[] {
    return this.trusted.map(formatNetwork);
  }

  /** The client's address given the peer and the forwarding header's lines (SPEC A1-A8). */
  clientAddress(peer: string | undefined | null, headerValues: readonly string[]): Addr | null {
    let addr = parsePeer(peer);
    if (addr === null || !this.isTrusted(addr)) return addr;
    const entries = headerValues.flatMap(splitList);
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i]!;
      const hop = this.header === 'x-forwarded-for' ? parseAddress(entry) : forwardedFor(entry);
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

  /** The client's identity (its address at /32, its /64 network for IPv6); null: no peer. */
  identity(peer: string | undefined | null, headerValues: readonly string[]): string | null {
    if (peer) {
      const fast = this.identityV4(peer, headerValues);
      if (fast !== undefined) return fast;
    }
    return this.identityGeneral(peer, headerValues);
  }

  /** SPEC A: the address and identity of a request with this peer and forwarding header lines. */
  resolve(peer: string | undefined | null, headerValues: readonly string[]): ClientIp {
    const a = this.clientAddress(peer, this.trusted.length ? headerValues : []);
    return a === null ? { address: null, identity: null } : { address: formatAddress(a), identity: this.group(a) };
  }

  /** {@link identity} by the general path only (every address form; the fast path's reference). */
  identityGeneral(peer: string | undefined | null, headerValues: readonly string[]): string | null {
    const a = this.clientAddress(peer, this.trusted.length ? headerValues : []);
    return a === null ? null : this.group(a);
  }
}
