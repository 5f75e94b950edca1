/**
 * Outbound scheduler: calls to a rate-limited partner API, shared by every process, on
 * one TB.RESERVE bucket. `schedule(key, fn)` books the slot (the reservation is taken at
 * once, in Redis, so processes never book the same slot), waits the booked time, then runs
 * `fn`. A slot further than `maxWait` away rejects with SchedulerWaitTooLongError and
 * books nothing.
 */
import { performance } from 'node:perf_hooks';
import { type RedisLike, TbClient } from './client.js';
import { SchedulerWaitTooLongError } from './errors.js';

export interface SchedulerOptions {
  /** the burst: calls that may go at once */
  capacity: number;
  /** calls per second */
  rate: number;
  /** seconds a call may wait for its slot */
  maxWait: number;
  /** key prefix, default `'sched:'` */
  prefix?: string;
}

function sleepUntil(deadline: number): Promise<void> {
  return new Promise((resolve) => {
    const tick = (): void => {
      const left = deadline - performance.now();
      if (left <= 0) resolve();
      else setTimeout(tick, Math.ceil(left)); // timers may fire early by a fraction of a ms
    };
    tick();
  });
}

export class Scheduler {
  readonly tb: TbClient;
  readonly capacity: number;
  readonly rate: number;
  readonly maxWait: number;
  readonly prefix: string;

  constructor(tb: RedisLike, options: SchedulerOptions) {
    this.tb = TbClient.from(tb);
    if (!(options.capacity > 0) || !(options.rate > 0) || !(options.maxWait >= 0)) {
      throw new RangeError('Scheduler needs capacity > 0, rate > 0 and maxWait >= 0');
    }
    this.capacity = options.capacity;
    this.rate = options.rate;
    this.maxWait = options.maxWait;
    this.prefix = options.prefix ?? 'sched:';
  }

  /** Seconds to wait for a slot booked now for `key` (books it), or a rejection. */
  async book(key: string, cost = 1): Promise<number> {
    const r = await this.tb.reserve(this.prefix + key, this.capacity, this.rate, cost, this.maxWait);
    if (!r.allowed) throw new SchedulerWaitTooLongError(key, r.retryAfter, this.maxWait);
    return r.wait;
  }

  /** Book a slot, wait for it, run `fn`. */
  async schedule<T>(key: string, fn: () => T | Promise<T>, opts: { cost?: number } = {}): Promise<T> {
    const wait = await this.book(key, opts.cost ?? 1);
    if (wait > 0) await sleepUntil(performance.now() + wait * 1000);
    return fn();
  }
}
