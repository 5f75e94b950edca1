package dev.redistb.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Hold;
import dev.redistb.Limit;
import dev.redistb.Outcome;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.RequestView;
import dev.redistb.Settlement;
import dev.redistb.StartupException;
import dev.redistb.store.Acquired;
import dev.redistb.store.Charge;
import dev.redistb.store.HoldReply;
import dev.redistb.store.LeaseReply;
import dev.redistb.store.MultiReply;
import dev.redistb.store.Reply;
import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import dev.redistb.store.Throttle;
import dev.redistb.store.WindowMode;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The same cases for every store backend (the {@code limits} library's one suite over every
 * storage): the twelve commands against a real redis-server with the module, error replies, a
 * stopped server, the startup check, and a limiter's whole check on the store.
 */
public abstract class StoreContract {
  protected RedisServer redis;
  protected Store store;

  /** A store of this backend on {@code redis} (host 127.0.0.1, {@code port}). */
  protected abstract Store open(int port);

  /** Closes what {@link #open} made. */
  protected abstract void closeStores();

  @BeforeEach
  void start() {
    redis = RedisServer.start();
    store = open(redis.port());
  }

  @AfterEach
  void stop() {
    closeStores();
    redis.close();
  }

  static <T> T get(java.util.concurrent.CompletableFuture<T> f) {
    return f.join();
  }

  @Test
  void take_mtake_reserve_peek_refund_answer_the_module() {
    Reply t = get(store.take("b1", 10, 1, 3, null));
    assertTrue(t.allowed());
    assertEquals(7, t.remaining(), 0.01);
    assertEquals(-1, get(store.take("b1", 10, 1, 20, null)).retryAfter());
    MultiReply m =
        get(store.mtake(List.of(new Charge("b1", 10, 1, 1), new Charge("b2", 5, 1, 5)), null));
    assertTrue(m.aggregate().allowed());
    assertEquals(2, m.keys().size());
    assertEquals(0, m.keys().get(1).remaining(), 0.01);
    assertFalse(
        get(store.mtake(List.of(new Charge("b1", 10, 1, 1), new Charge("b2", 5, 1, 5)), null))
            .aggregate()
            .allowed());
    assertTrue(get(store.reserve("q", 1, 2, 1, 5, null)).reply().allowed());
    var reserved = get(store.reserve("q", 1, 2, 1, 5, null));
    assertTrue(reserved.reply().allowed());
    assertTrue(reserved.waitSeconds() > 0);
    Reply peek = get(store.peek("b1", 10, 1, null));
    assertTrue(peek.remaining() < 10);
    assertTrue(get(store.refund("b1", 10, 1, 2, null)).allowed());
    List<Reply> refunds =
        get(store.refundAll(List.of(new Charge("b1", 10, 1, 1), new Charge("b2", 5, 1, 1))));
    assertEquals(2, refunds.size());
    Reply fixed = get(store.take("now", 10, 1, 1, 1764456268.5));
    assertTrue(fixed.allowed());
  }

  @Test
  void throttle_and_window_answer_the_module() {
    Throttle th = get(store.throttle("t", 4, 1, 60, 1));
    assertTrue(th.allowed());
    assertEquals(5, th.limit());
    Reply w = get(store.window("w", 2, 60, 1, null, WindowMode.SLIDING));
    assertTrue(w.allowed());
    get(store.window("w", 2, 60, 1, null, WindowMode.SLIDING));
    assertFalse(get(store.window("w", 2, 60, 1, null, WindowMode.SLIDING)).allowed());
    assertTrue(get(store.window("log", 2, 60, 1, null, WindowMode.LOG)).allowed());
    assertTrue(get(store.window("fixed", 2, 60, 1, null, WindowMode.FIXED)).allowed());
  }

  @Test
  void leases_acquire_renew_release_and_peek() {
    Acquired a = get(store.acquire("c", 1, 30000, List.of()));
    assertTrue(a.granted());
    assertNotNull(a.id());
    Acquired refused = get(store.acquire("c", 1, 30000, List.of()));
    assertFalse(refused.granted());
    assertNull(refused.id());
    assertEquals(1, get(store.peekLeases("c")).inFlight());
    LeaseReply renewed = get(store.renew("c", a.id(), 30000));
    assertTrue(renewed.ok());
    assertTrue(get(store.release("c", a.id())).ok());
    assertFalse(get(store.release("c", a.id())).ok());
    Acquired both = get(store.acquire("c", 2, 30000, List.of(new Charge("bb", 1, 1, 1))));
    assertTrue(both.granted());
    assertEquals(1, both.take().keys().size());
    Acquired bucketRefused = get(store.acquire("c", 2, 30000, List.of(new Charge("bb", 1, 1, 1))));
    assertFalse(bucketRefused.granted());
    assertFalse(bucketRefused.take().aggregate().allowed());
  }

  @Test
  void holds_take_settle_and_peek() {
    HoldReply h = get(store.hold("llm", 1000, 1, 400, 60000));
    assertTrue(h.reply().allowed());
    assertNotNull(h.id());
    assertEquals(1, get(store.peekHolds("llm")).holds());
    var s = get(store.settle("llm", 1000, 1, h.id(), 100, null));
    assertTrue(s.settled());
    assertEquals(-300, s.charged(), 0.01);
    assertFalse(get(store.settle("llm", 1000, 1, h.id(), 100, null)).settled());
    HoldReply refused = get(store.hold("llm", 1000, 1, 5000, 60000));
    assertFalse(refused.reply().allowed());
    assertNull(refused.id());
  }

  @Test
  void an_error_reply_is_a_reply_error_that_leaves_the_breaker_closed() {
    CompletionException e =
        assertThrows(CompletionException.class, () -> store.take("b", 0, 1, 1, null).join());
    StoreException se = (StoreException) e.getCause();
    assertEquals(StoreException.Kind.REPLY, se.kind());
    assertFalse(se.opensBreaker());
    assertTrue(se.getMessage().contains("ERR"), se.getMessage());
  }

  @Test
  void the_module_is_found_and_a_stopped_server_is_a_connection_error() {
    assertTrue(get(store.moduleLoaded()));
    redis.stop();
    CompletionException e =
        assertThrows(CompletionException.class, () -> store.take("b", 1, 1, 1, null).join());
    assertTrue(((StoreException) e.getCause()).opensBreaker(), e.getCause().getMessage());
  }

  /** A request for a limiter check. */
  protected static RequestView request(String peer, String route) {
    return new RequestView() {
      @Override
      public Object request() {
        return this;
      }

      @Override
      public String peer() {
        return peer;
      }

      @Override
      public List<String> header(String name) {
        return List.of();
      }

      @Override
      public String route() {
        return route;
      }
    };
  }

  @Test
  void a_limiter_checks_refunds_leases_and_holds_on_this_store() {
    RateLimiter limiter =
        RateLimiter.builder(store)
            .timeoutMillis(2000)
            .policy(Policy.perMinute("ip", 2))
            .policy(
                Policy.builder("global", Limit.perMinute(100)).key(dev.redistb.Key.fixed("all")))
            .policy(Policy.builder("conc", Limit.inFlight(5, 10)))
            .policy(Policy.perHour("tokens", 1000).settleLater(true))
            .build();
    limiter.startup();
    Decision first = limiter.check(request("203.0.113.9", "GET /x")).join();
    assertEquals(Outcome.ALLOWED, first.outcome());
    assertNotNull(first.lease());
    Hold hold = first.hold("tokens", 100).join();
    assertTrue(hold.allowed());
    Settlement settled = hold.settle(10).join();
    assertTrue(settled.settled());
    assertTrue(first.refund().join());
    first.finish().join();
    assertEquals(0, limiter.stats().leasesInFlight());
    assertEquals(Outcome.ALLOWED, limiter.check(request("203.0.113.9", "GET /x")).join().outcome());
    assertEquals(Outcome.ALLOWED, limiter.check(request("203.0.113.9", "GET /x")).join().outcome());
    Decision refused = limiter.check(request("203.0.113.9", "GET /x")).join();
    assertEquals(Outcome.LIMITED, refused.outcome());
    assertEquals(List.of("ip"), refused.violated());
    assertEquals(429, limiter.respond(refused).status());
    assertEquals(3, limiter.stats().allowed());
  }

  @Test
  void startup_forced_to_the_module_without_it_fails_in_one_line() {
    try (RedisServer plain = RedisServer.start(false)) {
      Store s = open(plain.port());
      RateLimiter limiter =
          RateLimiter.builder(s).backend("module").policy(Policy.perSecond("ip", 1)).build();
      StartupException e = assertThrows(StartupException.class, limiter::startup);
      assertEquals(
          "redis-tb module not loaded on 127.0.0.1:"
              + plain.port()
              + ": load libredis_tb.so with loadmodule",
          e.getMessage());
    }
  }

  @Test
  void hello_says_standalone_and_a_limiter_of_several_keys_starts_there() {
    assertEquals("standalone", get(store.serverMode()));
    RateLimiter limiter =
        RateLimiter.builder(store)
            .name("api")
            .policy(Policy.perSecond("ip", 10))
            .policy(Policy.perSecond("all", 100).key(dev.redistb.Key.fixed("all")))
            .build();
    limiter.startup();
  }

  @Test
  void on_a_cluster_several_keys_without_a_tag_fail_the_start_and_crossslot_is_a_500() {
    try (RedisServer node = RedisServer.startCluster()) {
      Store s = open(node.port());
      assertEquals("cluster", get(s.serverMode()));
      // the store says CROSSSLOT as such (K6, L5)
      CompletionException e =
          assertThrows(
              CompletionException.class,
              () ->
                  s.mtake(List.of(new Charge("a", 10, 1, 1), new Charge("b", 10, 1, 1)), null)
                      .join());
      assertTrue(((StoreException) e.getCause()).crossSlot(), e.getCause().getMessage());
      RateLimiter untagged =
          RateLimiter.builder(s)
              .name("api")
              .timeoutMillis(2000)
              .policy(Policy.perSecond("ip", 10))
              .policy(Policy.perSecond("all", 100).key(dev.redistb.Key.fixed("all")))
              .policy(Policy.perHour("tokens", 1000).settleLater(true))
              .build();
      // U3: refused at startup, in its one line
      StartupException refused = assertThrows(StartupException.class, untagged::startup);
      assertEquals(StartupException.Reason.CLUSTER_KEYS, refused.reason());
      assertEquals(
          "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'all'), which a"
              + " Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC"
              + " K6)",
          refused.getMessage());
      // K6: a call the server still answers CROSSSLOT is a 500, never the failure mode
      Decision d = untagged.check(request("203.0.113.9", "GET /x")).join();
      assertEquals(Outcome.INVALID_INPUT, d.outcome());
      assertFalse(d.allowed());
      assertEquals(500, untagged.respond(d).status());
      assertEquals(1, untagged.stats().invalidInputs());
      assertEquals(0, untagged.stats().storeErrors());
      // with a tag function every key of a call shares the tag's slot
      RateLimiter tagged =
          RateLimiter.builder(s)
              .name("api")
              .timeoutMillis(2000)
              .hashTag(r -> "tenant-1")
              .policy(Policy.perSecond("ip", 10))
              .policy(Policy.perSecond("all", 100).key(dev.redistb.Key.fixed("all")))
              .build();
      tagged.startup();
      assertEquals(
          Outcome.ALLOWED, tagged.check(request("203.0.113.9", "GET /x")).join().outcome());
    }
  }

  @Test
  void a_request_is_ended_at_its_max_duration_and_its_slot_freed() throws Exception {
    RateLimiter limiter =
        RateLimiter.builder(store)
            .timeoutMillis(2000)
            .policy(Policy.builder("conc", Limit.inFlight(1, 0.5, 2)))
            .build();
    Decision d = limiter.check(request("203.0.113.9", "GET /x")).join();
    assertNotNull(d.lease());
    CompletableFuture<Void> ended = new CompletableFuture<>();
    d.onTimeout(() -> ended.complete(null));
    d.keepAlive();
    // renewed past its lease of 0.5 s: the slot is still taken at 1 s (its deadline is 2 s)
    Thread.sleep(1000);
    assertFalse(d.timedOut());
    assertEquals(1, get(store.peekLeases(d.lease().key())).inFlight());
    ended.get(10, TimeUnit.SECONDS);
    assertTrue(d.timedOut());
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (get(store.peekLeases(d.lease().key())).inFlight() != 0 && System.nanoTime() < until) {
      Thread.sleep(10);
    }
    assertEquals(0, get(store.peekLeases(d.lease().key())).inFlight());
    assertEquals(1, limiter.stats().leasesTimedOut());
    assertEquals(0, limiter.stats().leasesInFlight());
    d.finish().join(); // the response's end sends nothing more
    assertEquals(0, limiter.stats().leasesExpired());
  }

  @Test
  void a_hold_renewed_while_its_request_runs_settles_after_its_ttl() throws Exception {
    // the module renews a hold on its bucket as it renews a lease (G5)
    HoldReply probe = get(store.hold("probe", 1000, 1, 10, 60000));
    LeaseReply renewed = get(store.renew("probe", probe.id(), 60000));
    assertTrue(renewed.ok());
    assertFalse(get(store.renew("probe", "0000000000000000", 60000)).ok());
    RateLimiter limiter =
        RateLimiter.builder(store)
            .timeoutMillis(2000)
            .policy(Policy.perHour("tokens", 1000).settleLater(true))
            .build();
    Decision d = limiter.check(request("203.0.113.9", "GET /x")).join();
    d.keepAlive();
    Hold hold = d.hold("tokens", 100, 0.6).join();
    assertTrue(hold.allowed());
    Thread.sleep(1800); // three ttls: alive only by its renewals
    Settlement s = hold.settle(40).join();
    assertTrue(s.settled());
    assertEquals(0, limiter.stats().holdsLost());
    assertEquals(0, limiter.stats().storeErrors());
    d.finish().join();
  }

  @Test
  void a_full_hold_table_is_a_refused_hold_with_a_wait_never_a_store_error() {
    // SPEC G6: the module keeps at most 100 live holds on one bucket
    RateLimiter limiter =
        RateLimiter.builder(store)
            .timeoutMillis(2000)
            .policy(Policy.perHour("tokens", 1000).settleLater(true))
            .build();
    Decision d = limiter.check(request("203.0.113.9", "GET /x")).join();
    String key = limiter.key("tokens", "203.0.113.9", null, null);
    for (int i = 0; i < 100; i++) {
      HoldReply h = get(store.hold(key, 1000, 1000.0 / 3600, 10, 60000));
      assertTrue(h.reply().allowed(), "hold " + i);
    }
    assertEquals(100, get(store.peekHolds(key)).holds());
    Hold refused = d.hold("tokens", 1).join();
    assertFalse(refused.allowed());
    assertNull(refused.id());
    assertTrue(refused.retryAfter() > 0, "a wait until a place frees: " + refused.retryAfter());
    assertEquals(429, refused.response().status());
    assertEquals(0, limiter.stats().storeErrors());
    assertEquals(100, get(store.peekHolds(key)).holds());
  }
}
