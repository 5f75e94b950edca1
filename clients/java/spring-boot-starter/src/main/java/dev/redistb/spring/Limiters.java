package dev.redistb.spring;

import dev.redistb.ClientIpConfig;
import dev.redistb.ConfigException;
import dev.redistb.Headers;
import dev.redistb.InFlightLimit;
import dev.redistb.Key;
import dev.redistb.Limit;
import dev.redistb.LimiterMetrics;
import dev.redistb.Policy;
import dev.redistb.RateLimiter;
import dev.redistb.WindowLimit;
import dev.redistb.store.Store;
import dev.redistb.store.WindowMode;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.IntPredicate;
import java.util.logging.Logger;

/**
 * Every limiter of the application, built from {@code redis-tb.*} (the main one) and from {@link
 * RateLimit} annotations, on one store with one configuration; {@link #startup()} checks each (SPEC
 * U1, U2) before the application serves.
 */
public final class Limiters {
  private static final Logger LOG = Logger.getLogger("redis_tb");

  private final RedisTbProperties props;
  private final Store store;
  private final ClientIpConfig clientIp;
  private final LimiterMetrics metrics;
  private final HashTag hashTag;
  private final List<RateLimiter> all = new CopyOnWriteArrayList<>();

  public Limiters(RedisTbProperties props, Store store, LimiterMetrics metrics) {
    this(props, store, metrics, null);
  }

  /** {@code hashTag}: every limiter's tag function (SPEC K4), or null. */
  public Limiters(RedisTbProperties props, Store store, LimiterMetrics metrics, HashTag hashTag) {
    this.props = props;
    this.store = store;
    this.metrics = metrics;
    this.hashTag = hashTag;
    this.clientIp =
        ClientIpConfig.builder()
            .trustedProxies(props.getTrustedProxies())
            .header(props.getForwardedHeader())
            .ipv4Prefix(props.getIpv4Prefix())
            .ipv6Prefix(props.getIpv6Prefix())
            .build();
  }

  public ClientIpConfig clientIp() {
    return clientIp;
  }

  public Store store() {
    return store;
  }

  /** A limiter with this application's settings (its name, failure mode and policies given). */
  public RateLimiter.Builder builder(String name, boolean failOpen) {
    RateLimiter.Builder b =
        RateLimiter.builder(store)
            .name(name)
            .prefix(props.getPrefix())
            .clientIp(clientIp)
            .failOpen(failOpen)
            .timeoutMillis(props.getTimeout().toMillis())
            .cooldownMillis(props.getCooldown().toMillis())
            .startDegraded(props.isStartDegraded())
            .backend(props.getBackend())
            .legacyHeaders(
                props.isLegacyHeaders(),
                Headers.LegacyReset.valueOf(props.getLegacyReset().toUpperCase(Locale.ROOT)))
            .shadow(props.isShadow())
            .metrics(metrics)
            .logger(LOG::warning)
            .infoLogger(LOG::info);
    if (props.getDenyCacheMaxEntries() > 0) {
      b.denyCache(props.getDenyCacheMaxEntries());
    }
    if (hashTag != null) {
      b.hashTag(hashTag::tag);
    }
    return b;
  }

  /** Registers a limiter for the startup check. */
  public RateLimiter register(RateLimiter limiter) {
    all.add(limiter);
    return limiter;
  }

  public List<RateLimiter> all() {
    return List.copyOf(all);
  }

  /** SPEC U1-U3: each limiter's check; the first failure stops the start (one line). */
  public void startup() {
    for (RateLimiter l : all) {
      l.startup();
    }
  }

  /** The main limiter: the properties' policies, then the application's Policy beans. */
  RateLimiter main(List<Policy> beans) {
    List<Policy> policies = new ArrayList<>();
    for (RedisTbProperties.PolicyProperties p : props.getPolicies()) {
      policies.add(policy(p));
    }
    policies.addAll(beans);
    RateLimiter.Builder b =
        builder(props.getName(), props.isFailOpen())
            .policies(policies)
            .exclude(props.getExclude().toArray(new String[0]))
            .limitUnmatched(props.isLimitUnmatched());
    if (!props.getRefundOn().isEmpty()) {
      b.refundOn(statuses(props.getRefundOn()));
    }
    return register(b.build());
  }

  /** SPEC F2: {@code redis-tb.refund-on}'s entries, each a status or a range {@code 500-599}. */
  static IntPredicate statuses(List<String> entries) {
    List<int[]> ranges = new ArrayList<>();
    for (String e : entries) {
      String[] ends = e.strip().split("-", 2);
      try {
        int lo = Integer.parseInt(ends[0].strip());
        int hi = ends.length == 2 ? Integer.parseInt(ends[1].strip()) : lo;
        if (lo < 100 || hi > 599 || lo > hi) {
          throw new NumberFormatException();
        }
        ranges.add(new int[] {lo, hi});
      } catch (NumberFormatException ex) {
        throw new ConfigException(
            "redis-tb.refund-on: a status (100-599) or a range such as 500-599, got '" + e + "'");
      }
    }
    return status -> {
      for (int[] r : ranges) {
        if (status >= r[0] && status <= r[1]) {
          return true;
        }
      }
      return false;
    };
  }

  /** A policy from properties (C: errors name the setting and the value). */
  static Policy policy(RedisTbProperties.PolicyProperties p) {
    String where = "redis-tb.policies[" + p.getName() + "]";
    Policy.Builder b;
    if (p.getWindow() != null) {
      WindowMode mode = WindowMode.valueOf(p.getMode().toUpperCase(Locale.ROOT));
      b =
          Policy.builder(
              p.getName(),
              WindowLimit.of(
                  p.getLimit(), Durations.seconds(p.getWindow(), where + ".window"), mode));
    } else if (p.getLease() != null) {
      b =
          Policy.builder(
              p.getName(),
              InFlightLimit.of(
                  p.getLimit(),
                  Durations.seconds(p.getLease(), where + ".lease"),
                  p.getMaxDuration() == null
                      ? InFlightLimit.DEFAULT_MAX_DURATION
                      : Durations.seconds(p.getMaxDuration(), where + ".max-duration")));
    } else if (p.getMaxDuration() != null) {
      throw new ConfigException(where + ".max-duration is an in-flight limit's: give it a lease");
    } else if (p.getPer() != null) {
      b =
          Policy.builder(
              p.getName(),
              Limit.perPeriod(p.getLimit(), Durations.seconds(p.getPer(), where + ".per")));
    } else {
      throw new ConfigException(where + ": one of per, window or lease is required");
    }
    if (p.getCost() != null) {
      b.cost(p.getCost());
    }
    b.key(key(p.getKey(), where));
    if (p.getRoutes() != null) {
      b.routes(p.getRoutes());
    }
    return b.perRoute(p.isPerRoute()).shadow(p.isShadow()).settleLater(p.isSettleLater()).build();
  }

  static Key key(String spec, String where) {
    String s = spec == null ? "client-ip" : spec.strip();
    if (s.equals("client-ip")) {
      return Key.clientIp();
    }
    if (s.startsWith("header:")) {
      return Key.header(s.substring(7));
    }
    if (s.startsWith("fixed:")) {
      return Key.fixed(s.substring(6));
    }
    throw new ConfigException(
        where + ".key must be client-ip, header:<name> or fixed:<value>, got '" + spec + "'");
  }
}
