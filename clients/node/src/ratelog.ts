/**
 * "Logged at most once a second per policy" (SPEC S2, L3, N5, N7, G5, K6): one line per
 * key and second, the line saying how many events it stands for.
 */
export class RateLog {
  private readonly seen = new Map<string, { last: number; count: number }>();

  /**
   * Counts one event of `key` at monotonic `now` (ms); returns how many events the line
   * to write now stands for (this one included), or 0 when no line is due yet.
   */
  note(key: string, now: number): number {
    let s = this.seen.get(key);
    if (s === undefined) {
      s = { last: -Infinity, count: 0 };
      this.seen.set(key, s);
    }
    s.count += 1;
    if (now - s.last < 1000) return 0;
    const count = s.count;
    s.last = now;
    s.count = 0;
    return count;
  }
}
