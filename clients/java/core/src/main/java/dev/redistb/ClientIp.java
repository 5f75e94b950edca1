package dev.redistb;

/**
 * The resolved address and identity of one request (SPEC A9); both null when the peer has no
 * address (A8: address policies are skipped).
 *
 * @param address the client's address ({@code 203.0.113.9}, {@code 2001:db8::1})
 * @param identity what it is limited under ({@code 203.0.113.9}, {@code 2001:db8::/64})
 */
public record ClientIp(String address, String identity) {}
