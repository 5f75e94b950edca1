package dev.redistb.store;

/**
 * TB.ACQUIRE's reply, {@code [granted, in_flight, id or nil, ms]}, then with TAKE the buckets'
 * aggregate and their replies.
 *
 * @param granted whether a lease was taken
 * @param inFlight leases held on the key after the call
 * @param id the lease id (16 hex digits), null when refused
 * @param ms granted: the lease's ms; refused: ms until a slot frees (an upper bound)
 * @param take with TAKE: the buckets' reply; null without TAKE
 */
public record Acquired(boolean granted, long inFlight, String id, long ms, MultiReply take) {}
