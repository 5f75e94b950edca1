package dev.redistb.gatewayexample;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import dev.redistb.testing.RedisServer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.reactive.server.EntityExchangeResult;
import org.springframework.test.web.reactive.server.WebTestClient;

/** The route over real HTTP against a real redis-server with the module. */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class GatewayApplicationTest {
  static final RedisServer REDIS = RedisServer.start();

  @DynamicPropertySource
  static void redis(DynamicPropertyRegistry r) {
    r.add("redis-tb.url", REDIS::url);
    r.add("redis-tb.timeout", () -> "2s");
  }

  @AfterAll
  static void stop() {
    REDIS.close();
  }

  @Autowired WebTestClient client;

  private EntityExchangeResult<byte[]> hello(String key) {
    return client
        .get()
        .uri("/hello")
        .header("X-API-Key", key)
        .exchange()
        .expectBody()
        .returnResult();
  }

  @Test
  void the_burst_then_429_with_retry_after_and_every_limit_in_the_headers() {
    List<EntityExchangeResult<byte[]>> rs = new ArrayList<>();
    for (int i = 0; i < 4; i++) {
      rs.add(hello("key-burst"));
    }
    for (int i = 0; i < 3; i++) {
      assertEquals(200, rs.get(i).getStatus().value());
      assertEquals(
          "\"gateway\";q=3;w=3, \"minute\";q=5;w=60, \"hour\";q=100;w=3600",
          rs.get(i).getResponseHeaders().getFirst("RateLimit-Policy"));
      assertNull(rs.get(i).getResponseHeaders().getFirst("Retry-After"));
    }
    EntityExchangeResult<byte[]> refused = rs.get(3);
    assertEquals(429, refused.getStatus().value());
    assertEquals("1", refused.getResponseHeaders().getFirst("Retry-After"));
    String ratelimit = refused.getResponseHeaders().getFirst("RateLimit");
    assertNotNull(ratelimit);
    assertEquals("\"gateway\";r=0", ratelimit.substring(0, ratelimit.indexOf(";t=")));
    assertEquals("0", refused.getResponseHeaders().getFirst("X-RateLimit-Remaining"));
    assertEquals("3", refused.getResponseHeaders().getFirst("X-RateLimit-Burst-Capacity"));
    // another key has its own buckets; the refusal spent nothing on the minute limit (all or
    // nothing)
    assertEquals(200, hello("key-other").getStatus().value());
  }
}
