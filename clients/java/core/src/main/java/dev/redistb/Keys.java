package dev.redistb;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * The one key builder (SPEC K1-K5): every path that makes a bucket key (the limiter, its refunds,
 * the deny cache, {@link RateLimiter#key}) goes through it.
 *
 * <p>{@code <prefix>:} then {@code {<tag>}:} (a non-empty tag, K4), {@code <policy>},
 * {@code @<route>} (a per-route policy), {@code :<identity>}. The tag, the route and the identity
 * are escaped (K2); an escaped identity or tag longer than 128 bytes is replaced by {@code %h} and
 * the first 32 hex digits of the SHA-256 of its unescaped bytes (K3).
 */
public final class Keys {
  /** SPEC K3: the longest escaped identity or tag kept as it is. */
  public static final int MAX_PART = 128;

  private static final char[] HEX = "0123456789ABCDEF".toCharArray();
  private static final char[] LOWER_HEX = "0123456789abcdef".toCharArray();

  private Keys() {}

  /** SPEC K2: 0x21..0x7E except {@code % { }} (and {@code : @} in a route) stay as they are. */
  private static boolean mustEscape(int b, boolean route) {
    if (b < 0x21 || b > 0x7e) {
      return true;
    }
    if (b == '%' || b == '{' || b == '}') {
      return true;
    }
    return route && (b == ':' || b == '@');
  }

  /** SPEC K2: the bytes escaped (the route's rules when {@code route}). */
  static String escape(byte[] bytes, boolean route) {
    StringBuilder out = new StringBuilder(bytes.length + 8);
    for (byte x : bytes) {
      int b = x & 0xff;
      if (mustEscape(b, route)) {
        out.append('%').append(HEX[b >> 4]).append(HEX[b & 15]);
      } else {
        out.append((char) b);
      }
    }
    return out.toString();
  }

  /** SPEC K2 + K3: an identity or tag part, escaped, or hashed when over 128 bytes. */
  static String bounded(byte[] bytes) {
    if (bytes.length <= MAX_PART) {
      String e = escape(bytes, false);
      if (e.length() <= MAX_PART) {
        return e;
      }
    }
    byte[] digest;
    try {
      digest = MessageDigest.getInstance("SHA-256").digest(bytes);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException("SHA-256 is part of every Java runtime", e);
    }
    StringBuilder out = new StringBuilder(34).append("%h");
    for (int i = 0; i < 16; i++) {
      out.append(LOWER_HEX[(digest[i] >> 4) & 15]).append(LOWER_HEX[digest[i] & 15]);
    }
    return out.toString();
  }

  /** An identity or tag from the application: its UTF-8 bytes, escaped and bounded. */
  public static String part(String s) {
    return bounded(s.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * A header value as received: each char one byte (the servlet containers' ISO-8859-1), so a byte
   * >= 0x80 stays that byte (SPEC I2). A char above 0xFF (an application string passed here by
   * mistake) makes it UTF-8.
   */
  static String headerPart(String s) {
    for (int i = 0; i < s.length(); i++) {
      if (s.charAt(i) > 0xff) {
        return part(s);
      }
    }
    return bounded(s.getBytes(StandardCharsets.ISO_8859_1));
  }

  /** SPEC K2: a route ({@code GET /items/{id}}) as it appears in a key. */
  static String routePart(String route) {
    return escape(route.getBytes(StandardCharsets.UTF_8), true);
  }

  /**
   * SPEC K1 from parts already escaped and bounded ({@code tagPart}, {@code routePart} may be
   * null).
   */
  static String join(
      String prefix, String tagPart, String policy, String routePart, String idPart) {
    StringBuilder out = new StringBuilder(prefix.length() + policy.length() + idPart.length() + 8);
    out.append(prefix).append(':');
    if (tagPart != null && !tagPart.isEmpty()) {
      out.append('{').append(tagPart).append("}:");
    }
    out.append(policy);
    if (routePart != null) {
      out.append('@').append(routePart);
    }
    return out.append(':').append(idPart).toString();
  }

  /**
   * SPEC K1-K4: the key of one (tag, policy, route, identity) from an application's strings: {@code
   * tag} null or empty is no tag, {@code route} null is not per-route.
   */
  public static String key(
      String prefix, String tag, String policy, String route, String identity) {
    return join(
        prefix,
        tag == null || tag.isEmpty() ? null : part(tag),
        policy,
        route == null ? null : routePart(route),
        part(identity));
  }
}
