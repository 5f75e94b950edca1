package dev.redistb.gatewayexample;

import dev.redistb.spring.RedisTbStartup;
import dev.redistb.store.BackendSetting;
import java.util.Map;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Mono;

/**
 * A gateway route limited by redis-tb's RateLimiter; the backend is a handler of the same app. A
 * limiter that cannot start stops it with its one line and exit status 3 (SPEC U4).
 * REDIS_TB_BACKEND chooses the store's backend (SPEC E1: auto, module, scripts).
 */
@SpringBootApplication
@RestController
public class GatewayApplication {
  public static void main(String[] args) {
    checkBackend();
    RedisTbStartup.run(GatewayApplication.class, args);
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

  /** Whose bucket: the API key, or "anonymous". */
  @Bean
  KeyResolver apiKeyResolver() {
    return exchange -> {
      String key = exchange.getRequest().getHeaders().getFirst("X-API-Key");
      return Mono.just(key == null ? "anonymous" : key);
    };
  }

  @GetMapping("/backend/hello")
  Map<String, String> hello() {
    return Map.of("hello", "world");
  }
}
