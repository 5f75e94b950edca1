/**
 * A hold on a settleLater policy (SPEC G): taken with TB.HOLD, renewed with TB.RENEW every
 * ttl / 2 while its request runs (G5), settled once with TB.SETTLE and a bounded max_wait
 * (G3). Every call goes through the limiter's breaker like a check's (B2, B3).
 */
import type { Hold, PolicyResult, SettleTarget, Settlement } from './decision.js';
import { StoreUnavailableError } from './errors.js';
import type { Response } from './headers.js';
import type { LimiterParts } from './parts.js';
import { RateLog } from './ratelog.js';
import type { HoldReply, SettleReply } from './replies.js';
import { RenewalTimer } from './renewal.js';

/** The limiter's side of a hold: its calls (through the breaker), counters and 429. */
export interface HoldOps {
  /** G1: TB.HOLD; rejects with a store error (failed, or kept from Redis by the breaker) */
  take(target: SettleTarget, estimate: number, ttlMs: number): Promise<HoldReply>;
  /**
   * G5: TB.RENEW key id ttl_ms: true renewed, false lost, null a failed call or none sent
   * (the next tick tries again); `live`: whether the hold still renews when the answer comes.
   */
  renew(target: SettleTarget, id: string, ttlMs: number, live: () => boolean): Promise<boolean | null>;
  /** G3: TB.SETTLE with max_wait; rejects with a store error */
  settle(target: SettleTarget, id: string, actual: number): Promise<SettleReply>;
  /** G2: the 429 of a refused hold */
  refusal(result: PolicyResult): Response;
}

/** held: renewed; stopped: its response ended (settle still allowed); settling: TB.SETTLE out */
type State = 'held' | 'stopped' | 'settling' | 'settled' | 'lost' | 'refused';

class HoldRun implements Hold {
  readonly policy: string;
  readonly key: string;
  readonly allowed: boolean;
  readonly remaining: number;
  readonly retryAfter: number;
  readonly resetAfter: number;
  readonly id: string | null;
  readonly estimate: number;
  readonly result: PolicyResult;
  readonly response: Response | null;
  private state: State;
  private renewing = false;
  private readonly timer: RenewalTimer | null = null;

  constructor(
    private readonly target: SettleTarget,
    reply: HoldReply,
    estimate: number,
    private readonly ttlMs: number,
    private readonly ops: HoldOps,
  ) {
    this.policy = target.policy;
    this.key = target.key;
    this.allowed = reply.allowed;
    this.remaining = reply.remaining;
    this.retryAfter = reply.retryAfter;
    this.resetAfter = reply.resetAfter;
    this.id = reply.allowed ? reply.id : null;
    this.estimate = estimate;
    this.result = {
      name: target.policy, key: target.key, capacity: target.capacity, rate: target.rate, cost: estimate,
      allowed: reply.allowed, remaining: reply.remaining, retryAfter: reply.retryAfter, resetAfter: reply.resetAfter, shadow: false,
    };
    // SPEC G2, G6: a refused hold (a full hold table included) is answered as a 429 of that policy
    this.response = reply.allowed ? null : ops.refusal(this.result);
    this.state = this.id === null ? 'refused' : 'held';
    if (this.state === 'held') this.timer = new RenewalTimer(Math.max(1, ttlMs / 2), () => this.renew());
  }

  /** SPEC G5: renew every ttl / 2 until settled, lost or {@link stop}. */
  start(): void {
    if (this.state === 'held') this.timer?.start();
  }

  /** SPEC G5: the response ended: no more renewals (a settle may still come). */
  stop(): void {
    if (this.state === 'held') this.state = 'stopped';
    this.timer?.stop();
  }

  /** SPEC G5: one renewal now; true when the module renewed it. */
  async renew(): Promise<boolean> {
    if (this.state !== 'held' || this.renewing || this.id === null) return false;
    this.renewing = true;
    let out: boolean | null;
    try {
      out = await this.ops.renew(this.target, this.id, this.ttlMs, () => this.state === 'held' || this.state === 'stopped');
    } finally {
      this.renewing = false;
    }
    if (out === false && (this.state === 'held' || this.state === 'stopped')) {
      // lost: renewals stop, and its settle sends nothing (G3)
      this.state = 'lost';
      this.timer?.stop();
    }
    return out === true;
  }

  /** SPEC G3: TB.SETTLE once; a refused, lost or settled hold sends nothing. */
  async settle(actual: number): Promise<Settlement> {
    if (!(typeof actual === 'number' && actual >= 0 && actual <= 2 ** 53)) {
      throw new RangeError(`policy '${this.policy}': a settlement's actual cost must be >= 0 and <= 2^53, got ${String(actual)}`);
    }
    if (this.id === null || (this.state !== 'held' && this.state !== 'stopped')) {
      return { settled: false, remaining: this.remaining, charged: 0, resetAfter: this.resetAfter };
    }
    const was = this.state;
    this.state = 'settling';
    let out: SettleReply;
    try {
      out = await this.ops.settle(this.target, this.id, actual);
    } catch (err) {
      if (err instanceof StoreUnavailableError) {
        // kept from Redis by the breaker (B2): nothing was sent, the hold is as it was
        this.state = was;
      } else {
        // sent and failed: not retried (L5); the hold keeps its estimate until it expires
        this.state = 'settled';
        this.timer?.stop();
      }
      throw err;
    }
    this.state = 'settled';
    this.timer?.stop();
    return { settled: out.settled, remaining: out.remaining, charged: out.settled ? out.charged : 0, resetAfter: out.resetAfter };
  }
}

/** SPEC G1: TB.HOLD on the key and limit the check resolved; an allowed hold is renewed (G5). */
export async function takeHold(ops: HoldOps, target: SettleTarget, estimate: number, ttl: number): Promise<Hold & { stop(): void; start(): void }> {
  const ttlMs = Math.ceil(ttl * 1000);
  const reply = await ops.take(target, estimate, ttlMs);
  return new HoldRun(target, reply, estimate, ttlMs, ops);
}

/** The limiter's hold calls and counters (SPEC G1, G3, G5, G6, M2); `refusal` is its 429. */
export function holdOps(parts: LimiterParts, refusal: (result: PolicyResult) => Response): HoldOps {
  const { client, stats } = parts;
  const lostLog = new RateLog();
  return {
    refusal,
    /** SPEC G1, G6: TB.HOLD; a refusal (a full hold table included) is a reply, not an error. */
    async take(target, estimate, ttlMs) {
      const r = await parts.guard('TB.HOLD', () => client.hold(target.key, target.capacity, target.rate, estimate, ttlMs));
      if (r.allowed) stats.holds += 1;
      return r;
    },
    /** SPEC G5: TB.RENEW key id ttl_ms; false: the hold was lost; null: failed or not sent. */
    async renew(target, id, ttlMs, live) {
      const r = await parts.guard('TB.RENEW', () => client.renew(target.key, id, ttlMs)).catch(() => undefined);
      if (r === undefined) return null;
      if (!r.ok && live()) {
        stats.holdsLost += 1;
        parts.metrics?.holdLost?.(parts.name, target.policy);
        const count = lostLog.note(target.policy, parts.now());
        if (count) {
          parts.logger.warn(
            `redis-tb: a hold of policy '${target.policy}' was lost before it was settled (a renewal found it gone; ${count} since the last line): its settlement sends nothing`,
          );
        }
      }
      return r.ok;
    },
    /** SPEC G3: TB.SETTLE with max_wait = capacity / rate (an excess leaves at most one bucket of debt). */
    async settle(target, id, actual) {
      const out = await parts.guard(
        'TB.SETTLE', () => client.settle(target.key, target.capacity, target.rate, id, actual, target.capacity / target.rate),
      );
      if (out.settled) stats.settlements += 1;
      return out;
    },
  };
}
