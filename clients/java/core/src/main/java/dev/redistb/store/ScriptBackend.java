package dev.redistb.store;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * The store's backend (SPEC E): the module's TB.* commands as they are, or the same calls to the
 * script library (clients/lua) where the module cannot be loaded. The transport is abstract: every
 * command goes through the {@code send} function a {@link CommandStore} hands in.
 *
 * <ul>
 *   <li>E1: chosen once, at startup, by {@code COMMAND INFO tb.take} (or forced by the setting); a
 *       degraded start chooses before its first call that reaches Redis ({@link #ready});
 *   <li>E2: {@code FUNCTION LOAD REPLACE} of the Functions build, else {@code SCRIPT LOAD} of
 *       tb.lua with its SHA-1 checked; a failed load is a {@link BackendException};
 *   <li>E3: {@code NOSCRIPT} / {@code ERR Function not found}: one reload and one retry per call,
 *       inside the call (the limiter's one guarded call sees one success or one failure);
 *   <li>E4: a grant's {@code ID} from {@link SecureRandom}, one retry with a fresh one on a
 *       collision;
 *   <li>E5: {@code now} / {@code NOW} from the client's clock where the server refuses TIME;
 *   <li>E6: the one line of the choice ({@link BackendChoice#line}).
 * </ul>
 */
public final class ScriptBackend {
  /** One raw command; the future fails with a {@link StoreException}. */
  public interface Send extends Function<List<String>, CompletableFuture<Object>> {}

  private static final List<String> TIME_PROBE = List.of("EVAL", "return redis.call('TIME')", "0");
  private static final SecureRandom RANDOM = new SecureRandom();

  /** The calls that carry {@code NOW} (E5) rather than a positional {@code now}. */
  private static final Set<String> LEASE_WORDS =
      Set.of("ACQUIRE", "RELEASE", "RENEW", "HOLD", "SETTLE");

  private final BackendSetting setting;
  private final String server;
  private final LongSupplier wallMs;
  private final List<Consumer<BackendChoice>> listeners = new ArrayList<>();
  private volatile BackendChoice chosen;
  private CompletableFuture<BackendChoice> choosing;

  /**
   * @param wallMs the client's clock, ms since the epoch (SPEC T1: the limiter's wall clock)
   */
  public ScriptBackend(BackendSetting setting, String server, LongSupplier wallMs) {
    this.setting = setting;
    this.server = server;
    this.wallMs = wallMs;
  }

  /** A backend already chosen as the scripts (a test's scripted store, or a caller that knows). */
  public static ScriptBackend scripts(
      String server, boolean functions, boolean clientClock, LongSupplier wallMs) {
    ScriptBackend b = new ScriptBackend(BackendSetting.SCRIPTS, server, wallMs);
    b.chosen =
        new BackendChoice(
            "scripts",
            functions,
            clientClock,
            scriptsLine(server, "forced by backend=scripts", functions, clientClock));
    return b;
  }

  public BackendSetting setting() {
    return setting;
  }

  public String server() {
    return server;
  }

  /** The choice, or null until it is made. */
  public BackendChoice current() {
    return chosen;
  }

  /** {@code listener} is told of the choice once: now if it is made, else when it is. */
  public void onChosen(Consumer<BackendChoice> listener) {
    BackendChoice c;
    synchronized (this) {
      c = chosen;
      if (c == null) {
        listeners.add(listener);
        return;
      }
    }
    listener.accept(c);
  }

  /**
   * SPEC E1, E2, E5: choose (once; concurrent callers share it; a failure lets the next call try
   * again) and tell the listeners. {@code moduleInfo} is U1's {@code COMMAND INFO tb.take}: true
   * when the server has the command. Cancelling the returned future leaves the choice running.
   */
  public CompletableFuture<BackendChoice> ready(
      Send send, Supplier<CompletableFuture<Boolean>> moduleInfo) {
    BackendChoice c = chosen;
    if (c != null) {
      return CompletableFuture.completedFuture(c);
    }
    CompletableFuture<BackendChoice> running;
    synchronized (this) {
      if (chosen != null) {
        return CompletableFuture.completedFuture(chosen);
      }
      running = choosing;
      if (running == null) {
        CompletableFuture<BackendChoice> started = choose(send, moduleInfo);
        choosing = started;
        running = started;
        started.whenComplete((v, err) -> settled(started, v));
      }
    }
    return running.thenApply(x -> x);
  }

  private void settled(CompletableFuture<BackendChoice> which, BackendChoice c) {
    List<Consumer<BackendChoice>> tell;
    synchronized (this) {
      if (choosing == which) {
        choosing = null;
      }
      if (c == null || chosen != null) {
        return;
      }
      chosen = c;
      tell = new ArrayList<>(listeners);
      listeners.clear();
    }
    for (Consumer<BackendChoice> l : tell) {
      l.accept(c);
    }
  }

  private CompletableFuture<BackendChoice> choose(
      Send send, Supplier<CompletableFuture<Boolean>> moduleInfo) {
    if (setting == BackendSetting.SCRIPTS) {
      return scriptsChoice(send, "forced by backend=scripts");
    }
    CompletableFuture<Boolean> info;
    try {
      info = moduleInfo.get();
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(e);
    }
    return info.thenCompose(
        found -> {
          if (found) {
            String why =
                setting == BackendSetting.MODULE ? "forced by backend=module" : "tb.take found";
            return CompletableFuture.completedFuture(
                new BackendChoice(
                    "module",
                    false,
                    false,
                    "redis-tb: backend module on " + server + " (" + why + ")"));
          }
          if (setting == BackendSetting.MODULE) {
            return CompletableFuture.failedFuture(BackendException.moduleMissing(server));
          }
          return scriptsChoice(send, "tb.take not found");
        });
  }

  private CompletableFuture<BackendChoice> scriptsChoice(Send send, String why) {
    return load(send, null)
        .thenCompose(
            functions ->
                send.apply(TIME_PROBE)
                    .handle(
                        (v, err) -> {
                          if (err == null) {
                            return false;
                          }
                          if (unwrap(err) instanceof StoreException se
                              && se.serverMessage() != null) {
                            return true; // SPEC E5: the server refuses TIME in scripts
                          }
                          throw new CompletionException(unwrap(err));
                        })
                    .thenApply(
                        clientClock ->
                            new BackendChoice(
                                "scripts",
                                functions,
                                clientClock,
                                scriptsLine(server, why, functions, clientClock))));
  }

  private static String scriptsLine(
      String server, String why, boolean functions, boolean clientClock) {
    return "redis-tb: backend scripts on "
        + server
        + " ("
        + why
        + ", "
        + (functions ? "Functions" : "EVALSHA")
        + (clientClock ? ", client clock" : "")
        + ")";
  }

  /**
   * SPEC E2: load the library; {@code via} the way already chosen (true: Functions, false: EVALSHA;
   * a reload, E3), or null at the choice (FUNCTION LOAD REPLACE where accepted, else SCRIPT LOAD).
   * Completes with true for Functions; an error reply to the last load is a {@link
   * BackendException}, a connection error is passed through.
   */
  CompletableFuture<Boolean> load(Send send, Boolean via) {
    LuaLibrary lua = LuaLibrary.shipped();
    if (Boolean.FALSE.equals(via)) {
      return scriptLoad(send, lua);
    }
    return send.apply(List.of("FUNCTION", "LOAD", "REPLACE", lua.functions()))
        .handle((v, err) -> err)
        .thenCompose(
            err -> {
              if (err == null) {
                return CompletableFuture.completedFuture(true);
              }
              String reply = replyText(err);
              if (reply == null) {
                return CompletableFuture.failedFuture(unwrap(err));
              }
              if (Boolean.TRUE.equals(via)) {
                return CompletableFuture.failedFuture(
                    BackendException.loadFailed(server, reply, unwrap(err)));
              }
              return scriptLoad(send, lua);
            });
  }

  private CompletableFuture<Boolean> scriptLoad(Send send, LuaLibrary lua) {
    return send.apply(List.of("SCRIPT", "LOAD", lua.script()))
        .handle(
            (sha, err) -> {
              if (err != null) {
                String reply = replyText(err);
                if (reply == null) {
                  throw new CompletionException(unwrap(err));
                }
                throw BackendException.loadFailed(server, reply, unwrap(err));
              }
              String got = text(sha);
              if (!lua.sha().equals(got.toLowerCase(Locale.ROOT))) {
                throw BackendException.loadFailed(
                    server,
                    "SCRIPT LOAD answered " + got + ", not tb.lua's SHA-1 " + lua.sha(),
                    null);
              }
              return false;
            });
  }

  /** SPEC E5: the client's clock as {@code now}, seconds; null where the server's is used. */
  public String clientNow() {
    BackendChoice c = chosen;
    return c != null && c.clientClock() ? seconds(wallMs.getAsLong()) : null;
  }

  /** Milliseconds as seconds in plain decimal ({@code 1764456268.25}). */
  static String seconds(long ms) {
    BigDecimal s = BigDecimal.valueOf(ms, 3).stripTrailingZeros();
    return s.scale() < 0 ? s.setScale(0).toPlainString() : s.toPlainString();
  }

  /** SPEC E4: 8 bytes of the CSPRNG, 16 lowercase hex digits, fresh for every call. */
  static String freshId() {
    byte[] b = new byte[8];
    RANDOM.nextBytes(b);
    StringBuilder out = new StringBuilder(16);
    for (byte x : b) {
      out.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
    }
    return out.toString();
  }

  /**
   * One TB.* call ({@code command}: the module's words) through the chosen backend: the module's as
   * it is, the scripts' translated (E2), with E3's reload and E4's fresh id, each retried once.
   */
  public CompletableFuture<Object> call(Send send, List<String> command) {
    BackendChoice c = chosen;
    if (c == null || !c.scripts()) {
      return send.apply(command);
    }
    String word = command.get(0).toUpperCase(Locale.ROOT).replaceFirst("^TB\\.", "");
    boolean granted = word.equals("ACQUIRE") || word.equals("HOLD");
    return attempt(send, c, word, command, granted ? freshId() : null, false, false);
  }

  private CompletableFuture<Object> attempt(
      Send send,
      BackendChoice c,
      String word,
      List<String> command,
      String id,
      boolean reloaded,
      boolean redrawn) {
    return send.apply(scriptArgv(c, word, command, id))
        .exceptionallyCompose(
            err -> {
              String reply = replyText(err);
              if (!reloaded
                  && reply != null
                  && (reply.startsWith("NOSCRIPT") || reply.startsWith("ERR Function not found"))) {
                // SPEC E3: once, never a loop
                return load(send, c.functions())
                    .thenCompose(x -> attempt(send, c, word, command, id, true, redrawn));
              }
              if (id != null
                  && !redrawn
                  && reply != null
                  && reply.startsWith("ERR ID is already held on this key")) {
                // SPEC E4: once, with a fresh id
                return attempt(send, c, word, command, freshId(), reloaded, true);
              }
              return CompletableFuture.failedFuture(unwrap(err));
            });
  }

  /** clients/lua/README.md's calling convention for {@code command} (the module's words). */
  private List<String> scriptArgv(BackendChoice c, String word, List<String> command, String id) {
    List<String> keys;
    List<String> rest = new ArrayList<>();
    boolean take =
        word.equals("ACQUIRE") && command.size() > 5 && command.get(4).equalsIgnoreCase("TAKE");
    if (take) {
      // TB.ACQUIRE key limit lease_ms TAKE numkeys bucket... triples: the buckets are keys
      int n = Integer.parseInt(command.get(5));
      keys = new ArrayList<>();
      keys.add(command.get(1));
      keys.addAll(command.subList(6, 6 + n));
      rest.addAll(command.subList(2, 5));
      rest.addAll(command.subList(6 + n, command.size()));
    } else if (word.equals("MTAKE")) {
      int n = Integer.parseInt(command.get(1));
      keys = command.subList(2, 2 + n);
      rest.addAll(command.subList(2 + n, command.size()));
    } else {
      keys = command.subList(1, 2);
      rest.addAll(command.subList(2, command.size()));
    }
    if (id != null) {
      rest.add("ID");
      rest.add(id);
    }
    boolean peekOf =
        word.equals("PEEK")
            && !rest.isEmpty()
            && (rest.get(0).equalsIgnoreCase("LEASES") || rest.get(0).equalsIgnoreCase("HOLDS"));
    if (c.clientClock() && (LEASE_WORDS.contains(word) || peekOf)) {
      rest.add("NOW");
      rest.add(seconds(wallMs.getAsLong()));
    }
    List<String> out = new ArrayList<>(keys.size() + rest.size() + 4);
    if (c.functions()) {
      out.add(word.equals("PEEK") ? "FCALL_RO" : "FCALL");
      out.add("tb_" + word.toLowerCase(Locale.ROOT));
      out.add(Integer.toString(keys.size()));
      out.addAll(keys);
    } else {
      out.add("EVALSHA");
      out.add(LuaLibrary.shipped().sha());
      out.add(Integer.toString(keys.size()));
      out.addAll(keys);
      out.add(word);
    }
    out.addAll(rest);
    return out;
  }

  private static Throwable unwrap(Throwable err) {
    Throwable t = err;
    while (t instanceof CompletionException && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  /** An error reply's text; null for anything else (a connection error, a timeout). */
  private static String replyText(Throwable err) {
    return unwrap(err) instanceof StoreException se ? se.serverMessage() : null;
  }

  private static String text(Object v) {
    if (v instanceof byte[] b) {
      return new String(b, StandardCharsets.UTF_8);
    }
    if (v instanceof ByteBuffer bb) {
      return StandardCharsets.UTF_8.decode(bb.duplicate()).toString();
    }
    return String.valueOf(v);
  }
}
