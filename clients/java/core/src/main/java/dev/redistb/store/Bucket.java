package dev.redistb.store;

/**
 * One bucket of an all-or-nothing call (TB.MTAKE, TB.ACQUIRE ... TAKE) or of a refund: its key, its
 * shape and the tokens to take.
 *
 * @param key the bucket's key
 * @param capacity the burst (tokens)
 * @param rate tokens refilled per second
 * @param n tokens to take (or give back)
 */
public record Bucket(String key, double capacity, double rate, double n) {}
