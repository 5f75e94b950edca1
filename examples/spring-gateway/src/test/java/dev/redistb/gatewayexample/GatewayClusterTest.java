package dev.redistb.gatewayexample;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.redistb.testing.RedisServer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.reactive.server.WebTestClient;

/**
 * The route with more limits on a one-node Redis Cluster (SPEC K4, K6): the key resolver's id is
 * the hash tag of every key of its call, so the one TB.MTAKE is answered, never CROSSSLOT.
 */
@SpringBootTest(webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class GatewayClusterTest {
  static final RedisServer REDIS = RedisServer.startCluster();

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

  private int hello(String key) {
    return client
        .get()
        .uri("/hello")
        .header("X-API-Key", key)
        .exchange()
        .expectBody()
        .returnResult()
        .getStatus()
        .value();
  }

  @Test
  void every_limit_of_a_route_is_checked_in_one_call_on_a_cluster() throws Exception {
    assertEquals(200, hello("key-cluster"));
    assertEquals(200, hello("key-cluster"));
    assertEquals(200, hello("key-cluster"));
    assertEquals(429, hello("key-cluster"));
    assertEquals(
        "1", REDIS.command("EXISTS", "rl:{key-cluster}:minute@hello:key-cluster").substring(1));
  }
}
