package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** clients/vectors/response.json: per-policy results to the decision, headers, status and body. */
final class ResponseVectors {
  private ResponseVectors() {}

  static LimitKind kind(JsonNode r) {
    return r.has("kind")
        ? LimitKind.valueOf(r.get("kind").asText().toUpperCase(Locale.ROOT))
        : LimitKind.BUCKET;
  }

  static void check(JsonNode c) {
    String id = c.get("id").asText();
    List<PolicyResult> results = new ArrayList<>();
    for (JsonNode r : c.get("results")) {
      LimitKind k = kind(r);
      Double rate = r.get("rate").isNull() ? null : TestRequest.number(r.get("rate"));
      // SPEC W2: a window policy's result carries its window (limit / rate)
      Double window = k == LimitKind.WINDOW ? Math.rint(r.get("capacity").asDouble() / rate) : null;
      results.add(
          new PolicyResult(
              r.get("name").asText(),
              "rl:" + r.get("name").asText(),
              TestRequest.number(r.get("capacity")),
              rate,
              TestRequest.number(r.get("cost")),
              k,
              window,
              r.get("allowed").asBoolean(),
              TestRequest.number(r.get("remaining")),
              TestRequest.number(r.get("retry_after")),
              TestRequest.number(r.get("reset_after")),
              r.get("shadow").asBoolean()));
    }
    Decision d = Decision.of(results);
    JsonNode legacy = c.get("legacy");
    Headers.Options opts =
        legacy == null || legacy.isNull()
            ? Headers.Options.DEFAULT
            : new Headers.Options(
                true, Headers.LegacyReset.valueOf(legacy.asText().toUpperCase(Locale.ROOT)));
    long nowMs = (long) (c.get("now_unix").asDouble() * 1000);
    RateLimitResponse resp = Headers.respond(d, opts, nowMs);
    JsonNode e = c.get("expect");
    JsonNode de = e.get("decision");
    assertEquals(de.get("outcome").asText(), d.outcome().wire(), id);
    assertEquals(de.get("allowed").asBoolean(), d.allowed(), id);
    assertNumber(de.get("remaining"), d.remaining(), id + " remaining");
    assertNumber(de.get("retry_after"), d.retryAfter(), id + " retry_after");
    assertNumber(de.get("reset_after"), d.resetAfter(), id + " reset_after");
    assertEquals(strings(de.get("violated")), d.violated(), id);
    assertEquals(strings(de.get("shadow_limited")), d.shadowLimited(), id);
    assertEquals(e.get("status").asInt(), resp.status(), id);
    assertHeaders(e.get("headers"), resp, id);
    assertEquals(e.get("body").isNull() ? null : e.get("body").asText(), resp.body(), id);
  }

  static void assertNumber(JsonNode want, Double got, String what) {
    if (want.isNull()) {
      assertEquals(null, got, what);
    } else {
      assertEquals(want.asDouble(), got, 1e-12, what);
    }
  }

  static List<String> strings(JsonNode arr) {
    List<String> out = new ArrayList<>();
    arr.forEach(x -> out.add(x.asText()));
    return out;
  }

  /** Each listed header's exact value; null means absent. */
  static void assertHeaders(JsonNode want, RateLimitResponse resp, String id) {
    want.properties()
        .forEach(
            h ->
                assertEquals(
                    h.getValue().isNull() ? null : h.getValue().asText(),
                    resp.header(h.getKey()),
                    id + " " + h.getKey()));
  }
}
