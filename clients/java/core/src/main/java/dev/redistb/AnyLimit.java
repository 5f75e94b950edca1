package dev.redistb;

/** A policy's limit: a bucket ({@link Limit}), a window or an in-flight limit. */
public sealed interface AnyLimit permits Limit, WindowLimit, InFlightLimit {
  /** SPEC C10 */
  LimitKind kind();

  /** SPEC D2: a bucket's capacity, a window's limit, an in-flight policy's n. */
  double capacity();
}
