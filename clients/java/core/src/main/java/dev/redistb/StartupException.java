package dev.redistb;

/** SPEC U1, U2: why a limiter cannot start, in one line naming the address and what to do. */
public final class StartupException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What stopped the start. */
  public enum Reason {
    MODULE_NOT_LOADED,
    NO_PERMISSION,
    UNREACHABLE
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
