package dev.redistb;

import java.util.Locale;

/** SPEC D1: what the limiter decided for one request. */
public enum Outcome {
  /** every enforced policy had the tokens, or only shadow policies refused */
  ALLOWED,
  /** an enforced policy refused: 429 */
  LIMITED,
  /** the call failed, timed out, or was skipped in the cool-down: the failure mode decides */
  STORE_ERROR,
  /** no policy applied: no call, no headers */
  NOT_LIMITED,
  /** a cost or limit from the application out of range (L3): 500 */
  INVALID_INPUT,
  /** a header identity with a control byte (I2): 400 */
  BAD_REQUEST;

  /** The SPEC's word: {@code allowed}, {@code store_error}, ... */
  public String wire() {
    return name().toLowerCase(Locale.ROOT);
  }
}
