package dev.redistb.store;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The typed client of every module command (SPEC "Names": {@code TbClient}; docs/commands.md):
 * TB.TAKE, MTAKE, RESERVE, PEEK (a bucket, LEASES, HOLDS), REFUND, THROTTLE, WINDOW, ACQUIRE (and
 * its TAKE), RELEASE, RENEW (a lease or a hold), HOLD and SETTLE. {@link CommandStore} writes their
 * arguments and reads their replies once, over any client that sends a raw command ({@code
 * LettuceStore}, {@code JedisStore}). Every method answers asynchronously; a failure completes the
 * future with a {@link StoreException} (an error reply is one of kind REPLY). A {@code now} of null
 * is the server's clock.
 */
public interface TbClient {
  /** TB.TAKE key capacity rate n [now]. */
  CompletableFuture<Reply> take(String key, double capacity, double rate, double n, Double now);

  /** TB.MTAKE numkeys key... capacity rate n ... [now]: all or nothing. */
  CompletableFuture<MultiReply> mtake(List<Charge> charges, Double now);

  /** TB.RESERVE key capacity rate n max_wait [now]. */
  CompletableFuture<Reservation> reserve(
      String key, double capacity, double rate, double n, double maxWait, Double now);

  /** TB.PEEK key capacity rate [now]. */
  CompletableFuture<Reply> peek(String key, double capacity, double rate, Double now);

  /** TB.PEEK key LEASES. */
  CompletableFuture<LeasesReply> peekLeases(String key);

  /** TB.PEEK key HOLDS. */
  CompletableFuture<HoldsReply> peekHolds(String key);

  /** TB.REFUND key capacity rate n [now]. */
  CompletableFuture<Reply> refund(String key, double capacity, double rate, double n, Double now);

  /** TB.THROTTLE key max_burst count_per_period period [quantity]. */
  CompletableFuture<Throttle> throttle(
      String key, long maxBurst, long countPerPeriod, double period, long quantity);

  /** TB.WINDOW key limit window n [now] [FIXED|SLIDING|LOG]. */
  CompletableFuture<Reply> window(
      String key, double limit, double seconds, double n, Double now, WindowMode mode);

  /** TB.ACQUIRE key limit lease_ms [TAKE numkeys key... capacity rate n ...]. */
  CompletableFuture<Acquired> acquire(String key, long limit, long leaseMs, List<Charge> take);

  /** TB.RELEASE key lease_id. */
  CompletableFuture<LeaseReply> release(String key, String id);

  /** TB.RENEW key id ms: a lease on an in-flight key, or a hold on a bucket (SPEC N5, G5). */
  CompletableFuture<LeaseReply> renew(String key, String id, long ms);

  /** TB.HOLD key capacity rate estimate ttl_ms. */
  CompletableFuture<HoldReply> hold(
      String key, double capacity, double rate, double estimate, long ttlMs);

  /** TB.SETTLE key capacity rate hold_id actual [max_wait]. */
  CompletableFuture<SettleReply> settle(
      String key, double capacity, double rate, String id, double actual, Double maxWait);
}
