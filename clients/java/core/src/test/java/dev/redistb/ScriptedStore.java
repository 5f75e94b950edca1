package dev.redistb;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.redistb.store.CommandStore;
import dev.redistb.store.LuaLibrary;
import dev.redistb.store.StoreException;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A store that answers from a vector's script (clients/vectors/README.md): each call must be the
 * next one listed, compared exactly for names and keys and numerically for numbers, and answered
 * with its {@code reply}, {@code error}, {@code timeout}, {@code connection_error}, or held until a
 * later {@code release} step.
 */
final class ScriptedStore extends CommandStore {
  private final Deque<JsonNode> expected = new ArrayDeque<>();
  private final Map<String, CompletableFuture<Object>> held = new HashMap<>();
  private final List<String> problems = new ArrayList<>();

  /**
   * SPEC E (clients/vectors/README.md): {@code {sha}}, {@code {script}}, {@code {functions}} are
   * the library's SHA-1 and texts as the jar ships them; {@code {id:x}} is bound to the first id
   * the client sent there, and every later one must be the same (two names never the same id).
   */
  private static final Pattern ID = Pattern.compile("\\{id:([A-Za-z0-9_]+)\\}");

  private final Map<String, String> ids = new HashMap<>();

  private static String placeholder(String text) {
    LuaLibrary lua = LuaLibrary.shipped();
    switch (text) {
      case "{sha}":
        return lua.sha();
      case "{script}":
        return lua.script();
      case "{functions}":
        return lua.functions();
      default:
        return null;
    }
  }

  /** A reply or an expectation with its placeholders, as the ids were bound. */
  JsonNode fill(JsonNode n) {
    if (n == null) {
      return null;
    }
    if (n.isArray()) {
      com.fasterxml.jackson.databind.node.ArrayNode out = JsonNodeFactory.instance.arrayNode();
      n.forEach(x -> out.add(fill(x)));
      return out;
    }
    if (n.isObject()) {
      ObjectNode out = JsonNodeFactory.instance.objectNode();
      n.properties().forEach(e -> out.set(e.getKey(), fill(e.getValue())));
      return out;
    }
    if (!n.isTextual()) {
      return n;
    }
    String p = placeholder(n.asText());
    if (p != null) {
      return JsonNodeFactory.instance.textNode(p);
    }
    Matcher m = ID.matcher(n.asText());
    if (m.matches()) {
      String bound = ids.get(m.group(1));
      if (bound == null) {
        fail(n.asText() + " in a reply before any call bound it");
      }
      return JsonNodeFactory.instance.textNode(bound);
    }
    return n;
  }

  /** Whether {@code got} is the expected {@code {id:name}} (bound on its first appearance). */
  private boolean idMatches(String name, String got) {
    if (!got.matches("[0-9a-f]{16}")) {
      return false;
    }
    String bound = ids.get(name);
    if (bound != null) {
      return bound.equals(got);
    }
    if (ids.containsValue(got)) {
      return false; // E4: every id fresh
    }
    ids.put(name, got);
    return true;
  }

  @Override
  public String server() {
    return "127.0.0.1:6379";
  }

  /** The calls the next step must make, in order. */
  void expect(JsonNode calls) {
    expected.clear();
    if (calls != null) {
      calls.forEach(expected::add);
    }
  }

  /** Fails when a listed call was not made, or an unlisted one was. */
  void verify(String where) {
    if (!problems.isEmpty()) {
      fail(where + ": " + String.join("; ", problems));
    }
    if (!expected.isEmpty()) {
      fail(where + ": calls not made: " + expected);
    }
  }

  CompletableFuture<Object> held(String name) {
    CompletableFuture<Object> f = held.remove(name);
    if (f == null) {
      fail("no held call named " + name);
    }
    return f;
  }

  @Override
  protected CompletableFuture<Object> send(List<String> args) {
    JsonNode call = expected.poll();
    if (call == null) {
      problems.add("unexpected call " + args);
      return CompletableFuture.failedFuture(StoreException.connection("unexpected call", null));
    }
    JsonNode want = call.get("call");
    if (!matches(want, args)) {
      problems.add("expected call " + want + ", got " + args);
    }
    if (call.has("hold")) {
      CompletableFuture<Object> f = new CompletableFuture<>();
      held.put(call.get("hold").asText(), f);
      return f;
    }
    return answer(call, args.get(0));
  }

  CompletableFuture<Object> answer(JsonNode call, String command) {
    if (call.has("reply")) {
      return CompletableFuture.completedFuture(raw(fill(call.get("reply"))));
    }
    if (call.has("error")) {
      return CompletableFuture.failedFuture(
          StoreException.reply(command, call.get("error").asText()));
    }
    if (call.path("timeout").asBoolean(false)) {
      return CompletableFuture.failedFuture(StoreException.timeout(command, 50));
    }
    if (call.path("connection_error").asBoolean(false)) {
      return CompletableFuture.failedFuture(StoreException.connection("connection refused", null));
    }
    throw new IllegalArgumentException("a call without an answer: " + call);
  }

  /**
   * How a map reply (HELLO's) is handed over: as a {@link Map} (a RESP3 client) or RESP2's flat
   * list of fields and values.
   */
  static boolean flatMaps;

  /**
   * A reply as a client hands it over: integers, doubles, strings, nil, nested arrays, maps (or
   * their flat lists, {@link #flatMaps}).
   */
  static Object raw(JsonNode n) {
    if (n.isArray()) {
      List<Object> out = new ArrayList<>();
      n.forEach(x -> out.add(raw(x)));
      return out;
    }
    if (n.isObject()) {
      Map<Object, Object> m = new java.util.LinkedHashMap<>();
      n.properties().forEach(e -> m.put(e.getKey(), raw(e.getValue())));
      if (!flatMaps) {
        return m;
      }
      List<Object> flat = new ArrayList<>();
      m.forEach(
          (k, v) -> {
            flat.add(k);
            flat.add(v);
          });
      return flat;
    }
    if (n.isNull()) {
      return null;
    }
    if (n.isIntegralNumber()) {
      return n.asLong();
    }
    if (n.isNumber()) {
      return n.asDouble();
    }
    return n.asText();
  }

  private boolean matches(JsonNode want, List<String> args) {
    if (want.size() != args.size()) {
      return false;
    }
    for (int i = 0; i < args.size(); i++) {
      JsonNode w = want.get(i);
      String a = args.get(i);
      if (w.isNumber()) {
        try {
          if (Double.parseDouble(a) != w.asDouble()) {
            return false;
          }
        } catch (NumberFormatException e) {
          return false;
        }
      } else {
        Matcher m = ID.matcher(w.asText());
        if (m.matches()) {
          if (!idMatches(m.group(1), a)) {
            return false;
          }
        } else {
          String p = placeholder(w.asText());
          if (!(p != null ? p : w.asText()).equals(a)) {
            return false;
          }
        }
      }
    }
    return true;
  }

  void assertArgs(JsonNode want, List<String> args) {
    assertEquals(true, matches(want, args), "expected " + want + ", got " + args);
  }
}
