package dev.redistb.spring;

import dev.redistb.RateLimiter;
import java.lang.reflect.Method;
import org.aspectj.lang.ProceedingJoinPoint;
import org.aspectj.lang.annotation.Around;
import org.aspectj.lang.annotation.Aspect;
import org.aspectj.lang.reflect.MethodSignature;
import org.springframework.aop.support.AopUtils;
import org.springframework.core.Ordered;
import org.springframework.util.ClassUtils;

/**
 * {@link RateLimit} on controller methods, through Spring AOP: the method's limiter checks the
 * request before the method runs; a refusal is a {@link RateLimitedException} (written by the
 * starter's handler with the limiter's status, headers and problem body), an admission adds its
 * headers after the main limiter's (SPEC H1). Servlet methods here; methods returning {@code Mono}
 * or {@code Flux} in {@link ReactiveRateLimits}.
 */
@Aspect
public class RateLimitAspect implements Ordered {
  private static final boolean SERVLET =
      ClassUtils.isPresent(
              "jakarta.servlet.http.HttpServletRequest", RateLimitAspect.class.getClassLoader())
          && ClassUtils.isPresent(
              "org.springframework.web.servlet.HandlerMapping",
              RateLimitAspect.class.getClassLoader());
  private static final boolean REACTOR =
      ClassUtils.isPresent("reactor.core.publisher.Mono", RateLimitAspect.class.getClassLoader());

  private final AnnotationLimiters limiters;

  public RateLimitAspect(AnnotationLimiters limiters) {
    this.limiters = limiters;
  }

  @Override
  public int getOrder() {
    return Ordered.HIGHEST_PRECEDENCE + 100;
  }

  @Around(
      "@annotation(dev.redistb.spring.RateLimit) || @annotation(dev.redistb.spring.RateLimit.List)")
  public Object around(ProceedingJoinPoint pjp) throws Throwable {
    Method method =
        AopUtils.getMostSpecificMethod(
            ((MethodSignature) pjp.getSignature()).getMethod(), pjp.getTarget().getClass());
    RateLimiter limiter = limiters.limiterOf(method);
    if (REACTOR && ReactiveRateLimits.isReactive(method.getReturnType())) {
      return ReactiveRateLimits.around(pjp, method, limiter, limiters);
    }
    if (SERVLET) {
      return ServletRateLimits.around(pjp, method, limiter, limiters);
    }
    return pjp.proceed();
  }
}
