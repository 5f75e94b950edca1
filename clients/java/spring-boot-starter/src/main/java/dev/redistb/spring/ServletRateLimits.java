package dev.redistb.spring;

import dev.redistb.Decision;
import dev.redistb.RateLimitResponse;
import dev.redistb.RateLimiter;
import dev.redistb.RequestView;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.lang.reflect.Method;
import org.aspectj.lang.ProceedingJoinPoint;
import org.springframework.web.context.request.RequestContextHolder;
import org.springframework.web.context.request.ServletRequestAttributes;
import org.springframework.web.servlet.HandlerMapping;

/** {@link RateLimit} on Spring MVC methods: the request from the thread's request attributes. */
final class ServletRateLimits {
  private ServletRateLimits() {}

  static Object around(
      ProceedingJoinPoint pjp, Method method, RateLimiter limiter, AnnotationLimiters limiters)
      throws Throwable {
    if (!(RequestContextHolder.getRequestAttributes() instanceof ServletRequestAttributes attrs)) {
      return pjp.proceed(); // not in a web request (a job, a test calling the bean)
    }
    HttpServletRequest request = attrs.getRequest();
    Object pattern = request.getAttribute(HandlerMapping.BEST_MATCHING_PATTERN_ATTRIBUTE);
    RequestView view =
        new ServletRequestView(
            request, pattern == null ? null : request.getMethod() + " " + pattern);
    Decision decision = limiter.check(limiters.view(method, pjp.getArgs(), view)).join();
    RateLimitResponse out = limiter.respond(decision);
    if (!out.proceeds()) {
      throw new RateLimitedException(out, decision);
    }
    HttpServletResponse response = attrs.getResponse();
    if (response != null) {
      ServletResponses.headers(response, out);
    }
    try {
      return pjp.proceed();
    } finally {
      decision.finish();
    }
  }
}
