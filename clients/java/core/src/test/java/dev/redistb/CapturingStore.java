package dev.redistb;

import dev.redistb.store.CommandStore;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/** A store that records the arguments of each call and admits it ([1, 1, 0, 1]). */
final class CapturingStore extends CommandStore {
  private final List<String> sent;

  CapturingStore(List<String> sent) {
    this.sent = sent;
  }

  @Override
  public String server() {
    return "capture";
  }

  @Override
  protected CompletableFuture<Object> send(List<String> args) {
    sent.addAll(args);
    return CompletableFuture.completedFuture(List.of(1L, 1L, 0L, 1L));
  }
}
