/**
 * Timeouts for the limiter's Redis calls without a timer per call.
 *
 * Every call of one limiter has the same bound (`timeoutMs`), so the calls' deadlines are
 * in the order the calls were made: a FIFO queue holds them, and ONE timer is armed for
 * the oldest outstanding deadline. A call that answers in time is only marked settled
 * (no timer to clear); when the timer fires it fails every call whose deadline has passed
 * (each exactly once: a settled call is never failed, a failed call's late answer is
 * ignored), drops the settled ones it passes over, and is armed again for the next
 * outstanding call if there is one. Under load that is one timer event per `ms` instead
 * of a setTimeout, a clearTimeout and a Promise.race per request.
 *
 * The timer keeps the process alive only while a call is outstanding (it is unref'd when
 * none is), and is not re-armed once the queue is empty: nothing is left behind.
 */
import { performance } from 'node:perf_hooks';
import { RedisTbTimeoutError } from './errors.js';

interface Pending {
  /** performance.now() ms after which the call fails */
  deadline: number;
  /** null once settled (answered, failed or timed out) */
  reject: ((err: Error) => void) | null;
  what: string;
}

export class Deadlines {
  /** the bound of every call, in ms */
  readonly ms: number;
  private queue: Array<Pending | undefined> = [];
  private head = 0;
  private timer: NodeJS.Timeout | null = null;
  private outstanding = 0;

  constructor(ms: number) {
    if (!(ms >= 0 && Number.isFinite(ms))) throw new RangeError(`a timeout must be >= 0 ms, got ${ms}`);
    this.ms = ms;
  }

  /** Calls made and not settled yet. */
  get pending(): number {
    return this.outstanding;
  }

  /** Entries in the queue (settled ones included until the timer passes over them). */
  get queued(): number {
    return this.queue.length - this.head;
  }

  /** Whether a timer is armed, and whether it keeps the process alive. */
  get timerState(): 'none' | 'ref' | 'unref' {
    if (this.timer === null) return 'none';
    return this.timer.hasRef() ? 'ref' : 'unref';
  }

  /**
   * `call`, or a rejection with {@link RedisTbTimeoutError} if it has not settled within
   * `ms`. A late failure of `call` after the timeout is absorbed (never unhandled).
   */
  bound<T>(call: Promise<T>, what: string, signal?: AbortSignal): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const p: Pending = { deadline: performance.now() + this.ms, reject, what };
      this.queue.push(p);
      this.outstanding += 1;
      if (this.timer === null) this.arm(this.ms);
      else if (this.outstanding === 1) this.timer.ref();
      if (signal !== undefined) {
        // the caller went away (SPEC R4: a cancelled check): settle now, ignore the answer
        const abort = (): void => {
          if (p.reject === null) return;
          p.reject = null;
          this.settled();
          reject(signal.reason instanceof Error ? signal.reason : new DOMException('the check was cancelled', 'AbortError'));
        };
        if (signal.aborted) abort();
        else signal.addEventListener('abort', abort, { once: true });
      }
      call.then(
        (value) => {
          if (p.reject === null) return;
          p.reject = null;
          this.settled();
          resolve(value);
        },
        (err: unknown) => {
          if (p.reject === null) return;
          p.reject = null;
          this.settled();
          reject(err);
        },
      );
    });
  }

  private settled(): void {
    this.outstanding -= 1;
    if (this.outstanding === 0 && this.timer !== null) this.timer.unref();
  }

  private arm(delay: number): void {
    this.timer = setTimeout(this.fire, delay);
    if (this.outstanding === 0) this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    const now = performance.now();
    const q = this.queue;
    let next: Pending | undefined;
    while (this.head < q.length) {
      const p = q[this.head]!;
      if (p.reject !== null) {
        if (p.deadline > now) {
          next = p;
          break;
        }
        const reject = p.reject;
        p.reject = null;
        this.outstanding -= 1;
        reject(new RedisTbTimeoutError(p.what, this.ms));
      }
      q[this.head] = undefined;
      this.head += 1;
    }
    if (next === undefined) {
      this.queue = [];
      this.head = 0;
      return;
    }
    if (this.head >= 1024 && this.head * 2 >= q.length) {
      this.queue = q.slice(this.head);
      this.head = 0;
    }
    // the timer may fire a little before performance.now() reaches a deadline (timers
    // count from the event loop's cached time): then it is armed again for the rest
    this.arm(Math.max(1, Math.ceil(next.deadline - now)));
  };
}

/** A one-off bound with its own timer (startup checks: rare, with their own duration). */
export function boundOnce<T>(call: Promise<T>, ms: number, what: string): Promise<T> {
  return new Deadlines(ms).bound(call, what);
}
