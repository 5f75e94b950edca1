package dev.redistb;

import java.util.List;

/**
 * What an adapter sends for a decision (SPEC H, P, B4): the status, the headers, and a problem
 * body; a null body means the request goes on to the handler (with the headers).
 *
 * @param status 200 (go on), 429, 503 (fail-closed), 500 (L3), 400 (I2)
 * @param headers the rate-limit headers, in order
 * @param body the problem body's compact JSON (P6), or null
 */
public record RateLimitResponse(int status, List<Header> headers, String body) {
  /** The media type of every problem body (RFC 9457). */
  public static final String PROBLEM_TYPE = "application/problem+json";

  /**
   * One header field.
   *
   * @param name as written ({@code RateLimit-Policy})
   * @param value its value
   */
  public record Header(String name, String value) {}

  public RateLimitResponse {
    headers = List.copyOf(headers);
  }

  /** Whether the request goes on to the handler. */
  public boolean proceeds() {
    return body == null;
  }

  /** The value of a header (any case), or null. */
  public String header(String name) {
    for (Header h : headers) {
      if (h.name().equalsIgnoreCase(name)) {
        return h.value();
      }
    }
    return null;
  }
}
