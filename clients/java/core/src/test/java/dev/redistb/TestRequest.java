package dev.redistb;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/** A request as the vectors give it: a peer, header lines by lowercase name, a route. */
final class TestRequest implements RequestView {
  final String peer;
  final Map<String, List<String>> headers = new HashMap<>();
  final String route;

  /** per-policy answers of cost and limit functions for this request */
  final Map<String, JsonNode> costs = new HashMap<>();

  final Map<String, JsonNode> limits = new HashMap<>();

  /** per-policy answers of a tiered policy's tier function (SPEC L2) */
  final Map<String, String> tiers = new HashMap<>();

  TestRequest(String peer, String route) {
    this.peer = peer;
    this.route = route;
  }

  /** From a vector's {@code headers}: each character one byte (Latin-1), as received. */
  static TestRequest of(JsonNode check, String route) {
    JsonNode p = check.get("peer");
    TestRequest r = new TestRequest(p == null || p.isNull() ? null : p.asText(), route);
    JsonNode hs = check.get("headers");
    if (hs != null) {
      hs.properties()
          .forEach(
              e -> {
                List<String> lines = new ArrayList<>();
                e.getValue().forEach(l -> lines.add(l.asText()));
                r.headers.put(e.getKey().toLowerCase(Locale.ROOT), lines);
              });
    }
    if (check.has("cost")) {
      check.get("cost").properties().forEach(e -> r.costs.put(e.getKey(), e.getValue()));
    }
    if (check.has("limit")) {
      check.get("limit").properties().forEach(e -> r.limits.put(e.getKey(), e.getValue()));
    }
    if (check.has("tier")) {
      check
          .get("tier")
          .properties()
          .forEach(
              e -> r.tiers.put(e.getKey(), e.getValue().isNull() ? null : e.getValue().asText()));
    }
    return r;
  }

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
    return headers.getOrDefault(name, List.of());
  }

  @Override
  public String route() {
    return route;
  }

  /** A vector number: a JSON number or "NaN" / "Infinity" / "-Infinity" ({"invalid": ...} too). */
  static double number(JsonNode n) {
    if (n.isObject() && n.has("invalid")) {
      return number(n.get("invalid"));
    }
    if (n.isNumber()) {
      return n.asDouble();
    }
    switch (n.asText()) {
      case "NaN":
        return Double.NaN;
      case "Infinity":
        return Double.POSITIVE_INFINITY;
      case "-Infinity":
        return Double.NEGATIVE_INFINITY;
      default:
        throw new IllegalArgumentException("not a vector number: " + n);
    }
  }
}
