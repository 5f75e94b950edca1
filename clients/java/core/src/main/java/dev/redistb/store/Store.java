package dev.redistb.store;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The module's commands, typed (docs/commands.md): the seam between the limiter and Redis. {@link
 * CommandStore} implements it over any client that can send a raw command (the Lettuce and Jedis
 * backends); a backend without the module (a script) implements it directly. Every method answers
 * asynchronously; a failure completes the future with a {@link StoreException}. A {@code now} of
 * null is the server's clock.
 */
public interface Store {
  /** {@code host:port} of the server, for messages. */
  String server();

  /** TB.TAKE key capacity rate n [now]. */
  CompletableFuture<TakeReply> take(String key, double capacity, double rate, double n, Double now);

  /** TB.MTAKE numkeys key... capacity rate n ... [now]: all or nothing. */
  CompletableFuture<MultiReply> mtake(List<Bucket> buckets, Double now);

  /** TB.RESERVE key capacity rate n max_wait [now]. */
  CompletableFuture<ReserveReply> reserve(
      String key, double capacity, double rate, double n, double maxWait, Double now);

  /** TB.PEEK key capacity rate [now]. */
  CompletableFuture<TakeReply> peek(String key, double capacity, double rate, Double now);

  /** TB.PEEK key LEASES. */
  CompletableFuture<LeasesInfo> peekLeases(String key);

  /** TB.PEEK key HOLDS. */
  CompletableFuture<HoldsInfo> peekHolds(String key);

  /** TB.REFUND key capacity rate n [now]. */
  CompletableFuture<TakeReply> refund(
      String key, double capacity, double rate, double n, Double now);

  /** TB.REFUND on each bucket, sent together (pipelined, no transaction). */
  CompletableFuture<List<TakeReply>> refundAll(List<Bucket> buckets);

  /** TB.THROTTLE key max_burst count_per_period period [quantity]. */
  CompletableFuture<ThrottleReply> throttle(
      String key, long maxBurst, long countPerPeriod, double period, long quantity);

  /** TB.WINDOW key limit window n [now] [FIXED|SLIDING|LOG]. */
  CompletableFuture<TakeReply> window(
      String key, double limit, double seconds, double n, Double now, WindowMode mode);

  /** TB.ACQUIRE key limit lease_ms [TAKE numkeys key... capacity rate n ...]. */
  CompletableFuture<AcquireReply> acquire(String key, long limit, long leaseMs, List<Bucket> take);

  /** TB.RELEASE key lease_id. */
  CompletableFuture<LeaseReply> release(String key, String id);

  /** TB.RENEW key lease_id lease_ms. */
  CompletableFuture<LeaseReply> renew(String key, String id, long leaseMs);

  /** TB.HOLD key capacity rate estimate ttl_ms. */
  CompletableFuture<HoldReply> hold(
      String key, double capacity, double rate, double estimate, long ttlMs);

  /** TB.SETTLE key capacity rate hold_id actual [max_wait]. */
  CompletableFuture<SettleReply> settle(
      String key, double capacity, double rate, String id, double actual, Double maxWait);

  /**
   * SPEC U3: {@code HELLO} without an argument (the connection's protocol is not switched): the
   * reply's {@code mode} field ({@code standalone}, {@code cluster}, {@code sentinel}), null when
   * the reply has none. An error reply completes with a {@link StoreException} of kind REPLY.
   */
  CompletableFuture<String> serverMode();

  /**
   * SPEC U1: {@code COMMAND INFO tb.take}; true when the module's commands exist. An error reply
   * (NOPERM) completes with a {@link StoreException} of kind REPLY.
   */
  CompletableFuture<Boolean> moduleLoaded();
}
