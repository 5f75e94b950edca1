package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import org.junit.jupiter.api.Test;

/** SPEC E6: the gauge redis_tb_backend{limiter, backend}: 1 for the backend in use, 0 the other. */
class BackendGaugeTest {
  @Test
  void the_backend_chosen_is_one_and_the_other_zero() {
    SimpleMeterRegistry registry = new SimpleMeterRegistry();
    MicrometerLimiterMetrics metrics = new MicrometerLimiterMetrics(registry);
    metrics.backend("api", "scripts");
    assertEquals(
        1.0,
        registry
            .get("redis.tb.backend")
            .tag("limiter", "api")
            .tag("backend", "scripts")
            .gauge()
            .value());
    assertEquals(
        0.0,
        registry
            .get("redis.tb.backend")
            .tag("limiter", "api")
            .tag("backend", "module")
            .gauge()
            .value());
    metrics.backend("api", "module");
    assertEquals(
        1.0,
        registry
            .get("redis.tb.backend")
            .tag("limiter", "api")
            .tag("backend", "module")
            .gauge()
            .value());
    assertEquals(
        0.0,
        registry
            .get("redis.tb.backend")
            .tag("limiter", "api")
            .tag("backend", "scripts")
            .gauge()
            .value());
    assertEquals(2, registry.find("redis.tb.backend").gauges().size());
  }
}
