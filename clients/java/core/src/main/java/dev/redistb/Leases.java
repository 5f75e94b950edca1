package dev.redistb;

import dev.redistb.store.LeaseReply;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;

/**
 * The limiter's side of leases (SPEC N4, N5, M2): the release and the renewal through the guarded
 * store call, the gauge of leases held, and leases that ended without a release.
 */
final class Leases {
  private final GuardedStore guarded;
  private final Stats stats;
  private final LimiterMetrics metrics;
  private final String name;
  private final RateLog log;
  private volatile ScheduledExecutorService scheduler;

  Leases(GuardedStore guarded, Stats stats, LimiterMetrics metrics, String name, RateLog log) {
    this.guarded = guarded;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
    this.log = log;
  }

  /** M2: a lease granted by a check. */
  Lease granted(String key, String id, String policy, long leaseMs) {
    stats.leasesInFlight.increment();
    metrics.leaseGranted(name, policy);
    return new Lease(key, id, policy, leaseMs, this);
  }

  /** N4: the gauge down whatever the answer; TB.RELEASE unless lost (and not while open, B2). */
  CompletableFuture<Void> end(Lease lease, boolean lost) {
    stats.leasesInFlight.decrement();
    metrics.leaseEnded(name, lease.policy());
    if (lost) {
      return CompletableFuture.completedFuture(null);
    }
    return guarded
        .call("TB.RELEASE", s -> s.release(lease.key(), lease.id()))
        .handle(
            (LeaseReply r, Throwable err) -> {
              if (err == null && !r.ok()) {
                expired(lease, "its release found it gone");
              }
              return null;
            });
  }

  /** N5: true renewed, false lost, null a failed call (the next tick tries again). */
  CompletableFuture<Boolean> renew(Lease lease) {
    return guarded
        .call("TB.RENEW", s -> s.renew(lease.key(), lease.id(), lease.leaseMs()))
        .handle(
            (LeaseReply r, Throwable err) -> {
              if (err != null) {
                return null;
              }
              if (!r.ok() && lease.held()) {
                expired(lease, "a renewal found it gone");
              }
              return r.ok();
            });
  }

  /** M2, N5: counted, logged at most once a second per policy. */
  private void expired(Lease lease, String how) {
    stats.leasesExpired.increment();
    metrics.leaseExpired(name, lease.policy());
    log.warn(
        "lease:" + lease.policy(),
        n ->
            "redis-tb: a lease of in-flight policy '"
                + lease.policy()
                + "' expired before its response ended ("
                + how
                + "; "
                + n
                + " since the last line): renew it sooner or give it a longer lease");
  }

  /** The renewal timers' thread, made on first use (daemon). */
  ScheduledExecutorService scheduler() {
    ScheduledExecutorService s = scheduler;
    if (s == null) {
      synchronized (this) {
        s = scheduler;
        if (s == null) {
          s =
              Executors.newSingleThreadScheduledExecutor(
                  r -> {
                    Thread t = new Thread(r, "redis-tb-renew-" + name);
                    t.setDaemon(true);
                    return t;
                  });
          scheduler = s;
        }
      }
    }
    return s;
  }
}
