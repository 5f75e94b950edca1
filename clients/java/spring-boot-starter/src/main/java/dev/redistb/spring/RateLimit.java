package dev.redistb.spring;

import dev.redistb.store.WindowMode;
import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Repeatable;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * A rate-limit policy on a controller method, checked through Spring AOP before the method runs.
 * Several on one method are one limiter: one all-or-nothing call (TB.MTAKE). A bucket is {@code
 * limit} per {@code per}; a window (SPEC W) is at most {@code limit} per {@code window}. Durations:
 * {@code 30s}, {@code 1m}, {@code 1h}, {@code 1d} or ISO-8601 ({@code PT1H}).
 *
 * <pre>{@code
 * @RateLimit(name = "login", limit = 20, window = "1h", limiter = "login", failOpen = false)
 * @PostMapping("/login")
 * Map<String, Object> login() { ... }
 * }</pre>
 */
@Documented
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
@Repeatable(RateLimit.List.class)
public @interface RateLimit {
  /** The policy name (SPEC C1). */
  String name();

  /** A bucket's capacity, a window's limit, an in-flight limit's n. */
  double limit();

  /** A bucket: {@code limit} refilled over this duration. */
  String per() default "";

  /** A window: at most {@code limit} per window of this duration (SPEC W1). */
  String window() default "";

  /** The window's mode. */
  WindowMode mode() default WindowMode.SLIDING;

  /**
   * The identity, a SpEL expression over the method's arguments ({@code #user.id}), the request
   * ({@code #request}) and the client address ({@code #clientIp}); empty: the client address (SPEC
   * A). Null or empty skips the policy (I1).
   */
  String key() default "";

  /** The cost (SPEC C3), or {@link #costExpression()}. */
  double cost() default 1;

  /** A SpEL cost per request (checked per request, L3); empty: {@link #cost()}. */
  String costExpression() default "";

  /** SPEC S1 */
  boolean shadow() default false;

  /** The limiter's name (the metrics' {@code limiter} label); default {@code Class.method}. */
  String limiter() default "";

  /** SPEC B4: fail open (default) or closed (503) when Redis fails. */
  boolean failOpen() default true;

  /** The container of repeated {@link RateLimit}s. */
  @Documented
  @Retention(RetentionPolicy.RUNTIME)
  @Target(ElementType.METHOD)
  @interface List {
    RateLimit[] value();
  }
}
