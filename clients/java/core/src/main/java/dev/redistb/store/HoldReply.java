package dev.redistb.store;

/**
 * TB.HOLD's reply: TB.TAKE's four fields and the hold id (null when refused).
 *
 * @param reply the four fields
 * @param id the hold id (16 hex digits), null when refused
 */
public record HoldReply(Reply reply, String id) {}
