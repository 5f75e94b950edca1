package dev.redistb.store;

/**
 * TB.RELEASE {@code [released, in_flight]} and TB.RENEW {@code [renewed, in_flight, ms]}.
 *
 * @param ok released or renewed (false: the lease was not held)
 * @param inFlight leases held on the key after the call
 * @param ms TB.RENEW: ms left on the lease (0 for TB.RELEASE)
 */
public record LeaseReply(boolean ok, long inFlight, long ms) {}
