package dev.redistb;

/** The integers of the headers (SPEC H2, H3) and the one number format of problem bodies (P5). */
public final class Numbers {
  /** The structured-field integer maximum (H2's clamp). */
  public static final long SF_MAX = 999_999_999_999_999L;

  /** P5's clamp. */
  public static final double BODY_MAX = 999_999_999_999.0;

  private Numbers() {}

  private static long clamp(double x) {
    if (Double.isNaN(x) || x <= 0) {
      return 0;
    }
    return x >= SF_MAX ? SF_MAX : (long) x;
  }

  /** {@code x} itself when within 1e-9 x max(1, x) of a whole number, else x. */
  static double snapped(double x) {
    double near = Math.rint(x);
    return Math.abs(x - near) <= 1e-9 * Math.max(1, Math.abs(x)) ? near : x;
  }

  /** {@code ceil(x)}, where x within 1e-9 x max(1, x) of a whole number is that number. */
  static long ceilSnapped(double x) {
    return (long) Math.ceil(snapped(x));
  }

  /** H2: q = floor(capacity), clamped. */
  public static long quota(double capacity) {
    return clamp(Math.floor(capacity));
  }

  /** H2: w = ceil(capacity / rate) (snapped), at least 1, clamped. */
  public static long window(double capacity, double rate) {
    double x = capacity / rate;
    if (x >= SF_MAX) {
      return SF_MAX;
    }
    return clamp(Math.max(1, Math.ceil(snapped(x))));
  }

  /** W2: a window's w, ceil(seconds), at least 1. */
  public static long windowOfSeconds(double seconds) {
    return clamp(Math.max(1, Math.ceil(Math.min(seconds, SF_MAX))));
  }

  /** H2: r = max(0, floor(remaining)), clamped. */
  public static long remaining(double remaining) {
    return clamp(Math.floor(remaining));
  }

  /** H2: t = max(0, ceil(reset_after)), clamped. */
  public static long reset(double resetAfter) {
    return clamp(Math.ceil(Math.min(resetAfter, SF_MAX)));
  }

  /** H3: max(1, ceil(retry_after)), clamped; null when never (negative) or null. */
  public static Long retryAfter(Double retryAfter) {
    if (retryAfter == null || retryAfter < 0) {
      return null;
    }
    return Math.max(1, clamp(Math.ceil(Math.min(retryAfter, SF_MAX))));
  }

  /**
   * P5: clamped to 0..=999999999999, rounded up to the millisecond (a product within 1e-9 relative
   * of a whole number of ms is that number), no exponent, no trailing zeros.
   */
  public static String bodyNumber(double x) {
    double v = Double.isNaN(x) ? 0 : Math.min(Math.max(x, 0), BODY_MAX);
    double t = v * 1000;
    double near = Math.rint(t);
    long m = (long) (Math.abs(t - near) <= 1e-9 * Math.max(1, t) ? near : Math.ceil(t));
    long whole = m / 1000;
    long frac = m % 1000;
    if (frac == 0) {
      return Long.toString(whole);
    }
    String f = String.format("%03d", frac);
    int end = f.length();
    while (f.charAt(end - 1) == '0') {
      end--;
    }
    return whole + "." + f.substring(0, end);
  }
}
