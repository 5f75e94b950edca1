package dev.redistb;

import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;

/**
 * The one guarded store call every command of a limiter goes through (a check, a refund, a release,
 * a renewal, a hold, a settlement): the breaker (B2, B3: not sent while open, one probe after the
 * cool-down), the timeout (L5: the limiter's, once, never retried), the counters and the call's
 * duration (B5, M1), and the breaker's answer to a failure (B1). A {@code CROSSSLOT} reply is K6's
 * configuration error: neither counted nor seen by the breaker.
 */
final class GuardedStore {
  private final Store store;
  private final Breaker breaker;
  private final Clock clock;
  private final long timeoutMs;
  private final LimiterStats stats;
  private final LimiterMetrics metrics;
  private final String name;
  private final RateLog log;
  private final boolean failOpen;
  private final double cooldownMs;

  GuardedStore(
      Store store,
      Clock clock,
      long timeoutMs,
      double cooldownMs,
      LimiterStats stats,
      LimiterMetrics metrics,
      String name,
      RateLog log,
      boolean failOpen) {
    this.store = store;
    this.breaker = new Breaker(cooldownMs);
    this.clock = clock;
    this.timeoutMs = timeoutMs;
    this.cooldownMs = cooldownMs;
    this.stats = stats;
    this.metrics = metrics;
    this.name = name;
    this.log = log;
    this.failOpen = failOpen;
  }

  Store store() {
    return store;
  }

  long timeoutMillis() {
    return timeoutMs;
  }

  /**
   * One command: {@code send} is called only when the breaker lets it through; the future completes
   * with the reply, or a {@link StoreException} (kind UNAVAILABLE when nothing was sent, not
   * counted). Cancelling the returned future abandons the call.
   */
  <T> CompletableFuture<T> call(String command, Function<Store, CompletableFuture<T>> send) {
    Breaker.Pass pass = breaker.admit(clock.monotonicMillis());
    if (pass == Breaker.Pass.DENIED) {
      return CompletableFuture.failedFuture(StoreException.unavailable(command, store.server()));
    }
    long started = System.nanoTime();
    CompletableFuture<T> sent;
    try {
      sent = send.apply(store);
    } catch (RuntimeException e) {
      sent = CompletableFuture.failedFuture(e);
    }
    CompletableFuture<T> raw = new CompletableFuture<>();
    CompletableFuture<T> upstream = sent;
    upstream.whenComplete(
        (v, err) -> {
          if (err == null) {
            raw.complete(v);
          } else {
            raw.completeExceptionally(err);
          }
        });
    raw.orTimeout(timeoutMs, TimeUnit.MILLISECONDS);
    CompletableFuture<T> out =
        raw.handle(
            (v, err) -> {
              metrics.redisCall(name, (System.nanoTime() - started) / 1e9);
              if (err == null) {
                breaker.succeeded(pass);
                return v;
              }
              Throwable cause = unwrap(err);
              if (cause instanceof CancellationException) {
                breaker.abandoned(pass);
                throw (CancellationException) cause;
              }
              StoreException se = classify(command, cause);
              if (se.crossSlot()) {
                // K6, L5: a configuration error, not a store error: not counted, the breaker
                // untouched (a probe's claim is handed back)
                breaker.failed(pass, false, clock.monotonicMillis());
                throw se;
              }
              failed(command, se, pass);
              throw se;
            });
    out.whenComplete(
        (v, err) -> {
          if (out.isCancelled()) {
            breaker.abandoned(pass);
            raw.cancel(false);
            upstream.cancel(false);
          }
        });
    return out;
  }

  static Throwable unwrap(Throwable err) {
    Throwable t = err;
    while ((t instanceof CompletionException || t instanceof ExecutionException)
        && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  private StoreException classify(String command, Throwable cause) {
    if (cause instanceof StoreException se) {
      return se;
    }
    if (cause instanceof TimeoutException) {
      return StoreException.timeout(command, timeoutMs);
    }
    return StoreException.connection(command + ": " + describe(cause), cause);
  }

  /** B1, B5: counted; a connection error or a timeout opens the breaker; logged once a second. */
  private void failed(String command, StoreException se, Breaker.Pass pass) {
    stats.storeErrors.increment();
    metrics.storeError(name);
    boolean opens = se.opensBreaker();
    breaker.failed(pass, opens, clock.monotonicMillis());
    log.warn(
        "store",
        skipped ->
            "redis-tb: "
                + command
                + " on "
                + store.server()
                + " failed ("
                + se.getMessage()
                + "); failing "
                + (failOpen ? "open: requests pass unlimited" : "closed: requests get 503")
                + (opens ? ", Redis skipped for " + cooldownMs / 1000 + " s" : "")
                + "; store errors so far: "
                + stats.storeErrors()
                + (skipped > 1 ? " (" + (skipped - 1) + " not logged)" : ""));
  }

  static String describe(Throwable t) {
    String m = t.getMessage();
    return m == null || m.isEmpty()
        ? t.getClass().getSimpleName()
        : t.getClass().getSimpleName() + ": " + m;
  }

  /** Whether a store exception means nothing was sent (the breaker is open). */
  static boolean notSent(Throwable err) {
    return unwrap(err) instanceof StoreException se && se.kind() == StoreException.Kind.UNAVAILABLE;
  }
}
