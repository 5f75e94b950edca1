package dev.redistb;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * One request's lease of an in-flight policy (SPEC N6: {@code key}, {@code id}, {@code policy}):
 * renewed while the request runs (N5), ended exactly once: released when its response is finished
 * (N4), or at the request's max_duration, whichever comes first (N7); lost when a renewal finds it
 * gone.
 */
public final class Lease {
  /**
   * The limiter's side of a lease ({@code Leases}): a seam of its own, so that a lease names no
   * file above it (the limiter's file imports this one, never the other way).
   */
  interface Ops {
    /** SPEC T1: the limiter's monotonic clock, ms. */
    double now();

    /** N4: the gauge down; TB.RELEASE unless the lease was lost. */
    CompletableFuture<Void> end(Lease lease, boolean lost);

    /** N5: TB.RENEW; true when renewed. */
    CompletableFuture<Boolean> renew(Lease lease);

    /** N7: counted and logged, the lease released. */
    void timedOut(Lease lease);

    /** An onTimeout action that threw: logged. */
    void actionFailed(Lease lease, RuntimeException e);

    /** The renewal timers' thread. */
    ScheduledExecutorService scheduler();
  }

  private enum State {
    HELD,
    LOST,
    ENDED,
    TIMED_OUT
  }

  private final String key;
  private final String id;
  private final String policy;
  private final long leaseMs;
  private final long maxDurationMs;

  /** SPEC N7: the limiter's monotonic ms at which the request has held its slot max_duration. */
  private final double deadline;

  private final Ops ops;
  private State state = State.HELD;
  private final AtomicBoolean renewing = new AtomicBoolean();
  private RenewalTimer timer;
  private List<Runnable> onTimeout;

  Lease(
      String key,
      String id,
      String policy,
      long leaseMs,
      long maxDurationMs,
      double grantedAt,
      Ops ops) {
    this.key = key;
    this.id = id;
    this.policy = policy;
    this.leaseMs = leaseMs;
    this.maxDurationMs = maxDurationMs;
    this.deadline = grantedAt + maxDurationMs;
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

  /** SPEC N7: how long the request may hold its slot, in ms (C9). */
  public long maxDurationMs() {
    return maxDurationMs;
  }

  synchronized boolean held() {
    return state == State.HELD;
  }

  /** SPEC N7: whether the limiter ended this request at its max_duration. */
  public synchronized boolean timedOut() {
    return state == State.TIMED_OUT;
  }

  /**
   * SPEC N7: {@code action} runs when the limiter ends the request at its max_duration (at once
   * when it has already); the adapters end the response there. It runs on the limiter's renewal
   * thread: hand anything slow to another.
   */
  public void onTimeout(Runnable action) {
    synchronized (this) {
      if (state != State.TIMED_OUT) {
        if (onTimeout == null) {
          onTimeout = new ArrayList<>(2);
        }
        onTimeout.add(action);
        return;
      }
    }
    action.run();
  }

  /**
   * SPEC N4: the response ended (sent, disconnected, raised or cancelled): TB.RELEASE once; later
   * calls do nothing, and a lost lease, or one released at its max_duration (N7), sends nothing.
   */
  public CompletableFuture<Void> finish() {
    boolean lost;
    synchronized (this) {
      if (state == State.ENDED || state == State.TIMED_OUT) {
        return CompletableFuture.completedFuture(null);
      }
      lost = state == State.LOST;
      state = State.ENDED;
      stopTimer();
    }
    return ops.end(this, lost);
  }

  /**
   * One tick of the renewal timer (SPEC N5, N7): TB.RENEW, or at or past the deadline the request's
   * end: no renewal, the lease released (N4's one release), {@link #onTimeout} actions run. True
   * only when a renewal was answered 1.
   */
  public CompletableFuture<Boolean> renew() {
    List<Runnable> actions;
    synchronized (this) {
      if (state != State.HELD) {
        return CompletableFuture.completedFuture(false);
      }
      if (ops.now() < deadline) {
        actions = null;
      } else {
        // even while a renewal is out: its late answer finds the lease no longer held
        state = State.TIMED_OUT;
        stopTimer();
        actions = onTimeout == null ? List.of() : onTimeout;
        onTimeout = null;
      }
    }
    if (actions != null) {
      ops.timedOut(this);
      for (Runnable a : actions) {
        try {
          a.run();
        } catch (RuntimeException e) {
          ops.actionFailed(this, e);
        }
      }
      return ops.end(this, false).thenApply(v -> false);
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
                  if (state == State.HELD) {
                    // lost: renewals stop and no release is sent; not timed out (N7)
                    state = State.LOST;
                    stopTimer();
                  }
                }
              }
              return err == null && out != null && out;
            });
  }

  /** SPEC N5, N7: renew every lease / 2, and tick at the deadline, until the lease ends. */
  public synchronized void keepAlive() {
    if (state != State.HELD || timer != null) {
      return;
    }
    timer =
        new RenewalTimer(
            ops.scheduler(),
            leaseMs / 2,
            this::renew,
            () -> (long) Math.ceil(deadline - ops.now()));
    timer.start();
  }

  private void stopTimer() {
    if (timer != null) {
      timer.stop();
    }
  }

  @Override
  public String toString() {
    return "Lease(" + key + ", " + id + ", " + policy + ")";
  }
}
