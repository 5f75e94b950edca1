//! The tower `Layer` + `Service` pair for axum: per request, resolve the client address,
//! build one bucket key per applicable policy, check them all in one TB.MTAKE, then answer
//! 429 (refused), pass the request on with the [`Decision`] in its extensions (allowed), or
//! apply the failure mode (Redis unreachable). Configured with [`RateLimitBuilder`].

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::client::{Charge, MultiReply, TbClient, check_n, check_shape, num};
use crate::decision::{Decision, PolicyResult, Status};
use crate::deny_cache::{DenyCache, Entry, Lookup, Probe};
use crate::error::{BuildError, Error};
use crate::headers::{LegacyReset, PolicyHeader, layer_headers, rate_limit_headers};
use crate::ip::{ClientIpConfig, ForwardedHeader};
use crate::policy::{BoxFuture, Limit, Policy, matched_route, valid_name};
use crate::telemetry::{LimiterMetrics, PolicyMetrics};

type TagFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

/// What a request gets when Redis cannot be asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through unlimited (the default): a limiter outage must not take the
    /// API down with it. No rate-limit headers are sent; [`Metrics::degraded`] counts it.
    #[default]
    FailOpen,
    /// Answer 503 with `Retry-After: 1` and a problem+json body: for endpoints where abuse
    /// costs more than an outage (login, password reset, SMS, payments).
    FailClosed,
}

/// Marks the current request as "not to be counted": the layer gives its tokens back
/// (TB.REFUND on every policy it was charged on) after the handler returns. In the request
/// extensions of every request the layer lets through (a no-op when nothing was charged).
#[derive(Clone, Debug, Default)]
pub struct RefundHandle {
    requested: Arc<AtomicBool>,
    charged: bool,
}

impl RefundHandle {
    fn charged() -> RefundHandle {
        RefundHandle {
            requested: Arc::default(),
            charged: true,
        }
    }

    /// Ask for the refund. Returns whether there is anything to give back: `false` when
    /// the request was not charged (no policy applied, a store error, or only shadow
    /// policies refused it, so TB.MTAKE took nothing).
    pub fn refund(&self) -> bool {
        self.requested.store(true, Ordering::Relaxed);
        self.charged
    }

    /// Whether a refund was asked for.
    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Relaxed)
    }
}

/// Counters of one layer (shared by its clones); read them from the app (`/metrics`).
#[derive(Clone, Debug, Default)]
pub struct Metrics(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    checks: AtomicU64,
    allowed: AtomicU64,
    limited: AtomicU64,
    store_errors: AtomicU64,
    degraded: AtomicU64,
    refunds: AtomicU64,
    refund_errors: AtomicU64,
    shadow_limited: AtomicU64,
    deny_cache_hits: AtomicU64,
}

impl Metrics {
    /// Requests checked against Redis (or meant to be: at least one policy applied).
    pub fn checks(&self) -> u64 {
        self.0.checks.load(Ordering::Relaxed)
    }
    /// Requests admitted by Redis.
    pub fn allowed(&self) -> u64 {
        self.0.allowed.load(Ordering::Relaxed)
    }
    /// Requests refused with 429.
    pub fn limited(&self) -> u64 {
        self.0.limited.load(Ordering::Relaxed)
    }
    /// Redis calls that failed (TB.MTAKE and TB.REFUND): connection errors, timeouts,
    /// error replies.
    pub fn store_errors(&self) -> u64 {
        self.0.store_errors.load(Ordering::Relaxed)
    }
    /// Requests decided by the failure mode: their call failed, or Redis was skipped
    /// during the cooldown after a failure.
    pub fn degraded(&self) -> u64 {
        self.0.degraded.load(Ordering::Relaxed)
    }
    /// Requests whose tokens were given back.
    pub fn refunds(&self) -> u64 {
        self.0.refunds.load(Ordering::Relaxed)
    }
    /// Refunds that failed (the tokens stay spent).
    pub fn refund_errors(&self) -> u64 {
        self.0.refund_errors.load(Ordering::Relaxed)
    }
    /// Requests that a shadow policy refused (they went on, or an enforced policy refused
    /// them too).
    pub fn shadow_limited(&self) -> u64 {
        self.0.shadow_limited.load(Ordering::Relaxed)
    }
    /// Requests refused by the local deny cache, without a Redis call (also counted in
    /// [`Metrics::limited`]).
    pub fn deny_cache_hits(&self) -> u64 {
        self.0.deny_cache_hits.load(Ordering::Relaxed)
    }
}

/// How much of an unread request body the layer reads before answering 429 or 503 itself.
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// Builds a [`RateLimitLayer`]: `RateLimitLayer::builder(client).policy(..).build()?`.
#[must_use]
pub struct RateLimitBuilder {
    client: TbClient,
    policies: Vec<Policy>,
    prefix: String,
    trusted_proxies: Vec<String>,
    forwarded_header: ForwardedHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    hash_tag: Option<Arc<TagFn>>,
    failure_mode: FailureMode,
    cooldown: Duration,
    legacy_headers: Option<LegacyReset>,
    refund_on: Option<Arc<StatusFn>>,
    limit_unmatched: bool,
    name: String,
    shadow: bool,
    deny_cache: usize,
    drain_limit: usize,
    drain_wait: Duration,
}

impl fmt::Debug for RateLimitBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitBuilder")
            .field("client", &self.client)
            .field("policies", &self.policies)
            .field("prefix", &self.prefix)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("failure_mode", &self.failure_mode)
            .finish_non_exhaustive()
    }
}

impl RateLimitBuilder {
    /// Adds a policy. All policies that apply to a request are checked in one TB.MTAKE.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Key prefix (default `rl`): keys are `<prefix>:<policy>:<identity>`.
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Proxies (CIDRs or addresses) whose forwarding headers are believed. Default: none,
    /// so the TCP peer is the client.
    pub fn trusted_proxies<I, S>(mut self, cidrs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.trusted_proxies = cidrs.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self
    }

    /// Which forwarding header trusted proxies write (default `X-Forwarded-For`).
    pub fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.forwarded_header = header;
        self
    }

    /// IPv4 grouping prefix (default 32).
    pub fn ipv4_prefix(mut self, prefix: u8) -> Self {
        self.ipv4_prefix = prefix;
        self
    }

    /// IPv6 grouping prefix (default 64).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix;
        self
    }

    /// Redis Cluster: TB.MTAKE needs one request's keys in one slot, so give them a hash
    /// tag (the user id, or the client IP): keys become `<prefix>:{<tag>}:<policy>:<identity>`.
    /// `None` from the function means no tag for that request.
    pub fn hash_tag<F>(mut self, f: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.hash_tag = Some(Arc::new(f));
        self
    }

    /// What to do when Redis cannot be asked (default [`FailureMode::FailOpen`]).
    pub fn failure_mode(mut self, mode: FailureMode) -> Self {
        self.failure_mode = mode;
        self
    }

    /// After a Redis failure, skip Redis for this long and apply the failure mode directly,
    /// then let one request probe (default 1 s; zero disables the cooldown).
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// Also send `X-RateLimit-Limit/Remaining/Reset` (default off), for the enforced
    /// policy with the smallest remaining: `.legacy_headers(LegacyReset::UnixTime)` (Reset
    /// is a Unix time, `ceil(now + reset_after)` on this server's wall clock) or
    /// `LegacyReset::DeltaSeconds` (Reset = `t`). `None` turns them off.
    pub fn legacy_headers(mut self, reset: impl Into<Option<LegacyReset>>) -> Self {
        self.legacy_headers = reset.into();
        self
    }

    /// The limiter's name: the `limiter` label of its metrics (default `default`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Every policy in shadow mode (see [`Policy::shadow`]): charged as usual, refusals
    /// only counted and logged, no rate-limit headers. Default off.
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// Local deny cache of at most `max_entries` buckets (default 0: off). After Redis
    /// refuses a request, each enforced violated bucket is remembered until its
    /// `retry_after`; a later request needing it (same limit, same or larger cost) gets
    /// the same 429 from memory, without a Redis call. It never admits what Redis would
    /// refuse, but it keeps refusing after a refund made on ANOTHER instance (or a key
    /// deleted by hand) until that time: opting in is a conscious choice. A refund through
    /// this layer clears the bucket's entry.
    pub fn deny_cache(mut self, max_entries: usize) -> Self {
        self.deny_cache = max_entries;
        self
    }

    /// Before answering 429 or 503 itself, the layer reads (and drops) the request body up
    /// to `limit` bytes within `wait` (default 64 KiB, 1 s), so that the connection can
    /// carry the client's next request. A larger or slower body gets `Connection: close`
    /// instead: the server then closes the connection after the response, and the client
    /// knows not to reuse it.
    pub fn drain_body(mut self, limit: usize, wait: Duration) -> Self {
        self.drain_limit = limit;
        self.drain_wait = wait;
        self
    }

    /// Refund automatically when the response status matches (e.g. `|s| s.is_server_error()`).
    /// Default: never.
    pub fn refund_on<F>(mut self, f: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.refund_on = Some(Arc::new(f));
        self
    }

    /// Apply unscoped policies to requests that match no route (404s, the fallback).
    /// Default: they are not limited.
    pub fn limit_unmatched(mut self, on: bool) -> Self {
        self.limit_unmatched = on;
        self
    }

    /// Checks the configuration and builds the layer.
    pub fn build(mut self) -> Result<RateLimitLayer, BuildError> {
        if self.policies.is_empty() {
            return Err(BuildError::NoPolicies);
        }
        if self.prefix.is_empty()
            || self
                .prefix
                .chars()
                .any(|c| c == '{' || c == '}' || c.is_whitespace())
        {
            return Err(BuildError::InvalidPrefixText(self.prefix));
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.policies {
            if !valid_name(&p.name) {
                return Err(BuildError::InvalidPolicyName(p.name.to_string()));
            }
            if !seen.insert(p.name.clone()) {
                return Err(BuildError::DuplicatePolicy(p.name.to_string()));
            }
            let invalid = |e: Error| BuildError::InvalidLimit {
                policy: p.name.to_string(),
                detail: e.to_string(),
            };
            if let Some(l) = p.fixed_limit() {
                check_shape(l.capacity, l.rate).map_err(invalid)?;
            }
            if let Some(c) = p.fixed_cost() {
                check_n(c).map_err(invalid)?;
            }
        }
        let ip = ClientIpConfig::new()
            .trusted_proxies(&self.trusted_proxies)?
            .header(self.forwarded_header)
            .ipv4_prefix(self.ipv4_prefix)?
            .ipv6_prefix(self.ipv6_prefix)?;
        if self.name.is_empty() {
            return Err(BuildError::InvalidLimiterName(self.name));
        }
        let needs_peer = self.policies.iter().any(|p| p.key.uses_client_ip());
        let name: Arc<str> = Arc::from(self.name.as_str());
        for p in &mut self.policies {
            p.shadow |= self.shadow;
        }
        let mut runtime = Vec::with_capacity(self.policies.len());
        for p in &self.policies {
            let fixed = p.fixed_limit();
            runtime.push(PolicyRuntime {
                metrics: PolicyMetrics::register(&name, &p.name),
                shadow_log: LogLimiter::new(),
                key_head: format!("{}:{}:", self.prefix, p.name),
                fixed: fixed.map(|l| (l, num(l.capacity), num(l.rate))),
                cost: p.fixed_cost().map(|c| (c, num(c))),
                header: PolicyHeader::new(&p.name, fixed)
                    .ok_or_else(|| BuildError::InvalidPolicyName(p.name.to_string()))?,
            });
        }
        // A deny-cache probe still out after twice the call timeout is taken as lost.
        let probe_timeout = self.client.config().call_timeout.saturating_mul(2);
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                client: self.client,
                policies: self.policies,
                runtime,
                telemetry: LimiterMetrics::register(&name),
                name,
                deny_cache: (self.deny_cache > 0)
                    .then(|| DenyCache::new(self.deny_cache, probe_timeout)),
                drain_limit: self.drain_limit,
                drain_wait: self.drain_wait,
                prefix: self.prefix,
                ip,
                needs_peer,
                hash_tag: self.hash_tag,
                failure_mode: self.failure_mode,
                legacy_headers: self.legacy_headers,
                refund_on: self.refund_on,
                limit_unmatched: self.limit_unmatched,
                metrics: Metrics::default(),
                breaker: Breaker::new(self.cooldown),
                log: LogLimiter::new(),
            }),
        })
    }
}

/// The rate-limit layer. Clones share configuration, connection and [`Metrics`].
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policies", &self.shared.policies)
            .field("failure_mode", &self.shared.failure_mode)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// Starts a builder over a connected client (see [`TbClient::connect`], which fails at
    /// startup when the module is missing).
    pub fn builder(client: TbClient) -> RateLimitBuilder {
        RateLimitBuilder {
            client,
            policies: Vec::new(),
            prefix: "rl".to_owned(),
            trusted_proxies: Vec::new(),
            forwarded_header: ForwardedHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            hash_tag: None,
            failure_mode: FailureMode::FailOpen,
            cooldown: Duration::from_secs(1),
            legacy_headers: None,
            refund_on: None,
            limit_unmatched: false,
            name: "default".to_owned(),
            shadow: false,
            deny_cache: 0,
            drain_limit: DRAIN_LIMIT,
            drain_wait: DRAIN_WAIT,
        }
    }

    /// The layer's counters.
    pub fn metrics(&self) -> Metrics {
        self.shared.metrics.clone()
    }

    /// The limiter's name (the `limiter` label of its metrics).
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Entries in the local deny cache (0 when it is off).
    pub fn deny_cache_len(&self) -> usize {
        self.shared.deny_cache.as_ref().map_or(0, DenyCache::len)
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The rate-limit service wrapping `S`.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, B> Service<Request<B>> for RateLimit<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The clone is not ready; the instance that was polled ready serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        Box::pin(async move { shared.handle(req, inner).await })
    }
}

struct Shared {
    client: TbClient,
    policies: Vec<Policy>,
    /// Per policy, same order: metrics handles and the shadow log limiter.
    runtime: Vec<PolicyRuntime>,
    telemetry: LimiterMetrics,
    name: Arc<str>,
    deny_cache: Option<DenyCache>,
    drain_limit: usize,
    drain_wait: Duration,
    prefix: String,
    ip: ClientIpConfig,
    needs_peer: bool,
    hash_tag: Option<Arc<TagFn>>,
    failure_mode: FailureMode,
    legacy_headers: Option<LegacyReset>,
    refund_on: Option<Arc<StatusFn>>,
    limit_unmatched: bool,
    metrics: Metrics,
    breaker: Breaker,
    log: LogLimiter,
}

/// What the layer prepares once per policy for the request path.
struct PolicyRuntime {
    metrics: PolicyMetrics,
    shadow_log: LogLimiter,
    /// `<prefix>:<name>:` (keys without a hash tag).
    key_head: String,
    /// The fixed limit with its capacity and rate as TB.MTAKE arguments.
    fixed: Option<(Limit, String, String)>,
    /// The fixed cost as an argument.
    cost: Option<(f64, String)>,
    /// The policy's header name and `RateLimit-Policy` item.
    header: PolicyHeader,
}

/// The buckets one request is charged on, and the index of each one's policy.
struct Plan {
    charges: Vec<Charge>,
    policy: Vec<usize>,
}

impl Shared {
    async fn handle<S, B>(&self, req: Request<B>, mut inner: S) -> Result<Response, S::Error>
    where
        S: Service<Request<B>>,
        S::Response: IntoResponse,
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = req.into_parts();
        let plan = self.plan(&mut parts).await;
        if plan.charges.is_empty() {
            parts.extensions.insert(Decision::not_limited());
            // Always there, so that `Extension<RefundHandle>` never fails to extract;
            // with nothing charged, a refund does nothing.
            parts.extensions.insert(RefundHandle::default());
            let resp = inner.call(Request::from_parts(parts, body)).await?;
            return Ok(resp.into_response());
        }
        self.metrics.0.checks.fetch_add(1, Ordering::Relaxed);

        // The entries this request probes (a single flight per expired refusal): dropped
        // once the answer is handled (or with the request, if cancelled).
        let probe = match self.cached_refusal(&plan) {
            Ok(probe) => probe,
            Err(decision) => {
                let resp = self.limited_response(&decision, None);
                return Ok(self.refuse(resp, body).await);
            }
        };

        let decision = if self.breaker.admit() {
            let started = Instant::now();
            let result = match self.mtake_command(&plan) {
                Ok(cmd) => self.client.mtake_encoded(&cmd, plan.charges.len()).await,
                Err(e) => Err(e),
            };
            self.telemetry
                .call_duration
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(reply) => {
                    self.breaker.success();
                    self.decide(plan_results(&plan, &reply, &self.policies), &plan.policy)
                }
                Err(e) => {
                    let what = if plan.charges.len() == 1 {
                        "TB.TAKE"
                    } else {
                        "TB.MTAKE"
                    };
                    self.failed(&e, what);
                    self.store_error_decision()
                }
            }
        } else {
            self.store_error_decision()
        };
        match decision.status {
            // Renews the probed entries Redis refused again; the drop removes the others.
            Status::Limited => self.remember(&decision),
            Status::Allowed if !probe.is_empty() => self.remember_spent(&decision, &probe),
            _ => {}
        }
        drop(probe);

        match decision.status {
            Status::Limited => {
                let resp = self.limited_response(&decision, Some(&plan));
                Ok(self.refuse(resp, body).await)
            }
            Status::StoreError if !decision.allowed => {
                Ok(self.refuse(unavailable_response(), body).await)
            }
            Status::StoreError | Status::NotLimited => {
                parts.extensions.insert(decision);
                parts.extensions.insert(RefundHandle::default());
                let resp = inner.call(Request::from_parts(parts, body)).await?;
                Ok(resp.into_response())
            }
            Status::Allowed => {
                let charged = decision.charged();
                let refund = if charged {
                    RefundHandle::charged()
                } else {
                    RefundHandle::default()
                };
                let headers = self.headers(&decision, &plan);
                parts.extensions.insert(decision);
                parts.extensions.insert(refund.clone());
                let mut resp = inner
                    .call(Request::from_parts(parts, body))
                    .await?
                    .into_response();
                if charged {
                    let auto = self.refund_on.as_ref().is_some_and(|f| f(resp.status()));
                    if refund.is_requested() || auto {
                        self.refund(&plan).await;
                    }
                }
                if let Some(h) = headers {
                    h.apply_owned(resp.headers_mut());
                }
                Ok(resp)
            }
        }
    }

    /// Counts a Redis decision (per policy: allowed, limited, shadow-limited) and logs
    /// shadow refusals.
    fn decide(&self, decision: Decision, policy_index: &[usize]) -> Decision {
        let results = decision.policies.iter().zip(policy_index);
        match decision.status {
            Status::Allowed if decision.charged() => {
                self.metrics.0.allowed.fetch_add(1, Ordering::Relaxed);
                for (_, &i) in results.clone() {
                    self.runtime[i].metrics.allowed.increment(1);
                }
            }
            Status::Limited => {
                self.metrics.0.limited.fetch_add(1, Ordering::Relaxed);
                for (_, &i) in results.clone().filter(|(p, _)| !p.allowed && !p.shadow) {
                    self.runtime[i].metrics.limited.increment(1);
                }
            }
            _ => {}
        }
        if !decision.shadow_limited.is_empty() {
            self.metrics
                .0
                .shadow_limited
                .fetch_add(1, Ordering::Relaxed);
            for (p, &i) in results.filter(|(p, _)| !p.allowed && p.shadow) {
                let rt = &self.runtime[i];
                rt.metrics.shadow_limited.increment(1);
                if let Some(held_back) = rt.shadow_log.admit() {
                    tracing::warn!(
                        target: "redis_tb",
                        "redis-tb: shadow policy '{}' would have limited a request ({} since the last line)",
                        p.name,
                        held_back + 1
                    );
                }
            }
        }
        decision
    }

    /// A refusal from the local deny cache (`Err`), if one of the plan's enforced buckets
    /// is remembered as refused (same limit, a cost at least as large, not expired, or
    /// expired with another request probing Redis about it); else the entries this
    /// request is to probe.
    fn cached_refusal(&self, plan: &Plan) -> Result<Probe<'_>, Decision> {
        let Some(cache) = self.deny_cache.as_ref() else {
            return Ok(Probe::none());
        };
        let now = Instant::now();
        let wanted = plan
            .charges
            .iter()
            .zip(&plan.policy)
            .enumerate()
            .filter(|(_, (_, i))| !self.policies[**i].shadow)
            .map(|(j, (c, _))| (j, c.key.as_str(), c.capacity, c.rate, c.n));
        let Lookup { hits, probe } = cache.lookup(wanted, now);
        if hits.is_empty() {
            return Ok(probe);
        }
        self.metrics.0.limited.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .0
            .deny_cache_hits
            .fetch_add(1, Ordering::Relaxed);
        let mut policies = Vec::with_capacity(hits.len());
        for (j, e) in hits {
            let (c, i) = (&plan.charges[j], plan.policy[j]);
            let rt = &self.runtime[i];
            rt.metrics.deny_cache_hits.increment(1);
            rt.metrics.limited.increment(1);
            policies.push(PolicyResult {
                name: self.policies[i].name.clone(),
                key: c.key.clone(),
                capacity: c.capacity,
                rate: c.rate,
                cost: c.n,
                allowed: false,
                remaining: 0.0,
                retry_after: e.deny_until.saturating_duration_since(now).as_secs_f64(),
                reset_after: e.reset_at.saturating_duration_since(now).as_secs_f64(),
                shadow: false,
            });
        }
        let mut decision = Decision::from_results(policies);
        decision.from_cache = true;
        Err(decision)
    }

    /// Remembers a Redis refusal's enforced violated buckets in the deny cache (those a
    /// wait can cure: `retry_after > 0`).
    fn remember(&self, decision: &Decision) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        let now = Instant::now();
        for p in decision.violated().filter(|p| p.retry_after > 0.0) {
            let (Ok(wait), Ok(full)) = (
                Duration::try_from_secs_f64(p.retry_after),
                Duration::try_from_secs_f64(p.reset_after.max(0.0)),
            ) else {
                continue;
            };
            let (Some(deny_until), Some(reset_at)) = (now.checked_add(wait), now.checked_add(full))
            else {
                continue;
            };
            cache.insert(
                &p.key,
                Entry::new(p.capacity, p.rate, p.cost, deny_until, reset_at),
            );
        }
    }

    /// After a probe Redis admitted: a probed bucket left with fewer tokens than the cost
    /// is refused by Redis to the next request of that cost until `(cost - remaining) /
    /// rate` from now, so its entry is renewed until then (single flight per window even
    /// when each window admits one request); the others are removed by the probe's drop.
    fn remember_spent(&self, decision: &Decision, probe: &Probe<'_>) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        let now = Instant::now();
        for p in &decision.policies {
            if !p.allowed || p.shadow || p.rate <= 0.0 || p.remaining >= p.cost {
                continue;
            }
            if !probe.probes(&p.key) {
                continue;
            }
            let (Ok(wait), Ok(full)) = (
                Duration::try_from_secs_f64((p.cost - p.remaining) / p.rate),
                Duration::try_from_secs_f64(p.reset_after.max(0.0)),
            ) else {
                continue;
            };
            let (Some(deny_until), Some(reset_at)) = (now.checked_add(wait), now.checked_add(full))
            else {
                continue;
            };
            cache.insert(
                &p.key,
                Entry::new(p.capacity, p.rate, p.cost, deny_until, reset_at),
            );
        }
    }

    /// A response the layer makes itself (429, 503): first read what the client sends
    /// of the body (a little, briefly), so that the connection can be reused; if the
    /// body is too large or too slow, say `Connection: close` instead.
    async fn refuse<B>(&self, mut resp: Response, body: B) -> Response
    where
        B: HttpBody<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if !drain(body, self.drain_limit, self.drain_wait).await {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }

    /// Resolves the client address and the applicable policies' keys, limits and costs.
    async fn plan(&self, parts: &mut Parts) -> Plan {
        let mut plan = Plan {
            charges: Vec::new(),
            policy: Vec::new(),
        };
        let route = matched_route(parts);
        let route = route.as_ref().map(|r| r.as_str());
        if route.is_none() && !self.limit_unmatched {
            return plan;
        }
        let applies = |p: &Policy| p.applies(&parts.method, route);
        if !self.policies.iter().any(applies) {
            return plan;
        }
        match parts.extensions.get::<ConnectInfo<SocketAddr>>() {
            Some(ConnectInfo(peer)) => {
                let client = self.ip.resolve(peer.ip(), &parts.headers);
                parts.extensions.insert(client);
            }
            None if self.needs_peer => self.log.warn_once(
                "redis-tb-client: no ConnectInfo<SocketAddr> in the request: serve the app with \
                 into_make_service_with_connect_info::<SocketAddr>(); policies keyed by client IP \
                 are skipped",
            ),
            None => {}
        }
        let parts: &Parts = parts;
        let tag = self.hash_tag.as_ref().and_then(|f| f(parts));
        for (i, p) in self.policies.iter().enumerate() {
            if !applies(p) {
                continue;
            }
            let Some(identity) = p.key.identity(parts).await else {
                continue;
            };
            let Some(limit) = p.limit_for(parts) else {
                continue;
            };
            let identity = match (route, p.per_route) {
                // A '{' in a key starts a Redis Cluster hash tag: keep the template's out.
                (Some(route), true) => std::borrow::Cow::Owned(format!(
                    "{} {}:{identity}",
                    parts.method,
                    route.replace('{', "<").replace('}', ">")
                )),
                _ => identity,
            };
            let key = match &tag {
                Some(tag) => format!("{}:{{{tag}}}:{}:{identity}", self.prefix, p.name),
                None => {
                    let head = &self.runtime[i].key_head;
                    let mut key = String::with_capacity(head.len() + identity.len());
                    key.push_str(head);
                    key.push_str(&identity);
                    key
                }
            };
            plan.charges.push(Charge {
                key,
                capacity: limit.capacity,
                rate: limit.rate,
                n: p.cost_for(parts),
            });
            plan.policy.push(i);
        }
        plan
    }

    fn store_error_decision(&self) -> Decision {
        self.metrics.0.degraded.fetch_add(1, Ordering::Relaxed);
        self.telemetry.degraded.increment(1);
        Decision::store_error(self.failure_mode == FailureMode::FailOpen)
    }

    /// Counts a failed call, opens the breaker when the failure concerns the whole server
    /// (unreachable, slow, module gone), and logs at most one line per second.
    fn failed(&self, e: &Error, what: &str) {
        let errors = self.metrics.0.store_errors.fetch_add(1, Ordering::Relaxed) + 1;
        self.telemetry.store_errors.increment(1);
        let unknown_command = matches!(e, Error::Server { source, .. }
            if source.to_string().to_ascii_lowercase().contains("unknown command"));
        // An error reply (a bad per-request limit, CROSSSLOT, WRONGTYPE) concerns this
        // request alone and leaves the breaker closed.
        let server_wide =
            unknown_command || matches!(e, Error::Connection { .. } | Error::Timeout { .. });
        if server_wide {
            self.breaker.failure();
        }
        let Some(unlogged) = self.log.admit() else {
            return;
        };
        let mut reason = match e {
            Error::Timeout { timeout, .. } => {
                format!("no answer within {} ms", timeout.as_millis())
            }
            Error::Connection { source, .. } | Error::Server { source, .. } => source.to_string(),
            Error::UnexpectedReply { detail, .. } => format!("unexpected reply: {detail}"),
            other => other.to_string(),
        };
        if unknown_command {
            reason.push_str(" (is the redis-tb module loaded?)");
        }
        let mode = match self.failure_mode {
            FailureMode::FailOpen => "open: requests pass unlimited",
            FailureMode::FailClosed => "closed: requests get 503",
        };
        let skipped = if server_wide && self.breaker.cooldown_ms > 0 {
            format!(
                ", Redis skipped for {} s",
                self.breaker.cooldown_ms as f64 / 1000.0
            )
        } else {
            String::new()
        };
        let not_logged = if unlogged > 0 {
            format!(" ({unlogged} not logged)")
        } else {
            String::new()
        };
        tracing::warn!(
            target: "redis_tb",
            "redis-tb: {what} on {} failed ({reason}); failing {mode}{skipped}; store errors so far: {errors}{not_logged}",
            self.client.addr()
        );
    }

    async fn refund(&self, plan: &Plan) {
        let given: Vec<(Charge, usize)> = plan
            .charges
            .iter()
            .zip(&plan.policy)
            .filter(|(c, _)| c.n > 0.0)
            .map(|(c, &i)| (c.clone(), i))
            .collect();
        if given.is_empty() {
            return;
        }
        if !self.breaker.closed() {
            // Redis is known to be failing: do not add a call to a dead server.
            self.metrics.0.refund_errors.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let charges: Vec<Charge> = given.iter().map(|(c, _)| c.clone()).collect();
        let started = Instant::now();
        let result = self.client.refund_many(&charges).await;
        self.telemetry
            .call_duration
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(_) => {
                self.metrics.0.refunds.fetch_add(1, Ordering::Relaxed);
                for (c, i) in &given {
                    self.runtime[*i].metrics.refunded.increment(1);
                    // Tokens came back: a remembered refusal of this bucket may be wrong now.
                    if let Some(cache) = &self.deny_cache {
                        cache.remove(&c.key);
                    }
                }
            }
            Err(e) => {
                self.metrics.0.refund_errors.fetch_add(1, Ordering::Relaxed);
                self.failed(&e, "TB.REFUND");
            }
        }
    }

    /// The rate-limit headers of a Redis decision, from the policies' prepared pieces.
    fn headers(
        &self,
        decision: &Decision,
        plan: &Plan,
    ) -> Option<crate::headers::RateLimitHeaders> {
        let items: Vec<&PolicyHeader> = plan
            .policy
            .iter()
            .map(|&i| &self.runtime[i].header)
            .collect();
        layer_headers(decision, &items, self.legacy_headers)
    }

    /// `TB.MTAKE n key.. (capacity rate cost)..`, with the fixed limits' and costs' numbers
    /// formatted once at build time; per-request ones are checked and formatted here. A
    /// plan of one bucket is `TB.TAKE key capacity rate cost`: the same decision, and its
    /// reply (4 values instead of 9) is about half the parsing in the `redis` crate, the
    /// largest cost of a check on the app's side.
    fn mtake_command(&self, plan: &Plan) -> Result<redis::Cmd, Error> {
        let n = plan.charges.len();
        let mut cmd = redis::Cmd::with_capacity(
            1 + 4 * n,
            16 + plan.charges.iter().map(|c| c.key.len() + 32).sum::<usize>(),
        );
        if n == 1 {
            cmd.arg("TB.TAKE");
        } else {
            cmd.arg("TB.MTAKE").arg(n);
        }
        for c in &plan.charges {
            cmd.arg(c.key.as_str());
        }
        for (c, &i) in plan.charges.iter().zip(&plan.policy) {
            let rt = &self.runtime[i];
            match &rt.fixed {
                Some((l, capacity, rate)) if l.capacity == c.capacity && l.rate == c.rate => {
                    cmd.arg(capacity.as_str()).arg(rate.as_str());
                }
                _ => {
                    check_shape(c.capacity, c.rate)?;
                    cmd.arg(num(c.capacity)).arg(num(c.rate));
                }
            }
            match &rt.cost {
                Some((cost, text)) if *cost == c.n => {
                    cmd.arg(text.as_str());
                }
                _ => {
                    check_n(c.n)?;
                    cmd.arg(num(c.n));
                }
            }
        }
        Ok(cmd)
    }

    fn limited_response(&self, decision: &Decision, plan: Option<&Plan>) -> Response {
        let violated = decision.violated_names();
        let never: Vec<_> = decision
            .violated()
            .filter(|p| p.retry_after < 0.0)
            .collect();
        let (detail, retry_after) = if never.is_empty() {
            let names = violated
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ");
            let secs = crate::headers::retry_after(decision.retry_after.max(0.0)).unwrap_or(1);
            (
                format!("rate limit exceeded for {names}: retry after {secs} s"),
                serde_json::Value::from(decision.retry_after),
            )
        } else {
            let detail = never
                .iter()
                .map(|p| {
                    format!(
                        "this request costs {} but policy '{}' allows at most {} at once: it can never succeed",
                        fmt_g(p.cost),
                        p.name,
                        fmt_g(p.capacity)
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            (detail, serde_json::Value::Null)
        };
        let body = serde_json::json!({
            "type": "about:blank",
            "title": "Too Many Requests",
            "status": 429,
            "detail": detail,
            "violated_policies": violated,
            "retry_after": retry_after,
        });
        let mut resp = problem(StatusCode::TOO_MANY_REQUESTS, &body);
        let headers = match plan {
            Some(plan) => self.headers(decision, plan),
            None => rate_limit_headers(decision, self.legacy_headers),
        };
        if let Some(h) = headers {
            h.apply_owned(resp.headers_mut());
        }
        resp
    }
}

/// The decision's per-policy results: TB.MTAKE's per-bucket replies with the plan's
/// shapes and the policies' shadow flags.
fn plan_results(plan: &Plan, reply: &MultiReply, policies: &[Policy]) -> Decision {
    let results = plan
        .charges
        .iter()
        .zip(&plan.policy)
        .zip(&reply.buckets)
        .map(|((c, &i), b)| PolicyResult {
            name: policies[i].name.clone(),
            key: c.key.clone(),
            capacity: c.capacity,
            rate: c.rate,
            cost: c.n,
            allowed: b.allowed,
            remaining: b.remaining,
            retry_after: b.retry_after,
            reset_after: b.reset_after,
            shadow: policies[i].shadow,
        })
        .collect();
    Decision::from_results(results)
}

/// Reads and drops a request body of at most `limit` bytes within `wait`; `false` when
/// the body is larger, slower, or broken (the connection should then be closed).
async fn drain<B>(body: B, limit: usize, wait: Duration) -> bool
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if body.is_end_stream() {
        return true;
    }
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return false;
    }
    matches!(
        tokio::time::timeout(wait, axum::body::to_bytes(Body::new(body), limit)).await,
        Ok(Ok(_))
    )
}

/// A number as Python's `%g` writes it (6 significant digits, no trailing zeros), so
/// that problem details read the same from both integrations.
fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".to_owned();
    }
    if !x.is_finite() {
        return x.to_string();
    }
    let sci = format!("{x:.5e}");
    let Some((mantissa, exp)) = sci.split_once('e') else {
        return x.to_string();
    };
    let Ok(exp) = exp.parse::<i32>() else {
        return x.to_string();
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exp.abs())
    } else {
        let decimals = usize::try_from(5 - exp).unwrap_or(0);
        strip_zeros(&format!("{x:.decimals$}")).to_owned()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The fail-closed answer: 503, `Retry-After: 1`, problem+json.
fn unavailable_response() -> Response {
    let body = serde_json::json!({
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the rate limiter's store is unavailable; retry shortly",
    });
    let mut resp = problem(StatusCode::SERVICE_UNAVAILABLE, &body);
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

fn problem(status: StatusCode, body: &serde_json::Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    resp
}

/// After a failure, Redis is skipped for the cooldown; then exactly one request probes it
/// (the others keep failing fast until the probe has answered): no retry storm on a dead
/// server.
struct Breaker {
    start: Instant,
    cooldown_ms: u64,
    /// 0 = closed; else the time (ms since `start`, at least 1) until which Redis is skipped.
    open_until: AtomicU64,
}

impl Breaker {
    fn new(cooldown: Duration) -> Breaker {
        Breaker {
            start: Instant::now(),
            cooldown_ms: u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX),
            open_until: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn admit(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = self.now_ms();
        if now < until {
            return false;
        }
        // The cooldown is over: the request that moves the window forward is the probe.
        let next = now.saturating_add(self.cooldown_ms).max(1);
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn closed(&self) -> bool {
        self.open_until.load(Ordering::Acquire) == 0
    }

    fn success(&self) {
        if self.open_until.load(Ordering::Acquire) != 0 {
            self.open_until.store(0, Ordering::Release);
        }
    }

    fn failure(&self) {
        if self.cooldown_ms > 0 {
            let until = self.now_ms().saturating_add(self.cooldown_ms).max(1);
            self.open_until.store(until, Ordering::Release);
        }
    }
}

/// At most one log line per second; counts the lines it held back.
struct LogLimiter {
    start: Instant,
    last_ms: AtomicU64,
    suppressed: AtomicU64,
    warned: AtomicBool,
}

impl LogLimiter {
    fn new() -> LogLimiter {
        LogLimiter {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written now.
    fn admit(&self) -> Option<u64> {
        // +1000 so that the very first failure logs even within the first second.
        let now = u64::try_from(self.start.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1000);
        let last = self.last_ms.load(Ordering::Acquire);
        if now.saturating_sub(last) >= 1000
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::AcqRel))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    fn warn_once(&self, message: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "redis_tb_client", "{message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaker_skips_during_cooldown_then_admits_one_probe() {
        let b = Breaker::new(Duration::from_secs(3600));
        assert!(b.admit());
        b.failure();
        assert!(!b.admit());
        assert!(!b.admit());
        b.success();
        assert!(b.admit());
        // Cooldown 0: never skips.
        let b = Breaker::new(Duration::ZERO);
        b.failure();
        assert!(b.admit());
    }

    #[test]
    fn breaker_probe_is_single_after_the_cooldown() {
        let b = Breaker::new(Duration::from_millis(1));
        b.failure();
        std::thread::sleep(Duration::from_millis(5));
        assert!(b.admit(), "the first request after the cooldown probes");
        assert!(!b.admit(), "the others wait for the probe");
    }

    #[test]
    fn log_limiter_writes_the_first_line_then_holds_back() {
        let l = LogLimiter::new();
        assert_eq!(l.admit(), Some(0));
        assert_eq!(l.admit(), None);
        assert_eq!(l.admit(), None);
        assert_eq!(l.suppressed.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn numbers_in_problem_details_read_like_python_percent_g() {
        for (x, text) in [
            (1000.0, "1000"),
            (2.5, "2.5"),
            (1e6, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.6666666, "1.66667"),
            (123456789.0, "1.23457e+08"),
            (999999.0, "999999"),
            (0.0, "0"),
            (-3.0, "-3"),
        ] {
            assert_eq!(fmt_g(x), text, "{x}");
        }
    }

    #[test]
    fn refund_handle_is_shared_by_clones() {
        let h = RefundHandle::charged();
        let c = h.clone();
        assert!(!h.is_requested());
        assert!(c.refund(), "a charged request has tokens to give back");
        assert!(h.is_requested());
        // Nothing charged (not limited, store error, refused by a shadow policy only).
        assert!(!RefundHandle::default().refund());
    }

    #[test]
    fn unavailable_response_is_problem_json_with_retry_after_one() {
        let r = unavailable_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "1");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
}
