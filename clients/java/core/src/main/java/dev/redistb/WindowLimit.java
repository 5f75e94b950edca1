package dev.redistb;

import dev.redistb.store.WindowMode;

/**
 * SPEC W1: at most {@code limit} requests (costs) per window of {@code seconds}, aligned to
 * multiples of {@code seconds} since the epoch, checked with TB.WINDOW (W2).
 */
public record WindowLimit(long limit, double seconds, WindowMode mode) implements AnyLimit {
  /** SPEC C8 */
  public WindowLimit {
    if (limit < 1 || limit > Limit.MAX) {
      throw new ConfigException(
          "a window limit must be a whole number >= 1 and <= 2^53, got " + limit);
    }
    if (!(seconds >= 0.000001 && seconds <= 1e12)) {
      throw new ConfigException("a window must be >= 0.000001 and <= 1e12 seconds, got " + seconds);
    }
    if (mode != WindowMode.SLIDING && mode != WindowMode.FIXED) {
      throw new ConfigException("a window mode is sliding or fixed, got " + mode);
    }
  }

  /** SPEC C8: a window from a limit that may not be whole (a configuration's number). */
  public static WindowLimit of(double limit, double seconds, WindowMode mode) {
    if (!(limit == Math.rint(limit) && limit >= 1 && limit <= Limit.MAX)) {
      throw new ConfigException(
          "a window limit must be a whole number >= 1 and <= 2^53, got " + limit);
    }
    return new WindowLimit((long) limit, seconds, mode);
  }

  @Override
  public LimitKind kind() {
    return LimitKind.WINDOW;
  }

  /** SPEC D2, W2: a window's capacity is its limit. */
  @Override
  public double capacity() {
    return limit;
  }

  /** SPEC D2, W2: a window's rate is limit / seconds. */
  public double rate() {
    return limit / seconds;
  }
}
