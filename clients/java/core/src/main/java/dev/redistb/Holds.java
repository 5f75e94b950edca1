package dev.redistb;

import dev.redistb.store.HoldReply;
import dev.redistb.store.SettleReply;
import dev.redistb.store.TakeReply;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/** The limiter's side of holds (SPEC G1-G3): TB.HOLD and TB.SETTLE through the guarded call. */
final class Holds {
  private final GuardedStore guarded;
  private final Stats stats;
  private final Function<Decision, RateLimitResponse> respond;

  Holds(GuardedStore guarded, Stats stats, Function<Decision, RateLimitResponse> respond) {
    this.guarded = guarded;
    this.stats = stats;
    this.respond = respond;
  }

  /** G1, G2: TB.HOLD on the key and limit the check resolved. */
  CompletableFuture<Hold> hold(SettleTarget t, double estimate, double ttlSeconds) {
    long ttlMs = Numbers.ceilSnapped(ttlSeconds * 1000);
    return guarded
        .call("TB.HOLD", s -> s.hold(t.key(), t.capacity(), t.rate(), estimate, ttlMs))
        .thenApply(
            (HoldReply r) -> {
              TakeReply x = r.reply();
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
                      : respond.apply(
                          Decision.refused(java.util.List.of(result), false, null, null));
              return new Hold(result, r.id(), estimate, response, t, this);
            });
  }

  /** G3: TB.SETTLE once. */
  CompletableFuture<Settlement> settle(Hold hold, double actual) {
    SettleTarget t = hold.target();
    return guarded
        .call("TB.SETTLE", s -> s.settle(t.key(), t.capacity(), t.rate(), hold.id(), actual, null))
        .thenApply(
            (SettleReply r) -> {
              if (r.settled()) {
                stats.settlements.increment();
              }
              return new Settlement(
                  r.settled(), r.remaining(), r.settled() ? r.charged() : 0, r.resetAfter());
            });
  }
}
