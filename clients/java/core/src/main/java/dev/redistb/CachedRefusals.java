package dev.redistb;

import java.util.ArrayList;
import java.util.List;

/**
 * A limiter's side of the deny cache (SPEC R): the refusal answered without Redis (R2-R4, H6), the
 * probes a check claims (R4, R6), and what a reply leaves in the cache (R1, R5, R10). Shadow and
 * in-flight policies never go through it (R10).
 */
final class CachedRefusals {
  private final DenyCache cache;
  private final LimiterStats stats;
  private final LimiterMetrics metrics;
  private final String name;

  CachedRefusals(DenyCache cache, LimiterStats stats, LimiterMetrics metrics, String name) {
    this.cache = cache;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
  }

  private static boolean cached(Plan.Part p) {
    return !p.shadow() && p.kind() != LimitKind.IN_FLIGHT; // shadow policies reach Redis; R10
  }

  /** SPEC R2, R3, R4, H6: a refusal from the deny cache, or null. */
  Decision refused(Plan plan, double now) {
    List<PolicyResult> results = null;
    for (Plan.Part p : plan.parts) {
      if (!cached(p)) {
        continue;
      }
      DenyCache.Entry e = cache.lookup(p.key(), p.capacity(), p.rate(), p.cost(), now);
      if (e == null) {
        continue;
      }
      // R3: deny_until - now; 1 while another check probes
      double wait = now < e.denyUntil ? (e.denyUntil - now) / 1000 : 1;
      if (results == null) {
        results = new ArrayList<>();
      }
      results.add(
          new PolicyResult(
              p.name(),
              p.key(),
              p.capacity(),
              p.rate(),
              p.cost(),
              p.kind(),
              e.window,
              false,
              0,
              wait,
              Math.max(0, (e.resetAt - now) / 1000),
              false));
    }
    if (results == null) {
      return null;
    }
    stats.limited.increment();
    stats.denyCacheHits.increment();
    for (PolicyResult r : results) {
      metrics.denyCacheHit(name, r.name());
      metrics.limited(name, r.name());
    }
    return Decision.refused(results, true, null, null);
  }

  /** SPEC R4: this check is the one probe of every expired entry it found. */
  List<DenyCache.Probe> claimProbes(Plan plan, double now) {
    List<DenyCache.Probe> out = new ArrayList<>();
    for (Plan.Part p : plan.parts) {
      if (!cached(p)) {
        continue;
      }
      DenyCache.Probe pr = cache.claimProbe(p.key(), p.capacity(), p.rate(), p.cost(), now);
      if (pr != null) {
        out.add(pr);
      }
    }
    return out;
  }

  /** R4: the answer ends the probes; R6: a probe the open breaker stopped gives its claim back. */
  void endProbes(List<DenyCache.Probe> probes, Throwable err) {
    boolean notSent = err != null && GuardedStore.notSent(err);
    for (DenyCache.Probe p : probes) {
      if (notSent) {
        cache.giveBack(p);
      } else {
        cache.endProbe(p);
      }
    }
  }

  /**
   * SPEC R1, R10: an enforced violated policy with a wait is remembered; never an in-flight one.
   */
  void refusedBy(PolicyResult r, double now) {
    if (r.retryAfter() > 0 && r.kind() != LimitKind.IN_FLIGHT) {
      cache.remember(
          r.key(),
          new DenyCache.Entry(
              r.name(),
              r.capacity(),
              r.rate(),
              r.cost(),
              now + r.retryAfter() * 1000,
              now + Math.max(0, r.resetAfter()) * 1000,
              r.window()));
    }
  }

  /** SPEC R5: an admission that left an enforced bucket below the cost caches the next refusal. */
  void spent(List<PolicyResult> results, double now) {
    for (PolicyResult r : results) {
      if (r.shadow()
          || r.kind() != LimitKind.BUCKET
          || !(r.cost() > 0)
          || !(r.remaining() < r.cost())) {
        continue;
      }
      double wait = (r.cost() - r.remaining()) / r.rate();
      if (wait > 0 && Double.isFinite(wait)) {
        cache.remember(
            r.key(),
            new DenyCache.Entry(
                r.name(),
                r.capacity(),
                r.rate(),
                r.cost(),
                now + wait * 1000,
                now + Math.max(0, r.resetAfter()) * 1000,
                null));
      }
    }
  }

  /** SPEC R8: a refund removes the entries of the keys it refunded. */
  void refunded(String key) {
    cache.drop(key);
  }
}
