/**
 * The local deny cache (off by default): after Redis refuses a request, remember each
 * enforced violated bucket until its retry_after has passed, and refuse later requests
 * that would certainly be refused too (same key, same capacity and rate, a cost at least
 * as large) without calling Redis. It only short-circuits refusals: it never admits.
 *
 * Bounded: at most `maxEntries` entries. When full, the entry with the earliest deny-until
 * goes: expired entries first, then the one that expires soonest (as in Python). A binary
 * heap of (deny-until, key) with lazy deletion: O(log n) per insert, O(1) per lookup.
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

type HeapItem = [denyUntil: number, key: string, entry: DenyEntry];

export class DenyCache {
  readonly maxEntries: number;
  private readonly entries = new Map<string, DenyEntry>();
  private heap: HeapItem[] = [];

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
    void now;
    if (!this.entries.has(key)) {
      while (this.entries.size >= this.maxEntries) this.evictSoonest();
    }
    this.entries.set(key, entry);
    this.push([entry.denyUntil, key, entry]);
    // stale heap items (replaced or dropped entries) are skipped lazily; keep them bounded
    if (this.heap.length > 2 * this.maxEntries + 16) this.rebuild();
  }

  drop(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
    this.heap = [];
  }

  private evictSoonest(): void {
    for (;;) {
      const top = this.pop();
      if (top === undefined) return;
      if (this.entries.get(top[1]) === top[2]) {
        this.entries.delete(top[1]);
        return;
      }
    }
  }

  private rebuild(): void {
    this.heap = [];
    for (const [key, entry] of this.entries) this.push([entry.denyUntil, key, entry]);
  }

  private push(item: HeapItem): void {
    const h = this.heap;
    h.push(item);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (h[parent]![0] <= h[i]![0]) break;
      [h[parent], h[i]] = [h[i]!, h[parent]!];
      i = parent;
    }
  }

  private pop(): HeapItem | undefined {
    const h = this.heap;
    if (!h.length) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && h[l]![0] < h[m]![0]) m = l;
        if (r < h.length && h[r]![0] < h[m]![0]) m = r;
        if (m === i) break;
        [h[m], h[i]] = [h[i]!, h[m]!];
        i = m;
      }
    }
    return top;
  }
}
