package dev.redistb.testing;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A real redis-server on a free loopback port, persistence off, with the module loaded (or without,
 * for the startup checks): bounded start, its log printed when it fails, the process ended on
 * {@link #close()}.
 */
public final class RedisServer implements AutoCloseable {
  private static final long START_TIMEOUT_MS = 30_000;

  private final int port;
  private final boolean withModule;
  private boolean cluster;
  private final List<String> extra = new ArrayList<>();
  private final Path dir;
  private Process process;

  private RedisServer(boolean withModule, int port) throws IOException {
    this.withModule = withModule;
    this.port = port;
    this.dir = Files.createTempDirectory("redis-tb-java-");
  }

  /** redis-server with the module, started. */
  public static RedisServer start() {
    return start(true);
  }

  public static RedisServer start(boolean withModule) {
    try {
      return startOn(freePort(), withModule);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * Without the module, with {@code extra} configuration ({@code --rename-command TIME ""}: a
   * server that refuses TIME in scripts, SPEC E5).
   */
  public static RedisServer startPlain(String... extra) {
    try {
      RedisServer s = new RedisServer(false, freePort());
      s.extra.addAll(List.of(extra));
      s.launch();
      return s;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** On a port of the caller's (one a store was pointed at before the server came up). */
  public static RedisServer startOn(int port, boolean withModule) {
    try {
      RedisServer s = new RedisServer(withModule, port);
      s.launch();
      return s;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /**
   * A one-node Redis Cluster with the module, owning every slot ({@code CLUSTER ADDSLOTSRANGE 0
   * 16383}, then {@code cluster_state:ok}): SPEC U3, K6.
   */
  public static RedisServer startCluster() {
    try {
      RedisServer s = new RedisServer(true, freeClusterPort());
      s.cluster = true;
      s.launch();
      if (!s.command("CLUSTER", "ADDSLOTSRANGE", "0", "16383").startsWith("+OK")) {
        s.close();
        throw new IllegalStateException("CLUSTER ADDSLOTSRANGE failed");
      }
      long deadline = System.currentTimeMillis() + START_TIMEOUT_MS;
      while (!s.bulk("CLUSTER", "INFO").contains("cluster_state:ok")) {
        if (System.currentTimeMillis() > deadline) {
          s.close();
          throw new IllegalStateException("the one-node cluster is not ok");
        }
        sleep(50);
      }
      return s;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** A free port whose cluster bus port (10000 above it) is free too. */
  private static int freeClusterPort() throws IOException {
    while (true) {
      int port = freePort();
      if (port > 55535) {
        continue;
      }
      try (ServerSocket bus = new ServerSocket()) {
        bus.bind(new InetSocketAddress("127.0.0.1", port + 10000));
        return port;
      } catch (IOException e) {
        // taken: another
      }
    }
  }

  public static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket()) {
      s.bind(new InetSocketAddress("127.0.0.1", 0));
      return s.getLocalPort();
    }
  }

  public int port() {
    return port;
  }

  public String url() {
    return "redis://127.0.0.1:" + port;
  }

  /** Starts it again (after {@link #stop()}), on the same port. */
  public void launch() throws IOException {
    List<String> argv = new ArrayList<>();
    String bin = System.getenv().getOrDefault("REDIS_SERVER", "redis-server");
    argv.addAll(
        List.of(
            bin,
            "--port",
            Integer.toString(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            dir.toString()));
    if (withModule) {
      argv.addAll(List.of("--loadmodule", Repo.module().toString()));
    }
    argv.addAll(extra);
    if (cluster) {
      argv.addAll(
          List.of(
              "--cluster-enabled",
              "yes",
              "--cluster-config-file",
              dir.resolve("nodes.conf").toString()));
    }
    long deadline = System.currentTimeMillis() + START_TIMEOUT_MS;
    Path log = dir.resolve("redis.log");
    while (true) {
      process =
          new ProcessBuilder(argv).redirectErrorStream(true).redirectOutput(log.toFile()).start();
      while (System.currentTimeMillis() < deadline && process.isAlive()) {
        if (ping()) {
          return;
        }
        sleep(20);
      }
      if (process.isAlive() || System.currentTimeMillis() >= deadline) {
        process.destroyForcibly();
        throw new IllegalStateException(
            "redis-server did not answer within "
                + START_TIMEOUT_MS
                + " ms:\n"
                + Files.readString(log));
      }
      sleep(200); // the port may still be held right after a stop: try again until the deadline
    }
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException(e);
    }
  }

  private boolean ping() {
    try {
      return command("PING").startsWith("+PONG");
    } catch (IOException e) {
      return false;
    }
  }

  /** One command whose reply is a bulk string (CLUSTER INFO), its text. */
  public String bulk(String... args) throws IOException {
    return exchange(args, true);
  }

  /** One command over a raw socket, its first reply line (RESP2 inline). */
  public String command(String... args) throws IOException {
    return exchange(args, false);
  }

  private String exchange(String[] args, boolean bulk) throws IOException {
    try (Socket s = new Socket()) {
      s.connect(new InetSocketAddress("127.0.0.1", port), 1000);
      s.setSoTimeout(2000);
      StringBuilder req = new StringBuilder("*").append(args.length).append("\r\n");
      for (String a : args) {
        byte[] b = a.getBytes(StandardCharsets.UTF_8);
        req.append('$').append(b.length).append("\r\n").append(a).append("\r\n");
      }
      OutputStream out = s.getOutputStream();
      out.write(req.toString().getBytes(StandardCharsets.UTF_8));
      out.flush();
      InputStream in = s.getInputStream();
      StringBuilder line = new StringBuilder();
      int c;
      while ((c = in.read()) >= 0 && c != '\n') {
        line.append((char) c);
      }
      String first = line.toString().strip();
      if (!bulk || !first.startsWith("$") || first.equals("$-1")) {
        return first;
      }
      byte[] body = in.readNBytes(Integer.parseInt(first.substring(1)));
      return new String(body, StandardCharsets.UTF_8);
    }
  }

  /** Stops the server (a killed Redis, for the failure-mode tests). */
  public void stop() {
    if (process != null) {
      process.destroyForcibly();
      try {
        process.waitFor(10, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      process = null;
    }
  }

  @Override
  public void close() {
    stop();
  }
}
