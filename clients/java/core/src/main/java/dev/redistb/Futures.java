package dev.redistb;

import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/** Mapping a future so that cancelling the result cancels its source (a client that went away). */
final class Futures {
  private Futures() {}

  static <T, U> CompletableFuture<U> map(CompletableFuture<T> source, Function<T, U> fn) {
    CompletableFuture<U> out = source.thenApply(fn);
    cancelWith(out, source);
    return out;
  }

  /** When {@code downstream} is cancelled, {@code upstream} is too. */
  static void cancelWith(CompletableFuture<?> downstream, CompletableFuture<?> upstream) {
    downstream.whenComplete(
        (v, err) -> {
          if (downstream.isCancelled()) {
            upstream.cancel(false);
          }
        });
  }
}
