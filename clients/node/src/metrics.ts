/** What the limiter reports to a metrics backend (`PrometheusMetrics` in `redis-tb/prometheus`). */
export interface LimiterMetrics {
  /** +1 per applied policy of an allowed, charged request */
  allowed(limiter: string, policy: string): void;
  /** +1 per enforced policy that refused a request that got a 429 */
  limited(limiter: string, policy: string): void;
  /** +1 per shadow policy that refused */
  shadowLimited(limiter: string, policy: string): void;
  /** +1 per policy whose tokens a refund gave back */
  refunded(limiter: string, policy: string): void;
  /** +1 per request refused by the deny cache, for the policy whose cached refusal answered */
  denyCacheHit(limiter: string, policy: string): void;
  /** +1 per out-of-range cost or limit from the application (SPEC L3); optional for older backends */
  invalidInput?(limiter: string, policy: string): void;
  /** SPEC M2: a lease of an in-flight policy was granted (the gauge goes up); optional for older backends */
  leaseGranted?(limiter: string, policy: string): void;
  /** SPEC M2: a lease ended by N4 (the gauge goes down), whatever the answer */
  leaseEnded?(limiter: string, policy: string): void;
  /** SPEC M2: a lease ended without a release (TB.RELEASE or TB.RENEW answered 0) */
  leaseExpired?(limiter: string, policy: string): void;
  /** SPEC M2, N7: a request ended at its max_duration */
  leaseTimedOut?(limiter: string, policy: string): void;
  /** SPEC M2, G5: a hold whose renewal answered 0 (lost) */
  holdLost?(limiter: string, policy: string): void;
  /** SPEC E6: the backend chosen (the gauge redis_tb_backend{limiter, backend}: 1 for it, 0 for the other) */
  backend?(limiter: string, backend: 'module' | 'scripts'): void;
  /** failed Redis calls (errors, timeouts) */
  storeError(limiter: string): void;
  /** requests decided by the failure mode */
  degraded(limiter: string): void;
  /** each Redis call of the limiter (TB.MTAKE, refunds), failed ones too */
  redisCall(limiter: string, seconds: number): void;
}
