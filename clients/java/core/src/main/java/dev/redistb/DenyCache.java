package dev.redistb;

import java.util.HashMap;
import java.util.Map;
import java.util.PriorityQueue;

/**
 * The local deny cache (SPEC R, off by default): after Redis refuses, each enforced violated bucket
 * is remembered until its wait has passed, and later checks it certainly covers (same key, capacity
 * and rate, a cost at least as large) are refused without Redis. It never admits (R7).
 *
 * <p>One probe at a time (R4): once an entry's deny-until has passed, the first check that finds it
 * claims it and goes to Redis; while that claim is fresh the others are refused (retry after 0,
 * Retry-After 1). A refusal renews the entry; an admission (unless R5 caches again), a store error
 * or a cancelled probe removes it; a claim older than {@code probeStaleMs} (twice the timeout) is
 * lost. Bounded (R9): when full, the entry that expires soonest goes (expired ones first), a heap
 * with lazy deletion.
 */
public final class DenyCache {
  /** One remembered refusal, times on the limiter's monotonic clock (ms). */
  static final class Entry {
    final String policy;
    final double capacity;
    final double rate;
    final double cost;
    final double denyUntil;
    final double resetAt;
    final Double window;

    /** NaN: no probe out */
    double probingSince = Double.NaN;

    Entry(
        String policy,
        double capacity,
        double rate,
        double cost,
        double denyUntil,
        double resetAt,
        Double window) {
      this.policy = policy;
      this.capacity = capacity;
      this.rate = rate;
      this.cost = cost;
      this.denyUntil = denyUntil;
      this.resetAt = resetAt;
      this.window = window;
    }
  }

  /** A claimed probe: hand it back to {@link #endProbe} or {@link #giveBack}. */
  record Probe(String key, Entry entry, double since) {}

  private record Item(double denyUntil, String key, Entry entry) {}

  private final int maxEntries;
  private final double probeStaleMs;
  private final Map<String, Entry> entries = new HashMap<>();
  private final PriorityQueue<Item> heap =
      new PriorityQueue<>((a, b) -> Double.compare(a.denyUntil, b.denyUntil));

  /** SPEC C7: {@code maxEntries} a whole number >= 1. */
  public DenyCache(int maxEntries, double probeStaleMs) {
    if (maxEntries < 1) {
      throw new ConfigException("deny_cache.max_entries must be >= 1, got " + maxEntries);
    }
    this.maxEntries = maxEntries;
    this.probeStaleMs = probeStaleMs;
  }

  public int maxEntries() {
    return maxEntries;
  }

  public synchronized int size() {
    return entries.size();
  }

  private boolean covers(Entry e, double capacity, double rate, double cost) {
    return e.capacity == capacity && e.rate == rate && cost >= e.cost;
  }

  private boolean probeFresh(Entry e, double now) {
    return !Double.isNaN(e.probingSince) && now - e.probingSince < probeStaleMs;
  }

  /** R2, R4: the entry that refuses this check now, or null. */
  synchronized Entry lookup(String key, double capacity, double rate, double cost, double now) {
    Entry e = entries.get(key);
    if (e == null || !covers(e, capacity, rate, cost)) {
      return null;
    }
    if (now < e.denyUntil || probeFresh(e, now)) {
      return e;
    }
    return null;
  }

  /** R4: claim the probe of this bucket's expired entry; null when none or one is out. */
  synchronized Probe claimProbe(String key, double capacity, double rate, double cost, double now) {
    Entry e = entries.get(key);
    if (e == null || now < e.denyUntil || !covers(e, capacity, rate, cost) || probeFresh(e, now)) {
      return null;
    }
    e.probingSince = now;
    return new Probe(key, e, now);
  }

  /**
   * R4: the probe's answer arrived (or failed, or was cancelled): the probed entry goes, unless the
   * answer renewed it already (a new entry).
   */
  synchronized void endProbe(Probe p) {
    Entry e = entries.get(p.key());
    if (e == p.entry() && e.probingSince == p.since()) {
      entries.remove(p.key());
    }
  }

  /** R6: the probe never reached Redis (the breaker is open): the entry stays as it was. */
  synchronized void giveBack(Probe p) {
    Entry e = entries.get(p.key());
    if (e == p.entry() && e.probingSince == p.since()) {
      e.probingSince = Double.NaN;
    }
  }

  /** R1, R5: remember a refusal of {@code key} until {@code entry.denyUntil}. */
  synchronized void remember(String key, Entry entry) {
    if (!entries.containsKey(key)) {
      while (entries.size() >= maxEntries) {
        evictSoonest();
      }
    }
    entries.put(key, entry);
    heap.add(new Item(entry.denyUntil, key, entry));
    if (heap.size() > 2 * maxEntries + 16) {
      heap.clear();
      for (Map.Entry<String, Entry> kv : entries.entrySet()) {
        heap.add(new Item(kv.getValue().denyUntil, kv.getKey(), kv.getValue()));
      }
    }
  }

  /** R8: a refund through this limiter drops the key's entry. */
  synchronized void drop(String key) {
    entries.remove(key);
  }

  private void evictSoonest() {
    Item top;
    while ((top = heap.poll()) != null) {
      if (entries.get(top.key()) == top.entry()) {
        entries.remove(top.key());
        return;
      }
    }
    entries.clear();
  }
}
