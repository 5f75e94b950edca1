package dev.redistb;

import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;

/** SPEC U1, U2: the strict startup check, {@code COMMAND INFO tb.take}, its lines word for word. */
final class Startup {
  private Startup() {}

  static void check(Store store, long waitMs, boolean startDegraded, Consumer<String> log) {
    String server = store.server();
    String reason;
    Throwable cause;
    try {
      boolean loaded = store.moduleLoaded().get(waitMs, TimeUnit.MILLISECONDS);
      if (!loaded) {
        throw new StartupException(
            StartupException.Reason.MODULE_NOT_LOADED,
            "redis-tb module not loaded on " + server + ": load libredis_tb.so with loadmodule",
            null);
      }
      return;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      reason = "interrupted";
      cause = e;
    } catch (TimeoutException e) {
      reason = "no answer within " + waitMs + " ms";
      cause = e;
    } catch (ExecutionException e) {
      cause = GuardedStore.unwrap(e);
      if (cause instanceof StoreException se && se.kind() == StoreException.Kind.REPLY) {
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
      reason = GuardedStore.describe(cause);
    }
    if (!startDegraded) {
      throw new StartupException(
          StartupException.Reason.UNREACHABLE,
          "redis-tb: cannot reach Redis at "
              + server
              + " ("
              + reason
              + "): start it, or set startDegraded to start failing open",
          cause);
    }
    log.accept(
        "redis-tb: Redis at "
            + server
            + " unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)");
  }
}
