package dev.redistb.bench.servlet;

import io.github.bucket4j.BucketConfiguration;
import io.github.bucket4j.ConsumptionProbe;
import io.github.bucket4j.distributed.ExpirationAfterWriteStrategy;
import io.github.bucket4j.distributed.proxy.ProxyManager;
import io.github.bucket4j.redis.lettuce.Bucket4jLettuce;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.api.StatefulRedisConnection;
import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.codec.RedisCodec;
import io.lettuce.core.codec.StringCodec;
import jakarta.servlet.Filter;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ServletException;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.boot.web.servlet.FilterRegistrationBean;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.filter.OncePerRequestFilter;

/**
 * The servlet side of bench/integrations/java (bench.py): {@code GET /items/{id}} behind one
 * variant, chosen by {@code bench.variant}: {@code none}; {@code tb} / {@code tb3} (redis-tb's
 * starter filter, its policies from the command line); {@code bucket4j} (a filter on Bucket4j's
 * Lettuce backend, one bucket per client address); the floors {@code ping} (one Lettuce PING per
 * request, the client both redis-tb's store and Bucket4j's backend use) and {@code rawping} (one
 * pre-encoded PING on a raw socket per request, a socket per Tomcat thread).
 */
@SpringBootApplication
@RestController
public class BenchServletApp {
  public static void main(String[] args) {
    SpringApplication.run(BenchServletApp.class, args);
  }

  @GetMapping("/items/{id}")
  String item(@PathVariable String id) {
    return "{\"id\":\"" + id + "\"}";
  }

  /** The client address the limiters key on: the proxy's X-Forwarded-For (bench.py's ring). */
  static String client(HttpServletRequest request) {
    String xff = request.getHeader("x-forwarded-for");
    return xff == null ? request.getRemoteAddr() : xff;
  }

  /** A Lettuce client as the starter makes its own: commands rejected while disconnected. */
  static RedisClient lettuce() {
    RedisClient client = RedisClient.create();
    client.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .build());
    return client;
  }

  static FilterRegistrationBean<Filter> first(Filter f) {
    FilterRegistrationBean<Filter> reg = new FilterRegistrationBean<>(f);
    reg.setOrder(Ordered.HIGHEST_PRECEDENCE + 100); // where redis-tb's filter runs
    reg.addUrlPatterns("/*");
    return reg;
  }

  /** Floor: one bare PING per request on a Lettuce connection. */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnProperty(name = "bench.variant", havingValue = "ping")
  static class Ping {
    @Bean
    FilterRegistrationBean<Filter> pingFilter(@Value("${bench.redis-url}") String url) {
      StatefulRedisConnection<String, String> c =
          lettuce().connect(StringCodec.UTF8, RedisURI.create(url));
      return first(
          new OncePerRequestFilter() {
            @Override
            protected void doFilterInternal(
                HttpServletRequest req, HttpServletResponse res, FilterChain chain)
                throws ServletException, IOException {
              try {
                c.async().ping().toCompletableFuture().get(1, TimeUnit.SECONDS);
              } catch (Exception e) {
                throw new ServletException(e);
              }
              chain.doFilter(req, res);
            }
          });
    }
  }

  /** Floor: one pre-encoded PING per request on a raw socket (one per thread). */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnProperty(name = "bench.variant", havingValue = "rawping")
  static class RawPing {
    static final byte[] PING = "*1\r\n$4\r\nPING\r\n".getBytes(StandardCharsets.US_ASCII);

    @Bean
    FilterRegistrationBean<Filter> rawPingFilter(@Value("${bench.redis-url}") String url) {
      URI u = URI.create(url);
      ThreadLocal<Socket> sockets =
          ThreadLocal.withInitial(
              () -> {
                try {
                  Socket s = new Socket();
                  s.setTcpNoDelay(true);
                  s.connect(new InetSocketAddress(u.getHost(), u.getPort()));
                  return s;
                } catch (IOException e) {
                  throw new IllegalStateException(e);
                }
              });
      return first(
          new OncePerRequestFilter() {
            @Override
            protected void doFilterInternal(
                HttpServletRequest req, HttpServletResponse res, FilterChain chain)
                throws ServletException, IOException {
              Socket s = sockets.get();
              OutputStream out = s.getOutputStream();
              out.write(PING);
              out.flush();
              InputStream in = s.getInputStream();
              for (int i = 0; i < 7; i++) { // +PONG\r\n
                if (in.read() < 0) {
                  throw new IOException("redis closed the connection");
                }
              }
              chain.doFilter(req, res);
            }
          });
    }
  }

  /**
   * Bucket4j on its Lettuce backend (compare-and-swap proxy manager): one bucket per client
   * address, the limit bench.py gives (never reached), X-Rate-Limit-Remaining on an admission.
   */
  @Configuration(proxyBeanMethods = false)
  @ConditionalOnProperty(name = "bench.variant", havingValue = "bucket4j")
  static class Bucket4j {
    @Bean
    FilterRegistrationBean<Filter> bucket4jFilter(
        @Value("${bench.redis-url}") String url, @Value("${bench.limit}") long limit) {
      StatefulRedisConnection<String, byte[]> c =
          lettuce()
              .connect(
                  RedisCodec.of(StringCodec.UTF8, ByteArrayCodec.INSTANCE), RedisURI.create(url));
      ProxyManager<String> buckets =
          Bucket4jLettuce.casBasedBuilder(c)
              .expirationAfterWrite(
                  ExpirationAfterWriteStrategy.basedOnTimeForRefillingBucketUpToMax(
                      Duration.ofSeconds(10)))
              .build();
      BucketConfiguration config =
          BucketConfiguration.builder()
              .addLimit(l -> l.capacity(limit).refillGreedy(limit, Duration.ofSeconds(1)))
              .build();
      return first(
          new OncePerRequestFilter() {
            @Override
            protected void doFilterInternal(
                HttpServletRequest req, HttpServletResponse res, FilterChain chain)
                throws ServletException, IOException {
              ConsumptionProbe p =
                  buckets
                      .builder()
                      .build("ip:" + client(req), () -> config)
                      .tryConsumeAndReturnRemaining(1);
              if (!p.isConsumed()) {
                res.setStatus(429);
                res.setHeader(
                    "X-Rate-Limit-Retry-After-Seconds",
                    Long.toString(TimeUnit.NANOSECONDS.toSeconds(p.getNanosToWaitForRefill())));
                return;
              }
              res.setHeader("X-Rate-Limit-Remaining", Long.toString(p.getRemainingTokens()));
              chain.doFilter(req, res);
            }
          });
    }
  }
}
