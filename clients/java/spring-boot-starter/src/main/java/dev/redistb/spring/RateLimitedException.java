package dev.redistb.spring;

import dev.redistb.Decision;
import dev.redistb.RateLimitResponse;

/**
 * A request an {@link RateLimit} limiter (or a held settle_later policy) refused: carries the
 * response every adapter sends (429, 503, 500, 400 with the headers and problem body), which the
 * starter's handler writes.
 */
public class RateLimitedException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final transient RateLimitResponse response;
  private final transient Decision decision;

  public RateLimitedException(RateLimitResponse response, Decision decision) {
    super("rate limited: " + response.status(), null, false, false);
    this.response = response;
    this.decision = decision;
  }

  public RateLimitResponse response() {
    return response;
  }

  /** The decision behind it (null for a refused hold). */
  public Decision decision() {
    return decision;
  }
}
