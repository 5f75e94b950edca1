/** The counters of one limiter (SPEC "Names", M2). */

/** SPEC "Names": the counters of one limiter. */
export interface LimiterStats {
  /** requests checked against Redis (or meant to be) */
  checks: number;
  /** requests admitted by Redis (charged) */
  allowed: number;
  /** requests refused with 429 (deny-cache hits included) */
  limited: number;
  /** Redis calls that failed: connection errors, timeouts, error replies */
  storeErrors: number;
  /** requests decided by the failure mode (store errors + cool-down skips) */
  degraded: number;
  refunds: number;
  refundErrors: number;
  /** requests that a shadow policy refused (they went on, or an enforced policy refused them too) */
  shadowLimited: number;
  /** requests refused by the local deny cache */
  denyCacheHits: number;
  /** requests with an out-of-range cost or limit from the application (SPEC L3) */
  invalidInputs: number;
  /** SPEC M2: leases this process holds now (up at a grant, down when the lease ends by N4) */
  leasesInFlight: number;
  /** SPEC M2: leases that ended without a release (a TB.RELEASE or TB.RENEW that answered 0) */
  leasesExpired: number;
  /** SPEC M2, N7: requests ended at their in-flight policy's max_duration */
  leasesTimedOut: number;
  /** SPEC M2: holds taken (G1) */
  holds: number;
  /** SPEC M2, G5: holds whose renewal answered 0 (lost) */
  holdsLost: number;
  /** SPEC M2: holds settled (G3) */
  settlements: number;
  /** SPEC E6: the backend in use, null until it is chosen (a degraded start, or no startup) */
  backend: 'module' | 'scripts' | null;
}

/** A limiter's counters, all 0. */
export function newStats(): LimiterStats {
  return {
    checks: 0, allowed: 0, limited: 0, storeErrors: 0, degraded: 0,
    refunds: 0, refundErrors: 0, shadowLimited: 0, denyCacheHits: 0, invalidInputs: 0,
    leasesInFlight: 0, leasesExpired: 0, leasesTimedOut: 0, holds: 0, holdsLost: 0, settlements: 0, backend: null,
  };
}
