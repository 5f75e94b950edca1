package dev.redistb.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.redistb.Decision;
import dev.redistb.Hold;
import dev.redistb.Limit;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.store.Store;
import dev.redistb.testing.RedisServer;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletionException;
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
    properties = {"redis-tb.name=api", "spring.mvc.async.request-timeout=-1"})
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
  @Autowired Store store;

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
    String id = store.hold("probe", 1000, 1, 10, 60000).join().id();
    boolean renews;
    try {
      renews = store.renew("probe", id, 60000).join().ok();
    } catch (CompletionException e) {
      renews = false;
    }
    long errors = main.stats().storeErrors();
    String body = readToEof("/hold", true);
    if (renews) {
      assertTrue(body.endsWith("true"), body); // alive after three ttls: renewed
    } else {
      // a module without hold renewal (issue 39's module part): TB.RENEW was sent every ttl / 2
      // and refused (WRONGTYPE), so the hold expired
      assertTrue(main.stats().storeErrors() >= errors + 2, "no TB.RENEW was sent");
      assertTrue(body.endsWith("false"), body);
    }
    assertEquals(0, main.stats().holdsLost());
  }
}
