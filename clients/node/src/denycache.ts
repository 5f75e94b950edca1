/**
 * The local deny cache (off by default): after Redis refuses a request, remember each
 * enforced violated bucket until its retry_after has passed, and refuse later requests
 * that would certainly be refused too (same key, same capacity and rate, a cost at least
 * as large) without calling Redis. It only short-circuits refusals: it never admits.
 *
 * Bounded: at most `maxEntries` entries. A Map keeps them in insertion order, which is
 * also the order of their deny-until for equal waits: on insert into a full cache the
 * oldest few entries are checked and expired ones dropped, then the oldest is evicted.
 * Every operation is O(1).
 */

export interface DenyCacheOptions {
  /** the size cap (entries), e.g. 10_000 */
  maxEntries: number;
}

export interface DenyEntry {
  policy: string;
  capacity: number;
  rate: number;
  cost: number;
  /** monotonic ms (performance.now()) */
  denyUntil: number;
  resetAt: number;
}

export class DenyCache {
  readonly maxEntries: number;
  private readonly entries = new Map<string, DenyEntry>();

  constructor(options: DenyCacheOptions) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError(`denyCache.maxEntries must be a positive integer, got ${options.maxEntries}`);
    }
    this.maxEntries = options.maxEntries;
  }

  get size(): number {
    return this.entries.size;
  }

  /** The entry that refuses this bucket at `now`, or null. */
  lookup(key: string, capacity: number, rate: number, cost: number, now: number): DenyEntry | null {
    const e = this.entries.get(key);
    if (e === undefined) return null;
    if (now >= e.denyUntil) {
      this.entries.delete(key);
      return null;
    }
    if (e.capacity !== capacity || e.rate !== rate || cost < e.cost) return null;
    return e;
  }

  remember(key: string, entry: DenyEntry, now: number): void {
    this.entries.delete(key);
    if (this.entries.size >= this.maxEntries) {
      let checked = 0;
      for (const [k, e] of this.entries) {
        if (checked++ >= 8) break;
        if (now >= e.denyUntil) this.entries.delete(k);
      }
      if (this.entries.size >= this.maxEntries) {
        const oldest = this.entries.keys().next();
        if (!oldest.done) this.entries.delete(oldest.value);
      }
    }
    this.entries.set(key, entry);
  }

  drop(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}
