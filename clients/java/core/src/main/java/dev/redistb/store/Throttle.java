package dev.redistb.store;

/**
 * TB.THROTTLE's reply: redis-cell's CL.THROTTLE five integers.
 *
 * @param limited CL.THROTTLE's first field (1 = limited)
 * @param limit max_burst + 1
 * @param remaining whole tokens left
 * @param retryAfter -1 when allowed, else whole seconds until a retry is admitted
 * @param resetAfter whole seconds until the bucket is full
 */
public record Throttle(
    boolean limited, long limit, long remaining, long retryAfter, long resetAfter) {
  /** Whether the call was admitted. */
  public boolean allowed() {
    return !limited;
  }
}
