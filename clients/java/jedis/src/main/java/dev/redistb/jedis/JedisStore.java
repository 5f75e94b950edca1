package dev.redistb.jedis;

import dev.redistb.store.CommandStore;
import dev.redistb.store.StoreException;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import redis.clients.jedis.AbstractPipeline;
import redis.clients.jedis.Response;
import redis.clients.jedis.UnifiedJedis;
import redis.clients.jedis.commands.ProtocolCommand;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * The module's commands on the application's own Jedis ({@link UnifiedJedis}: {@code JedisPooled},
 * {@code JedisCluster}). Jedis blocks: each call runs on the calling thread and its future is
 * complete when it returns, so the bound on a call is the pool's socket timeout: set it to the
 * limiter's timeout (the Spring starter does). Refunds of several buckets go in one pipeline. For
 * reactive stacks use the Lettuce store.
 */
public final class JedisStore extends CommandStore {
  private final UnifiedJedis jedis;
  private final String server;

  private JedisStore(UnifiedJedis jedis, String server) {
    this.jedis = jedis;
    this.server = server;
  }

  /** A store on {@code jedis}; {@code server} is host:port for messages. */
  public static JedisStore of(UnifiedJedis jedis, String server) {
    return new JedisStore(jedis, server);
  }

  @Override
  public String server() {
    return server;
  }

  private record Command(byte[] raw) implements ProtocolCommand {
    Command(String name) {
      this(name.getBytes(StandardCharsets.US_ASCII));
    }

    @Override
    public byte[] getRaw() {
      return raw.clone();
    }
  }

  private static String[] rest(List<String> args) {
    return args.subList(1, args.size()).toArray(new String[0]);
  }

  @Override
  protected CompletableFuture<Object> send(List<String> args) {
    try {
      return CompletableFuture.completedFuture(
          jedis.sendCommand(new Command(args.get(0)), rest(args)));
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(map(args.get(0), e));
    }
  }

  @Override
  protected CompletableFuture<List<Object>> sendAll(List<List<String>> commands) {
    if (commands.size() < 2) {
      return super.sendAll(commands);
    }
    try (AbstractPipeline p = jedis.pipelined()) {
      List<Response<Object>> replies = new ArrayList<>(commands.size());
      for (List<String> c : commands) {
        replies.add(p.sendCommand(new Command(c.get(0)), rest(c)));
      }
      p.sync();
      List<Object> out = new ArrayList<>(replies.size());
      for (Response<Object> r : replies) {
        out.add(r.get());
      }
      return CompletableFuture.completedFuture(out);
    } catch (RuntimeException e) {
      return CompletableFuture.failedFuture(map(commands.get(0).get(0), e));
    }
  }

  /** Jedis's exceptions as the breaker sees them (SPEC B1). */
  static StoreException map(String command, RuntimeException e) {
    if (e instanceof JedisDataException) {
      return StoreException.reply(command, e.getMessage());
    }
    if (e instanceof JedisConnectionException && e.getCause() instanceof SocketTimeoutException) {
      return new StoreException(StoreException.Kind.TIMEOUT, command + ": " + e.getMessage(), e);
    }
    return StoreException.connection(
        command + ": " + e.getClass().getSimpleName() + ": " + e.getMessage(), e);
  }
}
