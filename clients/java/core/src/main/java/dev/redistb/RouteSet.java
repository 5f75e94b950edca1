package dev.redistb;

import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * A set of routes (SPEC K5): {@code "METHOD /template"} (the method upper-cased) or {@code "*
 * /template"}, which matches every method.
 */
public final class RouteSet {
  private final Set<String> exact = new HashSet<>();
  private final Set<String> anyMethod = new HashSet<>();

  public RouteSet(List<String> routes) {
    for (String r : routes) {
      String t = r == null ? "" : r.strip();
      int sp = t.indexOf(' ');
      String method = sp < 0 ? "" : t.substring(0, sp).toUpperCase(Locale.ROOT);
      String path = sp < 0 ? "" : t.substring(sp + 1).strip();
      if (sp < 0 || !path.startsWith("/") || !method.matches("\\*|[A-Z]+")) {
        throw new ConfigException(
            "a route is 'METHOD /template' or '* /template', got '" + r + "'");
      }
      if (method.equals("*")) {
        anyMethod.add(path);
      } else {
        exact.add(method + " " + path);
      }
    }
  }

  public boolean isEmpty() {
    return exact.isEmpty() && anyMethod.isEmpty();
  }

  /** Whether {@code route} ({@code "METHOD /template"} of a request) is in the set. */
  public boolean contains(String route) {
    if (route == null) {
      return false;
    }
    if (exact.contains(route)) {
      return true;
    }
    if (anyMethod.isEmpty()) {
      return false;
    }
    int sp = route.indexOf(' ');
    return sp >= 0 && anyMethod.contains(route.substring(sp + 1));
  }
}
