package dev.redistb.lettuce;

import dev.redistb.store.CommandStore;
import dev.redistb.store.StoreException;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisCommandExecutionException;
import io.lettuce.core.RedisCommandTimeoutException;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.api.async.BaseRedisAsyncCommands;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.output.NestedMultiOutput;
import io.lettuce.core.protocol.CommandArgs;
import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;

/**
 * The module's commands on the application's own Lettuce connection: each a custom command ({@code
 * dispatch}), asynchronous, pipelined on the connection with everything else it carries. Give the
 * client {@code ClientOptions.disconnectedBehavior(REJECT_COMMANDS)}: a command made while Redis is
 * down then fails at once (the limiter's failure mode answers) instead of waiting in Lettuce's
 * queue and charging a bucket after the request was answered.
 */
public final class LettuceStore extends CommandStore {
  private final Supplier<CompletableFuture<BaseRedisAsyncCommands<String, String>>> commands;
  private final String server;

  private LettuceStore(
      Supplier<CompletableFuture<BaseRedisAsyncCommands<String, String>>> commands, String server) {
    this.commands = commands;
    this.server = server;
  }

  /**
   * A store that connects itself with {@code client} (connectAsync) on its first call, and again on
   * the next call after a connection that failed or closed: a Redis unreachable at startup is then
   * the limiter's failure mode until it answers (SPEC U2). The client's options should reject
   * commands while disconnected.
   */
  public static LettuceStore connect(RedisClient client, RedisURI uri) {
    AtomicReference<CompletableFuture<StatefulRedisConnection<String, String>>> current =
        new AtomicReference<>();
    Supplier<CompletableFuture<BaseRedisAsyncCommands<String, String>>> get =
        () -> {
          CompletableFuture<StatefulRedisConnection<String, String>> c = current.get();
          if (c == null || c.isCompletedExceptionally() || (c.isDone() && !c.join().isOpen())) {
            CompletableFuture<StatefulRedisConnection<String, String>> fresh =
                client.connectAsync(StringCodec.UTF8, uri).toCompletableFuture();
            if (current.compareAndSet(c, fresh)) {
              if (c != null && c.isDone() && !c.isCompletedExceptionally()) {
                c.join().closeAsync();
              }
              c = fresh;
            } else {
              fresh.thenAccept(StatefulRedisConnection::closeAsync);
              c = current.get();
            }
          }
          return c.thenApply(StatefulRedisConnection::async);
        };
    return new LettuceStore(get, describe(uri));
  }

  /**
   * A store on a connection ({@code client.connect()}); {@code server} is host:port for messages.
   */
  public static LettuceStore of(StatefulRedisConnection<String, String> connection, String server) {
    CompletableFuture<BaseRedisAsyncCommands<String, String>> c =
        CompletableFuture.completedFuture(connection.async());
    return new LettuceStore(() -> c, server);
  }

  /** A store on any async command interface (a cluster connection's, say). */
  public static LettuceStore of(BaseRedisAsyncCommands<String, String> commands, String server) {
    CompletableFuture<BaseRedisAsyncCommands<String, String>> c =
        CompletableFuture.completedFuture(commands);
    return new LettuceStore(() -> c, server);
  }

  /** {@code host:port} of a URI, for messages. */
  public static String describe(RedisURI uri) {
    return uri.getSocket() != null ? uri.getSocket() : uri.getHost() + ":" + uri.getPort();
  }

  @Override
  public String server() {
    return server;
  }

  /** A command name as Lettuce sends it. */
  private record Keyword(String name, byte[] bytes) implements ProtocolKeyword {
    Keyword(String name) {
      this(name, name.getBytes(StandardCharsets.US_ASCII));
    }

    @Override
    public byte[] getBytes() {
      return bytes.clone();
    }
  }

  @Override
  protected CompletableFuture<Object> send(List<String> args) {
    CommandArgs<String, String> a = new CommandArgs<>(StringCodec.UTF8);
    for (int i = 1; i < args.size(); i++) {
      a.add(args.get(i));
    }
    String name = args.get(0);
    CompletableFuture<List<Object>> sent;
    try {
      sent =
          commands
              .get()
              .thenCompose(
                  c ->
                      c.dispatch(new Keyword(name), new NestedMultiOutput<>(StringCodec.UTF8), a)
                          .toCompletableFuture());
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(map(name, e));
    }
    CompletableFuture<Object> out = new CompletableFuture<>();
    sent.whenComplete(
        (v, err) -> {
          if (err != null) {
            out.completeExceptionally(map(name, err));
          } else {
            // NestedMultiOutput wraps the reply in one more list
            out.complete(v != null && v.size() == 1 ? v.get(0) : v);
          }
        });
    out.whenComplete(
        (v, err) -> {
          if (out.isCancelled()) {
            sent.cancel(false);
          }
        });
    return out;
  }

  /** Lettuce's exceptions as the breaker sees them (SPEC B1). */
  static Throwable map(String command, Throwable err) {
    Throwable t = err;
    while (t instanceof CompletionException && t.getCause() != null) {
      t = t.getCause();
    }
    if (t instanceof StoreException) {
      return t;
    }
    if (t instanceof java.util.concurrent.CancellationException) {
      return t;
    }
    if (t instanceof RedisCommandExecutionException) {
      return StoreException.reply(command, t.getMessage());
    }
    if (t instanceof RedisCommandTimeoutException) {
      return new StoreException(StoreException.Kind.TIMEOUT, command + ": " + t.getMessage(), t);
    }
    return StoreException.connection(
        command + ": " + t.getClass().getSimpleName() + ": " + t.getMessage(), t);
  }
}
