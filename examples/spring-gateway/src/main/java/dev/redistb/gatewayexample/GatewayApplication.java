package dev.redistb.gatewayexample;

import dev.redistb.spring.RedisTbStartup;
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
 */
@SpringBootApplication
@RestController
public class GatewayApplication {
  public static void main(String[] args) {
    RedisTbStartup.run(GatewayApplication.class, args);
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
