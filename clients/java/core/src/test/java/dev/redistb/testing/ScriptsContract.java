package dev.redistb.testing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Hold;
import dev.redistb.Limit;
import dev.redistb.Outcome;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.Settlement;
import dev.redistb.StartupException;
import dev.redistb.store.Acquired;
import dev.redistb.store.BackendChoice;
import dev.redistb.store.BackendSetting;
import dev.redistb.store.Charge;
import dev.redistb.store.CommandStore;
import dev.redistb.store.HoldReply;
import dev.redistb.store.ScriptBackend;
import dev.redistb.store.SettleReply;
import dev.redistb.store.Store;
import dev.redistb.store.WindowMode;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * SPEC E against real servers WITHOUT the module, for every store transport: the script library
 * (clients/lua) chosen at startup, answering as the module does, reloaded once after a flush, the
 * client's clock where TIME is refused, and the start's lines.
 */
public abstract class ScriptsContract {
  private final List<RedisServer> servers = new ArrayList<>();

  /** A store of this transport on 127.0.0.1:{@code port}. */
  protected abstract Store open(int port);

  /** Closes what {@link #open} made. */
  protected abstract void closeStores();

  @AfterEach
  void stopAll() {
    closeStores();
    servers.forEach(RedisServer::close);
    servers.clear();
  }

  private RedisServer plain(String... extra) {
    RedisServer s = RedisServer.startPlain(extra);
    servers.add(s);
    return s;
  }

  /** A limiter of a bucket, an in-flight and a settle-later policy on {@code s}. */
  private static RateLimiter limiter(Store s, List<String> infos, List<String> warnings) {
    return RateLimiter.builder(s)
        .timeoutMillis(2000)
        .logger(warnings::add)
        .infoLogger(infos::add)
        .policy(Policy.perMinute("ip", 2))
        .policy(Policy.builder("conc", Limit.inFlight(5, 10)))
        .policy(Policy.perHour("tokens", 1000).settleLater(true))
        .build();
  }

  private static void runLimiter(RateLimiter limiter) {
    Decision first = limiter.check(StoreContract.request("203.0.113.9", "GET /x")).join();
    assertEquals(Outcome.ALLOWED, first.outcome(), String.valueOf(first));
    assertNotNull(first.lease());
    Hold hold = first.hold("tokens", 100).join();
    assertTrue(hold.allowed());
    assertEquals(16, hold.id().length(), hold.id());
    Settlement settled = hold.settle(10).join();
    assertTrue(settled.settled());
    assertTrue(first.refund().join());
    first.finish().join();
    assertEquals(0, limiter.stats().leasesInFlight());
    for (int i = 0; i < 2; i++) {
      assertEquals(
          Outcome.ALLOWED,
          limiter.check(StoreContract.request("203.0.113.9", "GET /x")).join().outcome());
    }
    Decision refused = limiter.check(StoreContract.request("203.0.113.9", "GET /x")).join();
    assertEquals(Outcome.LIMITED, refused.outcome());
    assertEquals(List.of("ip"), refused.violated());
    assertEquals(3, limiter.stats().allowed());
    assertEquals(0, limiter.stats().storeErrors());
  }

  @Test
  void auto_on_a_plain_server_chooses_the_functions_and_limits_as_the_module_does() {
    RedisServer r = plain();
    List<String> infos = new ArrayList<>();
    List<String> warnings = new ArrayList<>();
    RateLimiter limiter = limiter(open(r.port()), infos, warnings);
    limiter.startup();
    assertEquals(
        List.of(
            "redis-tb: backend scripts on 127.0.0.1:"
                + r.port()
                + " (tb.take not found, Functions)"),
        infos);
    assertEquals("scripts", limiter.stats().backend());
    runLimiter(limiter);
    assertEquals(List.of(), warnings);
  }

  @Test
  void where_function_load_is_refused_script_load_and_evalsha_limit_the_same() {
    RedisServer r = plain("--rename-command", "FUNCTION", "");
    List<String> infos = new ArrayList<>();
    RateLimiter limiter = limiter(open(r.port()), infos, new ArrayList<>());
    limiter.startup();
    assertEquals(
        List.of(
            "redis-tb: backend scripts on 127.0.0.1:" + r.port() + " (tb.take not found, EVALSHA)"),
        infos);
    runLimiter(limiter);
  }

  /** {@code cmdstat_<name>}'s calls in INFO commandstats (0 when never called). */
  private static long calls(RedisServer r, String name) throws Exception {
    Matcher m =
        Pattern.compile("cmdstat_" + Pattern.quote(name) + ":calls=(\\d+)")
            .matcher(r.bulk("INFO", "commandstats"));
    return m.find() ? Long.parseLong(m.group(1)) : 0;
  }

  @Test
  void script_flush_mid_run_is_one_reload_and_never_a_store_error() throws Exception {
    RedisServer r = plain("--rename-command", "FUNCTION", "");
    RateLimiter limiter =
        RateLimiter.builder(open(r.port()))
            .timeoutMillis(2000)
            .backend("scripts")
            .infoLogger(line -> {})
            .policy(Policy.perMinute("ip", 100))
            .build();
    limiter.startup();
    assertEquals(1, calls(r, "script|load"));
    assertEquals(
        Outcome.ALLOWED,
        limiter.check(StoreContract.request("203.0.113.7", "GET /")).join().outcome());
    assertTrue(r.command("SCRIPT", "FLUSH").startsWith("+OK"));
    Decision after = limiter.check(StoreContract.request("203.0.113.7", "GET /")).join();
    assertEquals(Outcome.ALLOWED, after.outcome());
    assertEquals(98, Math.floor(after.results().get(0).remaining()), String.valueOf(after));
    assertEquals(2, calls(r, "script|load"), "one reload");
    assertEquals(
        Outcome.ALLOWED,
        limiter.check(StoreContract.request("203.0.113.7", "GET /")).join().outcome());
    assertEquals(2, calls(r, "script|load"), "and no more");
    assertEquals(0, limiter.stats().storeErrors());
    assertEquals(0, limiter.stats().degraded());
  }

  @Test
  void function_flush_mid_run_is_one_reload_and_never_a_store_error() throws Exception {
    RedisServer r = plain();
    RateLimiter limiter =
        RateLimiter.builder(open(r.port()))
            .timeoutMillis(2000)
            .infoLogger(line -> {})
            .policy(Policy.builder("conc", Limit.inFlight(5, 10)))
            .build();
    limiter.startup();
    assertEquals(1, calls(r, "function|load"));
    Decision d = limiter.check(StoreContract.request("203.0.113.7", "GET /")).join();
    assertEquals(Outcome.ALLOWED, d.outcome());
    assertTrue(r.command("FUNCTION", "FLUSH").startsWith("+OK"));
    d.finish().join(); // TB.RELEASE: ERR Function not found, a reload, the release
    assertEquals(2, calls(r, "function|load"), "one reload");
    assertEquals(0, limiter.stats().leasesInFlight());
    assertEquals(0, limiter.stats().leasesExpired());
    assertEquals(0, limiter.stats().storeErrors());
  }

  @Test
  void a_server_refusing_time_in_scripts_gets_the_client_clock() {
    RedisServer r = plain("--rename-command", "TIME", "");
    List<String> infos = new ArrayList<>();
    RateLimiter limiter = limiter(open(r.port()), infos, new ArrayList<>());
    limiter.startup();
    assertEquals(
        List.of(
            "redis-tb: backend scripts on 127.0.0.1:"
                + r.port()
                + " (tb.take not found, Functions, client clock)"),
        infos);
    runLimiter(limiter);
  }

  @Test
  void forced_to_the_module_a_plain_server_fails_the_start_with_u1s_line() {
    RedisServer r = plain();
    RateLimiter limiter =
        RateLimiter.builder(open(r.port()))
            .backend("module")
            .policy(Policy.perSecond("ip", 1))
            .build();
    StartupException e = assertThrows(StartupException.class, limiter::startup);
    assertEquals(
        "redis-tb module not loaded on 127.0.0.1:"
            + r.port()
            + ": load libredis_tb.so with loadmodule",
        e.getMessage());
    assertEquals(StartupException.Reason.MODULE_NOT_LOADED, e.reason());
  }

  @Test
  void a_server_that_takes_neither_load_fails_the_start_with_e2s_line() {
    RedisServer r = plain("--rename-command", "FUNCTION", "", "--rename-command", "SCRIPT", "");
    RateLimiter limiter =
        RateLimiter.builder(open(r.port())).policy(Policy.perSecond("ip", 1)).build();
    StartupException e = assertThrows(StartupException.class, limiter::startup);
    assertEquals(StartupException.Reason.SCRIPT_LOAD, e.reason());
    assertTrue(
        e.getMessage()
            .startsWith(
                "redis-tb: cannot load the script backend on 127.0.0.1:"
                    + r.port()
                    + " (ERR unknown command 'SCRIPT'"),
        e.getMessage());
    assertTrue(
        e.getMessage().endsWith("): allow FUNCTION LOAD or SCRIPT LOAD, or load the module"),
        e.getMessage());
  }

  /** The same call on the module and on the scripts: the same reply (E7: read alike). */
  private static <T> void same(
      Store module,
      Store scripts,
      Function<Store, java.util.concurrent.CompletableFuture<T>> call) {
    T a = call.apply(module).join();
    T b = call.apply(scripts).join();
    assertEquals(a, b);
  }

  @Test
  void the_same_sequence_gets_the_same_replies_from_the_module_and_the_scripts() {
    RedisServer withModule = RedisServer.start();
    servers.add(withModule);
    RedisServer r = plain();
    Store module = open(withModule.port());
    Store scripts = open(r.port());
    ScriptBackend backend =
        new ScriptBackend(BackendSetting.AUTO, scripts.server(), System::currentTimeMillis);
    ((CommandStore) scripts).useBackend(backend);
    BackendChoice c = ((CommandStore) scripts).chooseBackend().join();
    assertEquals("scripts", c.backend());
    // one clock for both (a `now` the client sends), so the replies compare exactly
    double t0 = Math.floor(System.currentTimeMillis() / 1000.0) - 5;
    for (int i = 0; i < 40; i++) {
      double now = t0 + i * 0.125;
      double n = 1 + (i % 3);
      same(module, scripts, s -> s.take("b", 10, 2, n, now));
      same(module, scripts, s -> s.peek("b", 10, 2, now));
      same(module, scripts, s -> s.reserve("r", 5, 1, n, 3, now));
      same(
          module,
          scripts,
          s -> s.mtake(List.of(new Charge("{m}1", 10, 1, n), new Charge("{m}2", 4, 0.5, 1)), now));
      same(module, scripts, s -> s.window("w", 7, 2, 1, now, WindowMode.SLIDING));
      same(module, scripts, s -> s.window("l", 5, 1, 1, now, WindowMode.LOG));
      same(module, scripts, s -> s.window("f", 5, 1, 1, now, WindowMode.FIXED));
      if (i % 7 == 0) {
        same(module, scripts, s -> s.refund("b", 10, 2, 1, now));
      }
    }
    // leases and holds: ids are each backend's own; everything else alike
    for (int i = 0; i < 4; i++) {
      Acquired a = module.acquire("L", 3, 10_000, List.of()).join();
      Acquired b = scripts.acquire("L", 3, 10_000, List.of()).join();
      assertEquals(a.granted(), b.granted());
      assertEquals(a.inFlight(), b.inFlight());
      assertEquals(a.granted(), b.id() != null && b.id().matches("[0-9a-f]{16}"));
    }
    HoldReply ha = module.hold("H", 1000, 10, 400, 60_000).join();
    HoldReply hb = scripts.hold("H", 1000, 10, 400, 60_000).join();
    assertEquals(ha.reply().allowed(), hb.reply().allowed());
    assertEquals(ha.reply().remaining(), hb.reply().remaining(), 1.0);
    SettleReply sa = module.settle("H", 1000, 10, ha.id(), 100, null).join();
    SettleReply sb = scripts.settle("H", 1000, 10, hb.id(), 100, null).join();
    assertEquals(sa.settled(), sb.settled());
    assertEquals(sa.charged(), sb.charged());
    assertEquals(
        Objects.requireNonNull(module.peekHolds("H").join()).holds(),
        scripts.peekHolds("H").join().holds());
    assertEquals(
        module.peekLeases("L").join().inFlight(), scripts.peekLeases("L").join().inFlight());
  }
}
