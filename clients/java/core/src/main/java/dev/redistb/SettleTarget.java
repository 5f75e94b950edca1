package dev.redistb;

/**
 * SPEC G1: what a check resolved for a settle_later policy (its key and limit for this request).
 */
record SettleTarget(String policy, String key, double capacity, double rate) {}
