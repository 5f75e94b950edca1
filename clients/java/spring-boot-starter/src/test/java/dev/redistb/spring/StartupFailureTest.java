package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Policy;
import dev.redistb.StartupException;
import dev.redistb.testing.RedisServer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.system.CapturedOutput;
import org.springframework.boot.test.system.OutputCaptureExtension;
import org.springframework.context.annotation.Bean;

/**
 * SPEC U1-U4 through the starter: an application whose limiter cannot start (Redis unreachable, the
 * module missing, a Redis Cluster for a limiter of several keys without a tag function) fails its
 * start with the one line, reported by Spring Boot as that line (StartupFailureAnalyzer), never a
 * stack trace; {@link RedisTbStartup#startupCause} finds it for the exit status 3.
 */
@ExtendWith(OutputCaptureExtension.class)
class StartupFailureTest {
  @SpringBootApplication
  static class App {
    @Bean
    Policy all() {
      return Policy.perSecond("all", 100).key(dev.redistb.Key.fixed("all")).build();
    }
  }

  /** The same app with a tag function (SPEC K4): its keys of one call share a slot. */
  @SpringBootApplication
  static class TaggedApp {
    @Bean
    Policy all() {
      return Policy.perSecond("all", 100).key(dev.redistb.Key.fixed("all")).build();
    }

    @Bean
    HashTag tenant() {
      return req -> "tenant-1";
    }
  }

  private static String[] args(String url) {
    return new String[] {
      "--redis-tb.url=" + url,
      "--redis-tb.name=api",
      "--redis-tb.policies[0].name=ip",
      "--redis-tb.policies[0].limit=10",
      "--redis-tb.policies[0].per=1s",
      "--spring.main.banner-mode=off"
    };
  }

  private static StartupException start(String url, String... more) {
    SpringApplication app = new SpringApplication(App.class);
    app.setWebApplicationType(WebApplicationType.NONE);
    String[] argv =
        java.util.stream.Stream.concat(
                java.util.Arrays.stream(args(url)), java.util.Arrays.stream(more))
            .toArray(String[]::new);
    RuntimeException e = assertThrows(RuntimeException.class, () -> app.run(argv));
    StartupException cause = RedisTbStartup.startupCause(e);
    assertNotNull(cause, "not a limiter's startup failure: " + e);
    return cause;
  }

  private static void reportedAsTheLine(CapturedOutput output, String line) {
    assertTrue(output.getAll().contains("\n" + line + "\n"), output.getAll());
    assertFalse(output.getAll().contains("\tat "), "a stack trace:\n" + output.getAll());
  }

  @Test
  void an_unreachable_redis(CapturedOutput output) throws Exception {
    int port = RedisServer.freePort();
    StartupException e = start("redis://127.0.0.1:" + port);
    assertEquals(StartupException.Reason.UNREACHABLE, e.reason());
    assertTrue(
        e.getMessage().startsWith("redis-tb: cannot reach Redis at 127.0.0.1:" + port + " ("),
        e.getMessage());
    assertTrue(
        e.getMessage().endsWith("): start it, or set startDegraded to start failing open"),
        e.getMessage());
    reportedAsTheLine(output, e.getMessage());
  }

  @Test
  void a_redis_without_the_module_when_forced_to_it(CapturedOutput output) {
    try (RedisServer bare = RedisServer.start(false)) {
      StartupException e = start(bare.url(), "--redis-tb.backend=module");
      assertEquals(
          "redis-tb module not loaded on 127.0.0.1:"
              + bare.port()
              + ": load libredis_tb.so with loadmodule",
          e.getMessage());
      reportedAsTheLine(output, e.getMessage());
    }
  }

  @Test
  void a_redis_without_the_module_starts_on_the_scripts_and_limits(CapturedOutput output) {
    try (RedisServer bare = RedisServer.start(false)) {
      SpringApplication app = new SpringApplication(App.class);
      app.setWebApplicationType(WebApplicationType.NONE);
      try (var context = app.run(args(bare.url()))) {
        dev.redistb.RateLimiter main = context.getBean(dev.redistb.RateLimiter.class);
        assertEquals("scripts", main.stats().backend());
        assertEquals(
            dev.redistb.Outcome.ALLOWED, main.check(new TestView("203.0.113.9")).join().outcome());
        assertTrue(
            output
                .getAll()
                .contains(
                    "redis-tb: backend scripts on 127.0.0.1:"
                        + bare.port()
                        + " (tb.take not found, Functions)"),
            output.getAll());
      }
    }
  }

  @Test
  void a_redis_cluster_for_several_keys_without_a_tag(CapturedOutput output) {
    try (RedisServer node = RedisServer.startCluster()) {
      StartupException e = start(node.url());
      assertEquals(
          "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'all'), which a"
              + " Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC"
              + " K6)",
          e.getMessage());
      reportedAsTheLine(output, e.getMessage());
    }
  }

  @Test
  void a_redis_cluster_with_a_hash_tag_bean_starts_and_limits() {
    try (RedisServer node = RedisServer.startCluster()) {
      SpringApplication app = new SpringApplication(TaggedApp.class);
      app.setWebApplicationType(WebApplicationType.NONE);
      try (var context = app.run(args(node.url()))) {
        dev.redistb.RateLimiter main = context.getBean(dev.redistb.RateLimiter.class);
        dev.redistb.Decision d = main.check(new TestView("203.0.113.9")).join();
        assertEquals(dev.redistb.Outcome.ALLOWED, d.outcome());
        assertEquals("rl:{tenant-1}:all:all", d.results().get(1).key());
      }
    }
  }

  private record TestView(String peer) implements dev.redistb.RequestView {
    @Override
    public Object request() {
      return this;
    }

    @Override
    public java.util.List<String> header(String name) {
      return java.util.List.of();
    }

    @Override
    public String route() {
      return "GET /x";
    }
  }
}
