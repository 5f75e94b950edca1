package dev.redistb.bench.gateway;

import dev.redistb.gateway.RedisTbRateLimiter;
import io.github.bucket4j.BucketConfiguration;
import io.github.bucket4j.distributed.ExpirationAfterWriteStrategy;
import io.github.bucket4j.distributed.proxy.AsyncProxyManager;
import io.github.bucket4j.redis.lettuce.Bucket4jLettuce;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.codec.RedisCodec;
import io.lettuce.core.codec.StringCodec;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.AsynchronousSocketChannel;
import java.nio.channels.CompletionHandler;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.function.Supplier;
import org.springframework.beans.factory.ObjectProvider;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.cloud.gateway.filter.ratelimit.KeyResolver;
import org.springframework.cloud.gateway.filter.ratelimit.RateLimiter;
import org.springframework.cloud.gateway.filter.ratelimit.RedisRateLimiter;
import org.springframework.cloud.gateway.route.RouteLocator;
import org.springframework.cloud.gateway.route.builder.RouteLocatorBuilder;
import org.springframework.context.annotation.Bean;
import org.springframework.data.redis.core.ReactiveStringRedisTemplate;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import reactor.core.publisher.Mono;

/**
 * The gateway side of bench/integrations/java (bench.py): a route {@code /items/**} forwarded to a
 * handler of the same app, behind one {@code RateLimiter} chosen by {@code bench.variant}: {@code
 * none} (no RequestRateLimiter); {@code tb} / {@code tb3} (redisTbRateLimiter, one limit or three
 * in one call); {@code redis} (Spring Cloud Gateway's RedisRateLimiter, its Lua script on
 * spring-data-redis); {@code bucket4j} (Bucket4j's Lettuce backend, asynchronous); the floors
 * {@code ping-data} (a PING per request on RedisRateLimiter's client, spring-data-redis's reactive
 * template), {@code ping} (a PING on a Lettuce connection: redis-tb's and Bucket4j's client) and
 * {@code rawping} (a pre-encoded PING on a raw asynchronous socket, one per request in flight).
 * Each floor admits every request.
 */
@SpringBootApplication
@RestController
public class BenchGatewayApp {
  public static void main(String[] args) {
    SpringApplication.run(BenchGatewayApp.class, args);
  }

  @GetMapping("/backend")
  Mono<String> backend() {
    return Mono.just("{\"ok\":true}");
  }

  /** The client address the limiters key on: the proxy's X-Forwarded-For (bench.py's ring). */
  @Bean
  KeyResolver clientKey() {
    return exchange -> {
      String xff = exchange.getRequest().getHeaders().getFirst("X-Forwarded-For");
      return Mono.just(xff == null ? "anonymous" : xff);
    };
  }

  @Bean
  RouteLocator routes(
      RouteLocatorBuilder routes,
      KeyResolver clientKey,
      @Value("${bench.variant}") String variant,
      @Value("${bench.redis-url}") String url,
      @Value("${bench.limit}") int limit,
      ObjectProvider<RedisTbRateLimiter> tb,
      ObjectProvider<RedisRateLimiter> redis,
      ObjectProvider<ReactiveStringRedisTemplate> template) {
    RateLimiter<?> limiter =
        switch (variant) {
          case "none" -> null;
          case "tb" ->
              tb.getObject()
                  .withDefault(
                      new RedisTbRateLimiter.Config()
                          .setReplenishRate(limit)
                          .setBurstCapacity(limit)
                          .setIncludeHeaders(false));
          case "tb3" ->
              tb.getObject()
                  .withDefault(
                      new RedisTbRateLimiter.Config()
                          .setReplenishRate(limit)
                          .setBurstCapacity(limit)
                          .setIncludeHeaders(false)
                          .setLimits("minute=" + limit + "/1s, hour=" + limit + "/1s"));
          case "redis" -> redis.getObject();
          case "bucket4j" -> new Bucket4jLimiter(url, limit);
          case "ping-data" ->
              new Floor(() -> template.getObject().execute(c -> c.ping()).next().toFuture());
          case "ping" -> {
            StatefulRedisConnection<String, String> c =
                lettuce().connect(StringCodec.UTF8, RedisURI.create(url));
            yield new Floor(() -> c.async().ping().toCompletableFuture());
          }
          case "rawping" -> new Floor(new RawPing(URI.create(url))::ping);
          default -> throw new IllegalArgumentException("bench.variant " + variant);
        };
    return routes
        .routes()
        .route(
            "items",
            r ->
                r.path("/items/**")
                    .filters(
                        f ->
                            limiter == null
                                ? f
                                : f.requestRateLimiter(
                                    c -> c.setRateLimiter(limiter).setKeyResolver(clientKey)))
                    .uri("forward:/backend"))
        .build();
  }

  /** RedisRateLimiter with the bench's limit (its script and template from the context). */
  @Bean
  RedisRateLimiter redisRateLimiter(@Value("${bench.limit}") int limit) {
    RedisRateLimiter r = new RedisRateLimiter(limit, limit, 1);
    r.setIncludeHeaders(false);
    return r;
  }

  static RedisClient lettuce() {
    RedisClient client = RedisClient.create();
    client.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .build());
    return client;
  }

  /** A RateLimiter with no configuration of its own. */
  abstract static class Stateless implements RateLimiter<Object> {
    private final Map<String, Object> config = new HashMap<>();

    @Override
    public Map<String, Object> getConfig() {
      return config;
    }

    @Override
    public Class<Object> getConfigClass() {
      return Object.class;
    }

    @Override
    public Object newConfig() {
      return new Object();
    }
  }

  /** A floor: one round trip per request, every request admitted. */
  static final class Floor extends Stateless {
    private final Supplier<CompletableFuture<?>> call;

    Floor(Supplier<CompletableFuture<?>> call) {
      this.call = call;
    }

    @Override
    public Mono<Response> isAllowed(String routeId, String id) {
      return Mono.fromFuture(call::get).map(v -> new Response(true, Map.of()));
    }
  }

  /** Bucket4j's Lettuce backend, asynchronous: one bucket per client address. */
  static final class Bucket4jLimiter extends Stateless {
    private final AsyncProxyManager<String> buckets;
    private final CompletableFuture<BucketConfiguration> config;

    Bucket4jLimiter(String url, long limit) {
      StatefulRedisConnection<String, byte[]> c =
          lettuce()
              .connect(
                  RedisCodec.of(StringCodec.UTF8, ByteArrayCodec.INSTANCE), RedisURI.create(url));
      this.buckets =
          Bucket4jLettuce.casBasedBuilder(c)
              .expirationAfterWrite(
                  ExpirationAfterWriteStrategy.basedOnTimeForRefillingBucketUpToMax(
                      Duration.ofSeconds(10)))
              .build()
              .asAsync();
      this.config =
          CompletableFuture.completedFuture(
              BucketConfiguration.builder()
                  .addLimit(l -> l.capacity(limit).refillGreedy(limit, Duration.ofSeconds(1)))
                  .build());
    }

    @Override
    public Mono<Response> isAllowed(String routeId, String id) {
      return Mono.fromFuture(
              () ->
                  buckets.builder().build("ip:" + id, () -> config).tryConsumeAndReturnRemaining(1))
          .map(
              p ->
                  new Response(
                      p.isConsumed(),
                      Map.of("X-Rate-Limit-Remaining", Long.toString(p.getRemainingTokens()))));
    }
  }

  /** A pre-encoded PING on a raw asynchronous socket; a socket per request in flight. */
  static final class RawPing {
    private static final byte[] PING = "*1\r\n$4\r\nPING\r\n".getBytes(StandardCharsets.US_ASCII);
    private final InetSocketAddress address;
    private final ConcurrentLinkedQueue<AsynchronousSocketChannel> idle =
        new ConcurrentLinkedQueue<>();

    RawPing(URI url) {
      this.address = new InetSocketAddress(url.getHost(), url.getPort());
    }

    CompletableFuture<?> ping() {
      CompletableFuture<Void> done = new CompletableFuture<>();
      AsynchronousSocketChannel ch = idle.poll();
      if (ch == null) {
        try {
          ch = AsynchronousSocketChannel.open();
          ch.setOption(java.net.StandardSocketOptions.TCP_NODELAY, true);
          ch.connect(address).get();
        } catch (IOException | InterruptedException | java.util.concurrent.ExecutionException e) {
          return CompletableFuture.failedFuture(e);
        }
      }
      AsynchronousSocketChannel channel = ch;
      ByteBuffer out = ByteBuffer.wrap(PING);
      ByteBuffer in = ByteBuffer.allocate(7); // +PONG\r\n
      channel.write(
          out,
          null,
          new CompletionHandler<Integer, Void>() {
            @Override
            public void completed(Integer n, Void a) {
              if (out.hasRemaining()) {
                channel.write(out, null, this);
                return;
              }
              channel.read(
                  in,
                  null,
                  new CompletionHandler<Integer, Void>() {
                    @Override
                    public void completed(Integer n, Void a) {
                      if (n < 0) {
                        done.completeExceptionally(new IOException("redis closed"));
                      } else if (in.hasRemaining()) {
                        channel.read(in, null, this);
                      } else {
                        idle.add(channel);
                        done.complete(null);
                      }
                    }

                    @Override
                    public void failed(Throwable e, Void a) {
                      done.completeExceptionally(e);
                    }
                  });
            }

            @Override
            public void failed(Throwable e, Void a) {
              done.completeExceptionally(e);
            }
          });
      return done;
    }
  }
}
