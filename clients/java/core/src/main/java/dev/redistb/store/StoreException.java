package dev.redistb.store;

/**
 * A store call that failed. SPEC B1: a connection error or a timeout opens the limiter's breaker
 * ({@link #opensBreaker()}); an error reply counts as a store error but does not.
 */
public class StoreException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What went wrong, as far as the breaker is concerned. */
  public enum Kind {
    /** Redis answered with an error reply (or a reply of the wrong shape) */
    REPLY,
    /** the connection failed or was closed */
    CONNECTION,
    /** no answer within the limiter's timeout */
    TIMEOUT,
    /** not sent: the breaker is open (SPEC B2) */
    UNAVAILABLE
  }

  private final Kind kind;

  /** An error reply's text as Redis sent it ({@code CROSSSLOT Keys ...}); null otherwise. */
  private final String serverMessage;

  public StoreException(Kind kind, String message, Throwable cause) {
    super(message, cause);
    this.kind = kind;
    this.serverMessage = null;
  }

  private StoreException(String message, String serverMessage) {
    super(message);
    this.kind = Kind.REPLY;
    this.serverMessage = serverMessage;
  }

  public StoreException(Kind kind, String message) {
    this(kind, message, null);
  }

  public Kind kind() {
    return kind;
  }

  /** An error reply's text as Redis sent it; null for anything else. */
  public String serverMessage() {
    return serverMessage;
  }

  /**
   * SPEC K6, L5: Redis refused a call whose keys are in different cluster slots (a configuration
   * error, never the failure mode).
   */
  public boolean crossSlot() {
    return serverMessage != null && serverMessage.startsWith("CROSSSLOT");
  }

  /** SPEC B1: a connection error or a timeout opens the breaker; an error reply does not. */
  public boolean opensBreaker() {
    return kind == Kind.CONNECTION || kind == Kind.TIMEOUT;
  }

  /** An error reply from Redis (its text as sent, e.g. {@code ERR boom}). */
  public static StoreException reply(String command, String serverMessage) {
    return new StoreException(command + ": " + serverMessage, serverMessage);
  }

  /** A reply of a shape the command never gives. */
  public static StoreException unexpected(String what) {
    return new StoreException(Kind.REPLY, "unexpected reply: " + what);
  }

  public static StoreException connection(String what, Throwable cause) {
    return new StoreException(Kind.CONNECTION, what, cause);
  }

  public static StoreException timeout(String command, long ms) {
    return new StoreException(Kind.TIMEOUT, command + ": no answer within " + ms + " ms");
  }

  public static StoreException unavailable(String command, String server) {
    return new StoreException(
        Kind.UNAVAILABLE,
        command + " not sent to " + server + ": the breaker is open after a store error");
  }
}
