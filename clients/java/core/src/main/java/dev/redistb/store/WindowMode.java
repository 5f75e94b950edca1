package dev.redistb.store;

/** TB.WINDOW's modes (docs/commands.md): the word sent as the command's last argument. */
public enum WindowMode {
  FIXED,
  SLIDING,
  LOG
}
