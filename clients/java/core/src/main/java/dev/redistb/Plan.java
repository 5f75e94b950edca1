package dev.redistb;

import dev.redistb.store.Acquired;
import dev.redistb.store.Charge;
import dev.redistb.store.MultiReply;
import dev.redistb.store.Reply;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * The plan of one request (SPEC L4, W2, N2, G1): each applicable policy resolved to its key, limit
 * and cost; the settle_later ones set aside as hold targets; and the one call that checks the rest
 * (TB.TAKE, TB.MTAKE, TB.WINDOW or TB.ACQUIRE [TAKE]).
 */
final class Plan {
  /**
   * One policy for this request.
   *
   * @param policy the policy
   * @param key its key (K1)
   * @param capacity a bucket's capacity, a window's limit, an in-flight policy's n
   * @param rate tokens a second (a window's limit / seconds; 0 for an in-flight policy)
   * @param cost tokens (1 slot for an in-flight policy)
   * @param shadow the policy's or the limiter's shadow flag
   * @param limit the limit as resolved
   */
  record Part(
      Policy policy,
      String key,
      double capacity,
      double rate,
      double cost,
      boolean shadow,
      AnyLimit limit) {
    LimitKind kind() {
      return limit.kind();
    }

    String name() {
      return policy.name();
    }
  }

  /** What the call answered, per part in order (a slot's part reads {@code acquired}). */
  record Answer(boolean allowed, List<Reply> buckets, Acquired acquired) {}

  /** I2 or L3 stopped planning: the outcome and its culprit (the header or the policy). */
  final Outcome stop;

  final String culprit;

  /** The parts the call checks, in policy order. */
  final List<Part> parts;

  /** G1: settle_later policies' targets, by name (empty when none). */
  final Map<String, SettleTarget> settle;

  private Plan(Outcome stop, String culprit, List<Part> parts, Map<String, SettleTarget> settle) {
    this.stop = stop;
    this.culprit = culprit;
    this.parts = parts;
    this.settle = settle;
  }

  static Plan stopped(Outcome stop, String culprit) {
    return new Plan(stop, culprit, List.of(), Map.of());
  }

  static Plan of(List<Part> parts, Map<String, SettleTarget> settle) {
    return new Plan(null, null, parts, settle);
  }

  private Part slot() {
    for (Part p : parts) {
      if (p.kind() == LimitKind.IN_FLIGHT) {
        return p;
      }
    }
    return null;
  }

  /** The command this plan's call is (for logs and errors). */
  String command() {
    if (slot() != null) {
      return "TB.ACQUIRE";
    }
    if (parts.size() == 1) {
      return parts.get(0).kind() == LimitKind.WINDOW ? "TB.WINDOW" : "TB.TAKE";
    }
    return "TB.MTAKE";
  }

  private static List<Charge> buckets(List<Part> ps) {
    List<Charge> out = new ArrayList<>(ps.size());
    for (Part p : ps) {
      out.add(new Charge(p.key(), p.capacity(), p.rate(), p.cost()));
    }
    return out;
  }

  /**
   * L4: one policy is TB.TAKE (its reply the aggregate), several one TB.MTAKE in policy order; W2:
   * a window is TB.WINDOW; N2: an in-flight part makes it TB.ACQUIRE, with TAKE and the buckets
   * when any apply.
   */
  CompletableFuture<Answer> call(GuardedStore guarded) {
    Part slot = slot();
    if (slot != null) {
      List<Part> rest = new ArrayList<>(parts);
      rest.remove(slot);
      InFlightLimit f = (InFlightLimit) slot.limit();
      return Futures.map(
          guarded.call(
              "TB.ACQUIRE", s -> s.acquire(slot.key(), f.limit(), f.leaseMs(), buckets(rest))),
          a -> new Answer(a.granted(), a.take() == null ? List.of() : a.take().keys(), a));
    }
    Part first = parts.get(0);
    if (parts.size() == 1 && first.limit() instanceof WindowLimit w) {
      return Futures.map(
          guarded.call(
              "TB.WINDOW",
              s -> s.window(first.key(), w.limit(), w.seconds(), first.cost(), null, w.mode())),
          r -> new Answer(r.allowed(), List.of(r), null));
    }
    if (parts.size() == 1) {
      return Futures.map(
          guarded.call(
              "TB.TAKE",
              s -> s.take(first.key(), first.capacity(), first.rate(), first.cost(), null)),
          r -> new Answer(r.allowed(), List.of(r), null));
    }
    return Futures.map(
        guarded.call("TB.MTAKE", s -> s.mtake(buckets(parts), null)),
        (MultiReply m) -> new Answer(m.aggregate().allowed(), m.keys(), null));
  }

  /** SPEC D2, N3: the per-policy results of a reply, in policy order. */
  List<PolicyResult> results(Answer reply) {
    List<PolicyResult> out = new ArrayList<>(parts.size());
    int k = 0;
    for (Part p : parts) {
      if (p.kind() == LimitKind.IN_FLIGHT && reply.acquired() != null) {
        Acquired a = reply.acquired();
        double n = p.capacity();
        // N3: the slot was refused when not granted and in_flight >= n
        boolean free = a.granted() || a.inFlight() < n;
        double wait = free ? 0 : Math.max(0, a.ms()) / 1000.0;
        out.add(
            new PolicyResult(
                p.name(),
                p.key(),
                n,
                null,
                1,
                LimitKind.IN_FLIGHT,
                null,
                free,
                Math.max(0, n - a.inFlight()),
                wait,
                wait,
                p.shadow()));
        continue;
      }
      Reply r = reply.buckets().get(k++);
      Double window = p.limit() instanceof WindowLimit w ? w.seconds() : null;
      out.add(
          new PolicyResult(
              p.name(),
              p.key(),
              p.capacity(),
              p.rate(),
              p.cost(),
              p.kind(),
              window,
              r.allowed(),
              r.remaining(),
              r.retryAfter(),
              r.resetAfter(),
              p.shadow()));
    }
    return out;
  }
}
