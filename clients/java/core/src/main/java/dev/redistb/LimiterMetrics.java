package dev.redistb;

/**
 * SPEC M1, M2: where a limiter's counters go (Prometheus through Micrometer in the Spring starter).
 * Labels are the limiter's name and the policy's: configuration, never a client identity. Every
 * method has a no-op default.
 */
public interface LimiterMetrics {
  LimiterMetrics NONE = new LimiterMetrics() {};

  default void allowed(String limiter, String policy) {}

  default void limited(String limiter, String policy) {}

  default void shadowLimited(String limiter, String policy) {}

  default void refunded(String limiter, String policy) {}

  default void denyCacheHit(String limiter, String policy) {}

  default void invalidInput(String limiter, String policy) {}

  default void storeError(String limiter) {}

  default void degraded(String limiter) {}

  /** The duration of one Redis call, in seconds. */
  default void redisCall(String limiter, double seconds) {}

  /** M2: a lease granted (the gauge up). */
  default void leaseGranted(String limiter, String policy) {}

  /** M2: a lease ended by N4 (the gauge down). */
  default void leaseEnded(String limiter, String policy) {}

  /** M2: a lease that ended without a release. */
  default void leaseExpired(String limiter, String policy) {}

  /** M2, N7: a request ended at its in-flight policy's max_duration. */
  default void leaseTimedOut(String limiter, String policy) {}

  /** M2, G5: a hold whose renewal answered 0 (lost before it was settled). */
  default void holdLost(String limiter, String policy) {}

  /**
   * SPEC E6: the store's backend chosen ({@code module} or {@code scripts}): the gauge {@code
   * redis_tb_backend{limiter, backend}}, 1 for it and 0 for the other.
   */
  default void backend(String limiter, String backend) {}
}
