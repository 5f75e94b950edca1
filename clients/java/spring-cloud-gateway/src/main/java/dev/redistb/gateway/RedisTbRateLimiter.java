package dev.redistb.gateway;

import dev.redistb.ConfigException;
import dev.redistb.Decision;
import dev.redistb.Key;
import dev.redistb.Limit;
import dev.redistb.Outcome;
import dev.redistb.Policy;
import dev.redistb.RateLimitResponse;
import dev.redistb.RateLimiter;
import dev.redistb.RequestView;
import dev.redistb.spring.Limiters;
import jakarta.validation.constraints.Min;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.springframework.cloud.gateway.filter.ratelimit.AbstractRateLimiter;
import org.springframework.cloud.gateway.support.ConfigurationService;
import org.springframework.validation.annotation.Validated;
import reactor.core.publisher.Mono;

/**
 * A Spring Cloud Gateway {@code RateLimiter} on the module, configured as {@code RedisRateLimiter}
 * is ({@code redis-rate-limiter.replenishRate}, {@code burstCapacity}, {@code requestedTokens}), so
 * a route switches with one line ({@code rate-limiter: "#{@redisTbRateLimiter}"}). Beyond
 * RedisRateLimiter's Lua script: the refill over any period ({@code replenishPeriod}: {@code 1m},
 * {@code 1h}), more limits on the same call ({@code limits: "minute=100/1m, hour=1000/1h"}, checked
 * all or nothing in one TB.MTAKE), the SPEC's {@code RateLimit-Policy} / {@code RateLimit} headers
 * with the reset, and {@code Retry-After} on a 429. The failure mode is the starter's ({@code
 * redis-tb.fail-open}). A route with more limits has the key resolver's id as its hash tag (SPEC
 * K4), so its keys share a slot on a Redis Cluster (K6): {@code rl:{<id>}:minute@<route>:<id>}.
 */
public class RedisTbRateLimiter extends AbstractRateLimiter<RedisTbRateLimiter.Config> {
  /** The property name RedisRateLimiter's routes already use. */
  public static final String CONFIGURATION_PROPERTY_NAME = "redis-rate-limiter";

  private final Limiters limiters;
  private final Map<String, RateLimiter> byRoute = new ConcurrentHashMap<>();
  private Config defaultConfig = new Config();

  public RedisTbRateLimiter(Limiters limiters, ConfigurationService configurationService) {
    super(Config.class, CONFIGURATION_PROPERTY_NAME, configurationService);
    this.limiters = limiters;
  }

  /**
   * A limiter for every route without its own configuration ({@code RedisRateLimiter(rate,
   * burst)}).
   */
  public RedisTbRateLimiter withDefault(Config config) {
    this.defaultConfig = config;
    return this;
  }

  /** RedisRateLimiter's configuration names, and redis-tb's additions. */
  @Validated
  public static class Config {
    @Min(1)
    private int replenishRate = 1;

    @Min(0)
    private long burstCapacity = 1;

    @Min(1)
    private int requestedTokens = 1;

    /** the period replenishRate tokens refill over (RedisRateLimiter: one second) */
    private String replenishPeriod = "1s";

    /** more limits on the same call: {@code name=capacity/period, ...} */
    private String limits = "";

    /** RedisRateLimiter's X-RateLimit-* headers too */
    private boolean includeHeaders = true;

    public int getReplenishRate() {
      return replenishRate;
    }

    public Config setReplenishRate(int replenishRate) {
      this.replenishRate = replenishRate;
      return this;
    }

    public long getBurstCapacity() {
      return burstCapacity;
    }

    public Config setBurstCapacity(long burstCapacity) {
      this.burstCapacity = burstCapacity;
      return this;
    }

    public int getRequestedTokens() {
      return requestedTokens;
    }

    public Config setRequestedTokens(int requestedTokens) {
      this.requestedTokens = requestedTokens;
      return this;
    }

    public String getReplenishPeriod() {
      return replenishPeriod;
    }

    public Config setReplenishPeriod(String replenishPeriod) {
      this.replenishPeriod = replenishPeriod;
      return this;
    }

    public String getLimits() {
      return limits;
    }

    public Config setLimits(String limits) {
      this.limits = limits;
      return this;
    }

    public boolean isIncludeHeaders() {
      return includeHeaders;
    }

    public Config setIncludeHeaders(boolean includeHeaders) {
      this.includeHeaders = includeHeaders;
      return this;
    }
  }

  /** The key resolver's id, on the route. */
  private record GatewayRequest(String routeId, String id) implements RequestView {
    @Override
    public Object request() {
      return this;
    }

    @Override
    public String peer() {
      return null;
    }

    @Override
    public List<String> header(String name) {
      return List.of();
    }

    @Override
    public String route() {
      return routeId;
    }
  }

  static double seconds(String period) {
    String t = period.strip();
    double unit =
        switch (t.charAt(t.length() - 1)) {
          case 's' -> 1;
          case 'm' -> 60;
          case 'h' -> 3600;
          case 'd' -> 86400;
          default ->
              throw new ConfigException(
                  "a period is <n>s, <n>m, <n>h or <n>d, got '" + period + "'");
        };
    return Double.parseDouble(t.substring(0, t.length() - 1)) * unit;
  }

  /** One limiter per route configuration: its bucket, then its extra limits, one call. */
  private RateLimiter limiter(String routeId, Config c) {
    String sig =
        routeId
            + '\0'
            + c.replenishRate
            + '\0'
            + c.burstCapacity
            + '\0'
            + c.requestedTokens
            + '\0'
            + c.replenishPeriod
            + '\0'
            + c.limits;
    return byRoute.computeIfAbsent(
        sig,
        k -> {
          double period = seconds(c.replenishPeriod);
          Key id = Key.fromFn(r -> ((GatewayRequest) r).id());
          RateLimiter.Builder b =
              limiters
                  .builder("gateway", true)
                  .limitUnmatched(true)
                  .policy(
                      Policy.builder(
                              "gateway", Limit.checked(c.burstCapacity, c.replenishRate / period))
                          .key(id)
                          .perRoute(true)
                          .cost(c.requestedTokens));
          boolean several = false;
          for (String part : c.limits.split(",")) {
            if (part.isBlank()) {
              continue;
            }
            String[] nameRest = part.strip().split("=", 2);
            String[] capPer = nameRest.length == 2 ? nameRest[1].split("/", 2) : new String[0];
            if (capPer.length != 2) {
              throw new ConfigException(
                  "redis-rate-limiter.limits: name=capacity/period, got '" + part + "'");
            }
            several = true;
            b.policy(
                Policy.builder(
                        nameRest[0].strip(),
                        Limit.perPeriod(Double.parseDouble(capPer[0].strip()), seconds(capPer[1])))
                    .key(id)
                    .perRoute(true)
                    .cost(c.requestedTokens));
          }
          if (several) {
            // SPEC K4, K6: the keys of one call share a hash slot on a Redis Cluster, the key
            // resolver's id's (each client's buckets on one slot, the clients spread over all)
            b.hashTag(r -> ((GatewayRequest) r).id());
          }
          return limiters.register(b.build());
        });
  }

  @Override
  public Mono<Response> isAllowed(String routeId, String id) {
    Config c = getConfig().getOrDefault(routeId, defaultConfig);
    RateLimiter limiter = limiter(routeId, c);
    return Mono.fromFuture(() -> limiter.check(new GatewayRequest(routeId, id)))
        .flatMap(
            d -> {
              if (d.outcome() == Outcome.INVALID_INPUT) {
                // SPEC K6, L3: a configuration error is the gateway's 500, never a 429 or an
                // admission
                return Mono.error(new IllegalStateException(limiter.respond(d).body()));
              }
              return Mono.just(new Response(d.allowed(), headers(limiter, d, c)));
            });
  }

  /** SPEC H (RateLimit-Policy, RateLimit, Retry-After) and RedisRateLimiter's X-RateLimit-*. */
  private static Map<String, String> headers(RateLimiter limiter, Decision d, Config c) {
    Map<String, String> out = new LinkedHashMap<>();
    RateLimitResponse r = limiter.respond(d);
    for (RateLimitResponse.Header h : r.headers()) {
      out.put(h.name(), h.value());
    }
    if (c.includeHeaders && d.outcome() != Outcome.STORE_ERROR && d.remaining() != null) {
      out.put(
          "X-RateLimit-Remaining", Long.toString((long) Math.max(0, Math.floor(d.remaining()))));
      out.put("X-RateLimit-Replenish-Rate", Integer.toString(c.replenishRate));
      out.put("X-RateLimit-Burst-Capacity", Long.toString(c.burstCapacity));
      out.put("X-RateLimit-Requested-Tokens", Integer.toString(c.requestedTokens));
    }
    return out;
  }
}
