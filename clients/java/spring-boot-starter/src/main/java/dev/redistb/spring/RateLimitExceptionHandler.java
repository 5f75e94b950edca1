package dev.redistb.spring;

import dev.redistb.RateLimitResponse;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.RestControllerAdvice;

/**
 * Writes a {@link RateLimitedException} (an {@link RateLimit} refusal, a refused hold) as the
 * limiter answered it: status, rate-limit headers (a second line of a list header is the same list,
 * RFC 9110 5.3), and the problem body. For Spring MVC and WebFlux alike.
 */
@RestControllerAdvice
@Order(Ordered.HIGHEST_PRECEDENCE)
public class RateLimitExceptionHandler {
  @ExceptionHandler(RateLimitedException.class)
  public ResponseEntity<String> rateLimited(RateLimitedException e) {
    RateLimitResponse out = e.response();
    HttpHeaders headers = new HttpHeaders();
    for (RateLimitResponse.Header h : out.headers()) {
      headers.add(h.name(), h.value());
    }
    headers.setContentType(MediaType.parseMediaType(RateLimitResponse.PROBLEM_TYPE));
    return ResponseEntity.status(out.status()).headers(headers).body(out.body());
  }
}
