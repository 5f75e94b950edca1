package dev.redistb;

import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import java.util.function.ToDoubleFunction;

/**
 * A named limit with a key (SPEC "Names"): whose bucket a request's identity picks, what it costs,
 * on which routes, enforced or in shadow, charged by the check or settled later.
 */
public final class Policy {
  private static final String NAME = "[a-z0-9_-]{1,64}";

  private final String name;
  private final AnyLimit limit;
  private final Function<RequestView, AnyLimit> limitFn;
  private final LimitKind kind;
  private final Key key;
  private final double cost;
  private final ToDoubleFunction<RequestView> costFn;
  private final RouteSet routes;
  private final boolean perRoute;
  private final boolean shadow;
  private final boolean settleLater;

  private Policy(Builder b) {
    this.name = b.name;
    this.limit = b.limit;
    this.limitFn = b.limitFn;
    this.kind = b.kind;
    this.key = b.key;
    this.cost = b.cost;
    this.costFn = b.costFn;
    this.routes = b.routes;
    this.perRoute = b.perRoute;
    this.shadow = b.shadow;
    this.settleLater = b.settleLater;
  }

  /** SPEC C1: whether a policy name matches {@code [a-z0-9_-]{1,64}}. */
  public static boolean validName(String name) {
    return name != null && name.matches(NAME);
  }

  /** A policy with a fixed limit of any kind. */
  public static Builder builder(String name, AnyLimit limit) {
    return new Builder(name).limit(limit);
  }

  /** A policy whose limit is chosen per request (a bucket unless {@code kind} says). */
  public static Builder builder(String name, Function<RequestView, AnyLimit> limitFn) {
    return new Builder(name).limitFn(limitFn, LimitKind.BUCKET);
  }

  public static Builder perSecond(String name, double n) {
    return builder(name, Limit.perSecond(n));
  }

  public static Builder perMinute(String name, double n) {
    return builder(name, Limit.perMinute(n));
  }

  public static Builder perHour(String name, double n) {
    return builder(name, Limit.perHour(n));
  }

  public static Builder perDay(String name, double n) {
    return builder(name, Limit.perDay(n));
  }

  /**
   * Plan tiers (SPEC L2): {@code tier} names the caller's plan; an unknown or missing plan takes
   * {@code defaultTier} (null: the policy is skipped); a plan mapped to null is not limited by this
   * policy. The tiers are all of one kind (C10).
   */
  public static Builder tiered(
      String name,
      Map<String, ? extends AnyLimit> tiers,
      Function<RequestView, String> tier,
      String defaultTier) {
    Map<String, AnyLimit> table = new LinkedHashMap<>(tiers);
    if (defaultTier != null && !table.containsKey(defaultTier)) {
      throw new ConfigException(
          "policy " + name + ": default tier '" + defaultTier + "' is not in the tiers");
    }
    Set<LimitKind> kinds = EnumSet.noneOf(LimitKind.class);
    for (AnyLimit l : table.values()) {
      if (l != null) {
        checkStatic(name, l);
        kinds.add(l.kind());
      }
    }
    if (kinds.size() > 1) {
      throw new ConfigException(
          "policy " + name + ": the tiers of a tiered policy are all of one kind, got " + kinds);
    }
    LimitKind kind = kinds.isEmpty() ? LimitKind.BUCKET : kinds.iterator().next();
    Function<RequestView, AnyLimit> fn =
        req -> {
          String plan = tier.apply(req);
          if (plan == null || !table.containsKey(plan)) {
            plan = defaultTier;
          }
          return plan == null ? null : table.get(plan);
        };
    return new Builder(name).limitFn(fn, kind);
  }

  private static void checkStatic(String name, AnyLimit l) {
    if (l instanceof Limit b && !Limit.valid(b.capacity(), b.rate())) {
      throw new ConfigException(
          "policy "
              + name
              + ": capacity must be > 0 and <= 2^53 and rate >= 1e-9 and <= 2^53, got capacity "
              + b.capacity()
              + ", rate "
              + b.rate());
    }
  }

  /** The configuration of one policy. */
  public static final class Builder {
    private final String name;
    private AnyLimit limit;
    private Function<RequestView, AnyLimit> limitFn;
    private LimitKind kind = LimitKind.BUCKET;
    private Key key = Key.clientIp();
    private double cost = 1;
    private boolean costSet;
    private ToDoubleFunction<RequestView> costFn;
    private RouteSet routes;
    private boolean perRoute;
    private boolean shadow;
    private boolean settleLater;

    private Builder(String name) {
      if (!validName(name)) {
        throw new ConfigException("a policy name matches [a-z0-9_-]{1,64}, got '" + name + "'");
      }
      this.name = name;
    }

    Builder limit(AnyLimit l) {
      if (l == null) {
        throw new ConfigException("policy " + name + ": a limit is required");
      }
      checkStatic(name, l);
      this.limit = l;
      this.kind = l.kind();
      return this;
    }

    /** A limit chosen per request; {@code kind} is the kind of every limit it returns (C10). */
    public Builder limitFn(Function<RequestView, AnyLimit> fn, LimitKind kind) {
      this.limitFn = fn;
      this.limit = null;
      this.kind = kind;
      return this;
    }

    /** The identity (SPEC I); default {@link Key#clientIp()}. */
    public Builder key(Key k) {
      this.key = k;
      return this;
    }

    /** A key function: null or "" skips the policy (I1). */
    public Builder key(Function<RequestView, String> fn) {
      return key(Key.fromFn(fn));
    }

    /** SPEC C3: a static cost, finite, >= 0, <= 2^53 (default 1). */
    public Builder cost(double c) {
      if (!Limit.validCost(c)) {
        throw new ConfigException("policy " + name + ": cost must be >= 0 and <= 2^53, got " + c);
      }
      this.cost = c;
      this.costSet = true;
      this.costFn = null;
      return this;
    }

    /** A cost per request (checked per request, L3). */
    public Builder cost(ToDoubleFunction<RequestView> fn) {
      this.costFn = fn;
      this.costSet = true;
      return this;
    }

    /**
     * The routes it applies to ({@code "POST /orders"}, {@code "* /items"}); default every route.
     */
    public Builder routes(String... rs) {
      return routes(List.of(rs));
    }

    public Builder routes(List<String> rs) {
      this.routes = new RouteSet(rs);
      return this;
    }

    /** One bucket per route: the route is part of the key (K1). */
    public Builder perRoute(boolean on) {
      this.perRoute = on;
      return this;
    }

    /** SPEC S1: charged as usual, never refuses. */
    public Builder shadow(boolean on) {
      this.shadow = on;
      return this;
    }

    /** SPEC G1: not charged by the check; the handler takes a hold and settles it. */
    public Builder settleLater(boolean on) {
      this.settleLater = on;
      return this;
    }

    public Policy build() {
      if (limit == null && limitFn == null) {
        throw new ConfigException("policy " + name + ": a limit is required");
      }
      if (kind == LimitKind.IN_FLIGHT && costSet) {
        throw new ConfigException(
            "policy " + name + ": an in-flight policy has no cost (its cost is one slot)");
      }
      if (settleLater && kind != LimitKind.BUCKET) {
        throw new ConfigException(
            "policy "
                + name
                + ": a settle_later policy needs a bucket limit, got a "
                + kind
                + " limit");
      }
      return new Policy(this);
    }
  }

  public String name() {
    return name;
  }

  /** The fixed limit, or null for a limit function. */
  public AnyLimit limit() {
    return limit;
  }

  /** SPEC C10 */
  public LimitKind kind() {
    return kind;
  }

  public Key key() {
    return key;
  }

  public boolean shadow() {
    return shadow;
  }

  public boolean settleLater() {
    return settleLater;
  }

  public boolean perRoute() {
    return perRoute;
  }

  /** Whether the policy has routes of its own (else: every route the limiter wraps). */
  public boolean hasRoutes() {
    return routes != null;
  }

  /** SPEC L1: every route, or the listed ones. */
  public boolean appliesTo(String route) {
    return routes == null || routes.contains(route);
  }

  /** The limit for this request, unchecked (L3 checks it); null skips the policy (L2). */
  AnyLimit limitFor(RequestView req) {
    return limitFn == null ? limit : limitFn.apply(req);
  }

  /** The cost for this request, unchecked (L3 checks it). */
  double costFor(RequestView req) {
    return costFn == null ? cost : costFn.applyAsDouble(req);
  }

  /** Whether the limit is fixed (no limit function). */
  boolean staticLimit() {
    return limitFn == null;
  }

  @Override
  public String toString() {
    return "Policy(" + name + ", " + (limit == null ? kind + " function" : limit) + ")";
  }
}
