package dev.redistb.example;

import dev.redistb.spring.RedisTbStartup;
import org.springframework.boot.autoconfigure.SpringBootApplication;

/**
 * An API rate-limited with redis-tb's Spring Boot starter: the demo every example implements
 * (examples/manifest.json). The policies are {@link Policies}'s beans plus {@code
 * redis-tb.policies} in application.properties; the routes are {@link ApiController}'s. A limiter
 * that cannot start (SPEC U1-U3) stops it with its one line on standard error and exit status 3
 * (U4); it starts degraded only with REDIS_TB_START_DEGRADED=1.
 */
@SpringBootApplication
public class ExampleApplication {
  public static void main(String[] args) {
    RedisTbStartup.run(ExampleApplication.class, args);
  }
}
