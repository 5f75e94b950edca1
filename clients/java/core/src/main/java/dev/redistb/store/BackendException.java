package dev.redistb.store;

/**
 * SPEC E1, E2: the backend could not be chosen: forced to the module on a server without it, or
 * neither load of the script library was taken. Its message is the start's one line (U1, E2). At a
 * degraded start's first call it is a store error of kind REPLY (the breaker is not opened).
 */
public final class BackendException extends StoreException {
  private static final long serialVersionUID = 1L;

  /** Why no backend was chosen. */
  public enum Why {
    /** forced to the module, and {@code COMMAND INFO tb.take} found no entry (U1's line) */
    MODULE_MISSING,
    /** neither FUNCTION LOAD nor SCRIPT LOAD was taken (E2's line) */
    LOAD_FAILED
  }

  private final Why why;

  BackendException(Why why, String line, Throwable cause) {
    super(Kind.REPLY, line, cause);
    this.why = why;
  }

  public Why why() {
    return why;
  }

  static BackendException moduleMissing(String server) {
    return new BackendException(
        Why.MODULE_MISSING,
        "redis-tb module not loaded on " + server + ": load libredis_tb.so with loadmodule",
        null);
  }

  static BackendException loadFailed(String server, String reason, Throwable cause) {
    return new BackendException(
        Why.LOAD_FAILED,
        "redis-tb: cannot load the script backend on "
            + server
            + " ("
            + reason
            + "): allow FUNCTION LOAD or SCRIPT LOAD, or load the module",
        cause);
  }
}
