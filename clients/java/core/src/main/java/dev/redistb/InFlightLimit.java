package dev.redistb;

/**
 * SPEC N1, C9: at most {@code limit} requests of a key in progress at once, each holding a lease of
 * {@code lease} seconds (whole milliseconds, rounded up), renewed while it runs (N5) but for at
 * most {@code maxDuration} seconds after its grant (N7: then the request is ended), and released
 * when its response ends (N4).
 */
public record InFlightLimit(long limit, double lease, double maxDuration) implements AnyLimit {
  /** SPEC N7: the default max_duration, in seconds. */
  public static final double DEFAULT_MAX_DURATION = 300;

  /** SPEC C9 */
  public InFlightLimit {
    if (limit < 1 || limit > 10000) {
      throw new ConfigException(
          "an in-flight limit must be a whole number >= 1 and <= 10000, got " + limit);
    }
    if (!(lease >= 0.001 && lease <= 31536000)) {
      throw new ConfigException("a lease must be >= 0.001 and <= 31536000 seconds, got " + lease);
    }
    if (!(maxDuration >= 0.001 && maxDuration <= 31536000)) {
      throw new ConfigException(
          "a max_duration must be >= 0.001 and <= 31536000 seconds, got " + maxDuration);
    }
  }

  /** SPEC C9, N7: the default max_duration (300 s). */
  public InFlightLimit(long limit, double lease) {
    this(limit, lease, DEFAULT_MAX_DURATION);
  }

  /** SPEC C9: an in-flight limit from a limit that may not be whole. */
  public static InFlightLimit of(double limit, double lease) {
    return of(limit, lease, DEFAULT_MAX_DURATION);
  }

  /** SPEC C9, N7: an in-flight limit from a limit that may not be whole, with a max_duration. */
  public static InFlightLimit of(double limit, double lease, double maxDuration) {
    if (!(limit == Math.rint(limit) && limit >= 1 && limit <= 10000)) {
      throw new ConfigException(
          "an in-flight limit must be a whole number >= 1 and <= 10000, got " + limit);
    }
    return new InFlightLimit((long) limit, lease, maxDuration);
  }

  @Override
  public LimitKind kind() {
    return LimitKind.IN_FLIGHT;
  }

  /** SPEC N3: an in-flight policy's capacity is its limit. */
  @Override
  public double capacity() {
    return limit;
  }

  /** SPEC C9: {@code ceil(lease x 1000)}, a product within 1e-9 of a whole number being it. */
  public long leaseMs() {
    return Numbers.ceilSnapped(lease * 1000);
  }

  /** SPEC C9, N7: {@code ceil(max_duration x 1000)}, as the lease's. */
  public long maxDurationMs() {
    return Numbers.ceilSnapped(maxDuration * 1000);
  }
}
