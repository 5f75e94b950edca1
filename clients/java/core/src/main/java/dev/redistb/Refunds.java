package dev.redistb;

import dev.redistb.store.Charge;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A limiter's refunds (SPEC F): TB.REFUND now on every bucket a request was charged on, through the
 * guarded call (B2: not while the breaker is open), never retried, and the deny cache's entries of
 * those keys dropped (R8).
 */
final class Refunds {
  private final GuardedStore guarded;
  private final LimiterStats stats;
  private final LimiterMetrics metrics;
  private final String name;
  private final CachedRefusals cache;

  Refunds(
      GuardedStore guarded,
      LimiterStats stats,
      LimiterMetrics metrics,
      String name,
      CachedRefusals cache) {
    this.guarded = guarded;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
    this.cache = cache;
  }

  /** F1, F3, B2, R8: the request's bucket policies only; false and nothing sent when none. */
  CompletableFuture<Boolean> refund(Decision d) {
    List<Charge> charges = new ArrayList<>();
    List<PolicyResult> charged = new ArrayList<>();
    for (PolicyResult r : d.results()) {
      if (r.kind() == LimitKind.BUCKET && r.cost() > 0 && r.rate() != null) {
        charges.add(new Charge(r.key(), r.capacity(), r.rate(), r.cost()));
        charged.add(r);
      }
    }
    if (charges.isEmpty()) {
      return CompletableFuture.completedFuture(false);
    }
    return guarded
        .call("TB.REFUND", s -> s.refundAll(charges))
        .handle(
            (replies, err) -> {
              if (err != null) {
                stats.refundErrors.increment();
                return false;
              }
              stats.refunds.increment();
              for (PolicyResult r : charged) {
                metrics.refunded(name, r.name());
                if (cache != null) {
                  cache.refunded(r.key());
                }
              }
              return true;
            });
  }
}
