package dev.redistb.store;

import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * The seam the limiter reaches Redis through (SPEC "Names": {@code Store}): the module's commands
 * ({@link TbClient}), and what a limiter needs beside them: the server's address for its messages,
 * the refunds of several keys sent together, and startup's two probes (U1, U3). {@link
 * CommandStore} implements it over any client that can send a raw command (the Lettuce and Jedis
 * backends); a backend without the module (a script) implements it directly. The limiter makes
 * every call through its one guarded call (breaker, timeout, counters).
 */
public interface Store extends TbClient {
  /** {@code host:port} of the server, for messages. */
  String server();

  /** TB.REFUND on each key, sent together (pipelined, no transaction). */
  CompletableFuture<List<Reply>> refundAll(List<Charge> charges);

  /**
   * SPEC U3: {@code HELLO} without an argument (the connection's protocol is not switched): the
   * reply's {@code mode} field ({@code standalone}, {@code cluster}, {@code sentinel}), null when
   * the reply has none. An error reply completes with a {@link StoreException} of kind REPLY.
   */
  CompletableFuture<String> serverMode();

  /**
   * SPEC U1: {@code COMMAND INFO tb.take}; true when the module's commands exist. An error reply
   * (NOPERM) completes with a {@link StoreException} of kind REPLY.
   */
  CompletableFuture<Boolean> moduleLoaded();
}
