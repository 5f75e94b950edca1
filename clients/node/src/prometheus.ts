/**
 * Per-policy metrics through prom-client (an optional peer dependency):
 * `new RateLimiter(redis, { metrics: new PrometheusMetrics({ registry }) })`.
 * Labels `limiter` and `policy` only, never a client identity (SPEC M1).
 */
import { Counter, Gauge, Histogram, type Registry, register as globalRegistry } from 'prom-client';
import type { LimiterMetrics } from './metrics.js';

export const CALL_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];

export interface PrometheusMetricsOptions {
  /** default: prom-client's global registry */
  registry?: Registry;
}

type PolicyCounter = Counter<'limiter' | 'policy'>;
type LimiterCounter = Counter<'limiter'>;

export class PrometheusMetrics implements LimiterMetrics {
  readonly registry: Registry;
  private readonly allowedTotal: PolicyCounter;
  private readonly limitedTotal: PolicyCounter;
  private readonly shadowLimitedTotal: PolicyCounter;
  private readonly refundedTotal: PolicyCounter;
  private readonly denyCacheHitsTotal: PolicyCounter;
  private readonly invalidInputsTotal: PolicyCounter;
  private readonly leasesInFlight: Gauge<'limiter' | 'policy'>;
  private readonly leasesExpiredTotal: PolicyCounter;
  private readonly leasesTimedOutTotal: PolicyCounter;
  private readonly holdsLostTotal: PolicyCounter;
  private readonly storeErrorsTotal: LimiterCounter;
  private readonly backendGauge: Gauge<'limiter' | 'backend'>;
  private readonly degradedTotal: LimiterCounter;
  private readonly callDuration: Histogram<'limiter'>;

  constructor(options: PrometheusMetricsOptions = {}) {
    const registry = options.registry ?? globalRegistry;
    this.registry = registry;
    const policyCounter = (name: string, help: string): PolicyCounter =>
      (registry.getSingleMetric(name) as PolicyCounter | undefined) ??
      new Counter({ name, help, labelNames: ['limiter', 'policy'] as const, registers: [registry] });
    const limiterCounter = (name: string, help: string): LimiterCounter =>
      (registry.getSingleMetric(name) as LimiterCounter | undefined) ??
      new Counter({ name, help, labelNames: ['limiter'] as const, registers: [registry] });
    this.allowedTotal = policyCounter('redis_tb_allowed_total', 'Applied policies of allowed requests (tokens taken)');
    this.limitedTotal = policyCounter('redis_tb_limited_total', 'Enforced policies that refused a request answered 429');
    this.shadowLimitedTotal = policyCounter('redis_tb_shadow_limited_total', 'Shadow policies that would have refused a request');
    this.refundedTotal = policyCounter('redis_tb_refunded_total', 'Policies whose tokens a refund gave back');
    this.denyCacheHitsTotal = policyCounter('redis_tb_deny_cache_hits_total', 'Requests refused by the local deny cache');
    this.invalidInputsTotal = policyCounter('redis_tb_invalid_inputs_total', 'Out-of-range costs or limits from the application (SPEC L3)');
    // SPEC M2
    const gname = 'redis_tb_leases_in_flight';
    this.leasesInFlight = (registry.getSingleMetric(gname) as Gauge<'limiter' | 'policy'> | undefined) ??
      new Gauge({ name: gname, help: 'Leases of in-flight policies this process holds now (SPEC N)', labelNames: ['limiter', 'policy'] as const, registers: [registry] });
    this.leasesExpiredTotal = policyCounter('redis_tb_leases_expired_total', 'Leases that ended without a release (a TB.RELEASE or TB.RENEW that answered 0)');
    this.leasesTimedOutTotal = policyCounter('redis_tb_leases_timed_out_total', 'Requests ended at their in-flight policy\'s max_duration (SPEC N7)');
    this.holdsLostTotal = policyCounter('redis_tb_holds_lost_total', 'Holds whose renewal answered 0 before they were settled (SPEC G5)');
    // SPEC E6
    const bname = 'redis_tb_backend';
    this.backendGauge = (registry.getSingleMetric(bname) as Gauge<'limiter' | 'backend'> | undefined) ??
      new Gauge({ name: bname, help: 'The store\'s backend in use: 1 for it (module or scripts, SPEC E6)', labelNames: ['limiter', 'backend'] as const, registers: [registry] });
    this.storeErrorsTotal = limiterCounter('redis_tb_store_errors_total', 'Failed Redis calls (errors, timeouts)');
    this.degradedTotal = limiterCounter('redis_tb_degraded_total', 'Requests decided by the failure mode');
    const hname = 'redis_tb_redis_call_duration_seconds';
    this.callDuration = (registry.getSingleMetric(hname) as Histogram<'limiter'> | undefined) ??
      new Histogram({
        name: hname, help: 'Duration of the limiter\'s Redis calls (TB.MTAKE, refunds)',
        labelNames: ['limiter'] as const, buckets: CALL_BUCKETS, registers: [registry],
      });
  }

  allowed(limiter: string, policy: string): void {
    this.allowedTotal.inc({ limiter, policy });
  }
  limited(limiter: string, policy: string): void {
    this.limitedTotal.inc({ limiter, policy });
  }
  shadowLimited(limiter: string, policy: string): void {
    this.shadowLimitedTotal.inc({ limiter, policy });
  }
  refunded(limiter: string, policy: string): void {
    this.refundedTotal.inc({ limiter, policy });
  }
  denyCacheHit(limiter: string, policy: string): void {
    this.denyCacheHitsTotal.inc({ limiter, policy });
  }
  invalidInput(limiter: string, policy: string): void {
    this.invalidInputsTotal.inc({ limiter, policy });
  }
  leaseGranted(limiter: string, policy: string): void {
    this.leasesInFlight.inc({ limiter, policy });
  }
  leaseEnded(limiter: string, policy: string): void {
    this.leasesInFlight.dec({ limiter, policy });
  }
  leaseExpired(limiter: string, policy: string): void {
    this.leasesExpiredTotal.inc({ limiter, policy });
  }
  leaseTimedOut(limiter: string, policy: string): void {
    this.leasesTimedOutTotal.inc({ limiter, policy });
  }
  holdLost(limiter: string, policy: string): void {
    this.holdsLostTotal.inc({ limiter, policy });
  }
  backend(limiter: string, backend: 'module' | 'scripts'): void {
    this.backendGauge.set({ limiter, backend }, 1);
    this.backendGauge.set({ limiter, backend: backend === 'module' ? 'scripts' : 'module' }, 0);
  }

  storeError(limiter: string): void {
    this.storeErrorsTotal.inc({ limiter });
  }
  degraded(limiter: string): void {
    this.degradedTotal.inc({ limiter });
  }
  redisCall(limiter: string, seconds: number): void {
    this.callDuration.observe({ limiter }, seconds);
  }
}

export default PrometheusMetrics;
