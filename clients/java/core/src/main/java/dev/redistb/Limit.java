package dev.redistb;

import dev.redistb.store.WindowMode;

/**
 * A token bucket's shape (SPEC "Names"): {@code capacity} tokens (the burst), refilled at {@code
 * rate} tokens a second; and the factories of the other kinds ({@link #window}, {@link #inFlight}).
 */
public record Limit(double capacity, double rate) implements AnyLimit {
  /** 2^53, the module's bound on capacities, rates and costs. */
  public static final double MAX = 9007199254740992.0;

  /**
   * SPEC C2 (capacity finite, > 0, <= 2^53; rate finite, >= 1e-9, <= 2^53), checked here: the
   * factories and a policy's static limit use it; a limit function's answer may be out of range and
   * is checked per request instead (L3), so {@code new Limit(...)} does not throw.
   */
  public static Limit checked(double capacity, double rate) {
    if (!validCapacity(capacity)) {
      throw new ConfigException("capacity must be > 0 and <= 2^53, got " + capacity);
    }
    if (!validRate(rate)) {
      throw new ConfigException("rate must be >= 1e-9 and <= 2^53 per second, got " + rate);
    }
    return new Limit(capacity, rate);
  }

  static boolean validCapacity(double capacity) {
    return capacity > 0 && capacity <= MAX;
  }

  static boolean validRate(double rate) {
    return rate >= 1e-9 && rate <= MAX;
  }

  /** SPEC C2: whether a capacity and a rate are in the module's ranges (NaN is not). */
  public static boolean valid(double capacity, double rate) {
    return validCapacity(capacity) && validRate(rate);
  }

  /** SPEC C3: whether a cost is in range (finite, >= 0, <= 2^53). */
  public static boolean validCost(double cost) {
    return cost >= 0 && cost <= MAX;
  }

  @Override
  public LimitKind kind() {
    return LimitKind.BUCKET;
  }

  /** {@code n} per {@code seconds}: a burst of n, refilled evenly over the period. */
  public static Limit perPeriod(double n, double seconds) {
    return checked(n, n / seconds);
  }

  public static Limit perSecond(double n) {
    return perPeriod(n, 1);
  }

  public static Limit perMinute(double n) {
    return perPeriod(n, 60);
  }

  public static Limit perHour(double n) {
    return perPeriod(n, 3600);
  }

  public static Limit perDay(double n) {
    return perPeriod(n, 86400);
  }

  /** SPEC W1: at most {@code n} per window of {@code seconds}, sliding. */
  public static WindowLimit window(long n, double seconds) {
    return new WindowLimit(n, seconds, WindowMode.SLIDING);
  }

  /** SPEC W1: at most {@code n} per window of {@code seconds}, sliding or fixed. */
  public static WindowLimit window(long n, double seconds, WindowMode mode) {
    return new WindowLimit(n, seconds, mode);
  }

  /** SPEC W1: at most {@code n} a second, sliding. */
  public static WindowLimit windowPerSecond(long n) {
    return windowPerSecond(n, WindowMode.SLIDING);
  }

  /** SPEC W1: at most {@code n} a second, sliding or fixed. */
  public static WindowLimit windowPerSecond(long n, WindowMode mode) {
    return window(n, 1, mode);
  }

  /** SPEC W1: at most {@code n} a minute, sliding. */
  public static WindowLimit windowPerMinute(long n) {
    return windowPerMinute(n, WindowMode.SLIDING);
  }

  /** SPEC W1: at most {@code n} a minute, sliding or fixed. */
  public static WindowLimit windowPerMinute(long n, WindowMode mode) {
    return window(n, 60, mode);
  }

  /** SPEC W1: at most {@code n} an hour, sliding. */
  public static WindowLimit windowPerHour(long n) {
    return windowPerHour(n, WindowMode.SLIDING);
  }

  /** SPEC W1: at most {@code n} an hour, sliding or fixed. */
  public static WindowLimit windowPerHour(long n, WindowMode mode) {
    return window(n, 3600, mode);
  }

  /** SPEC W1: at most {@code n} a day, sliding. */
  public static WindowLimit windowPerDay(long n) {
    return windowPerDay(n, WindowMode.SLIDING);
  }

  /** SPEC W1: at most {@code n} a day, sliding or fixed. */
  public static WindowLimit windowPerDay(long n, WindowMode mode) {
    return window(n, 86400, mode);
  }

  /** SPEC N1: at most {@code n} in progress, each with a lease of 30 s (and max_duration 300 s). */
  public static InFlightLimit inFlight(long n) {
    return new InFlightLimit(n, 30);
  }

  /** SPEC N1: at most {@code n} in progress, each with a lease of {@code lease} seconds. */
  public static InFlightLimit inFlight(long n, double lease) {
    return new InFlightLimit(n, lease);
  }

  /**
   * SPEC N1, N7: at most {@code n} in progress, each with a lease of {@code lease} seconds and
   * ended {@code maxDuration} seconds after its grant (default 300).
   */
  public static InFlightLimit inFlight(long n, double lease, double maxDuration) {
    return new InFlightLimit(n, lease, maxDuration);
  }
}
