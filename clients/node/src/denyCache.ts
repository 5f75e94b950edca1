/**
 * The local deny cache (off by default): after Redis refuses a request, remember each
 * enforced violated bucket until its retry_after has passed, and refuse later requests
 * that would certainly be refused too (same key, same capacity and rate, a cost at least
 * as large) without calling Redis. It only short-circuits refusals: it never admits.
 * Redis admitting a request that leaves an enforced bucket with remaining < its cost is
 * remembered the same way (the limiter passes deny-until = now + (cost - remaining) /
 * rate): exactly the refusal Redis would give that cost until then, absent refunds.
 *
 * Single flight: once an entry's deny-until has passed, the first request that finds it
 * claims it as the probe (`claimProbe`, which marks the entry probing with the time) and
 * goes to Redis; while the mark is fresh, `lookup` keeps refusing the other requests for
 * that bucket (retry after 0, rendered Retry-After 1). The probe's caller ends it with
 * `endProbe`: a refusal, or an admission that left the bucket below the cost, has already
 * renewed the entry through `remember` (a new entry); anything else (admitted with enough
 * tokens left, store error, timeout) removes it. A mark older than
 * `probeStaleMs` no longer refuses: the next request becomes the probe, so a lost probe
 * never blocks a bucket for good.
 *
 * Bounded: at most `maxEntries` entries. When full, the entry with the earliest deny-until
 * goes: expired entries first, then the one that expires soonest (as in Python). A binary
 * heap of (deny-until, key) with lazy deletion: O(log n) per insert, O(1) per lookup.
 *
 * The limiter asks it with a request's plans ({@link DenyCache.refusal},
 * {@link DenyCache.claimProbes}) and tells it Redis's answers
 * ({@link DenyCache.rememberRefusals}, {@link DenyCache.rememberSpent}).
 */
import type { PolicyResult } from './decision.js';
import type { Plan } from './plan.js';

export interface DenyCacheOptions {
  /** the size cap (entries), e.g. 10_000 */
  maxEntries: number;
}

/** The probe of one expired entry: hand it back to `endProbe` when Redis has answered. */
export interface DenyProbe {
  key: string;
  entry: DenyEntry;
  since: number;
}

export interface DenyEntry {
  policy: string;
  capacity: number;
  rate: number;
  cost: number;
  /** monotonic ms (the limiter's clock, SPEC T1) */
  denyUntil: number;
  resetAt: number;
  /** monotonic ms when the current probe was claimed; undefined when none */
  probingSince?: number;
}

type HeapItem = [denyUntil: number, key: string, entry: DenyEntry];

export class DenyCache {
  readonly maxEntries: number;
  private readonly entries = new Map<string, DenyEntry>();
  private heap: HeapItem[] = [];

  /** how long a probing mark refuses the other requests (ms); the limiter uses 2x its call timeout */
  readonly probeStaleMs: number;

  constructor(options: DenyCacheOptions, probeStaleMs = 100) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1) {
      throw new RangeError(`denyCache.maxEntries must be a positive integer, got ${options.maxEntries}`);
    }
    this.maxEntries = options.maxEntries;
    this.probeStaleMs = probeStaleMs;
  }

  get size(): number {
    return this.entries.size;
  }

  /**
   * The entry that refuses this bucket at `now`, or null: one whose deny-until has not
   * passed, or an expired one whose probe (claimed less than `probeStaleMs` ago) is still
   * waiting for Redis. Only requests the entry certainly covers (same capacity and rate,
   * a cost at least as large) are refused.
   */
  lookup(key: string, capacity: number, rate: number, cost: number, now: number): DenyEntry | null {
    const e = this.entries.get(key);
    if (e === undefined) return null;
    if (e.capacity !== capacity || e.rate !== rate || cost < e.cost) return null;
    if (now < e.denyUntil) return e;
    if (e.probingSince !== undefined && now - e.probingSince < this.probeStaleMs) return e;
    return null;
  }

  /**
   * Claim the probe of this bucket's expired entry (none probing, or a stale mark): the
   * caller goes to Redis and must call `endProbe` with the result. Null when there is no
   * expired entry covering this request, or when its probe is already in flight.
   */
  claimProbe(key: string, capacity: number, rate: number, cost: number, now: number): DenyProbe | null {
    const e = this.entries.get(key);
    if (e === undefined || now < e.denyUntil) return null;
    if (e.capacity !== capacity || e.rate !== rate || cost < e.cost) return null;
    if (e.probingSince !== undefined && now - e.probingSince < this.probeStaleMs) return null;
    e.probingSince = now;
    return { key, entry: e, since: now };
  }

  /**
   * The probe's answer has arrived (or failed). A refusal (or an admission leaving fewer
   * tokens than the cost) has renewed the entry with `remember` already (a new entry
   * object), so this removes the probed entry only if it is still there and still marked
   * by this probe: admitted with enough left, store error or timeout.
   */
  endProbe(probe: DenyProbe): void {
    const e = this.entries.get(probe.key);
    if (e === probe.entry && e.probingSince === probe.since) this.entries.delete(probe.key);
  }

  /**
   * SPEC R6: the probe never reached Redis (the breaker is open): its claim is given back
   * and the entry left as it was, so the next check after the cool-down may probe.
   */
  giveBack(probe: DenyProbe): void {
    const e = this.entries.get(probe.key);
    if (e === probe.entry && e.probingSince === probe.since) e.probingSince = undefined;
  }

  /**
   * SPEC R2, R3, R4, H6: the cached refusals of a request's plans at `now`, one result per
   * cached violated policy (r=0, the wait to deny-until, the reset), or null: ask Redis.
   * Shadow policies always reach Redis; in-flight refusals are never cached (R10).
   */
  refusal(plans: readonly Plan[], now: number): PolicyResult[] | null {
    let results: PolicyResult[] | null = null;
    for (const pl of plans) {
      if (pl.shadow || pl.kind === 'in_flight') continue;
      const e = this.lookup(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (!e) continue;
      (results ??= []).push({
        name: pl.policy.name, key: pl.key, capacity: pl.capacity, rate: pl.rate, cost: pl.cost,
        ...(pl.window ? { kind: 'window' as const, window: pl.window.seconds } : {}),
        allowed: false, remaining: 0,
        // 0 while the entry's probe is waiting for Redis (Retry-After: 1)
        retryAfter: Math.max(0, e.denyUntil - now) / 1000,
        resetAfter: Math.max(0, (e.resetAt - now) / 1000),
        shadow: false,
      });
    }
    return results;
  }

  /**
   * SPEC R4, single flight: the request that finds expired entries is the one probe of each
   * (the others are refused by {@link refusal} until the answer ends the probes: {@link endProbe}).
   */
  claimProbes(plans: readonly Plan[], now: number): DenyProbe[] {
    const probes: DenyProbe[] = [];
    for (const pl of plans) {
      if (pl.shadow || pl.kind === 'in_flight') continue; // SPEC R10
      const pr = this.claimProbe(pl.key, pl.capacity, pl.rate, pl.cost, now);
      if (pr) probes.push(pr);
    }
    return probes;
  }

  /** SPEC R1, R10: Redis refused: each enforced violated bucket or window with a wait, until then. */
  rememberRefusals(results: readonly PolicyResult[], now: number): void {
    for (const r of results) {
      if (r.allowed || r.shadow || !(r.retryAfter > 0) || r.rate === null || r.kind === 'in_flight') continue;
      this.remember(r.key, {
        policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
        denyUntil: now + r.retryAfter * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
      }, now);
    }
  }

  /**
   * SPEC R5: Redis admitted the request: every charged (enforced) bucket it left with fewer
   * tokens than this request's cost would refuse a request of that cost (or more) until
   * (cost - remaining) / rate has passed, absent refunds, so cache exactly that refusal.
   * A bucket left with enough tokens caches nothing; a probe admitted with enough left
   * still removes its entry (`endProbe`). Buckets only (W3, R10).
   */
  rememberSpent(results: readonly PolicyResult[], now: number): void {
    for (const r of results) {
      if (r.shadow || r.kind !== undefined || r.rate === null || !(r.cost > 0) || !(r.remaining < r.cost)) continue;
      const wait = (r.cost - r.remaining) / r.rate;
      if (!(wait > 0 && Number.isFinite(wait))) continue;
      this.remember(r.key, {
        policy: r.name, capacity: r.capacity, rate: r.rate, cost: r.cost,
        denyUntil: now + wait * 1000, resetAt: now + Math.max(0, r.resetAfter) * 1000,
      }, now);
    }
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
