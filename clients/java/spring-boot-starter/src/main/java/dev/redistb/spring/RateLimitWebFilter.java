package dev.redistb.spring;

import dev.redistb.RateLimitResponse;
import dev.redistb.RateLimiter;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicReference;
import org.springframework.context.ApplicationContext;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.AnnotationAwareOrderComparator;
import org.springframework.http.HttpStatusCode;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.web.reactive.HandlerMapping;
import org.springframework.web.reactive.function.server.support.RouterFunctionMapping;
import org.springframework.web.reactive.result.method.RequestMappingInfoHandlerMapping;
import org.springframework.web.server.ServerWebExchange;
import org.springframework.web.server.WebFilter;
import org.springframework.web.server.WebFilterChain;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;
import reactor.core.publisher.SignalType;

/**
 * The WebFlux {@code WebFilter}: the servlet filter's behaviour on a reactive stack. The route
 * template is the one the application's handler mappings find; the decision is the exchange
 * attribute {@link WebFluxResponses#DECISION}; a lease is renewed while the response is written and
 * released when it ends, completes, fails or is cancelled (a {@code Flux} body included), and the
 * holds the handler takes are renewed until then (SPEC N4, N5, G5); the limiter's refund_on reads
 * the status it ended with (F2). At the in-flight policy's max_duration (N7) the response's writing
 * is cancelled with a {@link MaxDurationException}. The exchange is put in the Reactor context for
 * {@link RateLimit} methods.
 */
public class RateLimitWebFilter implements WebFilter, Ordered {
  private final RateLimiter limiter;
  private final ApplicationContext context;
  private volatile List<HandlerMapping> mappings;

  RateLimitWebFilter(RateLimiter limiter, ApplicationContext context) {
    this.limiter = limiter;
    this.context = context;
  }

  @Override
  public int getOrder() {
    return Ordered.HIGHEST_PRECEDENCE + 100;
  }

  private List<HandlerMapping> mappings() {
    List<HandlerMapping> m = mappings;
    if (m == null) {
      m = new ArrayList<>();
      for (HandlerMapping hm : context.getBeansOfType(HandlerMapping.class).values()) {
        if (hm instanceof RequestMappingInfoHandlerMapping || hm instanceof RouterFunctionMapping) {
          m.add(hm);
        }
      }
      AnnotationAwareOrderComparator.sort(m);
      mappings = m;
    }
    return m;
  }

  /** SPEC K5: {@code "METHOD /template"} of the route the dispatch will run. */
  Mono<Optional<String>> route(ServerWebExchange exchange) {
    return Flux.fromIterable(mappings())
        .concatMap(
            hm ->
                hm.getHandler(exchange)
                    .onErrorResume(e -> Mono.empty())
                    .flatMap(h -> pattern(exchange)))
        .next()
        .map(p -> Optional.of(exchange.getRequest().getMethod().name() + " " + p))
        .defaultIfEmpty(Optional.empty());
  }

  private static Mono<Object> pattern(ServerWebExchange exchange) {
    Object p = exchange.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
    return Mono.justOrEmpty(p);
  }

  /**
   * SPEC F2: the status a response ended with: the one written, or for an error not yet written the
   * status Spring will answer it with (an {@code ErrorResponse}'s, else 500).
   */
  static int status(ServerHttpResponse response, Throwable failed) {
    if (failed != null && !response.isCommitted()) {
      return 500;
    }
    HttpStatusCode status = response.getStatusCode();
    return status == null ? 200 : status.value();
  }

  @Override
  public Mono<Void> filter(ServerWebExchange exchange, WebFilterChain chain) {
    return route(exchange)
        .flatMap(
            route ->
                Mono.fromFuture(
                    () -> limiter.check(new WebFluxRequestView(exchange, route.orElse(null)))))
        .flatMap(
            decision -> {
              exchange.getAttributes().put(WebFluxResponses.DECISION, decision);
              RateLimitResponse out = limiter.respond(decision);
              if (!out.proceeds()) {
                return WebFluxResponses.send(exchange, out);
              }
              WebFluxResponses.headers(exchange, out);
              if (!decision.tracksResponse()) {
                return chain.filter(exchange);
              }
              decision.keepAlive();
              Mono<Void> served = chain.filter(exchange);
              if (decision.lease() != null) {
                // N7: at max_duration the response's writing is cancelled and ends in an error
                // (a response already started is cut off, its connection closed)
                Mono<Void> deadline =
                    Mono.create(
                        sink ->
                            decision.onTimeout(
                                () -> sink.error(new MaxDurationException(decision.lease()))));
                served = Mono.firstWithSignal(served, deadline);
              }
              AtomicReference<Throwable> failed = new AtomicReference<>();
              return served
                  .doOnError(failed::set)
                  .doFinally(
                      signal -> {
                        if (signal == SignalType.CANCEL) {
                          decision.finish(); // the client went away: no status was answered
                        } else {
                          decision.finish(status(exchange.getResponse(), failed.get()));
                        }
                      });
            })
        .contextWrite(ctx -> ctx.put(ServerWebExchange.class, exchange));
  }
}
