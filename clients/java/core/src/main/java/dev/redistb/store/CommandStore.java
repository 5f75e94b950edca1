package dev.redistb.store;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * {@link Store} over a client that sends a raw command and hands back its raw reply (a {@link
 * Number} for integers and RESP3 doubles, a {@link String}, {@code byte[]} or {@link ByteBuffer}
 * for bulk strings, a {@link List} for arrays, null for nil): the arguments of every command are
 * written here, and every reply read here, once for every backend.
 */
public abstract class CommandStore implements Store {
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

  private static List<String> withNow(List<String> args, Double now) {
    if (now != null) {
      args.add(arg(now));
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

  static List<String> takeArgs(String key, double capacity, double rate, double n, Double now) {
    return withNow(list("TB.TAKE", key, arg(capacity), arg(rate), arg(n)), now);
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

  static List<String> mtakeArgs(List<Charge> charges, Double now) {
    if (charges.isEmpty()) {
      throw new IllegalArgumentException("TB.MTAKE needs at least one bucket");
    }
    List<String> out = list("TB.MTAKE");
    appendCharges(out, charges);
    return withNow(out, now);
  }

  static List<String> refundArgs(String key, double capacity, double rate, double n, Double now) {
    return withNow(list("TB.REFUND", key, arg(capacity), arg(rate), arg(n)), now);
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
    return send(takeArgs(key, capacity, rate, n, now)).thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<MultiReply> mtake(List<Charge> charges, Double now) {
    int numkeys = charges.size();
    return send(mtakeArgs(charges, now)).thenApply(raw -> multiReply(raw, numkeys));
  }

  @Override
  public CompletableFuture<Reservation> reserve(
      String key, double capacity, double rate, double n, double maxWait, Double now) {
    List<String> args =
        withNow(list("TB.RESERVE", key, arg(capacity), arg(rate), arg(n), arg(maxWait)), now);
    return send(args)
        .thenApply(
            raw -> {
              Reply r = reply(raw);
              return new Reservation(r, r.allowed() ? r.retryAfter() : 0);
            });
  }

  @Override
  public CompletableFuture<Reply> peek(String key, double capacity, double rate, Double now) {
    return send(withNow(list("TB.PEEK", key, arg(capacity), arg(rate)), now))
        .thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<LeasesReply> peekLeases(String key) {
    return send(list("TB.PEEK", key, "LEASES"))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 2, "TB.PEEK LEASES");
              return new LeasesReply(integer(a.get(0)), integer(a.get(1)));
            });
  }

  @Override
  public CompletableFuture<HoldsReply> peekHolds(String key) {
    return send(list("TB.PEEK", key, "HOLDS"))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 3, "TB.PEEK HOLDS");
              return new HoldsReply(integer(a.get(0)), number(a.get(1)), integer(a.get(2)));
            });
  }

  @Override
  public CompletableFuture<Reply> refund(
      String key, double capacity, double rate, double n, Double now) {
    return send(refundArgs(key, capacity, rate, n, now)).thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<List<Reply>> refundAll(List<Charge> charges) {
    List<List<String>> commands = new ArrayList<>(charges.size());
    for (Charge b : charges) {
      commands.add(refundArgs(b.key(), b.capacity(), b.rate(), b.cost(), null));
    }
    return sendAll(commands)
        .thenApply(
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
    List<String> args = withNow(list("TB.WINDOW", key, arg(limit), arg(seconds), arg(n)), now);
    if (mode != null) {
      args.add(mode.name());
    }
    return send(args).thenApply(CommandStore::reply);
  }

  @Override
  public CompletableFuture<Acquired> acquire(
      String key, long limit, long leaseMs, List<Charge> take) {
    int numkeys = take == null ? 0 : take.size();
    return send(acquireArgs(key, limit, leaseMs, take)).thenApply(raw -> acquired(raw, numkeys));
  }

  @Override
  public CompletableFuture<LeaseReply> release(String key, String id) {
    return send(list("TB.RELEASE", key, id))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 2, "TB.RELEASE");
              return new LeaseReply(integer(a.get(0)) == 1, integer(a.get(1)), 0);
            });
  }

  @Override
  public CompletableFuture<LeaseReply> renew(String key, String id, long leaseMs) {
    return send(list("TB.RENEW", key, id, Long.toString(leaseMs)))
        .thenApply(
            raw -> {
              List<?> a = array(raw, 3, "TB.RENEW");
              return new LeaseReply(integer(a.get(0)) == 1, integer(a.get(1)), integer(a.get(2)));
            });
  }

  @Override
  public CompletableFuture<HoldReply> hold(
      String key, double capacity, double rate, double estimate, long ttlMs) {
    List<String> args =
        list("TB.HOLD", key, arg(capacity), arg(rate), arg(estimate), Long.toString(ttlMs));
    return send(args)
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
    List<String> args = list("TB.SETTLE", key, arg(capacity), arg(rate), id, arg(actual));
    if (maxWait != null) {
      args.add(arg(maxWait));
    }
    return send(args)
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
