package dev.redistb;

/**
 * SPEC C: a configuration error, raised when a limiter or a policy is built (before any request),
 * its message naming the setting and the value.
 */
public class ConfigException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  public ConfigException(String message) {
    super(message);
  }
}
