package dev.redistb;

import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/**
 * SPEC U1-U4: a limiter's startup checks, each failure one line, the whole message, word for word
 * in every language: the module is there ({@code COMMAND INFO tb.take}), the user may ask, Redis
 * answers (or the start is degraded on purpose), and a limiter that sends several keys in one call
 * without a tag function is not on a Redis Cluster (U3, K6).
 */
final class Startup {
  private Startup() {}

  /** What a call at startup gave: its value, or why it has none. */
  private record Answer<T>(T value, StoreException reply, Throwable failure, String reason) {}

  private static <T> Answer<T> await(CompletableFuture<T> call, long waitMs) {
    try {
      return new Answer<>(call.get(waitMs, TimeUnit.MILLISECONDS), null, null, null);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return new Answer<>(null, null, e, "interrupted");
    } catch (TimeoutException e) {
      call.cancel(false);
      return new Answer<>(null, null, e, "no answer within " + waitMs + " ms");
    } catch (ExecutionException e) {
      Throwable cause = GuardedStore.unwrap(e);
      if (cause instanceof StoreException se && se.kind() == StoreException.Kind.REPLY) {
        return new Answer<>(null, se, null, null);
      }
      // the client library's own words (a store's wrapper adds only the command's name)
      Throwable why =
          cause instanceof StoreException && cause.getCause() != null ? cause.getCause() : cause;
      return new Answer<>(null, null, cause, GuardedStore.describe(why));
    }
  }

  /**
   * @param several the limiter's policies of one call when it can send several keys and has no tag
   *     function (U3: then HELLO is sent); empty otherwise
   */
  static void check(
      Store store,
      long waitMs,
      boolean startDegraded,
      Consumer<String> log,
      String limiter,
      List<String> several) {
    String server = store.server();
    Answer<Boolean> info = await(store.moduleLoaded(), waitMs);
    if (info.reply() != null) {
      StoreException se = info.reply();
      if (se.getMessage().contains("NOPERM")) {
        throw new StartupException(
            StartupException.Reason.NO_PERMISSION,
            "redis-tb: user cannot run COMMAND INFO on "
                + server
                + ": grant +command|info (see docs/operations.md)",
            se);
      }
      throw new StartupException(
          StartupException.Reason.MODULE_NOT_LOADED,
          "redis-tb: COMMAND INFO on " + server + " failed: " + se.getMessage(),
          se);
    }
    if (info.failure() != null) {
      unreachable(server, info, startDegraded, log);
      return; // degraded: the failure mode answers until Redis does
    }
    if (!info.value()) {
      throw new StartupException(
          StartupException.Reason.MODULE_NOT_LOADED,
          "redis-tb module not loaded on " + server + ": load libredis_tb.so with loadmodule",
          null);
    }
    if (several.isEmpty()) {
      return;
    }
    // U3: HELLO without an argument (the protocol is not switched; every user may run it)
    Answer<String> hello = await(store.serverMode(), waitMs);
    if (hello.reply() != null) {
      return; // an error reply passes
    }
    if (hello.failure() != null) {
      unreachable(server, hello, startDegraded, log);
      return;
    }
    if ("cluster".equals(hello.value())) {
      StringBuilder names = new StringBuilder();
      for (String n : several) {
        names.append(names.length() == 0 ? "" : ", ").append('\'').append(n).append('\'');
      }
      throw new StartupException(
          StartupException.Reason.CLUSTER_KEYS,
          "redis-tb: limiter '"
              + limiter
              + "' sends several keys in one call (policies "
              + names
              + "), which a Redis Cluster refuses unless they share a hash slot: set a tag function"
              + " (SPEC K6)",
          null);
    }
  }

  /** SPEC U2: an unreachable Redis fails the start, or logs one line when started degraded. */
  private static void unreachable(
      String server, Answer<?> failed, boolean startDegraded, Consumer<String> log) {
    if (!startDegraded) {
      throw new StartupException(
          StartupException.Reason.UNREACHABLE,
          "redis-tb: cannot reach Redis at "
              + server
              + " ("
              + failed.reason()
              + "): start it, or set startDegraded to start failing open",
          failed.failure());
    }
    log.accept(
        "redis-tb: Redis at "
            + server
            + " unreachable at startup; starting degraded (the limiter's failure mode applies"
            + " until it answers)");
  }
}
