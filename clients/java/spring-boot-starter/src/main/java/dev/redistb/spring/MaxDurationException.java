package dev.redistb.spring;

import dev.redistb.Lease;
import java.io.IOException;

/**
 * SPEC N7: the limiter ended the request at its in-flight policy's max_duration; a write to its
 * response after that raises this (servlet), or the response's publisher ends with it (WebFlux).
 */
public final class MaxDurationException extends IOException {
  private static final long serialVersionUID = 1L;

  MaxDurationException(Lease lease) {
    super(
        "in-flight policy '"
            + lease.policy()
            + "': the request ran for its max_duration of "
            + lease.maxDurationMs()
            + " ms (SPEC N7): its response is ended");
  }
}
