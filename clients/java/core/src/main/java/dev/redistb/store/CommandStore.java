package dev.redistb.store;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;

/**
 * {@link Store} over a client that sends a raw command and hands back its raw reply (a {@link
 * Number} for integers and RESP3 doubles, a {@link String}, {@code byte[]} or {@link ByteBuffer}
 * for bulk strings, a {@link List} for arrays, null for nil): the arguments of every command are
 * written here, and every reply read here, once for every backend.
 */
public abstract class CommandStore implements Store {
  /** SPEC E: the backend TB.* calls go through; null: the module's commands as they are. */
  private volatile ScriptBackend backend;

  /**
   * Sends one command ({@code args[0]} is its name); the future completes with the raw reply or a
   * {@link StoreException}.
   */
  protected abstract CompletableFuture<Object> send(List<String> args);

  /** Sends several commands together (pipelined where the client can); replies in order. */
  protected CompletableFuture<List<Object>> sendAll(List<List<String>> commands) {
    List<CompletableFuture<Object>> sent = new ArrayList<>(commands.size());
    for (List<String> c : commands) {
      sent.add(send(c));
    }
    return CompletableFuture.allOf(sent.toArray(CompletableFuture[]::new))
        .thenApply(
            v -> {
              List<Object> out = new ArrayList<>(sent.size());
              for (CompletableFuture<Object> f : sent) {
                out.add(f.join());
              }
              return out;
            });
  }

  /**
   * SPEC E: send the TB.* calls through {@code b} (chosen, or to be chosen before the first call
   * that reaches Redis: a degraded start's).
   */
  public void useBackend(ScriptBackend b) {
    this.backend = b;
  }

  /**
   * SPEC E1: the backend's choice (made once; at startup, or by a degraded start's first call);
   * fails when no backend is set.
   */
  public CompletableFuture<BackendChoice> chooseBackend() {
    ScriptBackend b = backend;
    if (b == null) {
      return CompletableFuture.failedFuture(new IllegalStateException("no backend set"));
    }
    return b.ready(this::send, this::moduleLoaded);
  }

  /** The backend TB.* calls go through; null until a limiter's startup sets one. */
  public ScriptBackend backend() {
    return backend;
  }

  /**
   * One TB.* call, built by {@code build} from the client's clock where the scripts need it (E5:
   * the {@code now} of a bucket or window call, else null), through the backend. A reload and a
   * retry (E3, E4) stay inside the one future: the limiter's guarded call sees one call.
   */
  private CompletableFuture<Object> tb(Function<String, List<String>> build) {
    ScriptBackend b = backend;
    if (b == null) {
      return send(build.apply(null));
    }
    ScriptBackend.Send s = this::send;
    if (b.current() != null) {
      return b.call(s, build.apply(b.clientNow()));
    }
    return b.ready(s, this::moduleLoaded).thenCompose(c -> b.call(s, build.apply(b.clientNow())));
  }

  // -- arguments ------------------------------------------------------------------------

  /**
   * A number as the module reads it: integers as plain digits, others as the round-trip text of the
   * double (the module's grammar takes {@code 1.0E-4}).
   */
  public static String arg(double x) {
    if (!Double.isFinite(x)) {
      throw new IllegalArgumentException("not a finite number: " + x);
    }
    if (x == Math.rint(x) && Math.abs(x) < 1.0e18) {
      return Long.toString((long) x);
    }
    return Double.toString(x);
  }

  private static List<String> withNow(List<String> args, Double now, String clock) {
    if (now != null) {
      args.add(arg(now));
    } else if (clock != null) {
      args.add(clock);
    }
    return args;
  }

  private static List<String> list(String... parts) {
    List<String> out = new ArrayList<>(parts.length + 2);
    for (String p : parts) {
      out.add(p);
    }
    return out;
  }

  static List<String> takeArgs(
      String key, double capacity, double rate, double n, Double now, String clock) {
    return withNow(list("TB.TAKE", key, arg(capacity), arg(rate), arg(n)), now, clock);
  }

  static void appendCharges(List<String> out, List<Charge> charges) {
    out.add(Integer.toString(charges.size()));
    for (Charge b : charges) {
      out.add(b.key());
    }
    for (Charge b : charges) {
      out.add(arg(b.capacity()));
      out.add(arg(b.rate()));
      out.add(arg(b.cost()));
    }
  }

  static List<String> mtakeArgs(List<Charge> charges, Double now, String clock) {
    if (charges.isEmpty()) {
      throw new IllegalArgumentException("TB.MTAKE needs at least one bucket");
    }
    List<String> out = list("TB.MTAKE");
    appendCharges(out, charges);
    return withNow(out, now, clock);
  }

  static List<String> refundArgs(
      String key, double capacity, double rate, double n, Double now, String clock) {
    return withNow(list("TB.REFUND", key, arg(capacity), arg(rate), arg(n)), now, clock);
  }

  static List<String> acquireArgs(String key, long limit, long leaseMs, List<Charge> take) {
    List<String> out = list("TB.ACQUIRE", key, Long.toString(limit), Long.toString(leaseMs));
    if (take != null && !take.isEmpty()) {
      out.add("TAKE");
      appendCharges(out, take);
    }
    return out;
  }

  // -- the commands -----------------------------------------------------------------------

  @Override
  public CompletableFuture<Reply> take(
      String key, double capacity, double rate, double n, Double now) {
    return tb(clock -> takeArgs(key, capacity, rate, n, now, clock)).thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<MultiReply> mtake(List<Charge> charges, Double now) {
    int numkeys = charges.size();
    return tb(clock -> mtakeArgs(charges, now, clock)).thenApply(raw -> multiReply(raw, numkeys));
  }

  @Override
  public CompletableFuture<Reservation> reserve(
      String key, double capacity, double rate, double n, double maxWait, Double now) {
    return tb(clock ->
            withNow(
                list("TB.RESERVE", key, arg(capacity), arg(rate), arg(n), arg(maxWait)),
                now,
                clock))
        .thenApply(
            raw -> {
              Reply r = reply(raw);
              return new Reservation(r, r.allowed() ? r.retryAfter() : 0);
            });
  }

  @Override
  public CompletableFuture<Reply> peek(String key, double capacity, double rate, Double now) {
    return tb(clock -> withNow(list("TB.PEEK", key, arg(capacity), arg(rate)), now, clock))
        .thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<LeasesReply> peekLeases(String key) {
    return tb(clock -> list("TB.PEEK", key, "LEASES"))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 2, "TB.PEEK LEASES");
              return new LeasesReply(integer(a.get(0)), integer(a.get(1)));
            });
  }

  @Override
  public CompletableFuture<HoldsReply> peekHolds(String key) {
    return tb(clock -> list("TB.PEEK", key, "HOLDS"))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 3, "TB.PEEK HOLDS");
              return new HoldsReply(integer(a.get(0)), number(a.get(1)), integer(a.get(2)));
            });
  }

  @Override
  public CompletableFuture<Reply> refund(
      String key, double capacity, double rate, double n, Double now) {
    return tb(clock -> refundArgs(key, capacity, rate, n, now, clock))
        .thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<List<Reply>> refundAll(List<Charge> charges) {
    ScriptBackend b = backend;
    CompletableFuture<List<Object>> sent;
    if (b == null || (b.current() != null && !b.current().scripts())) {
      List<List<String>> commands = new ArrayList<>(charges.size());
      for (Charge c : charges) {
        commands.add(refundArgs(c.key(), c.capacity(), c.rate(), c.cost(), null, null));
      }
      sent = sendAll(commands);
    } else {
      // SPEC E: each through the scripts (a reload and a retry are per call)
      List<CompletableFuture<Object>> each = new ArrayList<>(charges.size());
      for (Charge c : charges) {
        each.add(tb(clock -> refundArgs(c.key(), c.capacity(), c.rate(), c.cost(), null, clock)));
      }
      sent =
          CompletableFuture.allOf(each.toArray(CompletableFuture[]::new))
              .thenApply(v -> each.stream().map(CompletableFuture::join).toList());
    }
    return sent.thenApply(
        raws -> {
          List<Reply> out = new ArrayList<>(raws.size());
          for (Object raw : raws) {
            out.add(reply(raw));
          }
          return out;
        });
  }

  @Override
  public CompletableFuture<Throttle> throttle(
      String key, long maxBurst, long countPerPeriod, double period, long quantity) {
    List<String> args =
        list(
            "TB.THROTTLE",
            key,
            Long.toString(maxBurst),
            Long.toString(countPerPeriod),
            arg(period),
            Long.toString(quantity));
    return send(args)
        .thenApply(
            raw -> {
              List<?> a = array(raw, 5, "TB.THROTTLE");
              return new Throttle(
                  integer(a.get(0)) == 1,
                  integer(a.get(1)),
                  integer(a.get(2)),
                  integer(a.get(3)),
                  integer(a.get(4)));
            });
  }

  @Override
  public CompletableFuture<Reply> window(
      String key, double limit, double seconds, double n, Double now, WindowMode mode) {
    return tb(clock -> {
          List<String> args =
              withNow(list("TB.WINDOW", key, arg(limit), arg(seconds), arg(n)), now, clock);
          if (mode != null) {
            args.add(mode.name());
          }
          return args;
        })
        .thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<Acquired> acquire(
      String key, long limit, long leaseMs, List<Charge> take) {
    int numkeys = take == null ? 0 : take.size();
    return tb(clock -> acquireArgs(key, limit, leaseMs, take))
        .thenApply(raw -> acquired(raw, numkeys));
  }

  @Override
  public CompletableFuture<LeaseReply> release(String key, String id) {
    return tb(clock -> list("TB.RELEASE", key, id))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 2, "TB.RELEASE");
              return new LeaseReply(integer(a.get(0)) == 1, integer(a.get(1)), 0);
            });
  }

  @Override
  public CompletableFuture<LeaseReply> renew(String key, String id, long leaseMs) {
    return tb(clock -> list("TB.RENEW", key, id, Long.toString(leaseMs)))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 3, "TB.RENEW");
              return new LeaseReply(integer(a.get(0)) == 1, integer(a.get(1)), integer(a.get(2)));
            });
  }

  @Override
  public CompletableFuture<HoldReply> hold(
      String key, double capacity, double rate, double estimate, long ttlMs) {
    return tb(clock ->
            list("TB.HOLD", key, arg(capacity), arg(rate), arg(estimate), Long.toString(ttlMs)))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 5, "TB.HOLD");
              Reply r = reply(a.subList(0, 4));
              String id = text(a.get(4));
              if (r.allowed() && id == null) {
                throw StoreException.unexpected("TB.HOLD took a hold without an id");
              }
              return new HoldReply(r, r.allowed() ? id : null);
            });
  }

  @Override
  public CompletableFuture<SettleReply> settle(
      String key, double capacity, double rate, String id, double actual, Double maxWait) {
    return tb(clock -> {
          List<String> args = list("TB.SETTLE", key, arg(capacity), arg(rate), id, arg(actual));
          if (maxWait != null) {
            args.add(arg(maxWait));
          }
          return args;
        })
        .thenApply(
            raw -> {
              List<?> a = array(raw, 4, "TB.SETTLE");
              return new SettleReply(
                  integer(a.get(0)) == 1, number(a.get(1)), number(a.get(2)), number(a.get(3)));
            });
  }

  @Override
  public CompletableFuture<Boolean> moduleLoaded() {
    return send(list("COMMAND", "INFO", "tb.take"))
        .thenApply(
            raw -> {
              if (!(raw instanceof List<?> a) || a.isEmpty()) {
                return false;
              }
              Object first = a.get(0);
              return first != null && !(first instanceof List<?> l && l.isEmpty());
            });
  }

  @Override
  public CompletableFuture<String> serverMode() {
    return send(list("HELLO")).thenApply(CommandStore::helloMode);
  }

  /** HELLO's {@code mode}: the reply as a client hands it over, a map or RESP2's flat list. */
  static String helloMode(Object raw) {
    if (raw instanceof java.util.Map<?, ?> m) {
      for (java.util.Map.Entry<?, ?> e : m.entrySet()) {
        if ("mode".equals(text(e.getKey()))) {
          return text(e.getValue());
        }
      }
      return null;
    }
    if (raw instanceof List<?> a) {
      for (int i = 0; i + 1 < a.size(); i += 2) {
        Object k = a.get(i);
        if (!(k instanceof List<?>) && "mode".equals(text(k))) {
          Object v = a.get(i + 1);
          return v instanceof List<?> ? null : text(v);
        }
      }
    }
    return null;
  }

  // -- replies ------------------------------------------------------------------------------

  static List<?> array(Object raw, int size, String command) {
    if (!(raw instanceof List<?> a) || a.size() != size) {
      throw StoreException.unexpected(
          "expected a " + size + "-element " + command + " reply, got " + describe(raw));
    }
    return a;
  }

  static Reply reply(Object raw) {
    List<?> a = array(raw, 4, "TB reply");
    return new Reply(number(a.get(0)) == 1, number(a.get(1)), number(a.get(2)), number(a.get(3)));
  }

  static MultiReply multiReply(Object raw, int numkeys) {
    List<?> a = array(raw, 5, "TB.MTAKE");
    return multiReply(a.subList(0, 4), a.get(4), numkeys);
  }

  private static MultiReply multiReply(Object aggregate, Object perKey, int numkeys) {
    if (!(perKey instanceof List<?> keys) || keys.size() != numkeys) {
      throw StoreException.unexpected(
          "expected " + numkeys + " per-key replies, got " + describe(perKey));
    }
    List<Reply> out = new ArrayList<>(numkeys);
    for (Object k : keys) {
      out.add(reply(k));
    }
    return new MultiReply(reply(aggregate), out);
  }

  static Acquired acquired(Object raw, int numkeys) {
    List<?> a = array(raw, numkeys == 0 ? 4 : 6, "TB.ACQUIRE");
    boolean granted = integer(a.get(0)) == 1;
    String id = text(a.get(2));
    if (granted && id == null) {
      throw StoreException.unexpected("TB.ACQUIRE granted a lease without an id");
    }
    MultiReply take = numkeys == 0 ? null : multiReply(a.get(4), a.get(5), numkeys);
    return new Acquired(granted, integer(a.get(1)), id, integer(a.get(3)), take);
  }

  /** A number in a reply: an integer, a RESP3 double, or RESP2's shortest-text bulk string. */
  static double number(Object v) {
    if (v instanceof Number n) {
      return n.doubleValue();
    }
    String s = text(v);
    if (s != null && !s.isEmpty()) {
      try {
        return Double.parseDouble(s);
      } catch (NumberFormatException e) {
        // below
      }
    }
    throw StoreException.unexpected("not a number in a TB reply: " + describe(v));
  }

  static long integer(Object v) {
    double d = number(v);
    if (d != Math.rint(d)) {
      throw StoreException.unexpected("not an integer in a TB reply: " + describe(v));
    }
    return (long) d;
  }

  static String text(Object v) {
    if (v == null) {
      return null;
    }
    if (v instanceof String s) {
      return s;
    }
    if (v instanceof byte[] b) {
      return new String(b, StandardCharsets.UTF_8);
    }
    if (v instanceof ByteBuffer bb) {
      return StandardCharsets.UTF_8.decode(bb.duplicate()).toString();
    }
    if (v instanceof Number n) {
      return n.toString();
    }
    throw StoreException.unexpected("not a string in a TB reply: " + describe(v));
  }

  private static String describe(Object raw) {
    if (raw instanceof List<?> a) {
      List<String> parts = new ArrayList<>();
      for (Object o : a) {
        parts.add(describe(o));
      }
      return parts.toString();
    }
    if (raw instanceof byte[] || raw instanceof ByteBuffer) {
      return '"' + text(raw) + '"';
    }
    return String.valueOf(raw);
  }
}
