package dev.redistb;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * What the limiter decided for one request, as handlers see it (SPEC D, N6, G1). {@link #allowed()}
 * says whether the request goes on (for a store error: the failure mode). {@link #results()} has
 * one entry per applied policy, in order (empty for a store error or when no policy applied; for a
 * deny-cache hit, the cached violated policies only).
 */
public final class Decision {
  /** The limiter's side of refunds and holds. */
  interface Operations {
    CompletableFuture<Boolean> refund(Decision decision);

    /** SPEC F2: whether the limiter refunds a response of {@code status} (its refund_on). */
    boolean refundsOn(int status);

    /** SPEC F2: whether the limiter has a refund_on at all. */
    boolean refundsOnAny();

    CompletableFuture<Hold> hold(SettleTarget target, double estimate, double ttlSeconds);
  }

  private final Outcome outcome;
  private final boolean allowed;
  private final List<PolicyResult> results;
  private final Throwable error;
  private final List<String> shadowLimited;
  private final boolean fromCache;
  private final boolean charged;
  private final String culprit;
  private final List<String> crossSlot;
  private final Lease lease;
  private final Map<String, SettleTarget> settleTargets;
  private final Operations ops;
  private final AtomicBoolean refunded = new AtomicBoolean();

  /** SPEC G5: the holds taken on this decision, renewed from keepAlive() until finish(). */
  private List<Hold> holds;

  private boolean keptAlive;
  private boolean finished;

  private Decision(
      Outcome outcome,
      boolean allowed,
      List<PolicyResult> results,
      Throwable error,
      List<String> shadowLimited,
      boolean fromCache,
      boolean charged,
      String culprit,
      List<String> crossSlot,
      Lease lease,
      Map<String, SettleTarget> settleTargets,
      Operations ops) {
    this.outcome = outcome;
    this.allowed = allowed;
    this.results = List.copyOf(results);
    this.error = error;
    this.shadowLimited = List.copyOf(shadowLimited);
    this.fromCache = fromCache;
    this.charged = charged;
    this.culprit = culprit;
    this.crossSlot = crossSlot == null ? null : List.copyOf(crossSlot);
    this.lease = lease;
    this.settleTargets = settleTargets == null ? Map.of() : Map.copyOf(settleTargets);
    this.ops = ops;
  }

  /** No policy applied (L4). */
  static Decision notLimited(Map<String, SettleTarget> settle, Operations ops) {
    return new Decision(
        Outcome.NOT_LIMITED,
        true,
        List.of(),
        null,
        List.of(),
        false,
        false,
        null,
        null,
        null,
        settle,
        ops);
  }

  /** I2 (bad_request) or L3 (invalid_input), naming the header or the policy. */
  static Decision stopped(Outcome outcome, String culprit) {
    return new Decision(
        outcome, false, List.of(), null, List.of(), false, false, culprit, null, null, null, null);
  }

  /**
   * SPEC K6: Redis answered CROSSSLOT: a configuration error (invalid_input, a 500 naming the
   * policies of the call), never the failure mode.
   */
  static Decision crossSlot(List<String> policies) {
    return new Decision(
        Outcome.INVALID_INPUT,
        false,
        List.of(),
        null,
        List.of(),
        false,
        false,
        null,
        policies,
        null,
        null,
        null);
  }

  /** B4: the failure mode decided. */
  static Decision storeError(boolean failOpen, Throwable error) {
    return new Decision(
        Outcome.STORE_ERROR,
        failOpen,
        List.of(),
        error,
        List.of(),
        false,
        false,
        null,
        null,
        null,
        null,
        null);
  }

  /** Redis admitted every policy: charged. */
  static Decision admitted(
      List<PolicyResult> results, Lease lease, Map<String, SettleTarget> settle, Operations ops) {
    return new Decision(
        Outcome.ALLOWED,
        true,
        results,
        null,
        List.of(),
        false,
        true,
        null,
        null,
        lease,
        settle,
        ops);
  }

  /**
   * SPEC D1, D4, S2, S3: limited when an enforced policy refused, else allowed with nothing charged
   * (only shadow policies refused).
   */
  static Decision refused(
      List<PolicyResult> results,
      boolean fromCache,
      Map<String, SettleTarget> settle,
      Operations ops) {
    boolean enforcedRefused = false;
    List<String> shadow = new ArrayList<>();
    for (PolicyResult r : results) {
      if (r.allowed()) {
        continue;
      }
      if (r.shadow()) {
        shadow.add(r.name());
      } else {
        enforcedRefused = true;
      }
    }
    if (enforcedRefused) {
      return new Decision(
          Outcome.LIMITED,
          false,
          results,
          null,
          shadow,
          fromCache,
          false,
          null,
          null,
          null,
          null,
          null);
    }
    return new Decision(
        Outcome.ALLOWED, true, results, null, shadow, false, false, null, null, null, settle, ops);
  }

  /** A decision of per-policy results as they are (tests, the response vectors). */
  public static Decision of(List<PolicyResult> results) {
    boolean all = results.stream().allMatch(PolicyResult::allowed);
    return all ? admitted(results, null, null, null) : refused(results, false, null, null);
  }

  public Outcome outcome() {
    return outcome;
  }

  /** Whether the request goes on. */
  public boolean allowed() {
    return allowed;
  }

  public List<PolicyResult> results() {
    return results;
  }

  /** The store error behind a {@code store_error} (null in the cool-down after one). */
  public Throwable error() {
    return error;
  }

  /** D4: the shadow policies that refused. */
  public List<String> shadowLimited() {
    return shadowLimited;
  }

  /** R2: refused by the local deny cache, without Redis. */
  public boolean fromCache() {
    return fromCache;
  }

  /** Whether tokens were taken for this request. */
  public boolean charged() {
    return charged;
  }

  /** invalid_input: the policy; bad_request: the header; else null. */
  public String culprit() {
    return culprit;
  }

  /** SPEC K6: invalid_input of a call Redis answered CROSSSLOT: its policies; else null. */
  public List<String> crossSlot() {
    return crossSlot;
  }

  /** SPEC N6: this request's lease, null when none was taken. */
  public Lease lease() {
    return lease;
  }

  public boolean limited() {
    return outcome == Outcome.LIMITED;
  }

  /** SPEC D4: the enforced policies that refused, in policy order. */
  public List<String> violated() {
    List<String> out = new ArrayList<>();
    if (outcome == Outcome.LIMITED) {
      for (PolicyResult r : results) {
        if (!r.allowed() && !r.shadow()) {
          out.add(r.name());
        }
      }
    }
    return out;
  }

  /** SPEC D3: the smallest remaining of the enforced policies; null when none applied. */
  public Double remaining() {
    Double out = null;
    for (PolicyResult r : results) {
      if (!r.shadow() && (out == null || r.remaining() < out)) {
        out = r.remaining();
      }
    }
    return out;
  }

  /** SPEC D3: the largest reset of the enforced policies; null when none applied. */
  public Double resetAfter() {
    Double out = null;
    for (PolicyResult r : results) {
      if (!r.shadow() && (out == null || r.resetAfter() > out)) {
        out = r.resetAfter();
      }
    }
    return out;
  }

  /**
   * SPEC D3: the largest wait among the enforced violated policies; null when one of them can never
   * pass, or none refused.
   */
  public Double retryAfter() {
    if (outcome != Outcome.LIMITED) {
      return null;
    }
    Double out = null;
    for (PolicyResult r : results) {
      if (r.allowed() || r.shadow()) {
        continue;
      }
      if (r.retryAfter() < 0) {
        return null;
      }
      if (out == null || r.retryAfter() > out) {
        out = r.retryAfter();
      }
    }
    return out;
  }

  /**
   * SPEC F1: TB.REFUND now on every bucket this request was charged on; true when every refund
   * succeeded. Once only; false (nothing sent) when nothing was charged. Never completes
   * exceptionally for a store error (it is counted and logged).
   */
  public CompletableFuture<Boolean> refund() {
    if (!charged
        || ops == null
        || outcome != Outcome.ALLOWED
        || !refunded.compareAndSet(false, true)) {
      return CompletableFuture.completedFuture(false);
    }
    return ops.refund(this);
  }

  /** Whether {@link #refund()} was called (and sent) for this decision. */
  public boolean refunded() {
    return refunded.get();
  }

  /** SPEC G1: a hold of {@code estimate} on a settle_later policy for 60 s. */
  public CompletableFuture<Hold> hold(String policy, double estimate) {
    return hold(policy, estimate, 60);
  }

  /**
   * SPEC G1: TB.HOLD {@code estimate} on the settle_later policy {@code policy}, its key and limit
   * as this check resolved them, for {@code ttlSeconds}. Throws {@link IllegalArgumentException}
   * (sending nothing) for an estimate that is not a cost > 0, a bad ttl, or a name that is not a
   * settle_later policy of this check; a failed call (or one the open breaker keeps from Redis)
   * completes with a {@code StoreException}.
   */
  public CompletableFuture<Hold> hold(String policy, double estimate, double ttlSeconds) {
    SettleTarget target = settleTargets.get(policy);
    if (target == null || ops == null) {
      throw new IllegalArgumentException(
          "'"
              + policy
              + "' is not a settle_later policy of this check (or it was skipped for this request)");
    }
    if (!(estimate > 0 && estimate <= Limit.MAX)) {
      throw new IllegalArgumentException(
          "policy '" + policy + "': a hold's estimate must be > 0 and <= 2^53, got " + estimate);
    }
    if (!(ttlSeconds > 0 && Math.ceil(ttlSeconds * 1000) <= 31536000000.0)) {
      throw new IllegalArgumentException(
          "policy '" + policy + "': a hold's ttl must be > 0 and <= 31536000 s, got " + ttlSeconds);
    }
    return ops.hold(target, estimate, ttlSeconds).thenApply(this::taken);
  }

  /** SPEC G5: a hold taken is renewed while the request runs (from keepAlive() to finish()). */
  private Hold taken(Hold h) {
    boolean start;
    synchronized (this) {
      if (finished || timedOut() || !h.live()) {
        return h;
      }
      if (holds == null) {
        holds = new ArrayList<>(2);
      }
      holds.add(h);
      start = keptAlive;
    }
    if (start) {
      h.start();
    }
    return h;
  }

  /** SPEC G5: the response ended (N4's event, N7's included): no more hold renewals. */
  private void stopHolds() {
    List<Hold> hs;
    synchronized (this) {
      finished = true;
      hs = holds;
      holds = null;
    }
    if (hs != null) {
      for (Hold h : hs) {
        h.stop();
      }
    }
  }

  /**
   * SPEC N4, G5: the response ended (sent, disconnected, raised or cancelled): the lease (if any)
   * is released once, and the holds taken on this decision are no longer renewed. Later calls do
   * nothing.
   */
  public CompletableFuture<Void> finish() {
    stopHolds();
    return lease == null ? CompletableFuture.completedFuture(null) : lease.finish();
  }

  /**
   * SPEC F2, N4, G5: {@link #finish()} for a response the handler answered with {@code status}:
   * when the limiter's refund_on lists it, {@link #refund()} first (sent before the lease's
   * release, neither waiting for the other). A failed refund is counted, never raised.
   */
  public CompletableFuture<Void> finish(int status) {
    if (ops == null || !charged || !ops.refundsOn(status)) {
      return finish();
    }
    CompletableFuture<Boolean> refunded = refund();
    return CompletableFuture.allOf(refunded, finish());
  }

  /** SPEC N5, N7: one renewal now (or the request's end past its max_duration); false when none. */
  public CompletableFuture<Boolean> renew() {
    return lease == null ? CompletableFuture.completedFuture(false) : lease.renew();
  }

  /**
   * SPEC N5, N7, G5: the adapter's promise to call {@link #finish()} when the response ends; until
   * then the lease is renewed every lease / 2 (and ended at its max_duration), and each hold taken
   * on this decision every ttl / 2, on the limiter's renewal thread.
   */
  public void keepAlive() {
    List<Hold> hs;
    synchronized (this) {
      if (keptAlive || finished) {
        return;
      }
      keptAlive = true;
      hs = holds == null ? List.of() : List.copyOf(holds);
    }
    if (lease != null) {
      lease.onTimeout(this::stopHolds); // G5: N7's end stops the holds' renewals too
      lease.keepAlive();
    }
    for (Hold h : hs) {
      h.start();
    }
  }

  /**
   * SPEC N4, G5, F2: whether the end of the response matters (a lease to release, holds to stop
   * renewing, a refund_on that may refund it): an adapter calls {@link #keepAlive()} and {@link
   * #finish(int)} (or {@link #finish()} when no status was answered) for such a decision.
   */
  public boolean tracksResponse() {
    return lease != null || !settleTargets.isEmpty() || refundsOnStatus();
  }

  /** SPEC F2: whether {@link #finish(int)} may refund this request (charged, and refund_on set). */
  public boolean refundsOnStatus() {
    return charged && ops != null && ops.refundsOnAny();
  }

  /** SPEC N7: whether the limiter ended this request at its in-flight policy's max_duration. */
  public boolean timedOut() {
    return lease != null && lease.timedOut();
  }

  /**
   * SPEC N7: {@code action} runs when the limiter ends this request at its max_duration (at once if
   * it has); the adapters end the response there. Never runs for a decision without a lease.
   */
  public void onTimeout(Runnable action) {
    if (lease != null) {
      lease.onTimeout(action);
    }
  }

  @Override
  public String toString() {
    return "Decision(" + outcome.wire() + ", allowed=" + allowed + ", " + results + ")";
  }
}
