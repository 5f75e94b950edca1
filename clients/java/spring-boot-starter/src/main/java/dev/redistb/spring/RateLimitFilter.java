package dev.redistb.spring;

import dev.redistb.Decision;
import dev.redistb.RateLimitResponse;
import dev.redistb.RateLimiter;
import jakarta.servlet.AsyncEvent;
import jakarta.servlet.AsyncListener;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * The servlet filter: every request checked against the main limiter before any handler (its route
 * template resolved as Spring MVC will), a refusal answered with its status, headers and problem
 * body, an admitted request given the headers and its decision (the request attribute {@link
 * ServletResponses#DECISION}, or a {@code Decision} handler argument).
 *
 * <p>A decision with a lease or settle_later policies is kept alive while the request runs (SPEC
 * N5, G5: the lease renewed every lease / 2, the holds the handler takes every ttl / 2) and
 * finished when the response is, with its status (F2's refund_on): at once for a plain response, at
 * the async request's end for a streamed one ({@code StreamingResponseBody}, {@code SseEmitter}), a
 * client gone mid-stream included (N4). At the in-flight policy's max_duration (N7) the limiter
 * releases the lease and the response is ended ({@link MaxDurationResponse}).
 */
public class RateLimitFilter extends OncePerRequestFilter {
  private final RateLimiter limiter;
  private final ServletRoutes routes;

  RateLimitFilter(RateLimiter limiter, ServletRoutes routes) {
    this.limiter = limiter;
    this.routes = routes;
  }

  @Override
  protected void doFilterInternal(
      HttpServletRequest request, HttpServletResponse response, FilterChain chain)
      throws ServletException, IOException {
    Decision decision =
        limiter.check(new ServletRequestView(request, routes.route(request))).join();
    request.setAttribute(ServletResponses.DECISION, decision);
    RateLimitResponse out = limiter.respond(decision);
    if (!out.proceeds()) {
      ServletResponses.send(response, out);
      return;
    }
    ServletResponses.headers(response, out);
    if (!decision.tracksResponse()) {
      chain.doFilter(request, response);
      return;
    }
    HttpServletResponse served =
        decision.lease() == null ? response : new MaxDurationResponse(request, response, decision);
    decision.keepAlive();
    boolean async = false;
    boolean raised = true;
    try {
      chain.doFilter(request, served);
      raised = false;
      async = request.isAsyncStarted();
    } finally {
      if (async) {
        request.getAsyncContext().addListener(new Finish(decision, response));
      } else {
        // SPEC F2: the status the handler answered; one that raised before its response
        // started is answered 500
        decision.finish(raised && !response.isCommitted() ? 500 : response.getStatus());
      }
    }
  }

  /**
   * SPEC N4 for an async response: ended, failed or timed out, once; F2's refund reads the status
   * it completed with.
   */
  private record Finish(Decision decision, HttpServletResponse response) implements AsyncListener {
    @Override
    public void onComplete(AsyncEvent event) {
      decision.finish(response.getStatus());
    }

    @Override
    public void onTimeout(AsyncEvent event) {
      decision.finish();
    }

    @Override
    public void onError(AsyncEvent event) {
      decision.finish();
    }

    @Override
    public void onStartAsync(AsyncEvent event) {
      event.getAsyncContext().addListener(this);
    }
  }
}
