package dev.redistb;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * The timer that renews a lease (SPEC N5, N7) or a hold (G5) while its request runs: a tick every
 * {@code periodMs}, and one at the deadline when no tick comes sooner (N7: the request's
 * max_duration). Each tick is armed only after the previous one's call answered, so a slow renewal
 * is never overtaken by the next.
 *
 * <p>The ticks run on the limiter's scheduler thread and only start calls (the store answers
 * asynchronously), never on a request's thread: a response blocked on a client that reads nothing
 * never delays another request's renewal.
 */
final class RenewalTimer {
  /** A limiter's renewal thread, made on first use (a daemon). */
  static final class Scheduler {
    private final String name;
    private volatile ScheduledExecutorService executor;

    Scheduler(String name) {
      this.name = name;
    }

    ScheduledExecutorService get() {
      ScheduledExecutorService s = executor;
      if (s == null) {
        synchronized (this) {
          s = executor;
          if (s == null) {
            s =
                java.util.concurrent.Executors.newSingleThreadScheduledExecutor(
                    r -> {
                      Thread t = new Thread(r, "redis-tb-renew-" + name);
                      t.setDaemon(true);
                      return t;
                    });
            executor = s;
          }
        }
      }
      return s;
    }
  }

  /** No deadline. */
  static final LongSupplier NONE = () -> Long.MAX_VALUE;

  private final ScheduledExecutorService scheduler;
  private final long periodMs;
  private final Supplier<CompletableFuture<?>> tick;
  private final LongSupplier untilDeadline;
  private ScheduledFuture<?> next;
  private boolean started;
  private boolean stopped;

  /**
   * @param periodMs the time between ticks
   * @param tick what a tick does (its future is awaited before the next tick is armed)
   * @param untilDeadline ms from now to the deadline ({@link #NONE}: none), read at each arming
   */
  RenewalTimer(
      ScheduledExecutorService scheduler,
      long periodMs,
      Supplier<CompletableFuture<?>> tick,
      LongSupplier untilDeadline) {
    this.scheduler = scheduler;
    this.periodMs = Math.max(1, periodMs);
    this.tick = tick;
    this.untilDeadline = untilDeadline;
  }

  synchronized void start() {
    if (started || stopped) {
      return;
    }
    started = true;
    arm();
  }

  synchronized void stop() {
    stopped = true;
    if (next != null) {
      next.cancel(false);
      next = null;
    }
  }

  synchronized boolean running() {
    return next != null;
  }

  private void arm() {
    long left = untilDeadline.getAsLong();
    long delay = Math.max(1, Math.min(periodMs, Math.max(0, left)));
    try {
      next = scheduler.schedule(this::fire, delay, TimeUnit.MILLISECONDS);
    } catch (RejectedExecutionException e) {
      next = null; // the scheduler was shut down with its limiter
    }
  }

  private void fire() {
    synchronized (this) {
      next = null;
      if (stopped) {
        return;
      }
    }
    CompletableFuture<?> f;
    try {
      f = tick.get();
    } catch (RuntimeException e) {
      f = CompletableFuture.completedFuture(null);
    }
    f.whenComplete(
        (v, err) -> {
          synchronized (this) {
            if (!stopped && next == null) {
              arm();
            }
          }
        });
  }
}
