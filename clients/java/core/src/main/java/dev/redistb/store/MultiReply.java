package dev.redistb.store;

import java.util.List;

/**
 * TB.MTAKE's reply (and the TAKE part of TB.ACQUIRE's): the aggregate, then one reply per key in
 * key order.
 *
 * @param aggregate the four aggregate fields
 * @param keys one reply per key
 */
public record MultiReply(Reply aggregate, List<Reply> keys) {
  public MultiReply {
    keys = List.copyOf(keys);
  }
}
