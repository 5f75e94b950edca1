package dev.redistb.spring;

import dev.redistb.Decision;
import dev.redistb.Headers;
import dev.redistb.RateLimitResponse;
import java.nio.charset.StandardCharsets;
import org.springframework.core.io.buffer.DataBuffer;
import org.springframework.http.HttpHeaders;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.server.reactive.ServerHttpResponse;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * Writing a limiter's answer on a WebFlux response (the same headers and bodies as the servlet's).
 */
public final class WebFluxResponses {
  /** The exchange attribute holding the main limiter's decision. */
  public static final String DECISION = Decision.class.getName();

  private WebFluxResponses() {}

  /** This exchange's decision (the main limiter's), or null. */
  public static Decision decision(ServerWebExchange exchange) {
    return exchange.getAttribute(DECISION);
  }

  static void headers(ServerWebExchange exchange, RateLimitResponse out) {
    HttpHeaders h = exchange.getResponse().getHeaders();
    for (RateLimitResponse.Header x : out.headers()) {
      boolean list = x.name().equals(Headers.POLICY) || x.name().equals(Headers.RATELIMIT);
      h.set(x.name(), Headers.join(list ? h.getFirst(x.name()) : null, x.value()));
    }
  }

  /** The whole refusal: status, headers, the problem body. */
  public static Mono<Void> send(ServerWebExchange exchange, RateLimitResponse out) {
    ServerHttpResponse response = exchange.getResponse();
    response.setStatusCode(HttpStatus.valueOf(out.status()));
    headers(exchange, out);
    byte[] body = out.body().getBytes(StandardCharsets.UTF_8);
    response.getHeaders().setContentType(MediaType.parseMediaType(RateLimitResponse.PROBLEM_TYPE));
    response.getHeaders().setContentLength(body.length);
    DataBuffer buffer = response.bufferFactory().wrap(body);
    return response.writeWith(Mono.just(buffer));
  }
}
