package dev.redistb.lettuce;

import dev.redistb.store.Store;
import dev.redistb.testing.ScriptsContract;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/** SPEC E on Lettuce: the script library on servers without the module. */
class LettuceScriptsTest extends ScriptsContract {
  private final List<RedisClient> clients = new ArrayList<>();

  @Override
  protected Store open(int port) {
    RedisClient c = RedisClient.create();
    c.setOptions(
        ClientOptions.builder()
            .disconnectedBehavior(ClientOptions.DisconnectedBehavior.REJECT_COMMANDS)
            .build());
    clients.add(c);
    return LettuceStore.connect(
        c,
        RedisURI.builder()
            .withHost("127.0.0.1")
            .withPort(port)
            .withTimeout(Duration.ofSeconds(2))
            .build());
  }

  @Override
  protected void closeStores() {
    clients.forEach(RedisClient::shutdown);
    clients.clear();
  }
}
