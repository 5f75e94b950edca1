package dev.redistb.spring;

import dev.redistb.RateLimitResponse;
import dev.redistb.RateLimiter;
import java.lang.reflect.Method;
import org.aspectj.lang.ProceedingJoinPoint;
import org.reactivestreams.Publisher;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/**
 * {@link RateLimit} on methods returning {@code Mono} or {@code Flux}: the check runs when the
 * result is subscribed, with the exchange the starter's WebFilter put in the Reactor context; the
 * method runs only when admitted.
 */
final class ReactiveRateLimits {
  private ReactiveRateLimits() {}

  static boolean isReactive(Class<?> type) {
    return Publisher.class.isAssignableFrom(type);
  }

  private static Mono<Object> check(
      ProceedingJoinPoint pjp, Method method, RateLimiter limiter, AnnotationLimiters limiters) {
    return Mono.deferContextual(
        ctx -> {
          ServerWebExchange exchange = ctx.getOrDefault(ServerWebExchange.class, null);
          if (exchange == null) {
            return Mono.just(Boolean.TRUE);
          }
          return Mono.fromFuture(
                  () ->
                      limiter.check(
                          limiters.view(method, pjp.getArgs(), WebFluxRequestView.of(exchange))))
              .map(
                  d -> {
                    RateLimitResponse out = limiter.respond(d);
                    if (!out.proceeds()) {
                      throw new RateLimitedException(out, d);
                    }
                    WebFluxResponses.headers(exchange, out);
                    return Boolean.TRUE;
                  });
        });
  }

  static Object around(
      ProceedingJoinPoint pjp, Method method, RateLimiter limiter, AnnotationLimiters limiters) {
    Mono<Object> gate = check(pjp, method, limiter, limiters);
    if (Flux.class.isAssignableFrom(method.getReturnType())) {
      return gate.flatMapMany(ok -> Flux.from(proceed(pjp)));
    }
    return gate.flatMap(ok -> Mono.from(proceed(pjp)));
  }

  @SuppressWarnings("unchecked")
  private static Publisher<Object> proceed(ProceedingJoinPoint pjp) {
    try {
      return (Publisher<Object>) pjp.proceed();
    } catch (Throwable t) {
      return Mono.error(t);
    }
  }
}
