package dev.redistb;

import dev.redistb.store.LeaseReply;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;

/**
 * The limiter's side of leases (SPEC N4, N5, N7, M2): the release and the renewal through the
 * guarded store call, the gauge of leases held, leases that ended without a release, and requests
 * ended at their max_duration.
 */
final class Leases implements Lease.Ops {
  private final GuardedStore guarded;
  private final LimiterStats stats;
  private final LimiterMetrics metrics;
  private final String name;
  private final RateLog log;
  private final Clock clock;
  private final RenewalTimer.Scheduler scheduler;

  Leases(
      GuardedStore guarded,
      LimiterStats stats,
      LimiterMetrics metrics,
      String name,
      RateLog log,
      Clock clock,
      RenewalTimer.Scheduler scheduler) {
    this.guarded = guarded;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
    this.log = log;
    this.clock = clock;
    this.scheduler = scheduler;
  }

  /** M2: a lease granted by a check now (its max_duration counts from here, N7). */
  Lease granted(String key, String id, String policy, InFlightLimit limit) {
    stats.leasesInFlight.increment();
    metrics.leaseGranted(name, policy);
    return new Lease(
        key, id, policy, limit.leaseMs(), limit.maxDurationMs(), clock.monotonicMillis(), this);
  }

  /** SPEC T1: the limiter's monotonic clock. */
  @Override
  public double now() {
    return clock.monotonicMillis();
  }

  /** N4: the gauge down whatever the answer; TB.RELEASE unless lost (and not while open, B2). */
  @Override
  public CompletableFuture<Void> end(Lease lease, boolean lost) {
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
  @Override
  public CompletableFuture<Boolean> renew(Lease lease) {
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

  /** M2, N7: counted, logged at most once a second per policy (the release is {@link #end}'s). */
  @Override
  public void timedOut(Lease lease) {
    stats.leasesTimedOut.increment();
    metrics.leaseTimedOut(name, lease.policy());
    log.warn(
        "timeout:" + lease.policy(),
        n ->
            "redis-tb: a request of in-flight policy '"
                + lease.policy()
                + "' ran for its max_duration: its lease is released and its response ended ("
                + n
                + " since the last line)");
  }

  /** An adapter's timeout action that raised: logged, the others still run. */
  @Override
  public void actionFailed(Lease lease, RuntimeException e) {
    log.warn(
        "timeout-action:" + lease.policy(),
        n ->
            "redis-tb: ending a request of in-flight policy '"
                + lease.policy()
                + "' at its max_duration failed: "
                + GuardedStore.describe(e)
                + " ("
                + n
                + " since the last line)");
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
  @Override
  public ScheduledExecutorService scheduler() {
    return scheduler.get();
  }
}
