package dev.redistb.spring;

import dev.redistb.RequestView;
import java.net.InetSocketAddress;
import java.util.List;
import org.springframework.web.server.ServerWebExchange;

/** A WebFlux exchange as the limiter sees it: the TCP peer, header lines, the route. */
record WebFluxRequestView(ServerWebExchange exchange, String route) implements RequestView {
  /** The route the dispatch found, when it already ran (inside a handler). */
  static WebFluxRequestView of(ServerWebExchange exchange) {
    Object pattern =
        exchange.getAttribute(
            org.springframework.web.reactive.HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
    String route =
        pattern == null ? null : exchange.getRequest().getMethod().name() + " " + pattern;
    return new WebFluxRequestView(exchange, route);
  }

  @Override
  public Object request() {
    return exchange;
  }

  @Override
  public String peer() {
    InetSocketAddress a = exchange.getRequest().getRemoteAddress();
    return a == null || a.getAddress() == null ? null : a.getAddress().getHostAddress();
  }

  @Override
  public List<String> header(String name) {
    return exchange.getRequest().getHeaders().getOrEmpty(name);
  }
}
