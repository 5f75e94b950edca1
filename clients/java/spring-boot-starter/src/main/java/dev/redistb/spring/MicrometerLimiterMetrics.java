package dev.redistb.spring;

import dev.redistb.LimiterMetrics;
import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * SPEC M1, M2 through Micrometer: in Prometheus {@code redis_tb_allowed_total}, ... labels {@code
 * limiter} and {@code policy} (configuration, never a client identity), the call duration histogram
 * {@code redis_tb_redis_call_duration_seconds}, the gauge {@code redis_tb_leases_in_flight}, and
 * the counters {@code redis_tb_leases_expired_total}, {@code redis_tb_leases_timed_out_total} and
 * {@code redis_tb_holds_lost_total}, and SPEC E6's gauge {@code redis_tb_backend}.
 */
public final class MicrometerLimiterMetrics implements LimiterMetrics {
  /** Charge bounds of the call duration, in seconds. */
  static final Duration[] BUCKETS = {
    Duration.ofNanos(100_000), Duration.ofNanos(250_000), Duration.ofNanos(500_000),
        Duration.ofMillis(1),
    Duration.ofNanos(2_500_000), Duration.ofMillis(5), Duration.ofMillis(10), Duration.ofMillis(25),
    Duration.ofMillis(50), Duration.ofMillis(100), Duration.ofMillis(250), Duration.ofSeconds(1)
  };

  private final MeterRegistry registry;
  private final Map<String, Counter> counters = new ConcurrentHashMap<>();
  private final Map<String, Timer> timers = new ConcurrentHashMap<>();
  private final Map<String, AtomicLong> gauges = new ConcurrentHashMap<>();

  public MicrometerLimiterMetrics(MeterRegistry registry) {
    this.registry = registry;
  }

  private void count(String name, String limiter, String policy) {
    String id = name + '\0' + limiter + '\0' + policy;
    counters
        .computeIfAbsent(
            id,
            k -> {
              Counter.Builder b = Counter.builder(name).tag("limiter", limiter);
              if (policy != null) {
                b.tag("policy", policy);
              }
              return b.register(registry);
            })
        .increment();
  }

  @Override
  public void allowed(String limiter, String policy) {
    count("redis.tb.allowed", limiter, policy);
  }

  @Override
  public void limited(String limiter, String policy) {
    count("redis.tb.limited", limiter, policy);
  }

  @Override
  public void shadowLimited(String limiter, String policy) {
    count("redis.tb.shadow.limited", limiter, policy);
  }

  @Override
  public void refunded(String limiter, String policy) {
    count("redis.tb.refunded", limiter, policy);
  }

  @Override
  public void denyCacheHit(String limiter, String policy) {
    count("redis.tb.deny.cache.hits", limiter, policy);
  }

  @Override
  public void invalidInput(String limiter, String policy) {
    count("redis.tb.invalid.inputs", limiter, policy);
  }

  @Override
  public void storeError(String limiter) {
    count("redis.tb.store.errors", limiter, null);
  }

  @Override
  public void degraded(String limiter) {
    count("redis.tb.degraded", limiter, null);
  }

  @Override
  public void redisCall(String limiter, double seconds) {
    timers
        .computeIfAbsent(
            limiter,
            l ->
                Timer.builder("redis.tb.redis.call.duration")
                    .tag("limiter", l)
                    .serviceLevelObjectives(BUCKETS)
                    .register(registry))
        .record(Duration.ofNanos((long) (seconds * 1e9)));
  }

  private AtomicLong gauge(String limiter, String policy) {
    return gauges.computeIfAbsent(
        limiter + '\0' + policy,
        k -> {
          AtomicLong v = new AtomicLong();
          Gauge.builder("redis.tb.leases.in.flight", v, AtomicLong::doubleValue)
              .tag("limiter", limiter)
              .tag("policy", policy)
              .register(registry);
          return v;
        });
  }

  @Override
  public void leaseGranted(String limiter, String policy) {
    gauge(limiter, policy).incrementAndGet();
  }

  @Override
  public void leaseEnded(String limiter, String policy) {
    gauge(limiter, policy).decrementAndGet();
  }

  @Override
  public void leaseExpired(String limiter, String policy) {
    count("redis.tb.leases.expired", limiter, policy);
  }

  @Override
  public void leaseTimedOut(String limiter, String policy) {
    count("redis.tb.leases.timed.out", limiter, policy);
  }

  @Override
  public void holdLost(String limiter, String policy) {
    count("redis.tb.holds.lost", limiter, policy);
  }

  /** SPEC E6: {@code redis_tb_backend{limiter, backend}}: 1 for the backend in use, 0 the other. */
  @Override
  public void backend(String limiter, String backend) {
    for (String b : new String[] {"module", "scripts"}) {
      gauges
          .computeIfAbsent(
              "backend\0" + limiter + '\0' + b,
              k -> {
                AtomicLong v = new AtomicLong();
                Gauge.builder("redis.tb.backend", v, AtomicLong::doubleValue)
                    .description("The store's backend in use: 1 for it (SPEC E6)")
                    .tag("limiter", limiter)
                    .tag("backend", b)
                    .register(registry);
                return v;
              })
          .set(b.equals(backend) ? 1 : 0);
    }
  }
}
