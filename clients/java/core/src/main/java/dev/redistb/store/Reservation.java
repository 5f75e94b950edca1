package dev.redistb.store;

/**
 * TB.RESERVE's reply: when allowed, {@code wait} is the time to wait before going ahead.
 *
 * @param reply the four fields as sent
 * @param waitSeconds seconds to wait before going ahead (0 when refused)
 */
public record Reservation(Reply reply, double waitSeconds) {}
