package dev.redistb;

/**
 * SPEC B1-B3: after a connection error or a timeout, Redis is left alone for the cool-down; then
 * exactly one call (a check, a refund, a release, a hold...) is the probe, across threads, while
 * the others keep the failure mode; success closes the breaker, failure opens it again.
 */
final class Breaker {
  /** What {@link #admit} allows. */
  enum Pass {
    /** the breaker is closed */
    CLOSED,
    /** this call is the one probe after the cool-down */
    PROBE,
    /** open, or another call probes: not sent */
    DENIED
  }

  private final double cooldownMs;

  /** monotonic ms until which the breaker is open; NaN: closed */
  private double openUntil = Double.NaN;

  private boolean probing;

  Breaker(double cooldownMs) {
    this.cooldownMs = cooldownMs;
  }

  /** B2, B3: whether a call may be sent now, and as what. */
  synchronized Pass admit(double now) {
    if (Double.isNaN(openUntil)) {
      return Pass.CLOSED;
    }
    if (now >= openUntil && !probing) {
      probing = true;
      return Pass.PROBE;
    }
    return Pass.DENIED;
  }

  /** Whether a call would be admitted now (nothing claimed). */
  synchronized boolean isClosed() {
    return Double.isNaN(openUntil);
  }

  /**
   * B3: an answer (a reply, an error reply included) closes nothing but a connection error; success
   * closes.
   */
  synchronized void succeeded(Pass pass) {
    openUntil = Double.NaN;
    if (pass == Pass.PROBE) {
      probing = false;
    }
  }

  /** B1: a failure; a connection error or a timeout opens it for the cool-down. */
  synchronized void failed(Pass pass, boolean opens, double now) {
    if (opens) {
      openUntil = now + cooldownMs;
    }
    if (pass == Pass.PROBE) {
      probing = false;
    }
  }

  /** The call ended without an answer that says anything about Redis (cancelled). */
  synchronized void abandoned(Pass pass) {
    if (pass == Pass.PROBE) {
      probing = false;
    }
  }
}
