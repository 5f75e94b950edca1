package dev.redistb.store;

/**
 * One key of an all-or-nothing call (TB.MTAKE, TB.ACQUIRE ... TAKE) or of a refund (SPEC "Names":
 * {@code Charge}): its key, its shape and what it costs.
 *
 * @param key the bucket's key
 * @param capacity the burst (tokens)
 * @param rate tokens refilled per second
 * @param cost tokens to take (or give back)
 */
public record Charge(String key, double capacity, double rate, double cost) {}
