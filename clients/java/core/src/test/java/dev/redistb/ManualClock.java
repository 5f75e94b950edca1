package dev.redistb;

/** SPEC T1 in tests: a clock the test sets (the vectors' wall clock is 1764456268000 + at_ms). */
final class ManualClock implements Clock {
  static final long WALL_ORIGIN = 1764456268000L;
  volatile double nowMs;

  @Override
  public double monotonicMillis() {
    return nowMs;
  }

  @Override
  public long wallMillis() {
    return WALL_ORIGIN + (long) nowMs;
  }
}
