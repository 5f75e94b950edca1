package dev.redistb.spring;

import dev.redistb.jedis.JedisStore;
import dev.redistb.store.Store;
import java.net.URI;
import java.time.Duration;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisPooled;

/**
 * {@code redis-tb.client=jedis}: a pool whose socket timeout is the limiter's (Jedis blocks);
 * {@code server} is the {@code host:port} the auto-configuration read from the URL.
 */
final class JedisStores {
  private JedisStores() {}

  static Store create(URI uri, String server, Duration timeout, RedisTbClients owned) {
    int ms = (int) timeout.toMillis();
    JedisPooled jedis =
        new JedisPooled(
            new HostAndPort(uri.getHost(), uri.getPort() < 0 ? 6379 : uri.getPort()),
            DefaultJedisClientConfig.builder()
                .socketTimeoutMillis(ms)
                .connectionTimeoutMillis(Math.max(ms, 1000))
                .build());
    owned.close(jedis::close);
    return JedisStore.of(jedis, server);
  }
}
