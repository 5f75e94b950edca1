package dev.redistb;

/**
 * One policy's part of a decision (SPEC D2): its bucket after this request (admitted) or as it
 * stands (refused).
 *
 * @param name the policy
 * @param key its key for this request
 * @param capacity a bucket's capacity, a window's limit (W2), an in-flight policy's n (N3)
 * @param rate tokens a second; a window's limit / seconds; null for an in-flight policy
 * @param cost what this request cost it (1 for an in-flight policy)
 * @param kind the kind of limit
 * @param window a window policy's window in seconds (its header's w), else null
 * @param allowed this policy alone had the tokens (N3: the slot was free)
 * @param remaining tokens (slots) left
 * @param retryAfter 0 when allowed, -1 when never, else seconds
 * @param resetAfter seconds until full
 * @param shadow observed, not enforced (S1)
 */
public record PolicyResult(
    String name,
    String key,
    double capacity,
    Double rate,
    double cost,
    LimitKind kind,
    Double window,
    boolean allowed,
    double remaining,
    double retryAfter,
    double resetAfter,
    boolean shadow) {}
