package dev.redistb;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.LongAdder;

/** SPEC "Names": the counters of one limiter (every check counts in checks). */
public final class LimiterStats {
  final LongAdder checks = new LongAdder();
  final LongAdder allowed = new LongAdder();
  final LongAdder limited = new LongAdder();
  final LongAdder shadowLimited = new LongAdder();
  final LongAdder storeErrors = new LongAdder();
  final LongAdder degraded = new LongAdder();
  final LongAdder denyCacheHits = new LongAdder();
  final LongAdder refunds = new LongAdder();
  final LongAdder refundErrors = new LongAdder();
  final LongAdder invalidInputs = new LongAdder();
  final LongAdder leasesInFlight = new LongAdder();
  final LongAdder leasesExpired = new LongAdder();
  final LongAdder leasesTimedOut = new LongAdder();
  final LongAdder holds = new LongAdder();
  final LongAdder holdsLost = new LongAdder();
  final LongAdder settlements = new LongAdder();
  volatile String backend;

  /**
   * SPEC E6: the store's backend in use, {@code module} or {@code scripts}; null until it is chosen
   * (a degraded start, or no startup).
   */
  public String backend() {
    return backend;
  }

  public long checks() {
    return checks.sum();
  }

  public long allowed() {
    return allowed.sum();
  }

  public long limited() {
    return limited.sum();
  }

  public long shadowLimited() {
    return shadowLimited.sum();
  }

  public long storeErrors() {
    return storeErrors.sum();
  }

  public long degraded() {
    return degraded.sum();
  }

  public long denyCacheHits() {
    return denyCacheHits.sum();
  }

  public long refunds() {
    return refunds.sum();
  }

  public long refundErrors() {
    return refundErrors.sum();
  }

  public long invalidInputs() {
    return invalidInputs.sum();
  }

  public long leasesInFlight() {
    return leasesInFlight.sum();
  }

  public long leasesExpired() {
    return leasesExpired.sum();
  }

  /** SPEC M2, N7: requests ended at their in-flight policy's max_duration. */
  public long leasesTimedOut() {
    return leasesTimedOut.sum();
  }

  public long holds() {
    return holds.sum();
  }

  /** SPEC M2, G5: holds whose renewal answered 0 before they were settled. */
  public long holdsLost() {
    return holdsLost.sum();
  }

  public long settlements() {
    return settlements.sum();
  }

  /** The counters by the SPEC's names ({@code checks}, {@code store_errors}, ...). */
  public Map<String, Long> asMap() {
    Map<String, Long> m = new LinkedHashMap<>();
    m.put("checks", checks());
    m.put("allowed", allowed());
    m.put("limited", limited());
    m.put("shadow_limited", shadowLimited());
    m.put("store_errors", storeErrors());
    m.put("degraded", degraded());
    m.put("deny_cache_hits", denyCacheHits());
    m.put("refunds", refunds());
    m.put("refund_errors", refundErrors());
    m.put("invalid_inputs", invalidInputs());
    m.put("leases_in_flight", leasesInFlight());
    m.put("leases_expired", leasesExpired());
    m.put("leases_timed_out", leasesTimedOut());
    m.put("holds", holds());
    m.put("holds_lost", holdsLost());
    m.put("settlements", settlements());
    return m;
  }

  @Override
  public String toString() {
    return asMap().toString();
  }
}
