package dev.redistb.spring;

import dev.redistb.Decision;
import dev.redistb.Headers;
import dev.redistb.RateLimitResponse;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * Writing a limiter's answer on a servlet response (SPEC H1: a second limiter's items join the
 * first's).
 */
public final class ServletResponses {
  /** The request attribute holding the main limiter's decision. */
  public static final String DECISION = Decision.class.getName();

  private ServletResponses() {}

  /** This request's decision (the main limiter's), or null when none checked it. */
  public static Decision decision(HttpServletRequest request) {
    return (Decision) request.getAttribute(DECISION);
  }

  /** H1: the rate-limit headers, joined to those an outer limiter set. */
  static void headers(HttpServletResponse response, RateLimitResponse out) {
    for (RateLimitResponse.Header h : out.headers()) {
      boolean list = h.name().equals(Headers.POLICY) || h.name().equals(Headers.RATELIMIT);
      String before = list ? response.getHeader(h.name()) : null;
      response.setHeader(h.name(), Headers.join(before, h.value()));
    }
  }

  /** The whole refusal (429, 503, 500, 400): status, headers, the problem body. */
  public static void send(HttpServletResponse response, RateLimitResponse out) throws IOException {
    response.setStatus(out.status());
    headers(response, out);
    byte[] body = out.body().getBytes(StandardCharsets.UTF_8);
    response.setContentType(RateLimitResponse.PROBLEM_TYPE);
    response.setContentLength(body.length);
    response.getOutputStream().write(body);
    response.flushBuffer();
  }
}
