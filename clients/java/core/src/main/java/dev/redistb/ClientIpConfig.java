package dev.redistb;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.function.Function;

/**
 * How the client address is found (SPEC A, C5, C6): trusted proxies, the one forwarding header
 * walked ({@code x-forwarded-for} or {@code forwarded}), and the prefixes an address is grouped
 * under.
 */
public final class ClientIpConfig {
  /** The walked header (SPEC C6). */
  public enum Header {
    X_FORWARDED_FOR("x-forwarded-for"),
    FORWARDED("forwarded");

    private final String wire;

    Header(String wire) {
      this.wire = wire;
    }

    /** The lowercase header name. */
    public String wire() {
      return wire;
    }

    /** SPEC C6: {@code x-forwarded-for} or {@code forwarded}, any case. */
    public static Header of(String name) {
      String n = name == null ? "" : name.strip().toLowerCase(Locale.ROOT);
      for (Header h : values()) {
        if (h.wire.equals(n)) {
          return h;
        }
      }
      throw new ConfigException("header must be x-forwarded-for or forwarded, got '" + name + "'");
    }
  }

  /** A trusted network (SPEC C5), host bits masked. */
  record Network(byte[] bytes, int prefix) {
    boolean contains(Address a) {
      if (a.bytes.length != bytes.length) {
        return false;
      }
      byte[] m = Address.mask(a.bytes, prefix);
      for (int i = 0; i < m.length; i++) {
        if (m[i] != bytes[i]) {
          return false;
        }
      }
      return true;
    }

    @Override
    public String toString() {
      return Address.format(bytes) + "/" + prefix;
    }
  }

  private final List<Network> trusted;
  private final Header header;
  private final int ipv4Prefix;
  private final int ipv6Prefix;

  private ClientIpConfig(List<Network> trusted, Header header, int ipv4Prefix, int ipv6Prefix) {
    this.trusted = List.copyOf(trusted);
    this.header = header;
    this.ipv4Prefix = ipv4Prefix;
    this.ipv6Prefix = ipv6Prefix;
  }

  /** No trusted proxy: the TCP peer is the client; /32 and /64. */
  public static ClientIpConfig defaults() {
    return builder().build();
  }

  public static Builder builder() {
    return new Builder();
  }

  /** Configuration of a {@link ClientIpConfig}. */
  public static final class Builder {
    private final List<Network> trusted = new ArrayList<>();
    private Header header = Header.X_FORWARDED_FOR;
    private int ipv4Prefix = 32;
    private int ipv6Prefix = 64;

    private Builder() {}

    /** SPEC C5: CIDRs or addresses of your load balancers; only their header is read. */
    public Builder trustedProxies(List<String> proxies) {
      for (String p : proxies) {
        trusted.add(parseNetwork(p));
      }
      return this;
    }

    public Builder trustedProxies(String... proxies) {
      return trustedProxies(List.of(proxies));
    }

    public Builder header(Header h) {
      header = h;
      return this;
    }

    /** SPEC C6: {@code x-forwarded-for} (default) or {@code forwarded}. */
    public Builder header(String name) {
      header = Header.of(name);
      return this;
    }

    /** SPEC C6: 0..=32, default 32. */
    public Builder ipv4Prefix(int prefix) {
      if (prefix < 0 || prefix > 32) {
        throw new ConfigException("ipv4_prefix must be 0..32, got " + prefix);
      }
      ipv4Prefix = prefix;
      return this;
    }

    /** SPEC C6: 0..=128, default 64. */
    public Builder ipv6Prefix(int prefix) {
      if (prefix < 0 || prefix > 128) {
        throw new ConfigException("ipv6_prefix must be 0..128, got " + prefix);
      }
      ipv6Prefix = prefix;
      return this;
    }

    public ClientIpConfig build() {
      return new ClientIpConfig(trusted, header, ipv4Prefix, ipv6Prefix);
    }
  }

  /**
   * SPEC C5: a trusted proxy, an address or CIDR; host bits masked; a range inside {@code
   * ::ffff:0:0/96} unmapped. Anything else is a {@link ConfigException}.
   */
  static Network parseNetwork(String text) {
    String t = text == null ? "" : text.strip();
    String[] parts = t.split("/", -1);
    Address a = parts.length > 2 ? null : Address.parsePlain(parts[0]);
    if (a == null) {
      throw new ConfigException("a trusted proxy is an address or CIDR, got '" + text + "'");
    }
    boolean written6 = parts[0].indexOf(':') >= 0;
    int full = written6 ? 128 : 32;
    int prefix = full;
    if (parts.length == 2) {
      String len = parts[1];
      if (len.isEmpty() || len.length() > 3 || !len.chars().allMatch(c -> c >= '0' && c <= '9')) {
        throw new ConfigException("bad prefix length in trusted proxy '" + text + "'");
      }
      prefix = Integer.parseInt(len);
      if (prefix > full) {
        throw new ConfigException("bad prefix length in trusted proxy '" + text + "'");
      }
    }
    if (written6 && !a.v6()) {
      if (prefix < 96) {
        throw new ConfigException(
            "trusted proxy '" + text + "' is wider than the IPv4-mapped range");
      }
      prefix -= 96;
    }
    return new Network(Address.mask(a.bytes, prefix), prefix);
  }

  /** SPEC C5: a trusted proxy as normalized text ({@code 10.0.0.0/8}, {@code 2001:db8::1/128}). */
  public static String normalizeProxy(String text) {
    return parseNetwork(text).toString();
  }

  /** The trusted proxies as normalized text. */
  public List<String> trustedProxies() {
    List<String> out = new ArrayList<>(trusted.size());
    for (Network n : trusted) {
      out.add(n.toString());
    }
    return out;
  }

  public Header header() {
    return header;
  }

  public int ipv4Prefix() {
    return ipv4Prefix;
  }

  public int ipv6Prefix() {
    return ipv6Prefix;
  }

  /** Whether the header is ever read (some proxy is trusted). */
  public boolean readsHeader() {
    return !trusted.isEmpty();
  }

  private boolean isTrusted(Address a) {
    for (Network n : trusted) {
      if (n.contains(a)) {
        return true;
      }
    }
    return false;
  }

  /** SPEC A1-A8: the client's address given the peer and the walked header's lines. */
  Address clientAddress(String peer, List<String> headerLines) {
    Address addr = Address.parsePeer(peer);
    if (addr == null || !isTrusted(addr)) {
      return addr;
    }
    List<String> entries = new ArrayList<>();
    for (String line : headerLines) {
      entries.addAll(Address.splitList(line));
    }
    for (int i = entries.size() - 1; i >= 0; i--) {
      String entry = entries.get(i);
      Address hop =
          header == Header.X_FORWARDED_FOR
              ? Address.parseEntry(entry)
              : Address.forwardedFor(entry);
      if (hop == null) {
        return addr;
      }
      addr = hop;
      if (!isTrusted(hop)) {
        return hop;
      }
    }
    return addr;
  }

  /** SPEC A9: the address itself at the full length, else its network and prefix. */
  String group(Address a) {
    int prefix = a.v6() ? ipv6Prefix : ipv4Prefix;
    if (prefix == a.bytes.length * 8) {
      return Address.format(a.bytes);
    }
    return Address.format(Address.mask(a.bytes, prefix)) + "/" + prefix;
  }

  /**
   * SPEC A: the address and identity of a request with this TCP peer ({@code null}: none) and the
   * walked header's lines ({@code lines.apply(name)}, the lowercase name).
   */
  public ClientIp resolve(String peer, Function<String, List<String>> lines) {
    Address a = clientAddress(peer, trusted.isEmpty() ? List.of() : lines.apply(header.wire()));
    return a == null ? new ClientIp(null, null) : new ClientIp(Address.format(a.bytes), group(a));
  }

  /** SPEC A9: the identity alone (null when the peer has no address). */
  public String identity(String peer, Function<String, List<String>> lines) {
    Address a = clientAddress(peer, trusted.isEmpty() ? List.of() : lines.apply(header.wire()));
    return a == null ? null : group(a);
  }
}
