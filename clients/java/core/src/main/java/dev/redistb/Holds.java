package dev.redistb;

import dev.redistb.store.HoldReply;
import dev.redistb.store.LeaseReply;
import dev.redistb.store.Reply;
import dev.redistb.store.SettleReply;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.function.Function;

/**
 * The limiter's side of holds (SPEC G1-G6, M2): TB.HOLD, TB.RENEW and TB.SETTLE through the guarded
 * call (B2, B3: a hold, its renewal or its settlement may be the probe), the counters, and the 429
 * of a refused hold.
 */
final class Holds implements Hold.Ops {
  private final GuardedStore guarded;
  private final LimiterStats stats;
  private final LimiterMetrics metrics;
  private final String name;
  private final RateLog log;
  private final RenewalTimer.Scheduler scheduler;
  private final Function<Decision, RateLimitResponse> respond;

  Holds(
      GuardedStore guarded,
      LimiterStats stats,
      LimiterMetrics metrics,
      String name,
      RateLog log,
      RenewalTimer.Scheduler scheduler,
      Function<Decision, RateLimitResponse> respond) {
    this.guarded = guarded;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
    this.log = log;
    this.scheduler = scheduler;
    this.respond = respond;
  }

  /** G1, G2, G6: TB.HOLD on the key and limit the check resolved; a refusal is a reply. */
  CompletableFuture<Hold> hold(SettleTarget t, double estimate, double ttlSeconds) {
    long ttlMs = Numbers.ceilSnapped(ttlSeconds * 1000);
    return guarded
        .call("TB.HOLD", s -> s.hold(t.key(), t.capacity(), t.rate(), estimate, ttlMs))
        .thenApply(
            (HoldReply r) -> {
              Reply x = r.reply();
              if (x.allowed()) {
                stats.holds.increment();
              }
              PolicyResult result =
                  new PolicyResult(
                      t.policy(),
                      t.key(),
                      t.capacity(),
                      t.rate(),
                      estimate,
                      LimitKind.BUCKET,
                      null,
                      x.allowed(),
                      x.remaining(),
                      x.retryAfter(),
                      x.resetAfter(),
                      false);
              RateLimitResponse response =
                  x.allowed()
                      ? null
                      : respond.apply(Decision.refused(List.of(result), false, null, null));
              return new Hold(result, r.id(), estimate, ttlMs, response, t, this);
            });
  }

  /** G5: TB.RENEW key id ttl_ms: true renewed, false lost, null a failed call or none sent. */
  @Override
  public CompletableFuture<Boolean> renew(Hold hold) {
    return guarded
        .call("TB.RENEW", s -> s.renew(hold.key(), hold.id(), hold.ttlMs()))
        .handle(
            (LeaseReply r, Throwable err) -> {
              if (err != null) {
                return null;
              }
              if (!r.ok() && hold.live()) {
                lost(hold);
              }
              return r.ok();
            });
  }

  /** M2, G5: counted, logged at most once a second per policy. */
  private void lost(Hold hold) {
    stats.holdsLost.increment();
    metrics.holdLost(name, hold.policy());
    log.warn(
        "hold:" + hold.policy(),
        n ->
            "redis-tb: a hold of policy '"
                + hold.policy()
                + "' was lost before it was settled (a renewal found it gone; "
                + n
                + " since the last line): its settlement sends nothing");
  }

  /** G3: TB.SETTLE once, with max_wait = capacity / rate (at most one bucket of debt). */
  @Override
  public CompletableFuture<Settlement> settle(Hold hold, double actual) {
    SettleTarget t = hold.target();
    double maxWait = t.capacity() / t.rate();
    return guarded
        .call(
            "TB.SETTLE", s -> s.settle(t.key(), t.capacity(), t.rate(), hold.id(), actual, maxWait))
        .thenApply(
            (SettleReply r) -> {
              if (r.settled()) {
                stats.settlements.increment();
              }
              return new Settlement(
                  r.settled(), r.remaining(), r.settled() ? r.charged() : 0, r.resetAfter());
            });
  }

  @Override
  public ScheduledExecutorService scheduler() {
    return scheduler.get();
  }
}
