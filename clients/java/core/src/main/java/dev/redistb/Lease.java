package dev.redistb;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One request's lease of an in-flight policy (SPEC N6: {@code key}, {@code id}, {@code policy}):
 * renewed while the request runs (N5) and ended exactly once when its response is finished (N4).
 */
public final class Lease {
  private enum State {
    HELD,
    LOST,
    ENDED
  }

  private final String key;
  private final String id;
  private final String policy;
  private final long leaseMs;
  private final Leases ops;
  private State state = State.HELD;
  private final AtomicBoolean renewing = new AtomicBoolean();
  private ScheduledFuture<?> timer;

  Lease(String key, String id, String policy, long leaseMs, Leases ops) {
    this.key = key;
    this.id = id;
    this.policy = policy;
    this.leaseMs = leaseMs;
    this.ops = ops;
  }

  public String key() {
    return key;
  }

  public String id() {
    return id;
  }

  public String policy() {
    return policy;
  }

  /** The lease's length in ms (C9). */
  public long leaseMs() {
    return leaseMs;
  }

  synchronized boolean held() {
    return state == State.HELD;
  }

  /**
   * SPEC N4: the response ended (sent, disconnected, raised or cancelled): TB.RELEASE once; later
   * calls do nothing, and a lost lease sends nothing.
   */
  public CompletableFuture<Void> finish() {
    boolean lost;
    synchronized (this) {
      if (state == State.ENDED) {
        return CompletableFuture.completedFuture(null);
      }
      lost = state == State.LOST;
      state = State.ENDED;
      stopTimer();
    }
    return ops.end(this, lost);
  }

  /** SPEC N5: one renewal now; false when nothing was renewed (lost, ended, or failed). */
  public CompletableFuture<Boolean> renew() {
    if (!held() || !renewing.compareAndSet(false, true)) {
      return CompletableFuture.completedFuture(false);
    }
    return ops.renew(this)
        .handle(
            (out, err) -> {
              renewing.set(false);
              if (err == null && out != null && !out) {
                synchronized (this) {
                  if (state == State.HELD) {
                    state = State.LOST;
                    stopTimer();
                  }
                }
              }
              return err == null && out != null && out;
            });
  }

  /** SPEC N5: renew every lease / 2 until the lease ends (a daemon scheduler). */
  public synchronized void keepAlive() {
    if (state != State.HELD || timer != null) {
      return;
    }
    long every = Math.max(1, leaseMs / 2);
    timer = ops.scheduler().scheduleAtFixedRate(this::renew, every, every, TimeUnit.MILLISECONDS);
  }

  private void stopTimer() {
    if (timer != null) {
      timer.cancel(false);
      timer = null;
    }
  }

  @Override
  public String toString() {
    return "Lease(" + key + ", " + id + ", " + policy + ")";
  }
}
