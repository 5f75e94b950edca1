package dev.redistb;

import java.util.HashMap;
import java.util.Map;
import java.util.function.Consumer;

/**
 * One warning line a second at most per topic (SPEC B5, L3, S2, N5), on the limiter's clock, saying
 * how many were not logged since.
 */
final class RateLog {
  private final Clock clock;
  private final Consumer<String> sink;
  private final Map<String, double[]> topics = new HashMap<>();

  RateLog(Clock clock, Consumer<String> sink) {
    this.clock = clock;
    this.sink = sink;
  }

  /** One line, not rate-limited (startup). */
  void line(String text) {
    sink.accept(text);
  }

  /** Logs {@code line(count since the last line)} unless this topic logged within a second. */
  void warn(String topic, java.util.function.LongFunction<String> line) {
    double now = clock.monotonicMillis();
    String text;
    synchronized (topics) {
      double[] s = topics.computeIfAbsent(topic, k -> new double[] {Double.NEGATIVE_INFINITY, 0});
      s[1] += 1;
      if (now - s[0] < 1000) {
        return;
      }
      text = line.apply((long) s[1]);
      s[0] = now;
      s[1] = 0;
    }
    sink.accept(text);
  }
}
