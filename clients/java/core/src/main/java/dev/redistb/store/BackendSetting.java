package dev.redistb.store;

import java.util.Locale;

/**
 * SPEC E1: the store's backend setting: {@code auto} (the default: the module where {@code COMMAND
 * INFO tb.take} finds it, else the script library), {@code module}, or {@code scripts}.
 */
public enum BackendSetting {
  AUTO,
  MODULE,
  SCRIPTS;

  /** The setting's word ({@code auto}, {@code module}, {@code scripts}). */
  public String word() {
    return name().toLowerCase(Locale.ROOT);
  }

  /**
   * A setting's word, checked.
   *
   * @throws IllegalArgumentException naming the value when it is not one of the three
   */
  public static BackendSetting parse(String value) {
    if (value != null) {
      for (BackendSetting s : values()) {
        if (s.word().equals(value)) {
          return s;
        }
      }
    }
    throw new IllegalArgumentException(
        "backend must be auto, module or scripts, got '" + value + "'");
  }
}
