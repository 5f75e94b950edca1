package dev.redistb.store;

/**
 * One bucket's answer, {@code [allowed, remaining, retry_after, reset_after]}: TB.TAKE, TB.PEEK,
 * TB.REFUND, TB.WINDOW, and each key of TB.MTAKE.
 *
 * @param allowed whether the tokens were taken (per key of TB.MTAKE: this bucket alone had enough)
 * @param remaining tokens left (negative while a TB.RESERVE or TB.SETTLE debt is out)
 * @param retryAfter 0 when allowed, -1 when never (n above the capacity), else seconds until the
 *     same call is admitted
 * @param resetAfter seconds until the bucket is full (a window's whole limit is back)
 */
public record Reply(boolean allowed, double remaining, double retryAfter, double resetAfter) {}
