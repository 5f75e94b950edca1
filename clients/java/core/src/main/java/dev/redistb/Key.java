package dev.redistb;

import java.util.function.Function;

/**
 * Where a policy's identity comes from (SPEC I1-I3): {@link #clientIp()} (the default), {@link
 * #header(String)}, {@link #fixed(String)}, {@link #fromFn(Function)}.
 */
public sealed interface Key {
  /** The client's address (SPEC A), grouped by prefix. */
  record ClientIpKey() implements Key {}

  /** A request header's lines joined with ", ", trimmed; a control byte is a 400 (I2). */
  record HeaderKey(String name) implements Key {}

  /** One identity for every request (I3). */
  record FixedKey(String value) implements Key {}

  /** A function of the request: null or "" skips the policy (I1). */
  record FnKey(Function<RequestView, String> fn) implements Key {}

  static Key clientIp() {
    return new ClientIpKey();
  }

  /** SPEC I2: the header's lines joined with ", " (the name in any case). */
  static Key header(String name) {
    if (name == null || !name.matches("[!#$%&'*+.^_`|~0-9A-Za-z-]+")) {
      throw new ConfigException("Key.header needs a header name, got '" + name + "'");
    }
    return new HeaderKey(name.toLowerCase(java.util.Locale.ROOT));
  }

  /** SPEC I3: an empty value is a configuration error. */
  static Key fixed(String value) {
    if (value == null || value.isEmpty()) {
      throw new ConfigException("Key.fixed needs a non-empty value, got '" + value + "'");
    }
    return new FixedKey(value);
  }

  static Key fromFn(Function<RequestView, String> fn) {
    if (fn == null) {
      throw new ConfigException("Key.fromFn needs a function");
    }
    return new FnKey(fn);
  }
}
