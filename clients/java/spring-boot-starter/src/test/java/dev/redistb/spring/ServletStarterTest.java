package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Hold;
import dev.redistb.Limit;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.testing.RedisServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.context.annotation.Bean;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody;

/**
 * The servlet filter over real HTTP (Tomcat) against a real redis-server: a stream whose client
 * never stops reading is ended at its in-flight policy's max_duration (SPEC N7: its connection
 * closed, its slot freed, counted once), and a hold taken in a handler is renewed while the request
 * runs (G5).
 */
@SpringBootTest(
    webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
    properties = {
      "redis-tb.name=api",
      "redis-tb.refund-on=422,500-599",
      "spring.mvc.async.request-timeout=-1"
    })
class ServletStarterTest {
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
    /** One endless stream at a time, ended 1 s after its grant (N7). */
    @Bean
    Policy streams() {
      return Policy.builder("streams", Limit.inFlight(1, 0.4, 1)).routes("GET /endless").build();
    }

    @Bean
    Policy tokens() {
      return Policy.perHour("tokens", 1000).settleLater(true).routes("GET /hold").build();
    }

    /** Two a minute per client on these routes; refund_on gives back the 422s and 5xx (F2). */
    @Bean
    Policy refundable() {
      return Policy.perMinute("refundable", 2)
          .routes("GET /written", "GET /boom", "GET /ok")
          .build();
    }

    @GetMapping("/written")
    ResponseEntity<String> written() {
      return ResponseEntity.unprocessableEntity().body("no");
    }

    @GetMapping("/boom")
    String boom() {
      throw new IllegalStateException("boom");
    }

    @GetMapping("/ok")
    String ok() {
      return "ok";
    }

    @GetMapping("/endless")
    ResponseEntity<StreamingResponseBody> endless() {
      StreamingResponseBody body =
          out -> {
            for (int i = 0; ; i++) {
              out.write(("data: " + i + "\n\n").getBytes(StandardCharsets.UTF_8));
              out.flush();
              try {
                Thread.sleep(50);
              } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
              }
            }
          };
      return ResponseEntity.ok().contentType(MediaType.TEXT_EVENT_STREAM).body(body);
    }

    /** A hold of ttl 0.6 s kept for 1.8 s: settled only if it was renewed (G5). */
    @GetMapping("/hold")
    String hold(Decision decision) throws InterruptedException {
      Hold h = decision.hold("tokens", 10, 0.6).join();
      Thread.sleep(1800);
      return Boolean.toString(h.settle(4).join().settled());
    }
  }

  @LocalServerPort int port;
  @Autowired RateLimiter main;

  /**
   * The whole exchange of GET {@code path} on a fresh connection, read to the server's EOF ({@code
   * close}: the request asks for it).
   */
  private String readToEof(String path, boolean close) throws IOException {
    try (Socket s = new Socket("127.0.0.1", port)) {
      s.setSoTimeout(20_000);
      OutputStream out = s.getOutputStream();
      out.write(
          ("GET "
                  + path
                  + " HTTP/1.1\r\nHost: x\r\n"
                  + (close ? "Connection: close\r\n" : "")
                  + "\r\n")
              .getBytes(StandardCharsets.US_ASCII));
      out.flush();
      InputStream in = s.getInputStream();
      ByteArrayOutputStream got = new ByteArrayOutputStream();
      byte[] buf = new byte[4096];
      int n;
      while ((n = in.read(buf)) >= 0) {
        got.write(buf, 0, n);
      }
      return got.toString(StandardCharsets.UTF_8);
    }
  }

  @Test
  void an_endless_stream_is_ended_at_max_duration_and_its_connection_closed() throws Exception {
    long before = main.stats().leasesTimedOut();
    String exchange = readToEof("/endless", false); // only the server closes it
    assertTrue(exchange.startsWith("HTTP/1.1 200"), exchange);
    assertTrue(exchange.toLowerCase().contains("\r\nconnection: close\r\n"), exchange);
    assertTrue(exchange.contains("data: 3\n\n"), "the stream ran before it was ended");
    assertEquals(before + 1, main.stats().leasesTimedOut());
    for (int i = 0; i < 100 && main.stats().leasesInFlight() > 0; i++) {
      Thread.sleep(20);
    }
    assertEquals(0, main.stats().leasesInFlight());
  }

  @Test
  void a_hold_taken_in_a_handler_is_renewed_while_the_request_runs() throws Exception {
    long renewals = main.stats().storeErrors();
    String body = readToEof("/hold", true);
    assertTrue(body.endsWith("true"), body); // alive after three ttls: renewed (G5)
    assertEquals(0, main.stats().holdsLost());
    assertEquals(renewals, main.stats().storeErrors());
  }

  private int status(String path) throws IOException {
    String exchange = readToEof(path, true);
    return Integer.parseInt(exchange.substring("HTTP/1.1 ".length(), "HTTP/1.1 ".length() + 3));
  }

  @Test
  void refund_on_gives_back_what_a_listed_status_took_and_nothing_else() throws Exception {
    long refunds = main.stats().refunds();
    assertEquals(422, status("/written"));
    assertEquals(422, status("/written"));
    assertEquals(500, status("/boom"));
    for (int i = 0; i < 100 && main.stats().refunds() < refunds + 3; i++) {
      Thread.sleep(20);
    }
    assertEquals(refunds + 3, main.stats().refunds());
    // the bucket of 2 is still whole: two 200s (not refunded), then a 429
    assertEquals(200, status("/ok"));
    assertEquals(200, status("/ok"));
    assertEquals(429, status("/ok"));
    assertEquals(refunds + 3, main.stats().refunds());
  }
}
