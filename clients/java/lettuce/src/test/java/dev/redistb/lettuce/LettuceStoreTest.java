package dev.redistb.lettuce;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Outcome;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.StartupException;
import dev.redistb.store.Store;
import dev.redistb.testing.RedisServer;
import dev.redistb.testing.StoreContract;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class LettuceStoreTest extends StoreContract {
  private final List<RedisClient> clients = new ArrayList<>();

  private RedisClient client() {
    RedisClient c = RedisClient.create();
    c.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .build());
    clients.add(c);
    return c;
  }

  @Override
  protected Store open(int port) {
    return LettuceStore.connect(
        client(),
        RedisURI.builder()
            .withHost("127.0.0.1")
            .withPort(port)
            .withTimeout(Duration.ofSeconds(2))
            .build());
  }

  @Override
  protected void closeStores() {
    clients.forEach(RedisClient::shutdown);
    clients.clear();
  }

  @Test
  void an_unreachable_redis_fails_the_start_unless_degraded_then_limits_once_it_answers()
      throws Exception {
    int port = RedisServer.freePort();
    Store s = open(port);
    StartupException e =
        assertThrows(
            StartupException.class,
            () -> RateLimiter.builder(s).policy(Policy.perSecond("ip", 1)).build().startup());
    assertTrue(
        e.getMessage().startsWith("redis-tb: cannot reach Redis at 127.0.0.1:" + port + " ("),
        e.getMessage());
    assertTrue(
        e.getMessage().endsWith("): start it, or set startDegraded to start failing open"),
        e.getMessage());
    List<String> lines = new ArrayList<>();
    RateLimiter degraded =
        RateLimiter.builder(s)
            .startDegraded(true)
            .cooldownMillis(0)
            .timeoutMillis(2000)
            .logger(lines::add)
            .policy(Policy.perSecond("ip", 1))
            .build();
    degraded.startup();
    assertEquals(
        List.of(
            "redis-tb: Redis at 127.0.0.1:"
                + port
                + " unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)"),
        lines);
    Decision down = degraded.check(request("203.0.113.9", "GET /")).join();
    assertEquals(Outcome.STORE_ERROR, down.outcome());
    assertTrue(down.allowed());
    // the server comes up on that port: the store connects on the next call
    RedisServer late = RedisServer.startOn(port, true);
    try {
      assertEquals(
          Outcome.ALLOWED, degraded.check(request("203.0.113.9", "GET /")).join().outcome());
    } finally {
      late.close();
    }
  }
}
