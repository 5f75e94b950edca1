/**
 * What the limiter's parts (leases, holds) read of their limiter: its name, client,
 * counters, metrics and logger, its monotonic clock (SPEC T1), and its one gate to Redis
 * for their calls (breaker, timeout, counting: SPEC B1-B3, L5).
 */
import type { TbClient } from './client.js';
import type { LimiterMetrics } from './metrics.js';
import type { LimiterStats } from './stats.js';

export interface LimiterParts {
  readonly name: string;
  readonly client: TbClient;
  readonly stats: LimiterStats;
  readonly metrics: LimiterMetrics | null;
  readonly logger: { warn(message: string): void };
  /** SPEC T1: monotonic ms */
  now(): number;
  /**
   * SPEC B2, B3, L5: the call sent only while the breaker is closed or as the one probe,
   * bounded by the timeout, made once; a failure counted and rethrown; kept from Redis by
   * the breaker, a `StoreUnavailableError` (nothing sent, nothing counted).
   */
  guard<T>(command: string, send: () => Promise<T>): Promise<T>;
}
