package dev.redistb.store;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The script library (clients/lua, SPEC E2) as the jar ships it: {@code tb.lua} for {@code SCRIPT
 * LOAD}, its SHA-1 as the client computes it, and the Functions build made from the two files as
 * clients/lua/README.md says ({@code #!lua name=tb}, tb.lua above its EVAL entry, functions.lua).
 * The build copies both files from clients/lua (the one source) into {@code dev/redistb/lua}.
 *
 * @param script tb.lua's text
 * @param sha its SHA-1, 40 lowercase hex digits
 * @param functions the Functions library's text
 */
public record LuaLibrary(String script, String sha, String functions) {
  /** Where the build puts the two files in the jar. */
  public static final String RESOURCES = "dev/redistb/lua/";

  /** The line that starts tb.lua's EVAL entry: the library is everything above it. */
  private static final String EVAL_ENTRY = "-- EVAL entry:";

  private static final class Shipped {
    static final LuaLibrary LIBRARY =
        of(read(RESOURCES + "tb.lua"), read(RESOURCES + "functions.lua"));
  }

  /** The library the jar ships (read once, on first use). */
  public static LuaLibrary shipped() {
    return Shipped.LIBRARY;
  }

  /** The library of {@code script} (tb.lua's text) and {@code entry} (functions.lua's). */
  public static LuaLibrary of(String script, String entry) {
    int end = script.indexOf(EVAL_ENTRY);
    if (end < 0) {
      throw new IllegalStateException("tb.lua has no EVAL entry line");
    }
    return new LuaLibrary(
        script, sha1(script), "#!lua name=tb\n" + script.substring(0, end) + entry);
  }

  /** SHA-1 of {@code text}'s UTF-8 bytes, lowercase hex. */
  public static String sha1(String text) {
    try {
      byte[] d = MessageDigest.getInstance("SHA-1").digest(text.getBytes(StandardCharsets.UTF_8));
      StringBuilder out = new StringBuilder(40);
      for (byte b : d) {
        out.append(Character.forDigit((b >> 4) & 0xf, 16)).append(Character.forDigit(b & 0xf, 16));
      }
      return out.toString();
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("no SHA-1 in this JVM", e);
    }
  }

  private static String read(String resource) {
    try (InputStream in = LuaLibrary.class.getClassLoader().getResourceAsStream(resource)) {
      if (in == null) {
        throw new IllegalStateException(
            "redis-tb: the script library is not in this build (" + resource + ")");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
