/**
 * The limiter's time source (SPEC T1): every rule that reads time reads it (a monotonic
 * clock for the deny cache R, the breaker B, the log rate and the leases' deadlines N7; the
 * wall clock for the Unix-time `X-RateLimit-Reset` of H4). Tests replace it.
 */
import { performance } from 'node:perf_hooks';

/** SPEC T1: the limiter's time source; tests replace it. */
export interface Clock {
  /** monotonic milliseconds (deny cache, breaker, log rate) */
  monotonicMs(): number;
  /** milliseconds since the Unix epoch (the legacy `X-RateLimit-Reset`, SPEC H4) */
  wallMs(): number;
}

/** The system's clocks: `performance.now()` and `Date.now()`. */
export const systemClock: Clock = Object.freeze({
  monotonicMs: () => performance.now(),
  wallMs: () => Date.now(),
});
