package dev.redistb;

/**
 * SPEC U1-U3, E1, E2: why a limiter cannot start, in one line naming the address and what to do.
 */
public final class StartupException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What stopped the start. */
  public enum Reason {
    MODULE_NOT_LOADED,
    NO_PERMISSION,
    UNREACHABLE,
    /** SPEC U3, K6: several keys in one call, without a tag function, on a Redis Cluster */
    CLUSTER_KEYS,
    /** SPEC E2: neither FUNCTION LOAD nor SCRIPT LOAD of the script library was taken */
    SCRIPT_LOAD
  }

  private final Reason reason;

  StartupException(Reason reason, String message, Throwable cause) {
    super(message, cause);
    this.reason = reason;
  }

  public Reason reason() {
    return reason;
  }

  /** One line, no stack trace needed. */
  @Override
  public String toString() {
    return getMessage();
  }
}
