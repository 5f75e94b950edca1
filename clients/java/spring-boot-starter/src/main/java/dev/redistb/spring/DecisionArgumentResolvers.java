package dev.redistb.spring;

import dev.redistb.Decision;
import jakarta.servlet.http.HttpServletRequest;
import org.springframework.core.MethodParameter;
import org.springframework.web.bind.support.WebDataBinderFactory;
import org.springframework.web.context.request.NativeWebRequest;
import org.springframework.web.method.support.HandlerMethodArgumentResolver;
import org.springframework.web.method.support.ModelAndViewContainer;
import org.springframework.web.reactive.BindingContext;
import org.springframework.web.server.ServerWebExchange;
import reactor.core.publisher.Mono;

/**
 * A {@code Decision} handler argument: the main limiter's decision for this request (null when
 * none).
 */
final class DecisionArgumentResolvers {
  private DecisionArgumentResolvers() {}

  /** Spring MVC. */
  static final class Servlet implements HandlerMethodArgumentResolver {
    @Override
    public boolean supportsParameter(MethodParameter p) {
      return p.getParameterType() == Decision.class;
    }

    @Override
    public Object resolveArgument(
        MethodParameter p,
        ModelAndViewContainer mav,
        NativeWebRequest req,
        WebDataBinderFactory binders) {
      HttpServletRequest r = req.getNativeRequest(HttpServletRequest.class);
      return r == null ? null : ServletResponses.decision(r);
    }
  }

  /** WebFlux. */
  static final class Reactive
      implements org.springframework.web.reactive.result.method.HandlerMethodArgumentResolver {
    @Override
    public boolean supportsParameter(MethodParameter p) {
      return p.getParameterType() == Decision.class;
    }

    @Override
    public Mono<Object> resolveArgument(
        MethodParameter p, BindingContext ctx, ServerWebExchange exchange) {
      return Mono.justOrEmpty(WebFluxResponses.decision(exchange));
    }
  }
}
