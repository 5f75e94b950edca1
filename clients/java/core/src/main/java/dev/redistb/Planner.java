package dev.redistb;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * From a request to its {@link Plan} (SPEC I, K, L2, L3, G1): each applicable policy's identity,
 * key, limit and cost, in policy order; a header with a control byte (I2) or an out-of-range cost
 * or limit from the application (L3) stops it.
 */
final class Planner {
  private final String prefix;
  private final ClientIpConfig clientIp;
  private final Function<RequestView, String> hashTag;
  private final boolean shadow;
  private final List<Policy> policies;

  /** K2: per-route routes escaped once */
  private final Map<String, String> routeParts = new HashMap<>();

  /** I3: a fixed identity escaped once per policy */
  private final Map<String, String> fixedParts = new HashMap<>();

  Planner(
      String prefix,
      ClientIpConfig clientIp,
      Function<RequestView, String> hashTag,
      boolean shadow,
      List<Policy> policies) {
    this.prefix = prefix;
    this.clientIp = clientIp;
    this.hashTag = hashTag;
    this.shadow = shadow;
    this.policies = List.copyOf(policies);
    for (Policy p : policies) {
      if (p.key() instanceof Key.FixedKey f) {
        fixedParts.put(p.name(), Keys.part(f.value()));
      }
    }
  }

  List<Policy> policies() {
    return policies;
  }

  /** SPEC I2: control bytes 0x00-0x08, 0x0A-0x1F, 0x7F (a tab is kept). */
  private static boolean hasControlByte(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        return true;
      }
    }
    return false;
  }

  /** SPEC I2: optional white space (space, tab) trimmed at both ends. */
  private static String trimOws(String s) {
    int a = 0;
    int b = s.length();
    while (a < b && (s.charAt(a) == ' ' || s.charAt(a) == '\t')) {
      a++;
    }
    while (b > a && (s.charAt(b - 1) == ' ' || s.charAt(b - 1) == '\t')) {
      b--;
    }
    return s.substring(a, b);
  }

  /** The marker of a header identity with a control byte. */
  static final String BAD = new String("bad request");

  /**
   * SPEC I2: {@code Key.header}'s identity: the lines joined with ", ", trimmed; null when absent
   * or empty (skipped); {@link #BAD} when a line holds a control byte.
   */
  static String headerIdentity(List<String> lines) {
    if (lines.isEmpty()) {
      return null;
    }
    String joined = lines.size() == 1 ? lines.get(0) : String.join(", ", lines);
    if (hasControlByte(joined)) {
      return BAD;
    }
    String v = trimOws(joined);
    return v.isEmpty() ? null : v;
  }

  private String routePart(String route) {
    synchronized (routeParts) {
      if (routeParts.size() > 4096) {
        routeParts.clear();
      }
      return routeParts.computeIfAbsent(route, Keys::routePart);
    }
  }

  Plan plan(RequestView req, Stopper invalid) {
    String tagRaw = hashTag == null ? null : hashTag.apply(req);
    String tag = tagRaw == null || tagRaw.isEmpty() ? null : Keys.part(tagRaw);
    String ip = null;
    boolean ipKnown = false;
    List<Plan.Part> parts = new ArrayList<>(policies.size());
    Map<String, SettleTarget> settle = null;
    for (Policy p : policies) {
      if (!p.appliesTo(req.route())) {
        continue;
      }
      String id;
      Key k = p.key();
      if (k instanceof Key.ClientIpKey) {
        // an address identity never needs escaping (hex digits, '.', ':', '/')
        if (!ipKnown) {
          ip = clientIp.identity(req.peer(), req::header);
          ipKnown = true;
        }
        id = ip;
      } else if (k instanceof Key.HeaderKey h) {
        String v = headerIdentity(req.header(h.name()));
        if (v == BAD) {
          return Plan.stopped(Outcome.BAD_REQUEST, h.name());
        }
        id = v == null ? null : Keys.headerPart(v);
      } else if (k instanceof Key.FixedKey) {
        id = fixedParts.get(p.name());
      } else {
        String v = ((Key.FnKey) k).fn().apply(req);
        id = v == null || v.isEmpty() ? null : Keys.part(v);
      }
      if (id == null) {
        continue; // I1, A8
      }
      AnyLimit limit = p.limitFor(req);
      if (limit == null) {
        continue; // L2
      }
      if (limit instanceof Limit b && !Limit.valid(b.capacity(), b.rate())) {
        return invalid.stop(p.name());
      }
      String route = p.perRoute() && req.route() != null ? routePart(req.route()) : null;
      String key = Keys.join(prefix, tag, p.name(), route, id);
      if (p.settleLater()) {
        Limit b = (Limit) limit;
        if (settle == null) {
          settle = new LinkedHashMap<>();
        }
        settle.put(p.name(), new SettleTarget(p.name(), key, b.capacity(), b.rate()));
        continue; // G1: not in the call
      }
      boolean sh = shadow || p.shadow();
      if (limit instanceof InFlightLimit f) {
        parts.add(new Plan.Part(p, key, f.limit(), 0, 1, sh, f)); // C9, N3: one slot
        continue;
      }
      double cost = p.costFor(req);
      if (!Limit.validCost(cost)) {
        return invalid.stop(p.name());
      }
      double rate = limit instanceof WindowLimit w ? w.rate() : ((Limit) limit).rate();
      parts.add(new Plan.Part(p, key, limit.capacity(), rate, cost, sh, limit));
    }
    for (int i = 1; i < parts.size(); i++) {
      for (int j = 0; j < i; j++) {
        if (parts.get(i).key().equals(parts.get(j).key())) {
          throw new IllegalStateException(
              "policies "
                  + parts.get(j).name()
                  + " and "
                  + parts.get(i).name()
                  + " map to the same key");
        }
      }
    }
    return Plan.of(parts, settle == null ? Map.of() : settle);
  }

  /** SPEC L3: what the limiter does with an invalid cost or limit (counted, logged). */
  interface Stopper {
    Plan stop(String policy);
  }
}
