package dev.redistb;

/**
 * SPEC G3: the answer of {@link Hold#settle(double)}.
 *
 * @param settled false for a hold settled already, expired or refused: nothing changed
 * @param remaining tokens left
 * @param charged actual minus estimate, as the module bounded it (0 when not settled)
 * @param resetAfter seconds until the bucket is full
 */
public record Settlement(boolean settled, double remaining, double charged, double resetAfter) {}
