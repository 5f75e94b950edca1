package dev.redistb.example;

import dev.redistb.Decision;
import dev.redistb.Hold;
import dev.redistb.Outcome;
import dev.redistb.PolicyResult;
import dev.redistb.spring.RateLimit;
import dev.redistb.spring.RateLimitedException;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.ExceptionHandler;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.RestController;
import org.springframework.web.servlet.mvc.method.annotation.StreamingResponseBody;

/**
 * The demo's routes; {@code Decision} arguments are the main limiter's decision for the request.
 */
@RestController
class ApiController {
  private final PrometheusMeterRegistry prometheus;

  ApiController(PrometheusMeterRegistry prometheus) {
    this.prometheus = prometheus;
  }

  @GetMapping("/healthz")
  Map<String, String> healthz() {
    return Map.of("status", "ok");
  }

  @GetMapping(value = "/metrics", produces = "text/plain; version=0.0.4; charset=utf-8")
  String metrics() {
    return prometheus.scrape();
  }

  /** The decision in a handler: tell a client running low (under 2 left anywhere) to slow down. */
  private static boolean slowDown(Decision d) {
    return d != null && d.results().stream().anyMatch(r -> r.remaining() < 2);
  }

  @GetMapping("/items/{id}")
  Map<String, Object> item(@PathVariable String id, Decision decision) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("id", id);
    out.put("name", "item " + id);
    out.put("slow_down", slowDown(decision));
    return out;
  }

  @PostMapping("/orders")
  ResponseEntity<Map<String, Object>> order(
      @RequestBody Map<String, Object> body, Decision decision) {
    Object itemId = body.get("item_id");
    Object quantity = body.get("quantity");
    if (!(itemId instanceof Number) || !(quantity instanceof Number q) || q.doubleValue() <= 0) {
      // the app decides not to count a request it rejects itself (SPEC F1)
      if (decision != null) {
        decision.refund().join();
      }
      return ResponseEntity.unprocessableEntity()
          .body(Map.of("error", "item_id and a positive quantity are required"));
    }
    return ResponseEntity.status(HttpStatus.CREATED)
        .body(Map.of("item_id", itemId, "quantity", quantity));
  }

  @GetMapping("/search")
  Map<String, Object> search(
      @RequestParam(defaultValue = "") String q,
      @RequestParam(defaultValue = "50") int size,
      Decision decision) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("q", q);
    out.put("size", size);
    out.put("results", List.of());
    out.put("slow_down", slowDown(decision));
    return out;
  }

  /**
   * The login: its own limiter (a sliding window of 20 an hour, SPEC W: alone in its limiter) that
   * fails CLOSED: Redis down, 503 rather than unlimited password guessing.
   */
  @RateLimit(name = "login", limit = 20, window = "1h", limiter = "login", failOpen = false)
  @PostMapping("/login")
  Map<String, Object> login() {
    return Map.of("ok", true);
  }

  /** GET /stream's query: its name, default and bounds (the manifest's {@code bounds}). */
  private record Param(String name, int fallback, int min, int max) {
    /** A whole number from min to max, or the default when absent; else a 400 (bad_query). */
    int of(String v) {
      if (v == null) {
        return fallback;
      }
      if (!v.matches("[0-9]{1,9}")) {
        throw new BadQuery(this);
      }
      int n = Integer.parseInt(v);
      if (n < min || n > max) {
        throw new BadQuery(this);
      }
      return n;
    }
  }

  static final Param TOKENS = new Param("tokens", 3, 0, 10000);
  static final Param DELAY_MS = new Param("delay_ms", 0, 0, 10000);
  static final Param MAX_TOKENS = new Param("max_tokens", 100, 1, 10000);

  /** A query value of GET /stream out of its bounds: the manifest's bad_query 400. */
  static final class BadQuery extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final transient Param param;

    BadQuery(Param param) {
      super(null, null, false, false);
      this.param = param;
    }

    String body() {
      return "{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,"
          + "\"detail\":\"query parameter '"
          + param.name()
          + "' must be a whole number from "
          + param.min()
          + " to "
          + param.max()
          + "\"}";
    }
  }

  @ExceptionHandler(BadQuery.class)
  ResponseEntity<String> badQuery(BadQuery e) {
    return ResponseEntity.badRequest()
        .contentType(MediaType.parseMediaType("application/problem+json"))
        .body(e.body());
  }

  /**
   * An LLM proxy's stream (SSE): the check took a 'streams' slot (released when the response ends,
   * a client that goes away included, or at its max_duration of 6 s: SPEC N7, the starter then ends
   * the response); the handler checks its query first (a 400 before anything is held), holds
   * max_tokens on 'tokens' (renewed while the stream runs, G5) and settles the number of tokens it
   * sent. Each event is written and flushed on a blocking stream: a client that reads nothing holds
   * the writer up (backpressure), one that goes away makes the next write fail.
   */
  @GetMapping("/stream")
  ResponseEntity<StreamingResponseBody> stream(
      @RequestParam(required = false) String tokens,
      @RequestParam(name = "delay_ms", required = false) String delayMs,
      @RequestParam(name = "max_tokens", required = false) String maxTokens,
      Decision decision) {
    int n = TOKENS.of(tokens);
    int delay = DELAY_MS.of(delayMs);
    int estimate = MAX_TOKENS.of(maxTokens);
    Hold hold = null;
    if (decision != null && decision.outcome() != Outcome.STORE_ERROR) {
      try {
        hold = decision.hold("tokens", estimate, 60).join();
      } catch (RuntimeException e) {
        hold = null; // a store error: the API fails open, stream without a hold
      }
      if (hold != null && !hold.allowed()) {
        // SPEC G2, G6: a 429 naming 'tokens' (a full hold table included)
        throw new RateLimitedException(hold.response(), null);
      }
    }
    // SPEC N7: a wait between events ends at once when the limiter ends the request
    CountDownLatch ended = new CountDownLatch(1);
    if (decision != null) {
      decision.onTimeout(ended::countDown);
    }
    Hold held = hold;
    StreamingResponseBody body =
        out -> {
          int sent = 0;
          try {
            for (int i = 1; i <= n; i++) {
              if (delay > 0) {
                pause(ended, delay);
              }
              write(out, "data: token-" + i + "\n\n");
              sent++;
            }
            write(out, "data: [DONE]\n\n");
          } finally {
            // SPEC G3: the actual count, also when the client went away mid-stream
            if (held != null) {
              try {
                held.settle(sent).join();
              } catch (RuntimeException e) {
                // a store error: the hold keeps its estimate until it expires
              }
            }
          }
        };
    return ResponseEntity.ok()
        .contentType(MediaType.TEXT_EVENT_STREAM)
        .header("Cache-Control", "no-cache")
        .body(body);
  }

  private static void write(OutputStream out, String event) throws IOException {
    out.write(event.getBytes(StandardCharsets.UTF_8));
    out.flush();
  }

  /** Waits {@code ms} between events, or until the request is ended at its max_duration. */
  private static void pause(CountDownLatch ended, int ms) throws IOException {
    try {
      ended.await(ms, TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    }
  }

  /** The results of a decision, for a handler that wants to show them. */
  static List<String> names(Decision d) {
    return d.results().stream().map(PolicyResult::name).toList();
  }
}
