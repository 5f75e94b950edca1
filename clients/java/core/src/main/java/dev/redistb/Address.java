package dev.redistb;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Addresses and networks as bytes (SPEC A4, A5, A7, A8, A9, C5): strict text parsing (no name
 * lookup ever), IPv4-mapped IPv6 as IPv4, RFC 5952 text, masks, and the two forwarding headers'
 * entries.
 */
final class Address {
  /** 4 bytes (IPv4) or 16 (IPv6). */
  final byte[] bytes;

  private Address(byte[] bytes) {
    this.bytes = bytes;
  }

  boolean v6() {
    return bytes.length == 16;
  }

  /** A dotted quad: four decimal octets 0-255 without leading zeros. */
  static byte[] parseV4(String s) {
    String[] parts = s.split("\\.", -1);
    if (parts.length != 4) {
      return null;
    }
    byte[] out = new byte[4];
    for (int i = 0; i < 4; i++) {
      String p = parts[i];
      if (p.isEmpty() || p.length() > 3 || (p.length() > 1 && p.charAt(0) == '0')) {
        return null;
      }
      int v = 0;
      for (int j = 0; j < p.length(); j++) {
        char c = p.charAt(j);
        if (c < '0' || c > '9') {
          return null;
        }
        v = v * 10 + (c - '0');
      }
      if (v > 255) {
        return null;
      }
      out[i] = (byte) v;
    }
    return out;
  }

  private static int hexGroup(String g) {
    if (g.isEmpty() || g.length() > 4) {
      return -1;
    }
    int v = 0;
    for (int i = 0; i < g.length(); i++) {
      int d = Character.digit(g.charAt(i), 16);
      if (d < 0) {
        return -1;
      }
      v = v * 16 + d;
    }
    return v;
  }

  private static List<String> groups(String s) {
    List<String> out = new ArrayList<>();
    if (s.isEmpty()) {
      return out;
    }
    out.addAll(Arrays.asList(s.split(":", -1)));
    return out;
  }

  /** IPv6 text: hex groups, one {@code ::} at most, an embedded IPv4 at the end; no zone. */
  static byte[] parseV6(String s) {
    if (s.indexOf('%') >= 0 || s.indexOf(':') < 0) {
      return null;
    }
    int dbl = s.indexOf("::");
    if (dbl >= 0 && s.indexOf("::", dbl + 1) >= 0) {
      return null;
    }
    List<String> left = groups(dbl < 0 ? s : s.substring(0, dbl));
    List<String> right = dbl < 0 ? new ArrayList<>() : groups(s.substring(dbl + 2));
    List<String> tail = right.isEmpty() ? left : right;
    byte[] v4 = null;
    if (!tail.isEmpty() && tail.get(tail.size() - 1).indexOf('.') >= 0) {
      v4 = parseV4(tail.remove(tail.size() - 1));
      if (v4 == null) {
        return null;
      }
    }
    int words = left.size() + right.size() + (v4 == null ? 0 : 2);
    if (dbl < 0 ? words != 8 : words > 7) {
      return null;
    }
    byte[] out = new byte[16];
    int at = 0;
    for (String g : left) {
      int v = hexGroup(g);
      if (v < 0) {
        return null;
      }
      out[at++] = (byte) (v >> 8);
      out[at++] = (byte) v;
    }
    at = 16 - 2 * right.size() - (v4 == null ? 0 : 4);
    for (String g : right) {
      int v = hexGroup(g);
      if (v < 0) {
        return null;
      }
      out[at++] = (byte) (v >> 8);
      out[at++] = (byte) v;
    }
    if (v4 != null) {
      System.arraycopy(v4, 0, out, 12, 4);
    }
    return out;
  }

  /** SPEC A7: {@code ::ffff:a.b.c.d} is the IPv4 address. */
  private static Address unmapped(byte[] b) {
    if (b.length == 16) {
      boolean mapped = b[10] == (byte) 0xff && b[11] == (byte) 0xff;
      for (int i = 0; i < 10 && mapped; i++) {
        mapped = b[i] == 0;
      }
      if (mapped) {
        return new Address(Arrays.copyOfRange(b, 12, 16));
      }
    }
    return new Address(b);
  }

  /** An address with nothing around it (no port, brackets or zone); null when not one. */
  static Address parsePlain(String text) {
    if (text == null || text.isEmpty() || text.indexOf('%') >= 0) {
      return null;
    }
    byte[] b = text.indexOf(':') >= 0 ? parseV6(text) : parseV4(text);
    return b == null ? null : unmapped(b);
  }

  private static boolean isPort(String s) {
    if (s.length() < 2 || s.length() > 6 || s.charAt(0) != ':') {
      return false;
    }
    for (int i = 1; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c < '0' || c > '9') {
        return false;
      }
    }
    return true;
  }

  /**
   * SPEC A4: an X-Forwarded-For entry: {@code 1.2.3.4}, {@code 1.2.3.4:80}, an IPv6 address, {@code
   * [v6]}, {@code [v6]:443}; null for anything else.
   */
  static Address parseEntry(String input) {
    String text = input.strip();
    if (text.isEmpty()) {
      return null;
    }
    if (text.charAt(0) == '[') {
      int end = text.indexOf(']');
      if (end < 0) {
        return null;
      }
      String rest = text.substring(end + 1);
      if (!rest.isEmpty() && !isPort(rest)) {
        return null;
      }
      text = text.substring(1, end);
      if (text.indexOf(':') < 0) {
        return null;
      }
    } else {
      int colon = text.indexOf(':');
      if (colon >= 0 && text.indexOf(':', colon + 1) < 0) {
        if (!isPort(text.substring(colon))) {
          return null;
        }
        text = text.substring(0, colon);
      }
    }
    return parsePlain(text);
  }

  /** SPEC A8: the TCP peer, its zone id dropped; null when it has no address. */
  static Address parsePeer(String peer) {
    if (peer == null || peer.isEmpty()) {
      return null;
    }
    String text = peer;
    if (text.startsWith("[") && text.endsWith("]")) {
      text = text.substring(1, text.length() - 1);
    }
    int pct = text.indexOf('%');
    if (pct >= 0 && text.indexOf(':') >= 0) {
      text = text.substring(0, pct);
    }
    return parsePlain(text);
  }

  static byte[] mask(byte[] bytes, int prefix) {
    byte[] out = new byte[bytes.length];
    for (int i = 0; i < bytes.length; i++) {
      int bits = Math.max(0, Math.min(8, prefix - 8 * i));
      out[i] = (byte) (bytes[i] & ((0xff << (8 - bits)) & 0xff));
    }
    return out;
  }

  /** A dotted quad, or RFC 5952 IPv6 (lowercase, the longest run of 2+ zero groups as ::). */
  static String format(byte[] b) {
    if (b.length == 4) {
      return (b[0] & 0xff) + "." + (b[1] & 0xff) + "." + (b[2] & 0xff) + "." + (b[3] & 0xff);
    }
    int[] g = new int[8];
    for (int i = 0; i < 8; i++) {
      g[i] = ((b[2 * i] & 0xff) << 8) | (b[2 * i + 1] & 0xff);
    }
    int bestStart = -1;
    int bestLen = 0;
    for (int i = 0; i < 8; ) {
      if (g[i] != 0) {
        i++;
        continue;
      }
      int j = i;
      while (j < 8 && g[j] == 0) {
        j++;
      }
      if (j - i > bestLen) {
        bestStart = i;
        bestLen = j - i;
      }
      i = j;
    }
    StringBuilder out = new StringBuilder();
    if (bestLen < 2) {
      for (int i = 0; i < 8; i++) {
        out.append(i == 0 ? "" : ":").append(Integer.toHexString(g[i]));
      }
      return out.toString();
    }
    for (int i = 0; i < bestStart; i++) {
      out.append(i == 0 ? "" : ":").append(Integer.toHexString(g[i]));
    }
    out.append("::");
    for (int i = bestStart + bestLen; i < 8; i++) {
      out.append(i == bestStart + bestLen ? "" : ":").append(Integer.toHexString(g[i]));
    }
    return out.toString();
  }

  @Override
  public String toString() {
    return format(bytes);
  }

  // -- forwarding headers ---------------------------------------------------------------

  /** SPEC A3: a header's comma-separated entries, commas inside double quotes kept. */
  static List<String> splitList(String value) {
    return split(value, ',', true);
  }

  private static List<String> split(String value, char sep, boolean keepEscapes) {
    List<String> out = new ArrayList<>();
    StringBuilder cur = new StringBuilder();
    boolean quoted = false;
    boolean escaped = false;
    for (int i = 0; i < value.length(); i++) {
      char ch = value.charAt(i);
      if (escaped) {
        escaped = false;
      } else if (quoted && ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        quoted = !quoted;
      } else if (ch == sep && !quoted) {
        out.add(cur.toString());
        cur.setLength(0);
        continue;
      }
      cur.append(ch);
    }
    out.add(cur.toString());
    return out;
  }

  private static boolean isToken(String s) {
    if (s.isEmpty()) {
      return false;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      boolean ok =
          (c >= '0' && c <= '9')
              || (c >= 'a' && c <= 'z')
              || (c >= 'A' && c <= 'Z')
              || "!#$%&'*+.^_`|~-".indexOf(c) >= 0;
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  private static boolean isNodeChars(String s) {
    if (s.isEmpty()) {
      return false;
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      boolean ok =
          (c >= '0' && c <= '9')
              || (c >= 'a' && c <= 'z')
              || (c >= 'A' && c <= 'Z')
              || ".:[]_-".indexOf(c) >= 0;
      if (!ok) {
        return false;
      }
    }
    return true;
  }

  private static String unquote(String quoted) {
    StringBuilder out = new StringBuilder();
    for (int i = 1; i < quoted.length() - 1; i++) {
      char c = quoted.charAt(i);
      if (c == '\\' && i + 1 < quoted.length() - 1) {
        c = quoted.charAt(++i);
      }
      out.append(c);
    }
    return out.toString();
  }

  /**
   * SPEC A5: the address of one RFC 7239 element's {@code for=} node; null when the element is
   * malformed (a pair without =, no for= or more than one, a node that is not an address, an IPv6
   * address not quoted and bracketed).
   */
  static Address forwardedFor(String element) {
    String node = null;
    boolean quoted = false;
    for (String raw : split(element, ';', true)) {
      String pair = raw.strip();
      int eq = pair.indexOf('=');
      if (eq <= 0) {
        return null;
      }
      String name = pair.substring(0, eq).strip();
      if (!isToken(name)) {
        return null;
      }
      String value = pair.substring(eq + 1).strip();
      boolean q = false;
      if (value.startsWith("\"")) {
        if (value.length() < 2 || !value.endsWith("\"")) {
          return null;
        }
        value = unquote(value);
        q = true;
      } else if (!isToken(value) && !isNodeChars(value)) {
        return null;
      }
      if (!name.toLowerCase(Locale.ROOT).equals("for")) {
        continue;
      }
      if (node != null) {
        return null;
      }
      node = value;
      quoted = q;
    }
    if (node == null) {
      return null;
    }
    if (node.startsWith("[")) {
      return quoted ? parseEntry(node) : null;
    }
    int colon = node.indexOf(':');
    if (colon >= 0 && node.indexOf(':', colon + 1) >= 0) {
      return null;
    }
    Address a = parseEntry(node);
    return a != null && !a.v6() ? a : null;
  }
}
