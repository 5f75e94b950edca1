package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import dev.redistb.store.CommandStore;
import dev.redistb.store.WindowMode;
import dev.redistb.testing.Repo;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicContainer;
import org.junit.jupiter.api.DynamicNode;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * Every file of clients/vectors (clients/vectors/README.md): a file without a handler, or a case of
 * a kind the handler does not know, fails; each case's id names its test.
 */
class VectorsTest {
  static final ObjectMapper JSON = new ObjectMapper();

  private static final Map<String, Consumer<JsonNode>> HANDLERS =
      Map.of(
          "numbers", VectorsTest::numbers,
          "config", VectorsTest::config,
          "address", VectorsTest::address,
          "keys", VectorsTest::keys,
          "header_identity", VectorsTest::headerIdentity,
          "response", ResponseVectors::check,
          "limiter", LimiterVectors::check,
          // limiter.json's cases on the script backend, through Functions (<id>-f) and EVALSHA
          // (<id>-e), made by clients/vectors/scripts_form.py (issue 42: both backends)
          "limiter-scripts", LimiterVectors::check,
          "startup", StartupVectors::check);

  /**
   * Cases of a rule Java does not implement yet, each expected to FAIL (a case that passes is an
   * error: take it off this list); nothing here hides a failure of another case. Empty since SPEC
   * E, the script backend (issue 42), is in Java.
   */
  static final Map<String, String> PENDING = Map.of();

  private static void pending(String id, Runnable run) {
    try {
      run.run();
    } catch (AssertionError expected) {
      return; // the rule is not in Java yet
    }
    fail(id + " passes: take it off VectorsTest.PENDING (SPEC " + PENDING.get(id) + ")");
  }

  @TestFactory
  Stream<DynamicNode> vectors() throws IOException {
    Path dir = Repo.root().resolve("clients/vectors");
    List<Path> files;
    try (Stream<Path> s = Files.list(dir)) {
      files = s.filter(p -> p.toString().endsWith(".json")).sorted().toList();
    }
    assertFalse(files.isEmpty(), "no vector files in " + dir);
    Set<String> ids = new HashSet<>();
    List<DynamicNode> out = new ArrayList<>();
    for (Path f : files) {
      String name = f.getFileName().toString().replace(".json", "");
      JsonNode doc = JSON.readTree(f.toFile());
      Consumer<JsonNode> handler = HANDLERS.get(name);
      List<DynamicTest> cases = new ArrayList<>();
      if (handler == null) {
        cases.add(
            DynamicTest.dynamicTest(
                name, () -> fail("no handler for clients/vectors/" + f.getFileName())));
      } else {
        for (JsonNode c : doc.get("cases")) {
          String id = c.get("id").asText();
          assertTrue(ids.add(id), "duplicate vector id " + id);
          cases.add(
              DynamicTest.dynamicTest(
                  id + " (" + c.get("rule").asText() + ") " + c.get("title").asText(),
                  PENDING.containsKey(id)
                      ? () -> pending(id, () -> handler.accept(c))
                      : () -> handler.accept(c)));
        }
      }
      out.add(DynamicContainer.dynamicContainer(name, cases));
    }
    return out.stream();
  }

  // -- numbers.json ------------------------------------------------------------------------

  static void numbers(JsonNode c) {
    JsonNode args = c.get("args");
    double a = TestRequest.number(args.get(0));
    JsonNode expect = c.get("expect");
    Object got;
    switch (c.get("fn").asText()) {
      case "quota":
        got = Numbers.quota(a);
        break;
      case "window":
        got = Numbers.window(a, TestRequest.number(args.get(1)));
        break;
      case "remaining":
        got = Numbers.remaining(a);
        break;
      case "reset":
        got = Numbers.reset(a);
        break;
      case "retry_after":
        got = Numbers.retryAfter(a);
        break;
      case "body_number":
        assertEquals(expect.asText(), Numbers.bodyNumber(a), c.get("id").asText());
        return;
      default:
        throw new AssertionError("unknown numbers fn " + c.get("fn"));
    }
    if (expect.isNull()) {
      assertNull(got, c.get("id").asText());
    } else {
      assertEquals(expect.asLong(), ((Number) got).longValue(), c.get("id").asText());
    }
  }

  // -- config.json -------------------------------------------------------------------------

  static void config(JsonNode c) {
    JsonNode v = c.get("value");
    JsonNode expect = c.get("expect");
    boolean valid = expect.get("valid").asBoolean();
    Runnable build;
    String[] normalized = {null};
    switch (c.get("setting").asText()) {
      case "prefix":
        build = () -> RateLimiter.builder(new ScriptedStore()).prefix(v.asText());
        break;
      case "policy_name":
        build = () -> Policy.perSecond(v.asText(), 1).build();
        break;
      case "policy_names":
        build =
            () -> {
              RateLimiter.Builder b = RateLimiter.builder(new ScriptedStore());
              v.forEach(n -> b.policy(Policy.perSecond(n.asText(), 1)));
              b.build();
            };
        break;
      case "limit":
        build =
            () ->
                Policy.builder(
                        "p",
                        Limit.checked(
                            TestRequest.number(v.get("capacity")),
                            TestRequest.number(v.get("rate"))))
                    .build();
        break;
      case "cost":
        build = () -> Policy.perSecond("p", 10).cost(TestRequest.number(v)).build();
        break;
      case "trusted_proxy":
        build = () -> normalized[0] = ClientIpConfig.normalizeProxy(v.asText());
        break;
      case "ipv4_prefix":
        build = () -> ClientIpConfig.builder().ipv4Prefix(v.asInt());
        break;
      case "ipv6_prefix":
        build = () -> ClientIpConfig.builder().ipv6Prefix(v.asInt());
        break;
      case "header":
        build = () -> ClientIpConfig.builder().header(v.asText());
        break;
      case "fixed_key":
        build = () -> Key.fixed(v.asText());
        break;
      case "window":
        build =
            () -> {
              WindowMode mode;
              try {
                mode =
                    WindowMode.valueOf(v.get("mode").asText().toUpperCase(java.util.Locale.ROOT));
              } catch (IllegalArgumentException e) {
                throw new ConfigException("unknown window mode " + v.get("mode"));
              }
              Policy.builder(
                      "w",
                      WindowLimit.of(
                          TestRequest.number(v.get("limit")),
                          TestRequest.number(v.get("seconds")),
                          mode))
                  .build();
            };
        break;
      case "in_flight":
        build =
            () -> {
              InFlightLimit f =
                  v.has("max_duration")
                      ? InFlightLimit.of(
                          TestRequest.number(v.get("limit")),
                          TestRequest.number(v.get("lease")),
                          TestRequest.number(v.get("max_duration")))
                      : InFlightLimit.of(
                          TestRequest.number(v.get("limit")), TestRequest.number(v.get("lease")));
              Policy.Builder b = Policy.builder("conc", f);
              if (v.has("cost")) {
                b.cost(TestRequest.number(v.get("cost")));
              }
              b.build();
              normalized[0] =
                  "{\"limit\":"
                      + f.limit()
                      + ",\"lease_ms\":"
                      + f.leaseMs()
                      + ",\"max_duration_ms\":"
                      + f.maxDurationMs()
                      + "}";
            };
        break;
      case "policy_kinds":
        build =
            () -> {
              RateLimiter.Builder b = RateLimiter.builder(new ScriptedStore());
              int i = 0;
              for (JsonNode k : v) {
                String n = "p" + i++;
                switch (k.asText()) {
                  case "bucket" -> b.policy(Policy.perSecond(n, 1));
                  case "window" -> b.policy(Policy.builder(n, Limit.window(5, 60)));
                  case "in_flight" -> b.policy(Policy.builder(n, Limit.inFlight(2)));
                  case "settle_later" -> b.policy(Policy.perHour(n, 1000).settleLater(true));
                  default -> throw new AssertionError("unknown kind " + k);
                }
              }
              b.build();
            };
        break;
      case "timeout_ms":
        build = () -> RateLimiter.builder(new ScriptedStore()).timeoutMillis(whole(v, "timeout"));
        break;
      case "cooldown_ms":
        build =
            () -> RateLimiter.builder(new ScriptedStore()).cooldownMillis(TestRequest.number(v));
        break;
      case "deny_cache_max_entries":
        build =
            () ->
                RateLimiter.builder(new ScriptedStore())
                    .denyCache(Math.toIntExact(whole(v, "deny_cache.max_entries")));
        break;
      case "window_helper":
        build =
            () -> {
              long n = whole(v.get("n"), "n");
              WindowLimit w;
              if (v.has("mode")) {
                WindowMode mode =
                    WindowMode.valueOf(v.get("mode").asText().toUpperCase(java.util.Locale.ROOT));
                w =
                    switch (v.get("unit").asText()) {
                      case "second" -> Limit.windowPerSecond(n, mode);
                      case "minute" -> Limit.windowPerMinute(n, mode);
                      case "hour" -> Limit.windowPerHour(n, mode);
                      case "day" -> Limit.windowPerDay(n, mode);
                      default -> throw new AssertionError("unknown unit " + v.get("unit"));
                    };
              } else {
                w =
                    switch (v.get("unit").asText()) {
                      case "second" -> Limit.windowPerSecond(n);
                      case "minute" -> Limit.windowPerMinute(n);
                      case "hour" -> Limit.windowPerHour(n);
                      case "day" -> Limit.windowPerDay(n);
                      default -> throw new AssertionError("unknown unit " + v.get("unit"));
                    };
              }
              normalized[0] =
                  JSON.createObjectNode()
                      .put("limit", w.limit())
                      .put("seconds", CommandStore.arg(w.seconds()))
                      .put("mode", w.mode().name().toLowerCase(java.util.Locale.ROOT))
                      .toString();
            };
        break;
      default:
        throw new AssertionError("unknown config setting " + c.get("setting"));
    }
    String id = c.get("id").asText();
    if (valid) {
      build.run();
      if (expect.has("normalized")) {
        JsonNode n = expect.get("normalized");
        if (c.get("setting").asText().equals("window_helper")) {
          // the seconds as the module's argument text, so 60 and 60.0 are one number
          n =
              ((com.fasterxml.jackson.databind.node.ObjectNode) n.deepCopy())
                  .put("seconds", CommandStore.arg(n.get("seconds").asDouble()));
        }
        assertEquals(n.isTextual() ? n.asText() : n.toString(), normalized[0], id);
      }
    } else {
      assertThrows(ConfigException.class, build::run, id);
    }
  }

  /**
   * SPEC C7: the builder takes a whole number ({@code timeoutMillis(long)}, {@code
   * denyCache(int)}), so a value that is not one (NaN, 1.5) cannot reach it: Java's type refuses
   * it, as Rust's does, and the runner says so with the ConfigException the case expects.
   */
  static long whole(JsonNode v, String setting) {
    double x = TestRequest.number(v);
    if (!(x == Math.rint(x) && Math.abs(x) <= Integer.MAX_VALUE)) {
      throw new ConfigException(setting + " takes a whole number, got " + x);
    }
    return (long) x;
  }

  // -- address.json ------------------------------------------------------------------------

  static ClientIpConfig clientIp(JsonNode cfg) {
    ClientIpConfig.Builder b = ClientIpConfig.builder();
    if (cfg == null) {
      return b.build();
    }
    if (cfg.has("trusted_proxies")) {
      List<String> ps = new ArrayList<>();
      cfg.get("trusted_proxies").forEach(p -> ps.add(p.asText()));
      b.trustedProxies(ps);
    }
    if (cfg.has("header")) {
      b.header(cfg.get("header").asText());
    }
    if (cfg.has("ipv4_prefix")) {
      b.ipv4Prefix(cfg.get("ipv4_prefix").asInt());
    }
    if (cfg.has("ipv6_prefix")) {
      b.ipv6Prefix(cfg.get("ipv6_prefix").asInt());
    }
    return b.build();
  }

  static void address(JsonNode c) {
    TestRequest r = TestRequest.of(c, null);
    ClientIp got = clientIp(c.get("config")).resolve(r.peer(), r::header);
    JsonNode e = c.get("expect");
    String id = c.get("id").asText();
    assertEquals(e.get("client").isNull() ? null : e.get("client").asText(), got.address(), id);
    assertEquals(
        e.get("identity").isNull() ? null : e.get("identity").asText(), got.identity(), id);
  }

  // -- keys.json, header_identity.json: through a limiter's one call -----------------------

  static void keys(JsonNode c) {
    String route = c.get("route").isNull() ? null : c.get("route").asText();
    JsonNode identity = c.get("identity");
    JsonNode tag = c.get("tag");
    List<String> sent = new ArrayList<>();
    RateLimiter limiter =
        RateLimiter.builder(new CapturingStore(sent))
            .prefix(c.get("prefix").asText())
            .hashTag(r -> tag.isNull() ? null : tag.asText())
            .limitUnmatched(true)
            .policy(
                Policy.perSecond(c.get("policy").asText(), 10)
                    .key(r -> identity.isNull() ? null : identity.asText())
                    .perRoute(route != null))
            .build();
    Decision d = limiter.check(new TestRequest("203.0.113.9", route)).join();
    JsonNode e = c.get("expect");
    String id = c.get("id").asText();
    if (e.path("skip").asBoolean(false)) {
      assertEquals(Outcome.NOT_LIMITED, d.outcome(), id);
      assertTrue(sent.isEmpty(), id);
      return;
    }
    assertEquals(e.get("key").asText(), sent.get(1), id);
    assertEquals(e.get("key").asText(), d.results().get(0).key(), id);
    if (route == null) {
      assertEquals(
          e.get("key").asText(),
          limiter.key(
              c.get("policy").asText(),
              identity.asText(),
              null,
              tag.isNull() ? null : tag.asText()),
          id);
    }
  }

  static void headerIdentity(JsonNode c) {
    List<String> sent = new ArrayList<>();
    RateLimiter limiter =
        RateLimiter.builder(new CapturingStore(sent))
            .policy(Policy.perSecond("key", 10).key(Key.header(c.get("header").asText())))
            .build();
    TestRequest req = new TestRequest("203.0.113.9", "GET /");
    List<String> lines = new ArrayList<>();
    c.get("lines").forEach(l -> lines.add(l.asText()));
    if (!lines.isEmpty()) {
      req.headers.put(c.get("header").asText(), lines);
    }
    Decision d = limiter.check(req).join();
    JsonNode e = c.get("expect");
    String id = c.get("id").asText();
    if (e.path("skip").asBoolean(false)) {
      assertEquals(Outcome.NOT_LIMITED, d.outcome(), id);
    } else if (e.path("bad_request").asBoolean(false)) {
      assertEquals(Outcome.BAD_REQUEST, d.outcome(), id);
      assertEquals(400, limiter.respond(d).status(), id);
      assertTrue(sent.isEmpty(), id);
    } else {
      assertEquals(e.get("key").asText(), sent.get(1), id);
    }
  }
}
