package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Limit;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.testing.RedisServer;
import java.time.Duration;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.context.annotation.Bean;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.test.web.reactive.server.EntityExchangeResult;
import org.springframework.test.web.reactive.server.WebTestClient;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.server.ResponseStatusException;
import reactor.core.publisher.Flux;
import reactor.core.publisher.Mono;

/** The WebFlux WebFilter and a reactive @RateLimit, over real HTTP, against a real redis-server. */
@SpringBootTest(
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = {
      "spring.main.web-application-type=reactive",
      "redis-tb.name=api",
      "redis-tb.exclude=GET /healthz",
      "redis-tb.refund-on=422",
      "redis-tb.policies[0].name=ip",
      "redis-tb.policies[0].limit=3",
      "redis-tb.policies[0].per=1m"
    })
class WebFluxStarterTest {
  static final RedisServer REDIS = RedisServer.start();

  @DynamicPropertySource
  static void redis(DynamicPropertyRegistry r) {
    r.add("redis-tb.url", REDIS::url);
    r.add("redis-tb.timeout", () -> "2s");
  }

  @AfterAll
  static void stop() {
    REDIS.close();
  }

  @SpringBootApplication
  @RestController
  static class App {
    @Bean
    Policy streams() {
      return Policy.builder("streams", Limit.inFlight(1, 5, 1))
          .routes("GET /stream", "GET /endless")
          .build();
    }

    @GetMapping("/healthz")
    Mono<String> healthz() {
      return Mono.just("ok");
    }

    @GetMapping("/items/{id}")
    Mono<Map<String, Object>> item(@PathVariable String id, Decision decision) {
      return Mono.just(Map.of("id", id, "outcome", decision.outcome().wire()));
    }

    @GetMapping(value = "/stream", produces = MediaType.TEXT_EVENT_STREAM_VALUE)
    Flux<String> stream() {
      return Flux.just("a", "b").delayElements(Duration.ofMillis(20));
    }

    @GetMapping(value = "/endless", produces = MediaType.TEXT_EVENT_STREAM_VALUE)
    Flux<String> endless() {
      return Flux.interval(Duration.ofMillis(50)).map(i -> "tick " + i);
    }

    /** Answers 422 with a body it writes (SPEC F2: refunded). */
    @GetMapping("/written")
    Mono<ResponseEntity<String>> written() {
      return Mono.just(ResponseEntity.unprocessableEntity().body("no"));
    }

    /** Fails with a status Spring answers (F2: its status, 422, is what refund_on reads). */
    @GetMapping("/rejected")
    Mono<String> rejected() {
      return Mono.error(new ResponseStatusException(HttpStatus.UNPROCESSABLE_ENTITY));
    }

    /** Fails: Spring answers 500 (F2: not listed, so not refunded). */
    @GetMapping("/boom")
    Mono<String> boom() {
      return Mono.error(new IllegalStateException("boom"));
    }

    @RateLimit(name = "login", limit = 1, window = "1h", limiter = "login", failOpen = false)
    @PostMapping("/login")
    Mono<Map<String, Object>> login() {
      return Mono.just(Map.of("ok", true));
    }
  }

  @org.springframework.boot.test.web.server.LocalServerPort int port;
  @Autowired WebTestClient client;
  @Autowired RateLimiter main;

  private EntityExchangeResult<byte[]> get(String path) {
    return client.get().uri(path).exchange().expectBody().returnResult();
  }

  @Test
  void the_webfilter_limits_by_template_with_the_spec_headers_and_problem_body() throws Exception {
    REDIS.command("FLUSHALL"); // fresh buckets, whichever test ran before
    EntityExchangeResult<byte[]> first = get("/items/1");
    assertEquals(200, first.getStatus().value());
    assertEquals("\"ip\";q=3;w=60", first.getResponseHeaders().getFirst("RateLimit-Policy"));
    assertTrue(new String(first.getResponseBodyContent()).contains("\"outcome\":\"allowed\""));
    get("/items/2");
    get("/items/3");
    EntityExchangeResult<byte[]> refused = get("/items/4");
    assertEquals(429, refused.getStatus().value());
    assertEquals(
        "application/problem+json", refused.getResponseHeaders().getContentType().toString());
    assertEquals("20", refused.getResponseHeaders().getFirst("Retry-After"));
    assertTrue(
        new String(refused.getResponseBodyContent())
            .startsWith(
                "{\"type\":\"about:blank\",\"title\":\"Too Many Requests\",\"status\":429,\"detail\":\"rate limit exceeded for 'ip': retry after 20 s\""));
    EntityExchangeResult<byte[]> health = get("/healthz");
    assertEquals(200, health.getStatus().value());
    assertNull(health.getResponseHeaders().getFirst("RateLimit"));
  }

  @Test
  void a_flux_body_holds_its_lease_until_it_ends_and_a_reactive_rate_limit_joins_the_headers()
      throws Exception {
    REDIS.command("FLUSHALL");
    EntityExchangeResult<byte[]> s = get("/stream");
    assertEquals(200, s.getStatus().value());
    assertTrue(s.getResponseHeaders().getFirst("RateLimit-Policy").contains("\"streams\";q=1"));
    for (int i = 0; i < 50 && main.stats().leasesInFlight() > 0; i++) {
      Thread.sleep(20);
    }
    assertEquals(0, main.stats().leasesInFlight());
    EntityExchangeResult<byte[]> login =
        client.post().uri("/login").exchange().expectBody().returnResult();
    assertEquals(200, login.getStatus().value());
    assertEquals(
        "\"ip\";q=3;w=60, \"login\";q=1;w=3600",
        login.getResponseHeaders().getFirst("RateLimit-Policy"));
    EntityExchangeResult<byte[]> again =
        client.post().uri("/login").exchange().expectBody().returnResult();
    assertEquals(429, again.getStatus().value());
    assertTrue(
        new String(again.getResponseBodyContent()).contains("\"violated_policies\":[\"login\"]"));
  }

  @Test
  void refund_on_gives_back_what_a_listed_status_took_and_nothing_else() throws Exception {
    REDIS.command("FLUSHALL");
    long refunds = main.stats().refunds();
    assertEquals(422, get("/written").getStatus().value());
    assertEquals(422, get("/rejected").getStatus().value());
    assertEquals(500, get("/boom").getStatus().value());
    for (int i = 0; i < 100 && main.stats().refunds() < refunds + 2; i++) {
      Thread.sleep(20);
    }
    assertEquals(refunds + 2, main.stats().refunds());
    // of the bucket of 3 only the 500 is spent: two 200s, then the third is refused
    assertEquals(200, get("/items/1").getStatus().value());
    assertEquals(200, get("/items/2").getStatus().value());
    assertEquals(429, get("/items/3").getStatus().value());
    assertEquals(refunds + 2, main.stats().refunds());
  }

  @Test
  void an_endless_flux_is_cancelled_at_max_duration_and_its_lease_released() throws Exception {
    REDIS.command("FLUSHALL");
    long before = main.stats().leasesTimedOut();
    String body;
    try (java.net.Socket s = new java.net.Socket("127.0.0.1", port)) {
      s.setSoTimeout(20_000);
      s.getOutputStream()
          .write(
              "GET /endless HTTP/1.1\r\nHost: x\r\n\r\n"
                  .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
      // read until the server closes the connection: only N7 ends this stream
      body = new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
    }
    assertTrue(body.startsWith("HTTP/1.1 200"), body);
    assertTrue(body.contains("tick 3"), body);
    assertEquals(before + 1, main.stats().leasesTimedOut());
    for (int i = 0; i < 100 && main.stats().leasesInFlight() > 0; i++) {
      Thread.sleep(20);
    }
    assertEquals(0, main.stats().leasesInFlight());
  }
}
