package dev.redistb;

/** The kinds of limit (SPEC C10): a token bucket, a window (W) or an in-flight limit (N). */
public enum LimitKind {
  BUCKET,
  WINDOW,
  IN_FLIGHT
}
