package dev.redistb;

import java.util.ArrayList;
import java.util.List;

/**
 * From a decision to the rate-limit headers (SPEC H): {@code RateLimit-Policy} and {@code
 * RateLimit} (IETF httpapi ratelimit-headers, structured-field lists), the legacy {@code
 * X-RateLimit-*} (H4) and {@code Retry-After} (H3). Shadow policies are in no header (H1).
 */
public final class Headers {
  public static final String POLICY = "RateLimit-Policy";
  public static final String RATELIMIT = "RateLimit";
  public static final String RETRY_AFTER = "Retry-After";

  /** H4: the legacy reset's form. */
  public enum LegacyReset {
    /** {@code ceil(now_unix + reset_after)}, the default */
    UNIX,
    /** the delta seconds t */
    DELTA
  }

  /**
   * The header settings of a limiter.
   *
   * @param legacy whether the X-RateLimit-* headers are written (off by default)
   * @param legacyReset their reset's form
   */
  public record Options(boolean legacy, LegacyReset legacyReset) {
    public static final Options DEFAULT = new Options(false, LegacyReset.UNIX);
  }

  private Headers() {}

  /** H2, W2, N3: a policy's w; null for an in-flight policy (no w). */
  static Long policyWindow(PolicyResult r) {
    if (r.kind() == LimitKind.IN_FLIGHT || r.rate() == null) {
      return null;
    }
    if (r.kind() == LimitKind.WINDOW && r.window() != null) {
      return Numbers.windowOfSeconds(r.window());
    }
    return Numbers.window(r.capacity(), r.rate());
  }

  /** H1: {@code "ip";q=10;w=1} ({@code "conc";q=4} without w). */
  static String policyItem(PolicyResult r) {
    Long w = policyWindow(r);
    String q = "\"" + r.name() + "\";q=" + Numbers.quota(r.capacity());
    return w == null ? q : q + ";w=" + w;
  }

  /** H1: {@code "ip";r=9;t=1}. */
  static String ratelimitItem(PolicyResult r) {
    return "\""
        + r.name()
        + "\";r="
        + Numbers.remaining(r.remaining())
        + ";t="
        + Numbers.reset(r.resetAfter());
  }

  private static List<PolicyResult> enforced(List<PolicyResult> all) {
    List<PolicyResult> out = new ArrayList<>(all.size());
    for (PolicyResult r : all) {
      if (!r.shadow()) {
        out.add(r);
      }
    }
    return out;
  }

  /** H3: Retry-After of a refused decision; null when allowed or never admissible. */
  public static String retryAfter(Decision d) {
    if (!d.limited()) {
      return null;
    }
    Long s = Numbers.retryAfter(d.retryAfter());
    return s == null ? null : Long.toString(s);
  }

  /**
   * Every rate-limit header of a decision (H1-H4), none when Redis (or the deny cache) was not
   * consulted. {@code nowMs}: the wall clock, read for H4's Unix reset only.
   */
  public static List<RateLimitResponse.Header> of(Decision d, Options opts, long nowMs) {
    List<RateLimitResponse.Header> out = new ArrayList<>(5);
    List<PolicyResult> shown = enforced(d.results());
    if (!shown.isEmpty()) {
      StringBuilder policy = new StringBuilder();
      StringBuilder limit = new StringBuilder();
      for (PolicyResult r : shown) {
        policy.append(policy.length() == 0 ? "" : ", ").append(policyItem(r));
        limit.append(limit.length() == 0 ? "" : ", ").append(ratelimitItem(r));
      }
      out.add(new RateLimitResponse.Header(POLICY, policy.toString()));
      out.add(new RateLimitResponse.Header(RATELIMIT, limit.toString()));
      if (opts.legacy()) {
        legacy(shown, opts.legacyReset(), nowMs, out);
      }
    }
    String retry = retryAfter(d);
    if (retry != null) {
      out.add(new RateLimitResponse.Header(RETRY_AFTER, retry));
    }
    return out;
  }

  /** H4: of the enforced policy with the smallest remaining (ties: the first). */
  private static void legacy(
      List<PolicyResult> shown, LegacyReset form, long nowMs, List<RateLimitResponse.Header> out) {
    PolicyResult tight = shown.get(0);
    for (PolicyResult r : shown) {
      if (r.remaining() < tight.remaining()) {
        tight = r;
      }
    }
    long reset =
        form == LegacyReset.DELTA
            ? Numbers.reset(tight.resetAfter())
            : (long) Math.ceil(nowMs / 1000.0 + Math.max(0, tight.resetAfter()));
    out.add(
        new RateLimitResponse.Header(
            "X-RateLimit-Limit", Long.toString(Numbers.quota(tight.capacity()))));
    out.add(
        new RateLimitResponse.Header(
            "X-RateLimit-Remaining", Long.toString(Numbers.remaining(tight.remaining()))));
    out.add(new RateLimitResponse.Header("X-RateLimit-Reset", Long.toString(reset)));
  }

  /**
   * H1: a second limiter's items joined to the first's in one field ({@code before} the outer
   * limiter's value, or null).
   */
  public static String join(String before, String after) {
    if (before == null || before.isEmpty()) {
      return after;
    }
    return after == null || after.isEmpty() ? before : before + ", " + after;
  }

  /** The response for a decision (H, P, B4): status, headers and, when refused, the body. */
  public static RateLimitResponse respond(Decision d, Options opts, long nowMs) {
    switch (d.outcome()) {
      case LIMITED:
        return new RateLimitResponse(429, of(d, opts, nowMs), Problem.tooManyRequests(d));
      case INVALID_INPUT:
        return new RateLimitResponse(
            500,
            List.of(),
            d.crossSlot() != null
                ? Problem.crossSlot(d.crossSlot())
                : Problem.invalidInput(d.culprit()));
      case BAD_REQUEST:
        return new RateLimitResponse(400, List.of(), Problem.badRequest(d.culprit()));
      case STORE_ERROR:
        if (!d.allowed()) {
          return new RateLimitResponse(
              503,
              List.of(new RateLimitResponse.Header(RETRY_AFTER, "1")),
              Problem.storeUnavailable());
        }
        return new RateLimitResponse(200, List.of(), null);
      default:
        return new RateLimitResponse(200, of(d, opts, nowMs), null);
    }
  }
}
