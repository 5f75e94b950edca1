package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * clients/vectors/startup.json: the limiter of the case's configuration, its startup against a
 * store at 127.0.0.1:6379 answering the case's calls in order (HELLO's reply handed over as a map,
 * and again as RESP2's flat list), and the one line it fails with or logs.
 */
final class StartupVectors {
  private StartupVectors() {}

  static void check(JsonNode c) {
    boolean before = ScriptedStore.flatMaps;
    try {
      for (boolean flat : new boolean[] {false, true}) {
        ScriptedStore.flatMaps = flat;
        run(c, c.get("id").asText() + (flat ? " (HELLO as a flat list)" : " (HELLO as a map)"));
      }
    } finally {
      ScriptedStore.flatMaps = before;
    }
  }

  private static void run(JsonNode c, String where) {
    JsonNode cfg = c.get("limiter");
    ScriptedStore store = new ScriptedStore();
    List<String> logged = new ArrayList<>();
    List<String> infos = new ArrayList<>();
    RateLimiter.Builder b =
        RateLimiter.builder(store)
            .name(cfg.get("name").asText())
            .startDegraded(cfg.path("start_degraded").asBoolean(false))
            .backend(cfg.path("backend").asText("auto")) // SPEC E1
            .logger(logged::add)
            .infoLogger(infos::add);
    if (cfg.path("tag").asBoolean(false)) {
      b.hashTag(r -> "t");
    }
    for (JsonNode p : cfg.get("policies")) {
      String name = p.get("name").asText();
      if (p.has("in_flight")) {
        JsonNode f = p.get("in_flight");
        b.policy(
            Policy.builder(
                name,
                Limit.inFlight(f.get("limit").asLong(), f.get("lease_ms").asDouble() / 1000)));
      } else {
        b.policy(
            Policy.builder(
                    name, Limit.checked(p.get("capacity").asDouble(), p.get("rate").asDouble()))
                .cost(p.path("cost").asDouble(1))
                .settleLater(p.path("settle_later").asBoolean(false)));
      }
    }
    RateLimiter limiter = b.build();
    store.expect(c.get("redis"));
    JsonNode e = c.get("expect");
    String error = null;
    try {
      limiter.startup();
    } catch (StartupException ex) {
      error = ex.getMessage();
    }
    store.verify(where);
    // SPEC E6: the backend chosen (null until a degraded start's first call) and its one line
    JsonNode backend = e.path("backend");
    assertEquals(
        backend.isMissingNode() || backend.isNull() ? null : backend.asText(),
        limiter.stats().backend(),
        where + ": stats.backend");
    JsonNode backendLog = e.path("backend_log");
    assertEquals(
        backendLog.isMissingNode() || backendLog.isNull()
            ? List.of()
            : List.of(backendLog.asText()),
        infos,
        where + ": the backend's line");
    if (e.has("error")) {
      assertTrue(error != null, where + ": started, expected " + e.get("error"));
      assertTrue(
          line(e.get("error").asText()).matcher(error).matches(),
          where + ": expected " + e.get("error").asText() + ", got " + error);
      return;
    }
    assertNull(error, where);
    assertTrue(e.get("started").asBoolean(), where);
    JsonNode log = e.get("log");
    if (log == null || log.isNull()) {
      assertEquals(List.of(), logged, where);
    } else {
      assertEquals(1, logged.size(), where + ": " + logged);
      if (!line(log.asText()).matcher(logged.get(0)).matches()) {
        fail(where + ": expected the line " + log.asText() + ", got " + logged.get(0));
      }
    }
  }

  /**
   * An expected line as a pattern: {@code {reason}} any non-empty text without a line break, {@code
   * {start_degraded}} the option's name in Java's case ({@code startDegraded}).
   */
  static Pattern line(String expected) {
    StringBuilder out = new StringBuilder();
    String rest = expected.replace("{start_degraded}", "startDegraded");
    int at;
    while ((at = rest.indexOf("{reason}")) >= 0) {
      out.append(Pattern.quote(rest.substring(0, at))).append("[^\\r\\n]+");
      rest = rest.substring(at + "{reason}".length());
    }
    return Pattern.compile(out.append(Pattern.quote(rest)).toString());
  }
}
