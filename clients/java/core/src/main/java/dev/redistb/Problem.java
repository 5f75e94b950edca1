package dev.redistb;

import java.util.ArrayList;
import java.util.List;

/**
 * The RFC 9457 problem bodies (SPEC P1-P6): compact JSON, keys in the SPEC's order, P5's number
 * format. Policy and header names are tokens ({@code [a-z0-9_-]}, header names), so no string here
 * needs JSON escaping beyond what {@link #quote} does.
 */
public final class Problem {
  private Problem() {}

  static String quote(String s) {
    StringBuilder out = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  private static String head(String title, int status, String detail) {
    return "{\"type\":\"about:blank\",\"title\":"
        + quote(title)
        + ",\"status\":"
        + status
        + ",\"detail\":"
        + quote(detail);
  }

  /**
   * P1, P2: a 429's body naming D4's violated policies and D3's wait (the same as the headers');
   * {@code retry_after} null with P2's detail when one can never pass.
   */
  public static String tooManyRequests(Decision d) {
    List<String> violated = d.violated();
    Double wait = d.retryAfter();
    List<String> never = new ArrayList<>();
    for (PolicyResult r : d.results()) {
      if (!r.allowed() && !r.shadow() && r.retryAfter() < 0) {
        never.add(
            "this request costs "
                + Numbers.bodyNumber(r.cost())
                + " but policy '"
                + r.name()
                + "' allows at most "
                + Numbers.bodyNumber(r.capacity())
                + " at once: it can never succeed");
      }
    }
    String detail;
    String retry;
    if (!never.isEmpty() || wait == null) {
      detail = String.join("; ", never);
      retry = "null";
    } else {
      StringBuilder names = new StringBuilder();
      for (String n : violated) {
        names.append(names.length() == 0 ? "" : ", ").append('\'').append(n).append('\'');
      }
      detail =
          "rate limit exceeded for " + names + ": retry after " + Numbers.retryAfter(wait) + " s";
      retry = Numbers.bodyNumber(wait);
    }
    StringBuilder list = new StringBuilder("[");
    for (String n : violated) {
      list.append(list.length() == 1 ? "" : ",").append(quote(n));
    }
    list.append(']');
    return head("Too Many Requests", 429, detail)
        + ",\"violated_policies\":"
        + list
        + ",\"retry_after\":"
        + retry
        + "}";
  }

  /** P3: the 503 of a fail-closed limiter whose store failed. */
  public static String storeUnavailable() {
    return head(
            "Service Unavailable", 503, "the rate limiter's store is unavailable; retry shortly")
        + "}";
  }

  /** P4: the 400 of a header identity with a control byte (I2). */
  public static String badRequest(String header) {
    return head("Bad Request", 400, "header '" + header + "' holds a control byte") + "}";
  }

  /** P4: the 500 of an out-of-range cost or limit from the application (L3), never the value. */
  public static String invalidInput(String policy) {
    return head(
            "Internal Server Error",
            500,
            "rate limit policy '" + policy + "' got an invalid cost or limit from the application")
        + "}";
  }

  /** P4: the 500 of a call Redis answered CROSSSLOT (K6), naming its policies in order. */
  public static String crossSlot(List<String> policies) {
    StringBuilder names = new StringBuilder();
    for (String n : policies) {
      names.append(names.length() == 0 ? "" : ", ").append('\'').append(n).append('\'');
    }
    return head(
            "Internal Server Error",
            500,
            "rate limit policies "
                + names
                + " have keys in different cluster slots: give the limiter a hash tag")
        + "}";
  }
}
