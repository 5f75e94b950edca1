package dev.redistb;

/**
 * SPEC T1: the limiter's time source: a monotonic clock for the deny cache, the breaker and log
 * rates, a wall clock for H4's Unix reset. Tests replace it.
 */
public interface Clock {
  /** Monotonic milliseconds (any origin). */
  double monotonicMillis();

  /** Milliseconds since the Unix epoch. */
  long wallMillis();

  /** {@link System#nanoTime()} and {@link System#currentTimeMillis()}. */
  Clock SYSTEM =
      new Clock() {
        @Override
        public double monotonicMillis() {
          return System.nanoTime() / 1e6;
        }

        @Override
        public long wallMillis() {
          return System.currentTimeMillis();
        }
      };
}
