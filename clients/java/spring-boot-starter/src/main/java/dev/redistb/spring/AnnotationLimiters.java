package dev.redistb.spring;

import dev.redistb.ConfigException;
import dev.redistb.Key;
import dev.redistb.Limit;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.RequestView;
import dev.redistb.WindowLimit;
import java.lang.reflect.Method;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.springframework.aop.support.AopUtils;
import org.springframework.beans.factory.config.BeanPostProcessor;
import org.springframework.context.expression.MethodBasedEvaluationContext;
import org.springframework.core.DefaultParameterNameDiscoverer;
import org.springframework.core.ParameterNameDiscoverer;
import org.springframework.core.annotation.AnnotatedElementUtils;
import org.springframework.expression.Expression;
import org.springframework.expression.spel.standard.SpelExpressionParser;
import org.springframework.util.ReflectionUtils;

/**
 * The limiters of {@link RateLimit} methods, one per method (its annotations are its policies,
 * checked in one call), built when the bean is (a configuration error fails the start, SPEC C) and
 * checked at startup with the others (U).
 */
public final class AnnotationLimiters implements BeanPostProcessor {
  private static final SpelExpressionParser PARSER = new SpelExpressionParser();
  private static final ParameterNameDiscoverer NAMES = new DefaultParameterNameDiscoverer();

  /** What a key or cost expression sees: the call's arguments, the request, the client address. */
  record Call(
      Method method, Object[] args, RequestView view, dev.redistb.ClientIpConfig clientIp) {}

  /** The request of an annotated call as its limiter sees it. */
  record CallView(Call call) implements RequestView {
    @Override
    public Object request() {
      return call;
    }

    @Override
    public String peer() {
      return call.view().peer();
    }

    @Override
    public java.util.List<String> header(String name) {
      return call.view().header(name);
    }

    @Override
    public String route() {
      return call.view().route();
    }
  }

  /** The view of one call of {@code method}. */
  CallView view(Method method, Object[] args, RequestView framework) {
    return new CallView(new Call(method, args, framework, limiters.get().clientIp()));
  }

  private final java.util.function.Supplier<Limiters> limiters;
  private final Map<Method, RateLimiter> byMethod = new ConcurrentHashMap<>();

  /** {@code limiters} is asked for on first use (a BeanPostProcessor is made before them). */
  public AnnotationLimiters(java.util.function.Supplier<Limiters> limiters) {
    this.limiters = limiters;
  }

  @Override
  public Object postProcessAfterInitialization(Object bean, String beanName) {
    Class<?> type = AopUtils.getTargetClass(bean);
    ReflectionUtils.doWithMethods(
        type,
        m -> limiterOf(m),
        m -> !AnnotatedElementUtils.findMergedRepeatableAnnotations(m, RateLimit.class).isEmpty());
    return bean;
  }

  /** The limiter of an annotated method (built once). */
  RateLimiter limiterOf(Method method) {
    return byMethod.computeIfAbsent(method, this::build);
  }

  private RateLimiter build(Method m) {
    var annotations = AnnotatedElementUtils.findMergedRepeatableAnnotations(m, RateLimit.class);
    String where = m.getDeclaringClass().getSimpleName() + "." + m.getName();
    RateLimit first = annotations.iterator().next();
    String name = first.limiter().isEmpty() ? where : first.limiter();
    boolean failOpen = first.failOpen();
    RateLimiter.Builder b = limiters.get().builder(name, failOpen).limitUnmatched(true);
    for (RateLimit a : annotations) {
      if (a.failOpen() != failOpen || !(a.limiter().isEmpty() ? where : a.limiter()).equals(name)) {
        throw new ConfigException(
            where
                + ": the @RateLimit annotations of one method are one limiter: give them one limiter and failOpen");
      }
      b.policy(policy(a, m, where));
    }
    return limiters.get().register(b.build());
  }

  private static Policy policy(RateLimit a, Method m, String where) {
    String at = "@RateLimit(name = \"" + a.name() + "\") on " + where;
    Policy.Builder p;
    if (!a.window().isEmpty() && !a.per().isEmpty()) {
      throw new ConfigException(at + ": per (a bucket) or window, not both");
    }
    if (!a.window().isEmpty()) {
      p =
          Policy.builder(
              a.name(),
              WindowLimit.of(a.limit(), Durations.seconds(a.window(), at + " window"), a.mode()));
    } else if (!a.per().isEmpty()) {
      p =
          Policy.builder(
              a.name(), Limit.perPeriod(a.limit(), Durations.seconds(a.per(), at + " per")));
    } else {
      throw new ConfigException(at + ": per (a bucket) or window is required");
    }
    if (!a.key().isEmpty()) {
      Expression e = PARSER.parseExpression(a.key());
      p.key(
          Key.fromFn(
              req -> {
                Object v = e.getValue(context(req));
                return v == null ? null : v.toString();
              }));
    }
    if (!a.costExpression().isEmpty()) {
      Expression e = PARSER.parseExpression(a.costExpression());
      p.cost(
          req -> {
            Object v = e.getValue(context(req));
            return v instanceof Number n ? n.doubleValue() : Double.NaN;
          });
    } else {
      p.cost(a.cost());
    }
    return p.shadow(a.shadow()).build();
  }

  private static MethodBasedEvaluationContext context(RequestView req) {
    Call call = (Call) req.request();
    MethodBasedEvaluationContext ctx =
        new MethodBasedEvaluationContext(call, call.method(), call.args(), NAMES);
    ctx.setVariable("request", call.view().request());
    ctx.setVariable("clientIp", call.clientIp().identity(call.view().peer(), call.view()::header));
    return ctx;
  }
}
