package dev.redistb;

import java.util.List;

/**
 * What an adapter knows about one request, the limiter's only view of it: the framework's request
 * object (for key, cost, limit and tier functions), the TCP peer, the header lines and the matched
 * route template.
 */
public interface RequestView {
  /** The framework's request (an {@code HttpServletRequest}, a {@code ServerWebExchange}, ...). */
  Object request();

  /** The TCP peer's address; null when it has none (a Unix socket, SPEC A8). */
  String peer();

  /** The lines of a header (lowercase name), in the order received; empty when absent. */
  List<String> header(String name);

  /** {@code "METHOD /template"} of the matched route, or null when none matched (SPEC K5). */
  String route();

  /** The first line of a header, or null. */
  default String firstHeader(String name) {
    List<String> lines = header(name);
    return lines.isEmpty() ? null : lines.get(0);
  }
}
