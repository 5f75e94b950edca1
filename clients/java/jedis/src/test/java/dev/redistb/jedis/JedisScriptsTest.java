package dev.redistb.jedis;

import dev.redistb.store.Store;
import dev.redistb.testing.ScriptsContract;
import java.util.ArrayList;
import java.util.List;
import redis.clients.jedis.DefaultJedisClientConfig;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.JedisPooled;

/** SPEC E on Jedis: the script library on servers without the module. */
class JedisScriptsTest extends ScriptsContract {
  private final List<JedisPooled> pools = new ArrayList<>();

  @Override
  protected Store open(int port) {
    JedisPooled j =
        new JedisPooled(
            new HostAndPort("127.0.0.1", port),
            DefaultJedisClientConfig.builder()
                .socketTimeoutMillis(2000)
                .connectionTimeoutMillis(2000)
                .build());
    pools.add(j);
    return JedisStore.of(j, "127.0.0.1:" + port);
  }

  @Override
  protected void closeStores() {
    pools.forEach(JedisPooled::close);
    pools.clear();
  }
}
