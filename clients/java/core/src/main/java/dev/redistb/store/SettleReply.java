package dev.redistb.store;

/**
 * TB.SETTLE's reply {@code [settled, remaining, charged, reset_after]}.
 *
 * @param settled false for a hold not live (settled already, expired, never made)
 * @param remaining tokens left
 * @param charged what the settlement changed the bucket by (actual minus estimate, bounded)
 * @param resetAfter seconds until the bucket is full
 */
public record SettleReply(boolean settled, double remaining, double charged, double resetAfter) {}
