package dev.redistb;

import dev.redistb.store.BackendChoice;
import dev.redistb.store.BackendSetting;
import dev.redistb.store.Store;
import dev.redistb.store.StoreException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.IntPredicate;
import java.util.logging.Logger;

/**
 * A limiter (SPEC "Names"): its policies and settings, and the check of one request.
 * Framework-neutral: an adapter hands {@link #check} a {@link RequestView} and sends {@link
 * #respond}'s answer. A check, in order: the request's scope (L1), its plan (I, K, L2, L3, G1), the
 * deny cache (R2-R4), one guarded call (L4, L5, B), the decision (D, N3, R1, R5).
 */
public final class RateLimiter {
  private final String name;
  private final String prefix;
  private final boolean failOpen;
  private final boolean startDegraded;
  private final Headers.Options headerOptions;
  private final Clock clock;
  private final LimiterMetrics metrics;
  private final LimiterStats stats = new LimiterStats();
  private final RouteSet exclude;
  private final boolean limitUnmatched;
  private final boolean anyRoutes;
  private final Planner planner;
  private final CachedRefusals denyCache;
  private final Refunds refunds;
  private final GuardedStore guarded;
  private final Leases leases;
  private final Holds holds;
  private final Function<RequestView, String> hashTag;
  private final RateLog log;
  private final Decision.Operations ops;
  private final IntPredicate refundOn;
  private final BackendSetting backend;
  private final Consumer<String> infoLogger;

  private RateLimiter(Builder b) {
    this.name = b.name;
    this.prefix = b.prefix;
    this.failOpen = b.failOpen;
    this.startDegraded = b.startDegraded;
    this.headerOptions = new Headers.Options(b.legacyHeaders, b.legacyReset);
    this.clock = b.clock;
    this.metrics = b.metrics;
    this.exclude = new RouteSet(b.exclude);
    this.limitUnmatched = b.limitUnmatched;
    this.anyRoutes = b.policies.stream().anyMatch(p -> !p.hasRoutes());
    this.log = new RateLog(b.clock, b.logger);
    this.planner = new Planner(b.prefix, b.clientIp, b.hashTag, b.shadow, b.policies);
    this.denyCache =
        b.denyCacheEntries == 0
            ? null
            : new CachedRefusals(
                new DenyCache(b.denyCacheEntries, 2.0 * b.timeoutMs), stats, b.metrics, b.name);
    this.guarded =
        new GuardedStore(
            b.store, b.clock, b.timeoutMs, b.cooldownMs, stats, b.metrics, b.name, log, b.failOpen);
    this.refunds = new Refunds(guarded, stats, b.metrics, b.name, denyCache);
    RenewalTimer.Scheduler renewals = new RenewalTimer.Scheduler(b.name);
    this.leases = new Leases(guarded, stats, b.metrics, b.name, log, b.clock, renewals);
    this.holds = new Holds(guarded, stats, b.metrics, b.name, log, renewals, this::respond);
    this.hashTag = b.hashTag;
    this.refundOn = b.refundOn;
    this.backend = b.backend;
    this.infoLogger = b.infoLogger;
    this.ops =
        new Decision.Operations() {
          @Override
          public CompletableFuture<Boolean> refund(Decision d) {
            return refunds.refund(d);
          }

          @Override
          public boolean refundsOn(int status) {
            return refundOn != null && refundOn.test(status);
          }

          @Override
          public boolean refundsOnAny() {
            return refundOn != null;
          }

          @Override
          public CompletableFuture<Hold> hold(SettleTarget t, double estimate, double ttl) {
            return holds.hold(t, estimate, ttl);
          }
        };
  }

  public static Builder builder(Store store) {
    return new Builder(store);
  }

  // -- the check -------------------------------------------------------------------------

  /** Checks one request against this limiter's policies in one call, all or nothing. */
  public CompletableFuture<Decision> check(RequestView request) {
    if (!inScope(request.route())) {
      return CompletableFuture.completedFuture(Decision.notLimited(null, ops));
    }
    Plan plan = planner.plan(request, this::invalidInput);
    if (plan.stop != null) {
      stats.checks.increment();
      return CompletableFuture.completedFuture(Decision.stopped(plan.stop, plan.culprit));
    }
    if (plan.parts.isEmpty()) {
      return CompletableFuture.completedFuture(Decision.notLimited(plan.settle, ops));
    }
    stats.checks.increment();
    double now = clock.monotonicMillis();
    Decision cached = denyCache == null ? null : denyCache.refused(plan, now);
    if (cached != null) {
      return CompletableFuture.completedFuture(cached);
    }
    List<DenyCache.Probe> probes = denyCache == null ? List.of() : denyCache.claimProbes(plan, now);
    CompletableFuture<Plan.Answer> call = plan.call(guarded);
    if (!probes.isEmpty()) {
      call.whenComplete((reply, err) -> denyCache.endProbes(probes, err));
    }
    CompletableFuture<Decision> decision =
        call.handle(
            (reply, err) -> {
              if (err == null) {
                return decide(plan, reply);
              }
              Throwable cause = GuardedStore.unwrap(err);
              if (cause instanceof CancellationException c) {
                throw c;
              }
              if (cause instanceof StoreException se && se.crossSlot()) {
                return crossSlot(plan);
              }
              return degraded(err);
            });
    // R4: a check cancelled while its call is out (the client went away) cancels the call
    Futures.cancelWith(decision, call);
    return decision;
  }

  /** SPEC L1: every route the limiter wraps (or the policies' own), never an excluded one. */
  private boolean inScope(String route) {
    if (route == null) {
      return limitUnmatched;
    }
    return !exclude.contains(route);
  }

  /** SPEC L3: counted, logged at most once a second per policy, never the value. */
  private Plan invalidInput(String policy) {
    stats.invalidInputs.increment();
    metrics.invalidInput(name, policy);
    log.warn(
        "invalid:" + policy,
        n ->
            "redis-tb: policy '"
                + policy
                + "' got an out-of-range cost or limit from the application; answering 500 ("
                + n
                + " since the last line)");
    return Plan.stopped(Outcome.INVALID_INPUT, policy);
  }

  /** SPEC D, N3, S2, R1, R5: the decision of a reply. */
  private Decision decide(Plan plan, Plan.Answer reply) {
    List<PolicyResult> results = plan.results(reply);
    if (reply.allowed()) {
      stats.allowed.increment();
      for (PolicyResult r : results) {
        metrics.allowed(name, r.name());
      }
      if (denyCache != null) {
        denyCache.spent(results, clock.monotonicMillis());
      }
      Lease lease = null;
      if (reply.acquired() != null && reply.acquired().id() != null) {
        Plan.Part slot =
            plan.parts.stream()
                .filter(p -> p.kind() == LimitKind.IN_FLIGHT)
                .findFirst()
                .orElseThrow();
        lease =
            leases.granted(
                slot.key(), reply.acquired().id(), slot.name(), (InFlightLimit) slot.limit());
      }
      return Decision.admitted(results, lease, plan.settle, ops);
    }
    Decision d = Decision.refused(results, false, plan.settle, ops);
    if (!d.shadowLimited().isEmpty()) {
      stats.shadowLimited.increment();
      for (String s : d.shadowLimited()) {
        shadowRefused(s);
      }
    }
    if (!d.limited()) {
      return d; // S2: only shadow policies refused; nothing was charged
    }
    stats.limited.increment();
    double now = clock.monotonicMillis();
    for (PolicyResult r : results) {
      if (r.allowed() || r.shadow()) {
        continue;
      }
      metrics.limited(name, r.name());
      if (denyCache != null) {
        denyCache.refusedBy(r, now); // R1, R10
      }
    }
    return d;
  }

  /** SPEC S2: counted, logged at most once a second per policy. */
  private void shadowRefused(String policy) {
    metrics.shadowLimited(name, policy);
    log.warn(
        "shadow:" + policy,
        n ->
            "redis-tb: shadow policy '"
                + policy
                + "' would have limited a request ("
                + n
                + " since the last line)");
  }

  /**
   * SPEC K6, L5: a CROSSSLOT reply is a configuration error, never the failure mode: invalid_input,
   * a 500 naming the call's policies, nothing admitted, counted in invalid_inputs (not
   * store_errors), logged at most once a second per limiter.
   */
  private Decision crossSlot(Plan plan) {
    List<String> names = new ArrayList<>(plan.parts.size());
    for (Plan.Part p : plan.parts) {
      names.add(p.name());
    }
    stats.invalidInputs.increment();
    for (String n : names) {
      metrics.invalidInput(name, n);
    }
    log.warn(
        "crossslot",
        n ->
            "redis-tb: limiter '"
                + name
                + "' sent keys in different cluster slots (policies "
                + quoted(names)
                + "; answering 500): give the limiter a hash tag (SPEC K6) ("
                + n
                + " since the last line)");
    return Decision.crossSlot(names);
  }

  private static String quoted(List<String> names) {
    StringBuilder out = new StringBuilder();
    for (String n : names) {
      out.append(out.length() == 0 ? "" : ", ").append('\'').append(n).append('\'');
    }
    return out.toString();
  }

  /** SPEC B4, B5: the failure mode decides. */
  private Decision degraded(Throwable err) {
    stats.degraded.increment();
    metrics.degraded(name);
    return Decision.storeError(failOpen, GuardedStore.unwrap(err));
  }

  // -- responses, keys, startup -----------------------------------------------------------

  /** The status, headers and body an adapter sends for a decision of this limiter. */
  public RateLimitResponse respond(Decision d) {
    return Headers.respond(d, headerOptions, clock.wallMillis());
  }

  /** SPEC K1-K4: the key of {@code identity} under {@code policy} (the one key builder). */
  public String key(String policy, String identity, String route, String tag) {
    return Keys.key(prefix, tag, policy, route, identity);
  }

  /**
   * SPEC U1-U3: {@code COMMAND INFO tb.take}, then for a limiter that sends several keys in one
   * call without a tag function {@code HELLO}; throws {@link StartupException} with one line naming
   * the address when the module is missing, the user may not run COMMAND INFO, Redis is unreachable
   * (unless started degraded: then one line is logged), or the server is a Redis Cluster such a
   * limiter cannot use (K6).
   */
  public void startup() {
    Startup.check(
        guarded.store(),
        new Startup.Target(
            Math.max(2000, guarded.timeoutMillis()),
            startDegraded,
            log::line,
            name,
            hashTag == null ? severalKeys() : List.of(),
            backend,
            clock::wallMillis,
            this::chosen));
  }

  /** SPEC E6: the backend chosen: one line, {@code stats.backend}, the gauge. */
  private void chosen(BackendChoice c) {
    stats.backend = c.backend();
    metrics.backend(name, c.backend());
    infoLogger.accept(c.line());
  }

  /** SPEC E1: the backend setting ({@code auto}, {@code module}, {@code scripts}). */
  public BackendSetting backend() {
    return backend;
  }

  /**
   * SPEC K6: the policies this limiter can send in one call (those that are not settle_later), in
   * policy order, when there are two or more; else empty.
   */
  public List<String> severalKeys() {
    List<String> out = new ArrayList<>();
    for (Policy p : planner.policies()) {
      if (!p.settleLater()) {
        out.add(p.name());
      }
    }
    return out.size() >= 2 ? out : List.of();
  }

  public String name() {
    return name;
  }

  public String prefix() {
    return prefix;
  }

  public boolean failOpen() {
    return failOpen;
  }

  public LimiterStats stats() {
    return stats;
  }

  public Store store() {
    return guarded.store();
  }

  public Clock clock() {
    return clock;
  }

  public List<Policy> policies() {
    return planner.policies();
  }

  /** Whether some policy applies to every route (else only the listed routes are checked). */
  public boolean coversEveryRoute() {
    return anyRoutes;
  }

  /** The configuration of a limiter (SPEC C); {@link #build()} checks it. */
  public static final class Builder {
    private final Store store;
    private String name = "default";
    private String prefix = "rl";
    private ClientIpConfig clientIp = ClientIpConfig.defaults();
    private Function<RequestView, String> hashTag;
    private boolean failOpen = true;
    private long timeoutMs = 50;
    private double cooldownMs = 1000;
    private boolean startDegraded;
    private boolean legacyHeaders;
    private Headers.LegacyReset legacyReset = Headers.LegacyReset.UNIX;
    private boolean shadow;
    private int denyCacheEntries;
    private LimiterMetrics metrics = LimiterMetrics.NONE;
    private Consumer<String> logger = Logger.getLogger("redis_tb")::warning;
    private Consumer<String> infoLogger = Logger.getLogger("redis_tb")::info;
    private BackendSetting backend = BackendSetting.AUTO;
    private Clock clock = Clock.SYSTEM;
    private final List<Policy> policies = new ArrayList<>();
    private final List<String> exclude = new ArrayList<>();
    private boolean limitUnmatched;
    private IntPredicate refundOn;

    private Builder(Store store) {
      if (store == null) {
        throw new ConfigException("a limiter needs a store");
      }
      this.store = store;
    }

    /** The {@code limiter} label of its metrics (M1), default {@code default}. */
    public Builder name(String n) {
      this.name = n;
      return this;
    }

    /** SPEC C4: {@code [A-Za-z0-9_.:-]{1,64}}, default {@code rl}. */
    public Builder prefix(String p) {
      if (p == null || !p.matches("[A-Za-z0-9_.:-]{1,64}")) {
        throw new ConfigException(
            "prefix must match [A-Za-z0-9_.:-]{1,64} (no braces, spaces or control bytes), got '"
                + p
                + "'");
      }
      this.prefix = p;
      return this;
    }

    public Builder clientIp(ClientIpConfig c) {
      this.clientIp = c;
      return this;
    }

    /** SPEC K4: the request's hash tag; null or empty is no tag. */
    public Builder hashTag(Function<RequestView, String> fn) {
      this.hashTag = fn;
      return this;
    }

    /** SPEC B4: fail open (default) or closed (503). */
    public Builder failOpen(boolean on) {
      this.failOpen = on;
      return this;
    }

    /** SPEC C7: > 0 ms, default 50. */
    public Builder timeoutMillis(long ms) {
      if (ms <= 0) {
        throw new ConfigException("timeout must be > 0 ms, got " + ms);
      }
      this.timeoutMs = ms;
      return this;
    }

    /** SPEC C7: >= 0 ms, default 1000. */
    public Builder cooldownMillis(double ms) {
      if (!(ms >= 0 && Double.isFinite(ms))) {
        throw new ConfigException("cooldown must be >= 0 ms, got " + ms);
      }
      this.cooldownMs = ms;
      return this;
    }

    /** SPEC U2: an unreachable Redis at startup logs one line instead of failing the start. */
    public Builder startDegraded(boolean on) {
      this.startDegraded = on;
      return this;
    }

    /** SPEC H4 (off by default). */
    public Builder legacyHeaders(boolean on, Headers.LegacyReset reset) {
      this.legacyHeaders = on;
      this.legacyReset = reset;
      return this;
    }

    /** SPEC S1: the whole limiter in shadow. */
    public Builder shadow(boolean on) {
      this.shadow = on;
      return this;
    }

    /** SPEC R, C7: the deny cache with at most {@code maxEntries} entries (>= 1). */
    public Builder denyCache(int maxEntries) {
      if (maxEntries < 1) {
        throw new ConfigException(
            "deny_cache.max_entries must be a whole number >= 1, got " + maxEntries);
      }
      this.denyCacheEntries = maxEntries;
      return this;
    }

    public Builder metrics(LimiterMetrics m) {
      this.metrics = m;
      return this;
    }

    /** Where the limiter's warnings go (one line each, at most one a second per topic). */
    public Builder logger(Consumer<String> l) {
      this.logger = l;
      return this;
    }

    /** Where the limiter's one informational line goes: the backend chosen (SPEC E6). */
    public Builder infoLogger(Consumer<String> l) {
      this.infoLogger = l;
      return this;
    }

    /**
     * SPEC E1: the store's backend: {@code auto} (the default: the module where {@code COMMAND INFO
     * tb.take} finds it, else the script library, clients/lua), {@code module}, or {@code scripts}.
     */
    public Builder backend(String setting) {
      try {
        this.backend = BackendSetting.parse(setting);
      } catch (IllegalArgumentException e) {
        throw new ConfigException(e.getMessage());
      }
      return this;
    }

    /** SPEC E1 */
    public Builder backend(BackendSetting setting) {
      this.backend = setting;
      return this;
    }

    /** SPEC T1 */
    public Builder clock(Clock c) {
      this.clock = c;
      return this;
    }

    public Builder policy(Policy p) {
      this.policies.add(p);
      return this;
    }

    public Builder policy(Policy.Builder p) {
      return policy(p.build());
    }

    public Builder policies(List<Policy> ps) {
      this.policies.addAll(ps);
      return this;
    }

    /** SPEC L1: routes never limited ({@code "GET /healthz"}). */
    public Builder exclude(String... routes) {
      this.exclude.addAll(List.of(routes));
      return this;
    }

    /** SPEC L1: limit requests that match no route (only route-less policies apply). */
    public Builder limitUnmatched(boolean on) {
      this.limitUnmatched = on;
      return this;
    }

    /**
     * SPEC F2: refund automatically after the handler answered one of {@code statuses} (default
     * none): {@link Decision#finish(int)} refunds the request's bucket policies (F1, F3).
     */
    public Builder refundOn(int... statuses) {
      Set<Integer> set = new HashSet<>();
      for (int s : statuses) {
        set.add(s);
      }
      return refundOn(set::contains);
    }

    /** SPEC F2: refund automatically after a status {@code when} accepts ({@code s >= 500}). */
    public Builder refundOn(IntPredicate when) {
      this.refundOn = when;
      return this;
    }

    /** Checks C1 and C10 across the policies and builds the limiter. */
    public RateLimiter build() {
      PolicyChecks.check(policies);
      return new RateLimiter(this);
    }
  }
}
