package dev.redistb;

import dev.redistb.store.BackendChoice;
import dev.redistb.store.BackendException;
import dev.redistb.store.BackendSetting;
import dev.redistb.store.CommandStore;
import dev.redistb.store.ScriptBackend;
import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;
import java.util.function.LongSupplier;

/**
 * SPEC U1-U4, E1: a limiter's startup checks, each failure one line, the whole message, word for
 * word in every language: the backend is chosen ({@code COMMAND INFO tb.take}, the script library
 * loaded where the module is not, ScriptBackend), the user may ask, Redis answers (or the start is
 * degraded on purpose), and a limiter that sends several keys in one call without a tag function is
 * not on a Redis Cluster (U3, K6).
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

  /** What the start reads of its limiter beside the store. */
  record Target(
      long waitMs,
      boolean startDegraded,
      Consumer<String> log,
      String limiter,
      List<String> several,
      BackendSetting backend,
      LongSupplier wallMs,
      Consumer<BackendChoice> chosen) {}

  /**
   * SPEC U1-U4, E1. The backend's line (E6) is told only of a start that passes (a failed one
   * throws its own line alone), and by a degraded start when its first call chooses.
   *
   * <p>{@code t.several()}: the limiter's policies of one call when it can send several keys and
   * has no tag function (U3: then HELLO is sent); empty otherwise.
   */
  static void check(Store store, Target t) {
    ScriptBackend backend = backendOf(store, t);
    if (checks(store, t, backend)) {
      if (backend != null) {
        backend.onChosen(t.chosen());
      } else {
        // a store of its own (not a CommandStore): the module's commands, as U1 found them
        t.chosen()
            .accept(
                new BackendChoice(
                    "module",
                    false,
                    false,
                    "redis-tb: backend module on "
                        + store.server()
                        + " ("
                        + (t.backend() == BackendSetting.MODULE
                            ? "forced by backend=module"
                            : "tb.take found")
                        + ")"));
      }
    }
  }

  /** SPEC E1: one backend per store and setting; a degraded start chooses at its first call. */
  private static ScriptBackend backendOf(Store store, Target t) {
    if (!(store instanceof CommandStore cs)) {
      return null;
    }
    ScriptBackend b = cs.backend();
    if (b == null || b.setting() != t.backend() || !b.server().equals(store.server())) {
      b = new ScriptBackend(t.backend(), store.server(), t.wallMs());
      cs.useBackend(b);
    }
    return b;
  }

  /** The checks; true when the limiter may serve (started, or degraded on purpose). */
  private static boolean checks(Store store, Target t, ScriptBackend backend) {
    String server = store.server();
    long waitMs = t.waitMs();
    boolean startDegraded = t.startDegraded();
    Consumer<String> log = t.log();
    List<String> several = t.several();
    if (backend == null && t.backend() == BackendSetting.SCRIPTS) {
      throw new ConfigException("backend=scripts needs a CommandStore (Lettuce, Jedis)");
    }
    Answer<?> info =
        backend != null
            ? await(((CommandStore) store).chooseBackend(), waitMs)
            : await(store.moduleLoaded(), waitMs);
    if (info.reply() != null) {
      StoreException se = info.reply();
      if (se instanceof BackendException be) {
        throw new StartupException(
            be.why() == BackendException.Why.MODULE_MISSING
                ? StartupException.Reason.MODULE_NOT_LOADED
                : StartupException.Reason.SCRIPT_LOAD,
            be.getMessage(),
            be);
      }
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
      return true; // degraded: the failure mode answers until Redis does
    }
    if (backend == null && Boolean.FALSE.equals(info.value())) {
      throw new StartupException(
          StartupException.Reason.MODULE_NOT_LOADED,
          "redis-tb module not loaded on " + server + ": load libredis_tb.so with loadmodule",
          null);
    }
    if (several.isEmpty()) {
      return true;
    }
    // U3: HELLO without an argument (the protocol is not switched; every user may run it)
    Answer<String> hello = await(store.serverMode(), waitMs);
    if (hello.reply() != null) {
      return true; // an error reply passes
    }
    if (hello.failure() != null) {
      unreachable(server, hello, startDegraded, log);
      return true;
    }
    if ("cluster".equals(hello.value())) {
      StringBuilder names = new StringBuilder();
      for (String n : several) {
        names.append(names.length() == 0 ? "" : ", ").append('\'').append(n).append('\'');
      }
      throw new StartupException(
          StartupException.Reason.CLUSTER_KEYS,
          "redis-tb: limiter '"
              + t.limiter()
              + "' sends several keys in one call (policies "
              + names
              + "), which a Redis Cluster refuses unless they share a hash slot: set a tag function"
              + " (SPEC K6)",
          null);
    }
    return true;
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
