package dev.redistb.example;

import dev.redistb.Limit;
import dev.redistb.Policy;
import dev.redistb.RequestView;
import jakarta.servlet.http.HttpServletRequest;
import java.util.Map;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.annotation.Order;

/**
 * The API's policies beyond {@code ip} (application.properties): all of a request's policies are
 * checked in one call (TB.MTAKE, or TB.ACQUIRE ... TAKE on /stream), all or nothing.
 */
@Configuration(proxyBeanMethods = false)
class Policies {
  /** A search costs one token per page of 50 results asked for. */
  static double searchCost(RequestView req) {
    String size = ((HttpServletRequest) req.request()).getParameter("size");
    try {
      double n = size == null ? 50 : Double.parseDouble(size);
      return n > 0 ? Math.ceil(n / 50) : 1;
    } catch (NumberFormatException e) {
      return 1;
    }
  }

  /** Signed-in users, by plan: free 100 an hour, pro 5000 an hour. */
  @Bean
  @Order(1)
  Policy user() {
    return Policy.tiered(
            "user",
            Map.of("free", Limit.perHour(100), "pro", Limit.perHour(5000)),
            Accounts::plan,
            "free")
        .key(Accounts::user)
        .build();
  }

  /** An endpoint policy: 5 orders a minute per user. */
  @Bean
  @Order(2)
  Policy orders() {
    return Policy.perMinute("orders", 5).key(Accounts::user).routes("POST /orders").build();
  }

  @Bean
  @Order(3)
  Policy search() {
    return Policy.perMinute("search", 60).cost(Policies::searchCost).routes("GET /search").build();
  }

  /** A stricter search limit tried out in shadow: charged and counted, never refusing (SPEC S). */
  @Bean
  @Order(4)
  Policy searchStrict() {
    return Policy.perMinute("search-strict", 20)
        .cost(Policies::searchCost)
        .routes("GET /search")
        .shadow(true)
        .build();
  }

  /**
   * At most 2 streams in progress per client address, a lease of 2 s (SPEC N), each ended 6 s after
   * its grant whatever its client does (N7).
   */
  @Bean
  @Order(5)
  Policy streams() {
    return Policy.builder("streams", Limit.inFlight(2, 2, 6)).routes("GET /stream").build();
  }

  /** 1000 tokens an hour per client address, held by the handler and settled (SPEC G). */
  @Bean
  @Order(6)
  Policy tokens() {
    return Policy.perHour("tokens", 1000).settleLater(true).routes("GET /stream").build();
  }
}
