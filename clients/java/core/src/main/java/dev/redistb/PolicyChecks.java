package dev.redistb;

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * SPEC C1 (distinct names), C10 (the kinds mix only as one call can check them) and C11 (at most 64
 * policies).
 */
final class PolicyChecks {
  /** SPEC C11: the module takes at most 64 buckets in one call. */
  static final int MAX_POLICIES = 64;

  private PolicyChecks() {}

  static void check(List<Policy> policies) {
    if (policies.size() > MAX_POLICIES) {
      throw new ConfigException(
          "a limiter holds at most "
              + MAX_POLICIES
              + " policies (the module takes at most "
              + MAX_POLICIES
              + " keys in one call), got "
              + policies.size());
    }
    Set<String> names = new HashSet<>();
    List<String> slots = new ArrayList<>();
    List<String> windows = new ArrayList<>();
    Set<LimitKind> seen = EnumSet.noneOf(LimitKind.class);
    for (Policy p : policies) {
      if (!names.add(p.name())) {
        throw new ConfigException(
            "policy names must be distinct within a limiter: '" + p.name() + "' twice");
      }
      seen.add(p.kind());
      if (p.kind() == LimitKind.IN_FLIGHT) {
        slots.add(p.name());
      }
      if (p.kind() == LimitKind.WINDOW) {
        windows.add(p.name());
      }
    }
    if (slots.size() > 1) {
      throw new ConfigException(
          "a limiter has at most one in-flight policy, got " + String.join(", ", slots));
    }
    if (!windows.isEmpty() && policies.size() > 1) {
      List<String> all = new ArrayList<>();
      policies.forEach(p -> all.add(p.name()));
      throw new ConfigException(
          "a window policy is the only policy of its limiter (put "
              + String.join(", ", windows)
              + " in a limiter of its own), got "
              + String.join(", ", all));
    }
  }
}
