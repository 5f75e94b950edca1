package dev.redistb.example;

import dev.redistb.spring.RedisTbStartup;
import dev.redistb.store.BackendSetting;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * An API rate-limited with redis-tb's Spring Boot starter: the demo every example implements
 * (examples/manifest.json). The policies are {@link Policies}'s beans plus {@code
 * redis-tb.policies} in application.properties; the routes are {@link ApiController}'s. A limiter
 * that cannot start (SPEC U1-U3) stops it with its one line on standard error and exit status 3
 * (U4); it starts degraded only with REDIS_TB_START_DEGRADED=1. REDIS_TB_BACKEND chooses the
 * store's backend (SPEC E1: auto, module, scripts).
 */
@SpringBootApplication
public class ExampleApplication {
  public static void main(String[] args) {
    checkBackend();
    RedisTbStartup.run(ExampleApplication.class, args);
  }

  /**
   * SPEC E1: REDIS_TB_BACKEND ({@code auto}, the default, uses the module where it is loaded and
   * the script library clients/lua elsewhere, e.g. on managed Redis; {@code module} or {@code
   * scripts} forces either); any other value stops the start with one line and exit status 2.
   */
  static void checkBackend() {
    String value = System.getenv().getOrDefault("REDIS_TB_BACKEND", "auto");
    try {
      BackendSetting.parse(value);
    } catch (IllegalArgumentException e) {
      System.err.println("REDIS_TB_BACKEND: " + e.getMessage());
      System.exit(2);
    }
  }
}
