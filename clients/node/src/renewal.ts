/**
 * The timer that renews a lease (SPEC N5, N7) or a hold (G5) while its request runs: a
 * tick every `periodMs`, and one at the `deadline` when no tick comes sooner (N7: the
 * request's max_duration). A chain of unref'd timeouts, so it never keeps the process
 * alive and each tick is armed only after the previous one ran (a slow renewal is never
 * overtaken by the next).
 *
 * Renewals run on the event loop's timers, independently of any response's writes: a
 * stream written with backpressure leaves the loop free, so one slow or gone client never
 * delays another request's renewal.
 */
export class RenewalTimer {
  private timer: ReturnType<typeof setTimeout> | null = null;
  private stopped = false;

  /**
   * @param periodMs the time between ticks
   * @param tick what a tick does (its promise is awaited before the next tick is armed)
   * @param untilDeadline ms from now to the deadline (null: none); read before each arming
   */
  constructor(
    private readonly periodMs: number,
    private readonly tick: () => Promise<unknown>,
    private readonly untilDeadline: () => number | null = () => null,
  ) {}

  start(): void {
    if (this.stopped || this.timer !== null) return;
    this.arm();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  get running(): boolean {
    return this.timer !== null;
  }

  private arm(): void {
    const left = this.untilDeadline();
    const delay = Math.max(1, left === null ? this.periodMs : Math.min(this.periodMs, Math.max(0, left)));
    this.timer = setTimeout(this.fire, delay);
    this.timer.unref();
  }

  private readonly fire = (): void => {
    this.timer = null;
    if (this.stopped) return;
    void this.tick().finally(() => {
      if (!this.stopped && this.timer === null) this.arm();
    });
  };
}
