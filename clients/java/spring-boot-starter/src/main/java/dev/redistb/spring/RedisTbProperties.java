package dev.redistb.spring;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code redis-tb.*}: the store, the main limiter's settings (SPEC C) and its policies. Key, cost
 * and limit functions (plan tiers, a user id) are {@code Policy} beans instead; they join these
 * policies in the same limiter.
 */
@ConfigurationProperties(prefix = "redis-tb")
public class RedisTbProperties {
  /** Turn the starter off. */
  private boolean enabled = true;

  /** The Redis the module runs on. */
  private String url = "redis://127.0.0.1:6379";

  /** {@code lettuce} (default) or {@code jedis}. */
  private String client = "lettuce";

  /** SPEC C4 */
  private String prefix = "rl";

  /** The {@code limiter} label of the main limiter's metrics. */
  private String name = "default";

  /** SPEC L5, C7: the bound of each call. */
  private Duration timeout = Duration.ofMillis(50);

  /** SPEC B1, C7 */
  private Duration cooldown = Duration.ofSeconds(1);

  /** SPEC B4 */
  private boolean failOpen = true;

  /** SPEC U2 */
  private boolean startDegraded;

  /**
   * SPEC E1: the store's backend: {@code auto} (the module where {@code COMMAND INFO tb.take} finds
   * it, else the script library), {@code module}, or {@code scripts}.
   */
  private String backend = "auto";

  /** SPEC C5: CIDRs or addresses of your load balancers. */
  private List<String> trustedProxies = new ArrayList<>();

  /** SPEC C6: {@code x-forwarded-for} or {@code forwarded}. */
  private String forwardedHeader = "x-forwarded-for";

  private int ipv4Prefix = 32;

  private int ipv6Prefix = 64;

  /** SPEC H4 */
  private boolean legacyHeaders;

  /** SPEC H4: {@code unix} or {@code delta}. */
  private String legacyReset = "unix";

  /** SPEC S1: the whole limiter in shadow. */
  private boolean shadow;

  /** SPEC R: the deny cache's size; 0 (default) is off. */
  private int denyCacheMaxEntries;

  /** SPEC L1: routes never limited, {@code GET /healthz}. */
  private List<String> exclude = new ArrayList<>();

  /** SPEC L1 */
  private boolean limitUnmatched;

  /**
   * SPEC F2: the statuses after which the main limiter refunds a request automatically: {@code
   * 422}, or a range {@code 500-599}; default none.
   */
  private List<String> refundOn = new ArrayList<>();

  /** Whether the servlet filter / WebFilter checks every request against the main limiter. */
  private boolean filter = true;

  private List<PolicyProperties> policies = new ArrayList<>();

  /** One policy from properties. */
  public static class PolicyProperties {
    private String name;

    /** a bucket's capacity, a window's limit, an in-flight n */
    private double limit;

    /** a bucket: limit per this duration ({@code 1s}, {@code 1m}, ...) */
    private String per;

    /** a window (SPEC W): at most limit per this duration */
    private String window;

    /** {@code sliding} (default) or {@code fixed} */
    private String mode = "sliding";

    /** an in-flight limit (SPEC N): its lease ({@code 30s}) */
    private String lease;

    /** an in-flight limit's max_duration (SPEC N7, default {@code 300s}) */
    private String maxDuration;

    private Double cost;

    /** {@code client-ip} (default), {@code header:X-Api-Key}, {@code fixed:all} */
    private String key = "client-ip";

    private List<String> routes;
    private boolean perRoute;
    private boolean shadow;
    private boolean settleLater;

    public String getName() {
      return name;
    }

    public void setName(String name) {
      this.name = name;
    }

    public double getLimit() {
      return limit;
    }

    public void setLimit(double limit) {
      this.limit = limit;
    }

    public String getPer() {
      return per;
    }

    public void setPer(String per) {
      this.per = per;
    }

    public String getWindow() {
      return window;
    }

    public void setWindow(String window) {
      this.window = window;
    }

    public String getMode() {
      return mode;
    }

    public void setMode(String mode) {
      this.mode = mode;
    }

    public String getLease() {
      return lease;
    }

    public void setLease(String lease) {
      this.lease = lease;
    }

    public String getMaxDuration() {
      return maxDuration;
    }

    public void setMaxDuration(String maxDuration) {
      this.maxDuration = maxDuration;
    }

    public Double getCost() {
      return cost;
    }

    public void setCost(Double cost) {
      this.cost = cost;
    }

    public String getKey() {
      return key;
    }

    public void setKey(String key) {
      this.key = key;
    }

    public List<String> getRoutes() {
      return routes;
    }

    public void setRoutes(List<String> routes) {
      this.routes = routes;
    }

    public boolean isPerRoute() {
      return perRoute;
    }

    public void setPerRoute(boolean perRoute) {
      this.perRoute = perRoute;
    }

    public boolean isShadow() {
      return shadow;
    }

    public void setShadow(boolean shadow) {
      this.shadow = shadow;
    }

    public boolean isSettleLater() {
      return settleLater;
    }

    public void setSettleLater(boolean settleLater) {
      this.settleLater = settleLater;
    }
  }

  public boolean isEnabled() {
    return enabled;
  }

  public void setEnabled(boolean enabled) {
    this.enabled = enabled;
  }

  public String getUrl() {
    return url;
  }

  public void setUrl(String url) {
    this.url = url;
  }

  public String getClient() {
    return client;
  }

  public void setClient(String client) {
    this.client = client;
  }

  public String getPrefix() {
    return prefix;
  }

  public void setPrefix(String prefix) {
    this.prefix = prefix;
  }

  public String getName() {
    return name;
  }

  public void setName(String name) {
    this.name = name;
  }

  public Duration getTimeout() {
    return timeout;
  }

  public void setTimeout(Duration timeout) {
    this.timeout = timeout;
  }

  public Duration getCooldown() {
    return cooldown;
  }

  public void setCooldown(Duration cooldown) {
    this.cooldown = cooldown;
  }

  public boolean isFailOpen() {
    return failOpen;
  }

  public void setFailOpen(boolean failOpen) {
    this.failOpen = failOpen;
  }

  public String getBackend() {
    return backend;
  }

  public void setBackend(String backend) {
    this.backend = backend;
  }

  public boolean isStartDegraded() {
    return startDegraded;
  }

  public void setStartDegraded(boolean startDegraded) {
    this.startDegraded = startDegraded;
  }

  public List<String> getTrustedProxies() {
    return trustedProxies;
  }

  public void setTrustedProxies(List<String> trustedProxies) {
    this.trustedProxies = trustedProxies;
  }

  public String getForwardedHeader() {
    return forwardedHeader;
  }

  public void setForwardedHeader(String forwardedHeader) {
    this.forwardedHeader = forwardedHeader;
  }

  public int getIpv4Prefix() {
    return ipv4Prefix;
  }

  public void setIpv4Prefix(int ipv4Prefix) {
    this.ipv4Prefix = ipv4Prefix;
  }

  public int getIpv6Prefix() {
    return ipv6Prefix;
  }

  public void setIpv6Prefix(int ipv6Prefix) {
    this.ipv6Prefix = ipv6Prefix;
  }

  public boolean isLegacyHeaders() {
    return legacyHeaders;
  }

  public void setLegacyHeaders(boolean legacyHeaders) {
    this.legacyHeaders = legacyHeaders;
  }

  public String getLegacyReset() {
    return legacyReset;
  }

  public void setLegacyReset(String legacyReset) {
    this.legacyReset = legacyReset;
  }

  public boolean isShadow() {
    return shadow;
  }

  public void setShadow(boolean shadow) {
    this.shadow = shadow;
  }

  public int getDenyCacheMaxEntries() {
    return denyCacheMaxEntries;
  }

  public void setDenyCacheMaxEntries(int denyCacheMaxEntries) {
    this.denyCacheMaxEntries = denyCacheMaxEntries;
  }

  public List<String> getExclude() {
    return exclude;
  }

  public void setExclude(List<String> exclude) {
    this.exclude = exclude;
  }

  public boolean isLimitUnmatched() {
    return limitUnmatched;
  }

  public void setLimitUnmatched(boolean limitUnmatched) {
    this.limitUnmatched = limitUnmatched;
  }

  public List<String> getRefundOn() {
    return refundOn;
  }

  public void setRefundOn(List<String> refundOn) {
    this.refundOn = refundOn;
  }

  public boolean isFilter() {
    return filter;
  }

  public void setFilter(boolean filter) {
    this.filter = filter;
  }

  public List<PolicyProperties> getPolicies() {
    return policies;
  }

  public void setPolicies(List<PolicyProperties> policies) {
    this.policies = policies;
  }
}
