package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import dev.redistb.store.ScriptBackend;
import dev.redistb.store.StoreException;
import dev.redistb.store.WindowMode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * clients/vectors/limiter.json and limiter-scripts.json (the same cases on the script backend): a
 * limiter built from the case's configuration, a clock the steps set, a store answering from the
 * script; per step the calls made and the result. Every call, a refund's and a held one's included,
 * goes through the store's {@link ScriptBackend} as in production (the {@link ScriptedStore} only
 * answers {@code send}), and a release's reply has its ids filled.
 */
final class LimiterVectors {
  /** The route of a check without {@code route}: one no policy lists and no exclude names. */
  private static final String ROUTE = "GET /vectors";

  private static final Set<String> LIMITER =
      Set.of(
          "backend",
          "policies",
          "fail_open",
          "timeout_ms",
          "cooldown_ms",
          "deny_cache",
          "exclude",
          "limit_unmatched",
          "refund_on");
  private static final Set<String> POLICY =
      Set.of(
          "name",
          "capacity",
          "rate",
          "cost",
          "shadow",
          "key",
          "window",
          "in_flight",
          "settle_later",
          "routes",
          "per_route",
          "tiers",
          "default_tier");
  private static final Set<String> STEP =
      Set.of(
          "at_ms",
          "redis",
          "expect",
          "check",
          "release",
          "reply",
          "error",
          "cancel",
          "refund",
          "finish",
          "status",
          "renew",
          "take_hold",
          "settle",
          "renew_hold");
  private static final Set<String> CHECK =
      Set.of("peer", "headers", "cost", "limit", "tier", "route");
  private static final Set<String> DECISION =
      Set.of(
          "outcome",
          "allowed",
          "from_cache",
          "status",
          "headers",
          "body",
          "violated",
          "shadow_limited",
          "results",
          "lease");

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
    if (cfg.has("backend")) {
      // SPEC E: the case's store is on the script library, chosen already (no startup runs)
      JsonNode be = cfg.get("backend");
      Fields.only(be, Set.of("kind", "via", "client_clock"), id + " backend");
      assertEquals("scripts", be.get("kind").asText(), id + ": backend kind");
      store.useBackend(
          ScriptBackend.scripts(
              store.server(),
              be.get("via").asText().equals("functions"),
              be.path("client_clock").asBoolean(false),
              clock::wallMillis));
    }
    Fields.only(cfg, LIMITER, id + " limiter");
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
    // SPEC L1: the limiter's scope (its policies' routes come with each policy)
    for (JsonNode r : cfg.path("exclude")) {
      b.exclude(r.asText());
    }
    b.limitUnmatched(cfg.path("limit_unmatched").asBoolean(false));
    if (cfg.has("refund_on")) {
      int[] statuses = new int[cfg.get("refund_on").size()];
      for (int k = 0; k < statuses.length; k++) {
        statuses[k] = cfg.get("refund_on").get(k).asInt();
      }
      b.refundOn(statuses); // SPEC F2
    }
    for (JsonNode p : cfg.get("policies")) {
      Fields.only(p, POLICY, id + " policy " + p.path("name").asText());
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
    } else if (p.has("tiers")) {
      // SPEC L2: the tier function answers the check's "tier" for this policy (null: none)
      Map<String, Limit> tiers = new LinkedHashMap<>();
      p.get("tiers")
          .properties()
          .forEach(
              t ->
                  tiers.put(
                      t.getKey(),
                      Limit.checked(
                          t.getValue().get("capacity").asDouble(),
                          t.getValue().get("rate").asDouble())));
      pb =
          Policy.tiered(
              name,
              tiers,
              req -> ((TestRequest) req.request()).tiers.get(name),
              p.has("default_tier") ? p.get("default_tier").asText() : null);
    } else {
      Limit fixed = Limit.checked(p.get("capacity").asDouble(), p.get("rate").asDouble());
      if (limitFns.contains(name)) {
        // SPEC L2: the check's "limit" for this policy is what its limit function returns
        // (a JSON null: nothing, which skips the policy); absent, the policy's own limit
        pb =
            Policy.builder(
                name,
                req -> {
                  Map<String, JsonNode> limits = ((TestRequest) req.request()).limits;
                  if (!limits.containsKey(name)) {
                    return fixed;
                  }
                  JsonNode l = limits.get(name);
                  return l.isNull()
                      ? null
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
    if (p.has("routes")) {
      List<String> routes = new ArrayList<>();
      p.get("routes").forEach(r -> routes.add(r.asText()));
      pb.routes(routes);
    }
    pb.perRoute(p.path("per_route").asBoolean(false));
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
      Fields.only(step, STEP, where);
      clock.nowMs = step.get("at_ms").asDouble();
      store.expect(step.get("redis"));
      if (step.has("check")) {
        check(i, step, where);
      } else if (step.has("release")) {
        String name = step.get("release").asText();
        CompletableFuture<Object> f = store.held(name);
        if (step.has("reply")) {
          f.complete(ScriptedStore.raw(store.fill(step.get("reply"))));
        } else {
          f.completeExceptionally(StoreException.reply("TB", step.get("error").asText()));
        }
        int by = heldBy.get(name);
        CompletableFuture<Hold> h = heldHolds.remove(by);
        if (h != null) {
          assertTrue(h.isDone(), where + ": the held hold did not complete on its release");
          expectHold(h, store.fill(step.get("expect")), by, where);
        } else {
          CompletableFuture<Decision> d = checks.get(by);
          assertTrue(d.isDone(), where + ": the held check did not complete on its release");
          expectDecision(d.join(), store.fill(step.get("expect")), where);
        }
      } else if (step.has("cancel")) {
        String name = step.get("cancel").asText();
        checks.get(heldBy.get(name)).cancel(false);
        store.held(name);
      } else if (step.has("refund")) {
        boolean got = decision(step.get("refund").asInt()).refund().join();
        assertEquals(store.fill(step.get("expect")).get("returns").asBoolean(), got, where);
      } else if (step.has("finish")) {
        Decision d = decision(step.get("finish").asInt());
        if (step.has("status")) {
          d.finish(step.get("status").asInt()).join(); // SPEC F2: the handler's status
        } else {
          d.finish().join();
        }
        JsonNode e = store.fill(step.get("expect"));
        if (e != null && e.has("leases_in_flight")) {
          assertEquals(e.get("leases_in_flight").asLong(), limiter.stats().leasesInFlight(), where);
        }
      } else if (step.has("renew")) {
        Decision d = decision(step.get("renew").asInt());
        boolean before = d.timedOut();
        boolean got = d.renew().join();
        JsonNode e = store.fill(step.get("expect"));
        assertEquals(e.get("renewed").asBoolean(), got, where);
        if (e.has("timed_out")) {
          assertEquals(e.get("timed_out").asBoolean(), !before && d.timedOut(), where);
        }
      } else if (step.has("renew_hold")) {
        boolean got = holds.get(step.get("renew_hold").asInt()).renew().join();
        assertEquals(store.fill(step.get("expect")).get("renewed").asBoolean(), got, where);
      } else if (step.has("take_hold")) {
        takeHold(i, step, where);
      } else if (step.has("settle")) {
        JsonNode s = step.get("settle");
        Settlement got =
            holds.get(s.get("hold").asInt()).settle(TestRequest.number(s.get("actual"))).join();
        JsonNode e = store.fill(step.get("expect"));
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
    JsonNode c = step.get("check");
    Fields.only(c, CHECK, where + " check");
    // SPEC L1, K5: the route the request matched; null: none; absent: ROUTE
    JsonNode r = c.get("route");
    TestRequest req = TestRequest.of(c, r == null ? ROUTE : r.isNull() ? null : r.asText());
    CompletableFuture<Decision> d = limiter.check(req);
    checks.put(i, d);
    for (JsonNode call : step.get("redis")) {
      if (call.has("hold")) {
        heldBy.put(call.get("hold").asText(), i);
      }
    }
    JsonNode e = store.fill(step.get("expect"));
    if (e == null || e.isNull()) {
      assertTrue(!d.isDone(), where + ": a check whose call is held completed");
      return;
    }
    assertTrue(d.isDone(), where + ": the check did not complete");
    expectDecision(d.join(), e, where);
  }

  private void expectDecision(Decision d, JsonNode e, String where) {
    Fields.only(e, DECISION, where + " expect");
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
    if (e.has("results")) {
      expectResults(d, e.get("results"), where);
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

  /** SPEC D2: one result per applied policy, in order, each field compared. */
  private static void expectResults(Decision d, JsonNode want, String where) {
    assertEquals(want.size(), d.results().size(), where + ": results " + d.results());
    for (int k = 0; k < want.size(); k++) {
      JsonNode w = want.get(k);
      PolicyResult got = d.results().get(k);
      String at = where + " results[" + k + "]";
      Fields.only(
          w,
          Set.of(
              "name",
              "key",
              "capacity",
              "rate",
              "cost",
              "allowed",
              "remaining",
              "retry_after",
              "reset_after",
              "shadow"),
          at);
      if (w.has("name")) {
        assertEquals(w.get("name").asText(), got.name(), at + ".name");
      }
      if (w.has("key")) {
        assertEquals(w.get("key").asText(), got.key(), at + ".key");
      }
      if (w.has("capacity")) {
        assertEquals(w.get("capacity").asDouble(), got.capacity(), 1e-9, at + ".capacity");
      }
      if (w.has("rate")) {
        if (w.get("rate").isNull()) {
          assertNull(got.rate(), at + ".rate");
        } else {
          assertNotNull(got.rate(), at + ".rate");
          assertEquals(w.get("rate").asDouble(), got.rate(), 1e-9, at + ".rate");
        }
      }
      if (w.has("cost")) {
        assertEquals(w.get("cost").asDouble(), got.cost(), 1e-9, at + ".cost");
      }
      if (w.has("allowed")) {
        assertEquals(w.get("allowed").asBoolean(), got.allowed(), at + ".allowed");
      }
      if (w.has("remaining")) {
        assertEquals(w.get("remaining").asDouble(), got.remaining(), 1e-9, at + ".remaining");
      }
      if (w.has("retry_after")) {
        assertEquals(w.get("retry_after").asDouble(), got.retryAfter(), 1e-9, at + ".retry_after");
      }
      if (w.has("reset_after")) {
        assertEquals(w.get("reset_after").asDouble(), got.resetAfter(), 1e-9, at + ".reset_after");
      }
      if (w.has("shadow")) {
        assertEquals(w.get("shadow").asBoolean(), got.shadow(), at + ".shadow");
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
    e = store.fill(e); // its ids, as the call bound them
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
