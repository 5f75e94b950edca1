package dev.redistb;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * SPEC G2: a hold taken on a settle_later policy, settled later with the actual cost (G3). A
 * refused hold charged nothing; {@link #response()} is the 429 the adapters send for it.
 */
public final class Hold {
  private final PolicyResult result;
  private final String id;
  private final double estimate;
  private final RateLimitResponse response;
  private final SettleTarget target;
  private final Holds ops;
  private final AtomicBoolean settled = new AtomicBoolean();

  Hold(
      PolicyResult result,
      String id,
      double estimate,
      RateLimitResponse response,
      SettleTarget target,
      Holds ops) {
    this.result = result;
    this.id = id;
    this.estimate = estimate;
    this.response = response;
    this.target = target;
    this.ops = ops;
  }

  public String policy() {
    return result.name();
  }

  public String key() {
    return result.key();
  }

  public boolean allowed() {
    return result.allowed();
  }

  public double remaining() {
    return result.remaining();
  }

  public double retryAfter() {
    return result.retryAfter();
  }

  public double resetAfter() {
    return result.resetAfter();
  }

  /** The hold id (16 hex digits), null when refused. */
  public String id() {
    return id;
  }

  public double estimate() {
    return estimate;
  }

  /** The policy's part, as a PolicyResult (G2: the 429's headers and body). */
  public PolicyResult result() {
    return result;
  }

  /** G2: the 429 for a refused hold (H1-H3, P1), null when the hold was taken. */
  public RateLimitResponse response() {
    return response;
  }

  SettleTarget target() {
    return target;
  }

  /**
   * SPEC G3: TB.SETTLE with the actual cost. A second call (or a call on a refused hold) sends
   * nothing and says {@code settled} false. Throws {@link IllegalArgumentException} for an actual
   * that is not a cost (C3); a failed call completes with a {@code StoreException} (the hold then
   * keeps its estimate charged until it expires).
   */
  public CompletableFuture<Settlement> settle(double actual) {
    if (!Limit.validCost(actual)) {
      throw new IllegalArgumentException(
          "policy '"
              + policy()
              + "': a settlement's actual cost must be >= 0 and <= 2^53, got "
              + actual);
    }
    if (!allowed() || id == null || !settled.compareAndSet(false, true)) {
      return CompletableFuture.completedFuture(new Settlement(false, remaining(), 0, resetAfter()));
    }
    return ops.settle(this, actual);
  }

  @Override
  public String toString() {
    return "Hold(" + policy() + ", allowed=" + allowed() + ", id=" + id + ")";
  }
}
