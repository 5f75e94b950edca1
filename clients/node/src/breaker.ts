/**
 * The limiter's breaker (SPEC B1-B3): after a connection error or a timeout Redis is left
 * alone for `cooldownMs`; then exactly one call is the probe while every other keeps the
 * failure mode, whatever the call is (a check, a refund, a lease's release or renewal, a
 * hold, a hold's renewal or its settlement: B3 is one rule for all of them); an answer
 * closes the breaker, a failure opens it again.
 *
 * One breaker per limiter; Node runs one thread per process, so the probe flag needs no
 * lock (B3's "one probe, not one per thread" holds within the process).
 */

/** What {@link Breaker.enter} grants: a call while closed, or the one probe. */
export type Pass = 'closed' | 'probe';

export class Breaker {
  readonly cooldownMs: number;
  /** SPEC B1: open until this monotonic ms; 0: closed */
  private openUntil = 0;
  /** SPEC B3: the one probe after the cool-down is out */
  private probing = false;

  constructor(cooldownMs: number) {
    this.cooldownMs = cooldownMs;
  }

  /** SPEC B2, B3: whether a call could go to Redis now (claims nothing). */
  mayCall(now: number): boolean {
    if (this.openUntil === 0) return true;
    return now >= this.openUntil && !this.probing;
  }

  /**
   * SPEC B2, B3: a call may go to Redis now: `'closed'`, or `'probe'` (this call is the one
   * probe: {@link leave} must follow); null: keep the failure mode, send nothing.
   */
  enter(now: number): Pass | null {
    if (this.openUntil === 0) return 'closed';
    if (now < this.openUntil || this.probing) return null;
    this.probing = true;
    return 'probe';
  }

  /** The call that {@link enter} let through has ended (answered, failed or cancelled). */
  leave(pass: Pass): void {
    if (pass === 'probe') this.probing = false;
  }

  /** SPEC B3: an answer closes the breaker. */
  answered(): void {
    this.openUntil = 0;
  }

  /** SPEC B1: a connection error or a timeout opens it for the cool-down. */
  open(now: number): void {
    this.openUntil = now + this.cooldownMs;
  }
}
