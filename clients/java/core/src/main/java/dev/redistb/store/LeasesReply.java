package dev.redistb.store;

/**
 * {@code TB.PEEK key LEASES}: {@code [in_flight, ms]}.
 *
 * @param inFlight live leases
 * @param ms until the earliest expires (0 when none)
 */
public record LeasesReply(long inFlight, long ms) {}
