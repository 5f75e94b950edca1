package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.redistb.store.StoreException;
import dev.redistb.store.WindowMode;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * clients/vectors/limiter.json: a limiter built from the case's configuration, a clock the steps
 * set, a store answering from the script; per step the calls made and the result.
 */
final class LimiterVectors {
  private static final String ROUTE = "GET /vectors";

  private final ScriptedStore store = new ScriptedStore();
  private final ManualClock clock = new ManualClock();
  private final RateLimiter limiter;
  private final Map<Integer, CompletableFuture<Decision>> checks = new HashMap<>();
  private final Map<Integer, Hold> holds = new HashMap<>();
  private final Map<String, Integer> heldBy = new HashMap<>();
  private final Map<Integer, CompletableFuture<Hold>> heldHolds = new HashMap<>();
  private final String id;

  private LimiterVectors(JsonNode c) {
    this.id = c.get("id").asText();
    JsonNode cfg = c.get("limiter");
    Set<String> costFns = new HashSet<>();
    Set<String> limitFns = new HashSet<>();
    for (JsonNode step : c.get("steps")) {
      JsonNode check = step.get("check");
      if (check != null) {
        check.path("cost").fieldNames().forEachRemaining(costFns::add);
        check.path("limit").fieldNames().forEachRemaining(limitFns::add);
      }
    }
    RateLimiter.Builder b = RateLimiter.builder(store).clock(clock).logger(line -> {});
    if (cfg.has("fail_open")) {
      b.failOpen(cfg.get("fail_open").asBoolean());
    }
    if (cfg.has("timeout_ms")) {
      b.timeoutMillis(cfg.get("timeout_ms").asLong());
    }
    if (cfg.has("cooldown_ms")) {
      b.cooldownMillis(cfg.get("cooldown_ms").asDouble());
    }
    if (cfg.has("deny_cache")) {
      b.denyCache(cfg.get("deny_cache").get("max_entries").asInt());
    }
    for (JsonNode p : cfg.get("policies")) {
      b.policy(policy(p, costFns, limitFns));
    }
    this.limiter = b.build();
  }

  private static Policy policy(JsonNode p, Set<String> costFns, Set<String> limitFns) {
    String name = p.get("name").asText();
    Policy.Builder pb;
    if (p.has("window")) {
      JsonNode w = p.get("window");
      pb =
          Policy.builder(
              name,
              WindowLimit.of(
                  w.get("limit").asDouble(),
                  w.get("seconds").asDouble(),
                  WindowMode.valueOf(w.path("mode").asText("sliding").toUpperCase(Locale.ROOT))));
    } else if (p.has("in_flight")) {
      JsonNode f = p.get("in_flight");
      pb =
          Policy.builder(
              name,
              Limit.inFlight(
                  f.get("limit").asLong(),
                  f.get("lease_ms").asDouble() / 1000,
                  f.path("max_duration_ms").asDouble(300000) / 1000));
    } else {
      Limit fixed = Limit.checked(p.get("capacity").asDouble(), p.get("rate").asDouble());
      if (limitFns.contains(name)) {
        pb =
            Policy.builder(
                name,
                req -> {
                  JsonNode l = ((TestRequest) req.request()).limits.get(name);
                  return l == null
                      ? fixed
                      : new Limit(
                          TestRequest.number(l.get("capacity")), TestRequest.number(l.get("rate")));
                });
      } else {
        pb = Policy.builder(name, fixed);
      }
      pb.settleLater(p.path("settle_later").asBoolean(false));
    }
    if (p.has("cost") && !p.has("in_flight")) {
      double fixedCost = TestRequest.number(p.get("cost"));
      if (costFns.contains(name)) {
        pb.cost(
            req -> {
              JsonNode v = ((TestRequest) req.request()).costs.get(name);
              return v == null ? fixedCost : TestRequest.number(v);
            });
      } else {
        pb.cost(fixedCost);
      }
    } else if (costFns.contains(name)) {
      pb.cost(
          req -> {
            JsonNode v = ((TestRequest) req.request()).costs.get(name);
            return v == null ? 1 : TestRequest.number(v);
          });
    }
    pb.shadow(p.path("shadow").asBoolean(false));
    JsonNode key = p.get("key");
    if (key != null) {
      switch (key.get("kind").asText()) {
        case "header" -> pb.key(Key.header(key.get("name").asText()));
        case "fixed" -> pb.key(Key.fixed(key.get("value").asText()));
        case "client_ip" -> pb.key(Key.clientIp());
        default -> throw new AssertionError("unknown key kind " + key);
      }
    }
    return pb.build();
  }

  static void check(JsonNode c) {
    new LimiterVectors(c).run(c);
  }

  private void run(JsonNode c) {
    int i = 0;
    for (JsonNode step : c.get("steps")) {
      String where = id + " step " + i;
      clock.nowMs = step.get("at_ms").asDouble();
      store.expect(step.get("redis"));
      if (step.has("check")) {
        check(i, step, where);
      } else if (step.has("release")) {
        String name = step.get("release").asText();
        CompletableFuture<Object> f = store.held(name);
        if (step.has("reply")) {
          f.complete(ScriptedStore.raw(step.get("reply")));
        } else {
          f.completeExceptionally(StoreException.reply("TB", step.get("error").asText()));
        }
        int by = heldBy.get(name);
        CompletableFuture<Hold> h = heldHolds.remove(by);
        if (h != null) {
          assertTrue(h.isDone(), where + ": the held hold did not complete on its release");
          expectHold(h, step.get("expect"), by, where);
        } else {
          CompletableFuture<Decision> d = checks.get(by);
          assertTrue(d.isDone(), where + ": the held check did not complete on its release");
          expectDecision(d.join(), step.get("expect"), where);
        }
      } else if (step.has("cancel")) {
        String name = step.get("cancel").asText();
        checks.get(heldBy.get(name)).cancel(false);
        store.held(name);
      } else if (step.has("refund")) {
        boolean got = decision(step.get("refund").asInt()).refund().join();
        assertEquals(step.get("expect").get("returns").asBoolean(), got, where);
      } else if (step.has("finish")) {
        decision(step.get("finish").asInt()).finish().join();
        JsonNode e = step.get("expect");
        if (e != null && e.has("leases_in_flight")) {
          assertEquals(e.get("leases_in_flight").asLong(), limiter.stats().leasesInFlight(), where);
        }
      } else if (step.has("renew")) {
        Decision d = decision(step.get("renew").asInt());
        boolean before = d.timedOut();
        boolean got = d.renew().join();
        JsonNode e = step.get("expect");
        assertEquals(e.get("renewed").asBoolean(), got, where);
        if (e.has("timed_out")) {
          assertEquals(e.get("timed_out").asBoolean(), !before && d.timedOut(), where);
        }
      } else if (step.has("renew_hold")) {
        boolean got = holds.get(step.get("renew_hold").asInt()).renew().join();
        assertEquals(step.get("expect").get("renewed").asBoolean(), got, where);
      } else if (step.has("take_hold")) {
        takeHold(i, step, where);
      } else if (step.has("settle")) {
        JsonNode s = step.get("settle");
        Settlement got =
            holds.get(s.get("hold").asInt()).settle(TestRequest.number(s.get("actual"))).join();
        JsonNode e = step.get("expect");
        assertEquals(e.get("settled").asBoolean(), got.settled(), where);
        if (e.has("charged")) {
          assertEquals(e.get("charged").asDouble(), got.charged(), 1e-9, where);
        }
        if (e.has("remaining")) {
          assertEquals(e.get("remaining").asDouble(), got.remaining(), 1e-9, where);
        }
      } else {
        fail(where + ": a step of a kind this runner does not know: " + step);
      }
      store.verify(where);
      i++;
    }
    if (c.has("expect_stats")) {
      Map<String, Long> stats = limiter.stats().asMap();
      c.get("expect_stats")
          .properties()
          .forEach(
              e -> {
                assertTrue(stats.containsKey(e.getKey()), id + ": no counter " + e.getKey());
                assertEquals(
                    e.getValue().asLong(), stats.get(e.getKey()), id + " stats." + e.getKey());
              });
    }
  }

  private Decision decision(int step) {
    return checks.get(step).join();
  }

  private void check(int i, JsonNode step, String where) {
    TestRequest req = TestRequest.of(step.get("check"), ROUTE);
    CompletableFuture<Decision> d = limiter.check(req);
    checks.put(i, d);
    for (JsonNode call : step.get("redis")) {
      if (call.has("hold")) {
        heldBy.put(call.get("hold").asText(), i);
      }
    }
    JsonNode e = step.get("expect");
    if (e == null || e.isNull()) {
      assertTrue(!d.isDone(), where + ": a check whose call is held completed");
      return;
    }
    assertTrue(d.isDone(), where + ": the check did not complete");
    expectDecision(d.join(), e, where);
  }

  private void expectDecision(Decision d, JsonNode e, String where) {
    RateLimitResponse resp = limiter.respond(d);
    if (e.has("outcome")) {
      assertEquals(e.get("outcome").asText(), d.outcome().wire(), where);
    }
    if (e.has("allowed")) {
      assertEquals(e.get("allowed").asBoolean(), d.allowed(), where);
    }
    if (e.has("from_cache")) {
      assertEquals(e.get("from_cache").asBoolean(), d.fromCache(), where);
    }
    if (e.has("status")) {
      assertEquals(e.get("status").asInt(), resp.status(), where);
    }
    if (e.has("headers")) {
      ResponseVectors.assertHeaders(e.get("headers"), resp, where);
    }
    if (e.has("body")) {
      assertEquals(e.get("body").asText(), resp.body(), where);
    }
    if (e.has("violated")) {
      assertEquals(ResponseVectors.strings(e.get("violated")), d.violated(), where);
    }
    if (e.has("shadow_limited")) {
      assertEquals(ResponseVectors.strings(e.get("shadow_limited")), d.shadowLimited(), where);
    }
    if (e.has("lease")) {
      JsonNode l = e.get("lease");
      if (l.isNull()) {
        assertNull(d.lease(), where);
      } else {
        assertNotNull(d.lease(), where);
        assertEquals(l.get("key").asText(), d.lease().key(), where);
        assertEquals(l.get("id").asText(), d.lease().id(), where);
        assertEquals(l.get("policy").asText(), d.lease().policy(), where);
      }
    }
  }

  private void takeHold(int i, JsonNode step, String where) {
    JsonNode h = step.get("take_hold");
    Decision d = decision(h.get("check").asInt());
    JsonNode e = step.get("expect");
    CompletableFuture<Hold> f;
    try {
      f =
          d.hold(
              h.get("policy").asText(),
              TestRequest.number(h.get("estimate")),
              h.get("ttl_ms").asDouble() / 1000);
    } catch (IllegalArgumentException ex) {
      assertEquals("invalid_input", e.path("error").asText(""), where + ": " + ex.getMessage());
      return;
    }
    for (JsonNode call : step.get("redis")) {
      if (call.has("hold")) {
        heldBy.put(call.get("hold").asText(), i);
      }
    }
    if (e == null || e.isNull()) {
      assertTrue(!f.isDone(), where + ": a hold whose call is held completed");
      heldHolds.put(i, f);
      return;
    }
    expectHold(f, e, i, where);
  }

  private void expectHold(CompletableFuture<Hold> f, JsonNode e, int i, String where) {
    String error = e.path("error").asText("");
    Hold hold;
    try {
      hold = f.join();
    } catch (CompletionException ex) {
      assertTrue(ex.getCause() instanceof StoreException, where + ": " + ex);
      assertEquals("store_error", error, where + ": " + ex.getCause().getMessage());
      return;
    }
    assertEquals("", error, where + ": expected an error, got " + hold);
    holds.put(i, hold);
    if (e.has("allowed")) {
      assertEquals(e.get("allowed").asBoolean(), hold.allowed(), where);
    }
    if (e.has("id")) {
      assertEquals(e.get("id").isNull() ? null : e.get("id").asText(), hold.id(), where);
    }
    if (e.has("remaining")) {
      assertEquals(e.get("remaining").asDouble(), hold.remaining(), 1e-9, where);
    }
    if (e.has("retry_after")) {
      assertEquals(e.get("retry_after").asDouble(), hold.retryAfter(), 1e-9, where);
    }
    if (e.has("key")) {
      assertEquals(e.get("key").asText(), hold.key(), where);
    }
    if (e.has("policy")) {
      assertEquals(e.get("policy").asText(), hold.policy(), where);
    }
    if (e.has("status")) {
      assertNotNull(hold.response(), where);
      assertEquals(e.get("status").asInt(), hold.response().status(), where);
    }
    if (e.has("headers")) {
      ResponseVectors.assertHeaders(e.get("headers"), hold.response(), where);
    }
  }
}
