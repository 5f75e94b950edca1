package dev.redistb.store;

/**
 * {@code TB.PEEK key HOLDS}: {@code [holds, amount, ms]}.
 *
 * @param holds live holds
 * @param amount the sum of their estimates
 * @param ms until the earliest expires (0 when none)
 */
public record HoldsReply(long holds, double amount, long ms) {}
