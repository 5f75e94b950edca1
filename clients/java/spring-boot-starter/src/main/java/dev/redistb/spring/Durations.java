package dev.redistb.spring;

import dev.redistb.ConfigException;
import java.time.Duration;
import java.time.format.DateTimeParseException;

/** {@code 500ms}, {@code 30s}, {@code 1m}, {@code 1h}, {@code 1d} or ISO-8601, in seconds. */
final class Durations {
  private Durations() {}

  static double seconds(String text, String what) {
    String t = text == null ? "" : text.strip();
    try {
      if (t.startsWith("P") || t.startsWith("p")) {
        return Duration.parse(t).toNanos() / 1e9;
      }
      double unit;
      String n;
      if (t.endsWith("ms")) {
        unit = 0.001;
        n = t.substring(0, t.length() - 2);
      } else if (t.endsWith("s")) {
        unit = 1;
        n = t.substring(0, t.length() - 1);
      } else if (t.endsWith("m")) {
        unit = 60;
        n = t.substring(0, t.length() - 1);
      } else if (t.endsWith("h")) {
        unit = 3600;
        n = t.substring(0, t.length() - 1);
      } else if (t.endsWith("d")) {
        unit = 86400;
        n = t.substring(0, t.length() - 1);
      } else {
        unit = 1;
        n = t;
      }
      double v = Double.parseDouble(n.strip()) * unit;
      if (!(v > 0) || !Double.isFinite(v)) {
        throw new ConfigException(what + " must be a positive duration, got '" + text + "'");
      }
      return v;
    } catch (NumberFormatException | DateTimeParseException e) {
      throw new ConfigException(
          what + " is not a duration (30s, 1m, 1h, 1d, PT1H), got '" + text + "'");
    }
  }
}
