package dev.redistb;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * SPEC G2: a hold taken on a settle_later policy, renewed while its request runs (G5) and settled
 * later with the actual cost (G3). A refused hold (a full hold table included, G6) charged nothing;
 * {@link #response()} is the 429 the adapters send for it.
 */
public final class Hold {
  /**
   * The limiter's side of a hold ({@code Holds}): a seam of its own, so that a hold names no file
   * above it.
   */
  interface Ops {
    /** G5: TB.RENEW on the hold's bucket; true when renewed. */
    CompletableFuture<Boolean> renew(Hold hold);

    /** G3: TB.SETTLE with max_wait. */
    CompletableFuture<Settlement> settle(Hold hold, double actual);

    /** The renewal timers' thread. */
    ScheduledExecutorService scheduler();
  }

  /** held: renewed; stopped: its response ended (a settle may still come). */
  private enum State {
    HELD,
    STOPPED,
    SETTLING,
    SETTLED,
    LOST,
    REFUSED
  }

  private final PolicyResult result;
  private final String id;
  private final double estimate;
  private final long ttlMs;
  private final RateLimitResponse response;
  private final SettleTarget target;
  private final Ops ops;
  private final AtomicBoolean renewing = new AtomicBoolean();
  private State state;
  private RenewalTimer timer;

  Hold(
      PolicyResult result,
      String id,
      double estimate,
      long ttlMs,
      RateLimitResponse response,
      SettleTarget target,
      Ops ops) {
    this.result = result;
    this.id = id;
    this.estimate = estimate;
    this.ttlMs = ttlMs;
    this.response = response;
    this.target = target;
    this.ops = ops;
    this.state = result.allowed() && id != null ? State.HELD : State.REFUSED;
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

  /** The hold's ttl in ms (G1), renewed every half of it (G5). */
  public long ttlMs() {
    return ttlMs;
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

  /** G5: still this request's to renew or settle (not refused, settled or lost). */
  synchronized boolean live() {
    return state == State.HELD || state == State.STOPPED;
  }

  /** SPEC G5: renew every ttl / 2 until settled, lost or {@link #stop()}. */
  synchronized void start() {
    if (state != State.HELD || timer != null) {
      return;
    }
    timer = new RenewalTimer(ops.scheduler(), ttlMs / 2, this::renew, RenewalTimer.NONE);
    timer.start();
  }

  /** SPEC G5: the response ended: no more renewals (a settle may still come). */
  synchronized void stop() {
    if (state == State.HELD) {
      state = State.STOPPED;
    }
    stopTimer();
  }

  private void stopTimer() {
    if (timer != null) {
      timer.stop();
    }
  }

  /**
   * SPEC G5: one renewal now ({@code TB.RENEW key id ttl_ms}; the hold's timer does it every ttl /
   * 2 while its request runs). False when nothing was renewed: refused, settled, lost, its response
   * ended, or the call failed (a store error; the next tick tries again).
   */
  public CompletableFuture<Boolean> renew() {
    synchronized (this) {
      if (state != State.HELD) {
        return CompletableFuture.completedFuture(false);
      }
    }
    if (!renewing.compareAndSet(false, true)) {
      return CompletableFuture.completedFuture(false);
    }
    return ops.renew(this)
        .handle(
            (out, err) -> {
              renewing.set(false);
              if (err == null && out != null && !out) {
                synchronized (this) {
                  if (state == State.HELD || state == State.STOPPED) {
                    // lost: renewals stop, and its settle sends nothing (G3)
                    state = State.LOST;
                    stopTimer();
                  }
                }
              }
              return err == null && out != null && out;
            });
  }

  /**
   * SPEC G3: TB.SETTLE with the actual cost and {@code max_wait = capacity / rate}. A second call,
   * or a call on a refused or lost hold, sends nothing and says {@code settled} false. Throws
   * {@link IllegalArgumentException} for an actual that is not a cost (C3); a failed call completes
   * with a {@code StoreException} (the hold then keeps its estimate charged until it expires; not
   * retried, except when the open breaker kept it from Redis: nothing was sent).
   */
  public CompletableFuture<Settlement> settle(double actual) {
    if (!Limit.validCost(actual)) {
      throw new IllegalArgumentException(
          "policy '"
              + policy()
              + "': a settlement's actual cost must be >= 0 and <= 2^53, got "
              + actual);
    }
    State was;
    synchronized (this) {
      if (state != State.HELD && state != State.STOPPED) {
        return CompletableFuture.completedFuture(
            new Settlement(false, remaining(), 0, resetAfter()));
      }
      was = state;
      state = State.SETTLING;
    }
    return ops.settle(this, actual)
        .whenComplete(
            (s, err) -> {
              synchronized (this) {
                if (err != null && GuardedStore.notSent(err)) {
                  state = was; // B2: nothing was sent, the hold is as it was
                } else {
                  state = State.SETTLED;
                  stopTimer();
                }
              }
            });
  }

  @Override
  public String toString() {
    return "Hold(" + policy() + ", allowed=" + allowed() + ", id=" + id + ")";
  }
}
