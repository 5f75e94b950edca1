/**
 * One request's lease of an in-flight policy while its response runs (SPEC N4-N7): renewed
 * every lease / 2, ended exactly once (released when the response ends, or at the
 * request's max_duration, whichever comes first), lost when a renewal finds it gone.
 */
import type { Lease } from './decision.js';
import type { LimiterParts } from './parts.js';
import { RateLog } from './ratelog.js';
import { RenewalTimer } from './renewal.js';

/** The limiter's side of a lease (its calls, counters and clock). */
export interface LeaseOps {
  /** SPEC T1: the limiter's monotonic clock, in ms */
  now(): number;
  /** N4: the lease ended; `lost`: a renewal found it gone (no release is sent) */
  end(lease: Lease, lost: boolean): Promise<void>;
  /**
   * N5: true renewed, false lost, null a failed call or none sent (the next tick tries
   * again); `live` says whether the lease is still this request's when the answer comes
   * (a renewal answered after the response ended is not a lost lease).
   */
  renew(lease: Lease, leaseMs: number, live: () => boolean): Promise<boolean | null>;
  /** N7: the request reached its max_duration: counted and logged (the release is `end`'s) */
  timedOut(lease: Lease): void;
}

type State = 'held' | 'lost' | 'ended' | 'timed_out';

/** SPEC N7: why a request's signal aborts at its max_duration. */
export function maxDurationReason(policy: string, ms: number): DOMException {
  return new DOMException(`in-flight policy '${policy}': the request ran for its max_duration of ${ms} ms`, 'TimeoutError');
}

export class LeaseRun {
  private state: State = 'held';
  private renewing = false;
  private timer: RenewalTimer | null = null;
  private readonly controller = new AbortController();
  /** SPEC N7: the monotonic ms at which the request has held its slot for max_duration */
  readonly deadline: number;

  constructor(
    readonly lease: Lease,
    private readonly leaseMs: number,
    private readonly maxDurationMs: number,
    private readonly ops: LeaseOps,
  ) {
    this.deadline = ops.now() + maxDurationMs;
  }

  /** Aborted when the limiter ends the request at its max_duration (SPEC N7). */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get timedOut(): boolean {
    return this.state === 'timed_out';
  }

  /** SPEC N4: the response ended: the lease ends once (nothing more after N7 ended it). */
  finish(): Promise<void> {
    if (this.state === 'ended' || this.state === 'timed_out') return Promise.resolve();
    const lost = this.state === 'lost';
    this.state = 'ended';
    this.timer?.stop();
    return this.ops.end(this.lease, lost);
  }

  /**
   * One tick of the renewal timer (SPEC N5, N7): TB.RENEW, or at or past the deadline the
   * request's end: no renewal, the lease released (N4's one release), the signal aborted so
   * the adapter ends the response. True only when a renewal was answered 1.
   */
  async renew(): Promise<boolean> {
    if (this.state !== 'held') return false;
    if (this.ops.now() >= this.deadline) {
      // even while a renewal is out: its late answer finds the lease no longer this request's
      this.state = 'timed_out';
      this.timer?.stop();
      this.ops.timedOut(this.lease);
      this.controller.abort(maxDurationReason(this.lease.policy, this.maxDurationMs));
      await this.ops.end(this.lease, false);
      return false;
    }
    if (this.renewing) return false;
    this.renewing = true;
    let out: boolean | null;
    try {
      out = await this.ops.renew(this.lease, this.leaseMs, () => this.state === 'held');
    } finally {
      this.renewing = false;
    }
    if (out === false && this.state === 'held') {
      // lost: renewals stop and no release is sent; a lost lease is not timed out (N7)
      this.state = 'lost';
      this.timer?.stop();
    }
    return out === true;
  }

  /**
   * SPEC N5, N7: renew every lease / 2, and tick at the deadline, until the lease ends;
   * `tick` is the decision's renew (which also stops its holds at the deadline).
   */
  keepAlive(tick: () => Promise<boolean> = () => this.renew()): void {
    if (this.state !== 'held' || this.timer !== null) return;
    this.timer = new RenewalTimer(Math.max(1, this.leaseMs / 2), tick, () => this.deadline - this.ops.now());
    this.timer.start();
  }
}

/** The limiter's lease calls and counters (SPEC N4, N5, N7, M2). */
export function leaseOps(parts: LimiterParts): LeaseOps {
  const { client, stats, logger } = parts;
  const expiredLog = new RateLog();
  const timeoutLog = new RateLog();

  /** SPEC M2, N5: counted, logged at most once a second per policy. */
  const expired = (lease: Lease, how: string): void => {
    stats.leasesExpired += 1;
    parts.metrics?.leaseExpired?.(parts.name, lease.policy);
    const count = expiredLog.note(lease.policy, parts.now());
    if (count) {
      logger.warn(
        `redis-tb: a lease of in-flight policy '${lease.policy}' expired before its response ended (${how}; ${count} since the last line): renew it sooner or give it a longer lease`,
      );
    }
  };

  return {
    now: parts.now,
    /** SPEC N4: the response ended: TB.RELEASE once (not when lost, nor while the breaker is open). */
    async end(lease, lost) {
      // SPEC M2: down when the lease ends, whatever the answer
      stats.leasesInFlight -= 1;
      parts.metrics?.leaseEnded?.(parts.name, lease.policy);
      if (lost) return;
      const r = await parts.guard('TB.RELEASE', () => client.release(lease.key, lease.id)).catch(() => undefined);
      if (r !== undefined && !r.ok) expired(lease, 'its release found it gone');
    },
    /** SPEC N5: TB.RENEW; false: the lease was lost; null: the call failed or was not sent. */
    async renew(lease, leaseMs, live) {
      const r = await parts.guard('TB.RENEW', () => client.renew(lease.key, lease.id, leaseMs)).catch(() => undefined);
      if (r === undefined) return null;
      if (!r.ok && live()) expired(lease, 'a renewal found it gone');
      return r.ok;
    },
    /** SPEC M2, N7: counted, logged at most once a second per policy. */
    timedOut(lease) {
      stats.leasesTimedOut += 1;
      parts.metrics?.leaseTimedOut?.(parts.name, lease.policy);
      const count = timeoutLog.note(lease.policy, parts.now());
      if (count) {
        logger.warn(
          `redis-tb: a request of in-flight policy '${lease.policy}' ran for its max_duration: its lease is released and its response ended (${count} since the last line)`,
        );
      }
    },
  };
}
