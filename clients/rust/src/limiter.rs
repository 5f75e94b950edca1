//! The framework-neutral limiter (SPEC L, D, R, B, F, S, T): for one request head, the
//! applicable policies, their keys (one key builder, SPEC K), the deny cache, the breaker,
//! one TB.TAKE or TB.MTAKE through a [`Store`], and the [`Check`] an adapter turns into a
//! response (the tower layer in [`crate::tower`]). Time comes from the limiter's [`Clock`].

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, StatusCode};

use crate::breaker::{Breaker, LogLimiter};
use crate::client::{
    Acquired, Charge, HoldReply, MAX_NUMBER, MIN_RATE, MultiReply, Reply, SettleReply, TbClient,
    WindowMode, num,
};
use crate::clock::{Clock, SystemClock};
use crate::decision::{Decision, Lease, Outcome, PolicyResult, SettleTarget};
use crate::deny_cache::{DenyCache, Entry, Lookup, Probe};
use crate::error::{BuildError, Error};
use crate::headers::{
    LegacyReset, PolicyHeader, RateLimitHeaders, layer_headers, rate_limit_headers_at,
};
use crate::hold::Holds;
use crate::ip::{ClientIpConfig, ForwardedHeader};
use crate::keys::{self, Head};
use crate::lease::{LeaseHandle, LeaseState, RequestScope};
use crate::policy::{Identity, Limit, LimitKind, Policy, Route, ceil_ms, valid_name};
use crate::problem;
use crate::telemetry::{LimiterMetrics, PolicyMetrics};

mod cluster;
mod stores;

type TagFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

/// The store the limiter calls, at the level of the typed client: TB.TAKE / TB.MTAKE for a
/// check and TB.REFUND for a refund. [`TbClient`] is the real one; tests script a fake.
pub trait Store: Send + Sync + 'static {
    /// The check: TB.TAKE for one bucket, TB.MTAKE for several (SPEC L4), the reply in
    /// TB.MTAKE's shape. One attempt, within the store's timeout (SPEC L5).
    fn take(&self, call: &Call) -> impl Future<Output = Result<MultiReply, Error>> + Send;
    /// One TB.REFUND per charge (SPEC F1), never retried.
    fn refund(&self, charges: &[Charge]) -> impl Future<Output = Result<Vec<Reply>, Error>> + Send;
    /// The check with an in-flight policy: TB.ACQUIRE, with TAKE when the call has
    /// buckets (SPEC N2). The default answers that the store does not implement it.
    fn acquire(&self, call: &Call) -> impl Future<Output = Result<Acquired, Error>> + Send {
        let _ = call;
        async { Err(unsupported("TB.ACQUIRE")) }
    }
    /// `TB.RELEASE key id` (SPEC N4): `(released, in_flight)`.
    fn release(
        &self,
        key: &str,
        id: &str,
    ) -> impl Future<Output = Result<(bool, f64), Error>> + Send {
        let _ = (key, id);
        async { Err(unsupported("TB.RELEASE")) }
    }
    /// `TB.RENEW key id lease_ms` (SPEC N5): `(renewed, in_flight, ms)`.
    fn renew(
        &self,
        key: &str,
        id: &str,
        lease_ms: u64,
    ) -> impl Future<Output = Result<(bool, f64, f64), Error>> + Send {
        let _ = (key, id, lease_ms);
        async { Err(unsupported("TB.RENEW")) }
    }
    /// `TB.HOLD key capacity rate estimate ttl_ms` (SPEC G1).
    fn hold(
        &self,
        target: &SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<HoldReply, Error>> + Send {
        let _ = (target, estimate, ttl_ms);
        async { Err(unsupported("TB.HOLD")) }
    }
    /// `TB.SETTLE key capacity rate id actual max_wait` (SPEC G3).
    fn settle(
        &self,
        target: &SettleTarget,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> impl Future<Output = Result<SettleReply, Error>> + Send {
        let _ = (target, id, actual, max_wait);
        async { Err(unsupported("TB.SETTLE")) }
    }
    /// `COMMAND INFO tb.take` (SPEC U1): whether the module's commands are there.
    fn command_info(&self) -> impl Future<Output = Result<bool, Error>> + Send {
        async { Err(unsupported("COMMAND INFO")) }
    }
    /// `HELLO` with no argument (SPEC U3): the server's `mode`, `None` when the reply has
    /// none.
    fn hello(&self) -> impl Future<Output = Result<Option<String>, Error>> + Send {
        async { Err(unsupported("HELLO")) }
    }
    /// Whether the store was started degraded (SPEC U2): a limiter's startup then does not
    /// fail on an unreachable store.
    fn started_degraded(&self) -> bool {
        false
    }
    /// `host:port`, for log lines.
    fn addr(&self) -> &str;
    /// The call timeout (a deny-cache probe out for twice as long is lost, SPEC R4).
    fn timeout(&self) -> Duration;
}

fn unsupported(command: &'static str) -> Error {
    Error::UnexpectedReply {
        addr: String::new(),
        command,
        detail: "this store does not implement the command".to_owned(),
    }
}

impl Store for TbClient {
    async fn take(&self, call: &Call) -> Result<MultiReply, Error> {
        if call.kind == CallKind::Window {
            return self.window_encoded(&call.cmd).await;
        }
        let v = self.call(&call.cmd).await?;
        self.mtake_reply(&v, call.charges.len())
    }

    async fn refund(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        self.refund_many(charges).await
    }

    async fn acquire(&self, call: &Call) -> Result<Acquired, Error> {
        self.acquire_encoded(&call.cmd, call.charges.len()).await
    }

    async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        TbClient::release(self, key, id).await
    }

    async fn renew(&self, key: &str, id: &str, lease_ms: u64) -> Result<(bool, f64, f64), Error> {
        TbClient::renew(self, key, id, lease_ms).await
    }

    async fn hold(
        &self,
        target: &SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> Result<HoldReply, Error> {
        TbClient::hold(
            self,
            &target.key,
            target.capacity,
            target.rate,
            estimate,
            ttl_ms,
        )
        .await
    }

    async fn settle(
        &self,
        target: &SettleTarget,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> Result<SettleReply, Error> {
        TbClient::settle(
            self,
            &target.key,
            target.capacity,
            target.rate,
            id,
            actual,
            max_wait,
        )
        .await
    }

    async fn command_info(&self) -> Result<bool, Error> {
        self.startup_command_info().await
    }

    async fn hello(&self) -> Result<Option<String>, Error> {
        self.hello_mode().await
    }

    fn started_degraded(&self) -> bool {
        TbClient::started_degraded(self)
    }

    fn addr(&self) -> &str {
        TbClient::addr(self)
    }

    fn timeout(&self) -> Duration {
        self.config().call_timeout
    }
}

/// One check's call: its buckets and the encoded command (`TB.TAKE key capacity rate cost`
/// or `TB.MTAKE n key.. (capacity rate cost)..`, the fixed numbers formatted once).
pub struct Call {
    charges: Vec<Charge>,
    cmd: redis::Cmd,
    kind: CallKind,
}

/// Which command a [`Call`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// TB.TAKE (one bucket) or TB.MTAKE.
    Take,
    /// TB.WINDOW (SPEC W2): one charge.
    Window,
    /// TB.ACQUIRE, with TAKE when there are charges (SPEC N2).
    Acquire,
}

impl Call {
    /// The buckets, in policy order (the window for TB.WINDOW; those after TAKE for
    /// TB.ACQUIRE).
    pub fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// The command.
    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// The command's arguments as sent (name first).
    pub fn args(&self) -> Vec<Vec<u8>> {
        self.cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"CURSOR".to_vec(),
            })
            .collect()
    }
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("charges", &self.charges)
            .finish()
    }
}

/// What a request gets when Redis cannot be asked (SPEC B4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through unlimited (the default), no rate-limit headers.
    #[default]
    FailOpen,
    /// Answer 503 with `Retry-After: 1` and a problem body (SPEC P3).
    FailClosed,
}

/// Counters of one limiter (SPEC "Names": `stats`), shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Stats(Arc<Counters>);

/// The old name of [`Stats`].
#[deprecated(note = "renamed Stats (SPEC names: `stats`)")]
pub type Metrics = Stats;

#[derive(Debug, Default)]
struct Counters {
    checks: AtomicU64,
    allowed: AtomicU64,
    limited: AtomicU64,
    shadow_limited: AtomicU64,
    store_errors: AtomicU64,
    degraded: AtomicU64,
    deny_cache_hits: AtomicU64,
    refunds: AtomicU64,
    refund_errors: AtomicU64,
    invalid_inputs: AtomicU64,
    leases_in_flight: AtomicU64,
    leases_expired: AtomicU64,
    leases_timed_out: AtomicU64,
    holds: AtomicU64,
    holds_lost: AtomicU64,
    settlements: AtomicU64,
}

fn bump(c: &AtomicU64) -> u64 {
    c.fetch_add(1, Ordering::Relaxed).saturating_add(1)
}

impl Stats {
    /// Requests to which at least one policy applied.
    pub fn checks(&self) -> u64 {
        self.0.checks.load(Ordering::Relaxed)
    }
    /// Requests admitted and charged.
    pub fn allowed(&self) -> u64 {
        self.0.allowed.load(Ordering::Relaxed)
    }
    /// Requests refused with 429 (by Redis or the deny cache).
    pub fn limited(&self) -> u64 {
        self.0.limited.load(Ordering::Relaxed)
    }
    /// Requests a shadow policy refused.
    pub fn shadow_limited(&self) -> u64 {
        self.0.shadow_limited.load(Ordering::Relaxed)
    }
    /// Failed Redis calls (checks and refunds): connection errors, timeouts, error replies.
    pub fn store_errors(&self) -> u64 {
        self.0.store_errors.load(Ordering::Relaxed)
    }
    /// Requests decided by the failure mode (SPEC B5).
    pub fn degraded(&self) -> u64 {
        self.0.degraded.load(Ordering::Relaxed)
    }
    /// Requests refused by the local deny cache (also counted in `limited`).
    pub fn deny_cache_hits(&self) -> u64 {
        self.0.deny_cache_hits.load(Ordering::Relaxed)
    }
    /// Refunds made.
    pub fn refunds(&self) -> u64 {
        self.0.refunds.load(Ordering::Relaxed)
    }
    /// Refunds that failed or were not sent because the breaker was open.
    pub fn refund_errors(&self) -> u64 {
        self.0.refund_errors.load(Ordering::Relaxed)
    }
    /// Out-of-range costs or limits from the application (SPEC L3).
    pub fn invalid_inputs(&self) -> u64 {
        self.0.invalid_inputs.load(Ordering::Relaxed)
    }
    /// Leases this process holds now (SPEC M2: up at a grant, down when the lease ends).
    pub fn leases_in_flight(&self) -> u64 {
        self.0.leases_in_flight.load(Ordering::Relaxed)
    }
    /// Leases that ended without a release: a TB.RELEASE or TB.RENEW that answered 0 (M2).
    pub fn leases_expired(&self) -> u64 {
        self.0.leases_expired.load(Ordering::Relaxed)
    }
    /// Requests ended at their in-flight policy's `max_duration` (SPEC N7, M2).
    pub fn leases_timed_out(&self) -> u64 {
        self.0.leases_timed_out.load(Ordering::Relaxed)
    }
    /// Holds whose renewal answered 0: lost before their settle (SPEC G5, M2).
    pub fn holds_lost(&self) -> u64 {
        self.0.holds_lost.load(Ordering::Relaxed)
    }
    /// Holds taken (SPEC G1, M2).
    pub fn holds(&self) -> u64 {
        self.0.holds.load(Ordering::Relaxed)
    }
    /// Holds settled (SPEC G3, M2).
    pub fn settlements(&self) -> u64 {
        self.0.settlements.load(Ordering::Relaxed)
    }
}

/// SPEC C11: the most policies one limiter holds (the module's bound on the buckets of one
/// TB.MTAKE or TB.ACQUIRE ... TAKE).
pub const MAX_POLICIES: usize = 64;

/// How much of an unread request body an adapter reads before answering itself.
const DRAIN_LIMIT: usize = 64 * 1024;
const DRAIN_WAIT: Duration = Duration::from_secs(1);

/// What `build()` makes: a [`RateLimiter`] or an adapter around one.
pub trait FromLimiter<S: Store> {
    /// Wraps the limiter.
    fn from_limiter(limiter: RateLimiter<S>) -> Self;
}

impl<S: Store> FromLimiter<S> for RateLimiter<S> {
    fn from_limiter(limiter: RateLimiter<S>) -> Self {
        limiter
    }
}

/// Builds a [`RateLimiter`] (or, from [`crate::RateLimitLayer::builder`], the tower layer).
#[must_use]
pub struct RateLimiterBuilder<S: Store = TbClient, T = RateLimiter<S>> {
    store: S,
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
    exclude: Vec<Route>,
    name: String,
    shadow: bool,
    deny_cache: Option<usize>,
    drain_limit: usize,
    drain_wait: Duration,
    clock: Arc<dyn Clock>,
    out: PhantomData<fn() -> T>,
}

impl<S: Store, T> fmt::Debug for RateLimiterBuilder<S, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiterBuilder")
            .field("addr", &self.store.addr())
            .field("policies", &self.policies)
            .field("prefix", &self.prefix)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("failure_mode", &self.failure_mode)
            .finish_non_exhaustive()
    }
}

impl<S: Store, T: FromLimiter<S>> RateLimiterBuilder<S, T> {
    pub(crate) fn new(store: S) -> Self {
        RateLimiterBuilder {
            store,
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
            exclude: Vec::new(),
            name: "default".to_owned(),
            shadow: false,
            deny_cache: None,
            drain_limit: DRAIN_LIMIT,
            drain_wait: DRAIN_WAIT,
            clock: Arc::new(SystemClock::new()),
            out: PhantomData,
        }
    }

    /// Adds a policy. The policies that apply to a request are checked in one call.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policies.push(policy);
        self
    }

    /// Key prefix (default `rl`, SPEC C4: `[A-Za-z0-9_.:-]{1,64}`).
    pub fn key_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_owned();
        self
    }

    /// Proxies (CIDRs or addresses, SPEC C5) whose forwarding header is believed.
    pub fn trusted_proxies<I, P>(mut self, cidrs: I) -> Self
    where
        I: IntoIterator<Item = P>,
        P: AsRef<str>,
    {
        self.trusted_proxies = cidrs.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self
    }

    /// Which forwarding header trusted proxies write (default `X-Forwarded-For`).
    pub fn forwarded_header(mut self, header: ForwardedHeader) -> Self {
        self.forwarded_header = header;
        self
    }

    /// IPv4 grouping prefix (default 32, SPEC C6).
    pub fn ipv4_prefix(mut self, prefix: u8) -> Self {
        self.ipv4_prefix = prefix;
        self
    }

    /// IPv6 grouping prefix (default 64, SPEC C6).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix;
        self
    }

    /// A hash tag per request (SPEC K4; Redis Cluster needs one request's keys in one
    /// slot): keys become `<prefix>:{<tag>}:...`. `None` or an empty tag is no tag.
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

    /// After a connection error or a timeout, skip Redis this long (default 1 s, SPEC B1).
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// Also send `X-RateLimit-*` (SPEC H4; default off).
    pub fn legacy_headers(mut self, reset: impl Into<Option<LegacyReset>>) -> Self {
        self.legacy_headers = reset.into();
        self
    }

    /// The limiter's name: the `limiter` label of its metrics (default `default`).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Every policy in shadow mode (SPEC S1).
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// The local deny cache of at most `max_entries` keys (SPEC R; default off; 0 is a
    /// configuration error, SPEC C7).
    pub fn deny_cache(mut self, max_entries: usize) -> Self {
        self.deny_cache = Some(max_entries);
        self
    }

    /// The time source (SPEC T1; default the system clocks).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Before answering 429, 503, 400 or 500 itself, an adapter reads (and drops) the
    /// request body up to `limit` bytes within `wait` (default 64 KiB, 1 s); a larger or
    /// slower body gets `Connection: close` instead.
    pub fn drain_body(mut self, limit: usize, wait: Duration) -> Self {
        self.drain_limit = limit;
        self.drain_wait = wait;
        self
    }

    /// Refund automatically after the handler answered with a matching status (SPEC F2).
    pub fn refund_on<F>(mut self, f: F) -> Self
    where
        F: Fn(StatusCode) -> bool + Send + Sync + 'static,
    {
        self.refund_on = Some(Arc::new(f));
        self
    }

    /// Apply unscoped policies to requests that match no route (SPEC L1; default off).
    pub fn limit_unmatched(mut self, on: bool) -> Self {
        self.limit_unmatched = on;
        self
    }

    /// Never limit `method` on the route `template` (SPEC L1).
    pub fn exclude(mut self, method: Method, template: &str) -> Self {
        self.exclude.push(Route {
            method: Some(method),
            template: template.to_owned(),
        });
        self
    }

    /// Never limit any method of the route `template` (SPEC L1).
    pub fn exclude_any_method(mut self, template: &str) -> Self {
        self.exclude.push(Route {
            method: None,
            template: template.to_owned(),
        });
        self
    }

    /// Checks the configuration (SPEC C) and builds.
    pub fn build(mut self) -> Result<T, BuildError> {
        if self.policies.is_empty() {
            return Err(BuildError::NoPolicies);
        }
        // SPEC C11: the module takes at most 64 buckets in one call.
        if self.policies.len() > MAX_POLICIES {
            return Err(BuildError::TooManyPolicies(self.policies.len()));
        }
        keys::check_prefix(&self.prefix)?;
        let mut seen = std::collections::HashSet::new();
        for p in &self.policies {
            if !valid_name(&p.name) {
                return Err(BuildError::InvalidPolicyName(p.name.to_string()));
            }
            if !seen.insert(p.name.clone()) {
                return Err(BuildError::DuplicatePolicy(p.name.to_string()));
            }
            if p.key.is_empty_fixed() {
                return Err(BuildError::EmptyFixedKey(p.name.to_string()));
            }
            let invalid = |detail: String| BuildError::InvalidLimit {
                policy: p.name.to_string(),
                detail,
            };
            for l in p.static_limits() {
                if let Err(detail) = check_limit(&l) {
                    return Err(invalid(detail));
                }
                // SPEC C10: a tiered policy's tiers are all of one kind.
                if l.kind.as_str() != p.kind.as_str() {
                    return Err(invalid(format!(
                        "its limits mix kinds ({} and {}): a tiered policy's tiers are all of one kind",
                        p.kind.as_str(),
                        l.kind.as_str()
                    )));
                }
            }
            if matches!(p.kind, LimitKind::InFlight { .. }) && p.cost_set {
                return Err(invalid(
                    "an in-flight policy has no cost (its cost is one slot, SPEC C9)".to_owned(),
                ));
            }
            if p.settle_later && p.kind != LimitKind::Bucket {
                return Err(invalid(format!(
                    "a settle_later policy has a bucket limit, not a {} limit (SPEC C10)",
                    p.kind.as_str()
                )));
            }
            if let Some(c) = p.fixed_cost()
                && !valid_cost(c)
            {
                return Err(invalid(format!("cost {c} must be finite, in [0, 2^53]")));
            }
        }
        check_kinds(&self.policies)?;
        // SPEC C7: a call with no time to answer would be a store error every time.
        if self.store.timeout().is_zero() {
            return Err(BuildError::InvalidSetting(
                "timeout 0 ms: the store's call timeout must be > 0 (SPEC C7)".to_owned(),
            ));
        }
        if self.deny_cache == Some(0) {
            return Err(BuildError::InvalidSetting(
                "deny_cache max_entries must be at least 1".to_owned(),
            ));
        }
        if self.name.is_empty() {
            return Err(BuildError::InvalidLimiterName(self.name));
        }
        let ip = ClientIpConfig::new()
            .trusted_proxies(&self.trusted_proxies)?
            .header(self.forwarded_header)
            .ipv4_prefix(self.ipv4_prefix)?
            .ipv6_prefix(self.ipv6_prefix)?;
        let needs_peer = self.policies.iter().any(|p| p.key.uses_client_ip());
        let async_keys = self.policies.iter().any(|p| p.key.is_async());
        let name: Arc<str> = Arc::from(self.name.as_str());
        for p in &mut self.policies {
            p.shadow |= self.shadow;
        }
        let mut runtime = Vec::with_capacity(self.policies.len());
        for p in &self.policies {
            let fixed = p.fixed_limit();
            let mut metrics = PolicyMetrics::register(&name, &p.name);
            if matches!(p.kind, LimitKind::InFlight { .. }) {
                metrics = metrics.with_leases(&name, &p.name);
            }
            if p.settle_later {
                metrics = metrics.with_holds(&name, &p.name);
            }
            runtime.push(PolicyRuntime {
                metrics,
                shadow_log: LogLimiter::new(),
                invalid_log: LogLimiter::new(),
                lease_log: LogLimiter::new(),
                timeout_log: LogLimiter::new(),
                hold_log: LogLimiter::new(),
                head: Head::new(&self.prefix, &p.name).with_fixed(p.key.fixed_identity()),
                fixed: fixed.map(|l| (l, num(l.capacity), num(l.rate))),
                cost: p.fixed_cost().map(|c| (c, num(c))),
                header: PolicyHeader::new(&p.name, fixed)
                    .ok_or_else(|| BuildError::InvalidPolicyName(p.name.to_string()))?,
            });
        }
        let probe_timeout = self.store.timeout().saturating_mul(2);
        let breaker = Breaker::new(self.cooldown, self.clock.clone());
        let inner = Inner {
            store: self.store,
            policies: self.policies,
            runtime,
            telemetry: LimiterMetrics::register(&name),
            name,
            deny_cache: self.deny_cache.map(|n| DenyCache::new(n, probe_timeout)),
            drain_limit: self.drain_limit,
            drain_wait: self.drain_wait,
            ip,
            needs_peer,
            async_keys,
            hash_tag: self.hash_tag,
            failure_mode: self.failure_mode,
            legacy_headers: self.legacy_headers,
            refund_on: self.refund_on,
            limit_unmatched: self.limit_unmatched,
            exclude: self.exclude,
            stats: Stats::default(),
            breaker,
            log: LogLimiter::new(),
            cross_slot_log: LogLimiter::new(),
            clock: self.clock,
        };
        Ok(T::from_limiter(RateLimiter {
            inner: Arc::new(inner),
        }))
    }
}

/// SPEC C2, C8, C9: one limit of its kind; the message names the setting and the value.
fn check_limit(l: &Limit) -> Result<(), String> {
    match l.kind {
        LimitKind::Bucket if !valid_limit(*l) => Err(format!(
            "capacity {} and rate {} must be finite, capacity in (0, 2^53], rate in [1e-9, 2^53]",
            l.capacity, l.rate
        )),
        LimitKind::Bucket => Ok(()),
        LimitKind::Window { seconds, mode } => {
            if !(l.capacity >= 1.0 && l.capacity <= MAX_NUMBER && l.capacity.fract() == 0.0) {
                Err(format!(
                    "window limit {} must be a whole number in [1, 2^53]",
                    l.capacity
                ))
            } else if !(seconds.is_finite() && (0.000_001..=1e12).contains(&seconds)) {
                Err(format!(
                    "window seconds {seconds} must be finite, in [0.000001, 1e12]"
                ))
            } else if !matches!(mode, WindowMode::Sliding | WindowMode::Fixed) {
                Err(format!("window mode {mode:?} must be sliding or fixed"))
            } else {
                Ok(())
            }
        }
        LimitKind::InFlight {
            lease,
            max_duration,
        } => {
            if !(l.capacity >= 1.0 && l.capacity <= 10_000.0 && l.capacity.fract() == 0.0) {
                Err(format!(
                    "in-flight limit {} must be a whole number in [1, 10000]",
                    l.capacity
                ))
            } else if !(lease.is_finite() && (0.001..=31_536_000.0).contains(&lease)) {
                Err(format!(
                    "lease {lease} must be finite, in [0.001, 31536000] seconds"
                ))
            } else if !(max_duration.is_finite() && (0.001..=31_536_000.0).contains(&max_duration))
            {
                Err(format!(
                    "max_duration {max_duration} must be finite, in [0.001, 31536000] seconds (SPEC C9)"
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// SPEC C10: the kinds mix only as the module checks them in one call.
fn check_kinds(policies: &[Policy]) -> Result<(), BuildError> {
    let names = |kind: &str| -> Vec<String> {
        policies
            .iter()
            .filter(|p| p.kind.as_str() == kind)
            .map(|p| format!("'{}'", p.name))
            .collect()
    };
    let in_flight = names("in_flight");
    if in_flight.len() > 1 {
        return Err(BuildError::InvalidSetting(format!(
            "policies {}: at most one in-flight policy per limiter (SPEC C10)",
            in_flight.join(", ")
        )));
    }
    let window = names("window");
    if !window.is_empty() && policies.len() > 1 {
        let all: Vec<String> = policies.iter().map(|p| format!("'{}'", p.name)).collect();
        return Err(BuildError::InvalidSetting(format!(
            "policies {}: a window policy ({}) is the only policy of its limiter (SPEC C10, W3): put it in a limiter of its own",
            all.join(", "),
            window.join(", ")
        )));
    }
    Ok(())
}

/// SPEC C2: capacity finite in `(0, 2^53]`, rate finite in `[1e-9, 2^53]`.
pub fn valid_limit(l: Limit) -> bool {
    l.capacity > 0.0 && l.capacity <= MAX_NUMBER && (MIN_RATE..=MAX_NUMBER).contains(&l.rate)
}

/// SPEC C3: a cost finite in `[0, 2^53]`.
pub fn valid_cost(c: f64) -> bool {
    (0.0..=MAX_NUMBER).contains(&c)
}

/// The limiter (SPEC `RateLimiter`). Clones share configuration, store, caches and
/// [`Stats`].
pub struct RateLimiter<S: Store = TbClient> {
    inner: Arc<Inner<S>>,
}

impl<S: Store> Clone for RateLimiter<S> {
    fn clone(&self) -> Self {
        RateLimiter {
            inner: self.inner.clone(),
        }
    }
}

impl<S: Store> fmt::Debug for RateLimiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimiter")
            .field("name", &self.inner.name)
            .field("policies", &self.inner.policies)
            .field("failure_mode", &self.inner.failure_mode)
            .finish_non_exhaustive()
    }
}

struct Inner<S: Store> {
    store: S,
    policies: Vec<Policy>,
    runtime: Vec<PolicyRuntime>,
    telemetry: LimiterMetrics,
    name: Arc<str>,
    deny_cache: Option<DenyCache>,
    drain_limit: usize,
    drain_wait: Duration,
    ip: ClientIpConfig,
    needs_peer: bool,
    /// Whether a policy's key is an async function: only then is the plan's key step
    /// awaited (SPEC I1).
    async_keys: bool,
    hash_tag: Option<Arc<TagFn>>,
    failure_mode: FailureMode,
    legacy_headers: Option<LegacyReset>,
    refund_on: Option<Arc<StatusFn>>,
    limit_unmatched: bool,
    exclude: Vec<Route>,
    stats: Stats,
    breaker: Breaker,
    log: LogLimiter,
    /// `CROSSSLOT` answers (SPEC K6), logged at most once a second per limiter.
    cross_slot_log: LogLimiter,
    clock: Arc<dyn Clock>,
}

/// What the limiter prepares once per policy.
struct PolicyRuntime {
    metrics: PolicyMetrics,
    shadow_log: LogLimiter,
    invalid_log: LogLimiter,
    /// Lost leases (SPEC N5), logged at most once a second per policy.
    lease_log: LogLimiter,
    /// Requests ended at `max_duration` (SPEC N7), likewise.
    timeout_log: LogLimiter,
    /// Lost holds (SPEC G5), likewise.
    hold_log: LogLimiter,
    head: Head,
    /// The fixed limit with its capacity and rate as command arguments.
    fixed: Option<(Limit, String, String)>,
    /// The fixed cost as an argument.
    cost: Option<(f64, String)>,
    header: PolicyHeader,
}

/// The buckets one request is charged on, and the index of each one's policy.
struct Plan {
    charges: Vec<Charge>,
    policy: Vec<usize>,
    /// The charge is a window (SPEC W2): its seconds and mode.
    window: Option<(f64, WindowMode)>,
    /// The in-flight policy of the request (SPEC N2).
    in_flight: Option<InFlight>,
    /// The `settle_later` policies (SPEC G1): not in the call.
    settle: Vec<SettleTarget>,
}

/// The in-flight part of a plan.
#[derive(Clone)]
struct InFlight {
    key: String,
    n: f64,
    lease_ms: u64,
    /// SPEC N7: how long after its grant the request may hold the slot.
    max_duration_ms: u64,
    policy: usize,
    /// Its place among the applied policies (the results are in policy order, D2).
    pos: usize,
}

impl Plan {
    /// The policy of each result, in policy order (the in-flight one at its place);
    /// borrowed when there is no in-flight policy.
    fn result_policies(&self) -> Cow<'_, [usize]> {
        match &self.in_flight {
            None => Cow::Borrowed(&self.policy),
            Some(f) => {
                let mut out = self.policy.clone();
                out.insert(f.pos.min(out.len()), f.policy);
                Cow::Owned(out)
            }
        }
    }

    /// The bucket charges only: what `refund()` may give back (SPEC F3). Takes the plan:
    /// the charges move into the refund instead of being copied.
    fn into_refundable(self) -> Option<Plan> {
        if self.window.is_some() || self.charges.is_empty() {
            return None;
        }
        Some(Plan {
            charges: self.charges,
            policy: self.policy,
            window: None,
            in_flight: None,
            settle: Vec::new(),
        })
    }
}

enum Planned {
    NotLimited(Vec<SettleTarget>),
    Charges(Plan),
    BadRequest(String),
    Invalid(usize, &'static str, f64),
}

/// The result of one check: the decision, and what the response carries.
#[derive(Debug)]
pub struct Check {
    /// The decision (also put in the request extensions by the adapter).
    pub decision: Decision,
    /// The rate-limit headers (SPEC H), on a refusal and on the admitted response.
    pub headers: Option<RateLimitHeaders>,
    /// The limiter's own answer when the request does not go on: status and problem body.
    pub problem: Option<(StatusCode, String)>,
    /// Gives the tokens back (SPEC F1); does nothing when nothing was charged.
    pub refund: RefundHandle,
    /// The lease of the in-flight policy (SPEC N4, N5): finish it when the response ends;
    /// does nothing without a lease.
    pub lease: LeaseHandle,
}

impl Check {
    fn pass(decision: Decision) -> Check {
        Check {
            decision,
            headers: None,
            problem: None,
            refund: RefundHandle::default(),
            lease: LeaseHandle::default(),
        }
    }

    /// A refusal (SPEC H, P): the 429 problem and the headers of `decision`, nothing
    /// charged to refund, no lease.
    fn too_many_requests(decision: Decision, headers: Option<RateLimitHeaders>) -> Check {
        let body = problem::too_many_requests(&decision);
        Check {
            decision,
            headers,
            problem: Some((StatusCode::TOO_MANY_REQUESTS, body)),
            refund: RefundHandle::default(),
            lease: LeaseHandle::default(),
        }
    }

    /// The response status: the problem's, else 200 (the handler decides).
    pub fn status(&self) -> StatusCode {
        self.problem.as_ref().map_or(StatusCode::OK, |(s, _)| *s)
    }

    /// Writes the headers of the limiter's own answer (problem content type, rate-limit
    /// headers, `Retry-After`) or of an admitted response (rate-limit headers) into `map`.
    pub fn write_headers(&self, map: &mut HeaderMap) {
        match &self.problem {
            Some((status, _)) => write_problem_headers(*status, self.headers.as_ref(), map),
            None => {
                if let Some(h) = &self.headers {
                    h.apply(map);
                }
            }
        }
    }
}

/// The headers of the limiter's own answer of `status` (problem content type, rate-limit
/// headers, `Retry-After`), as [`Check::write_headers`] writes them.
pub(crate) fn write_problem_headers(
    status: StatusCode,
    headers: Option<&RateLimitHeaders>,
    map: &mut HeaderMap,
) {
    map.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        map.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(h) = headers {
        h.apply(map);
    }
}

impl<S: Store> RateLimiter<S> {
    /// Starts a builder over a store (a connected [`TbClient`]).
    pub fn builder(store: S) -> RateLimiterBuilder<S, RateLimiter<S>> {
        RateLimiterBuilder::new(store)
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.inner.stats.clone()
    }

    /// The limiter's name (the `limiter` label of its metrics).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Entries in the local deny cache (0 when it is off).
    pub fn deny_cache_len(&self) -> usize {
        self.inner.deny_cache.as_ref().map_or(0, DenyCache::len)
    }

    /// Whether a policy is keyed by client address (an adapter that cannot find the peer
    /// says so once).
    pub fn needs_peer(&self) -> bool {
        self.inner.needs_peer
    }

    /// Logs once that the adapter found no peer address.
    pub fn warn_once(&self, message: &str) {
        self.inner.log.warn_once(message);
    }

    /// The body-draining settings of adapters: `(limit, wait)`.
    pub fn drain_settings(&self) -> (usize, Duration) {
        (self.inner.drain_limit, self.inner.drain_wait)
    }

    /// Whether a response status asks for an automatic refund (SPEC F2).
    pub fn refund_on(&self, status: StatusCode) -> bool {
        self.inner.refund_on.as_ref().is_some_and(|f| f(status))
    }

    /// Checks one request: `parts` is its head (key, cost, limit and tag functions read
    /// it; the resolved [`crate::ClientIp`] is put in its extensions), `peer` the TCP peer
    /// address (`None`: a Unix socket, SPEC A8), `route` the matched route template
    /// (`None`: no route matched, SPEC L1).
    pub fn check<'a>(
        &'a self,
        parts: &'a mut Parts,
        peer: Option<IpAddr>,
        route: Option<&'a str>,
    ) -> impl Future<Output = Check> + Send + 'a {
        // The inner future itself, not an async wrapper around it: one copy of a large
        // future less per request.
        self.inner.check(&self.inner, parts, peer, route)
    }
}

impl<S: Store> Inner<S> {
    async fn check(
        &self,
        this: &Arc<Inner<S>>,
        parts: &mut Parts,
        peer: Option<IpAddr>,
        route: Option<&str>,
    ) -> Check {
        // The plan is made without an await unless a key is an async function, and
        // `planned` lives in this block only: outside it, its storage would stay in the
        // future's state beside the plan's across the call.
        let mut plan = {
            let planned = if self.in_scope(parts, peer, route) {
                // One call of `plan` (inlined here), with or without async answers.
                let mut resolved = match self.async_keys {
                    true => self.resolve_async_keys(parts, route).await,
                    false => Vec::new(),
                };
                self.plan(parts, route, &mut resolved)
            } else {
                Planned::NotLimited(Vec::new())
            };
            match planned {
                Planned::Charges(plan) if !plan.charges.is_empty() || plan.in_flight.is_some() => {
                    plan
                }
                Planned::Charges(Plan { settle, .. }) | Planned::NotLimited(settle) => {
                    let mut check = Check::pass(Decision::not_limited());
                    check.lease.scope = self.settle_later(this, &mut check.decision, settle);
                    return check;
                }
                Planned::BadRequest(header) => {
                    bump(&self.stats.0.checks);
                    let mut c = Check::pass(Decision::without_results(Outcome::BadRequest, false));
                    c.problem = Some((StatusCode::BAD_REQUEST, problem::bad_request(&header)));
                    return c;
                }
                Planned::Invalid(i, what, value) => {
                    bump(&self.stats.0.checks);
                    return self.invalid_input(i, what, value);
                }
            }
        };
        let settle = std::mem::take(&mut plan.settle);
        bump(&self.stats.0.checks);
        // The call and its decision, in this future (not one of its own inside it: the
        // check is made in place, and not moved out of a second future).
        let mut check = 'call: {
            // The entries this request probes (one probe per expired refusal, SPEC R4): the
            // drop removes those the answer did not renew (or all, if the request is
            // cancelled).
            let probe = match self.cached_refusal(&plan) {
                Ok(probe) => probe,
                Err(decision) => {
                    let decision = *decision;
                    let headers =
                        rate_limit_headers_at(&decision, self.legacy_headers, self.clock.unix());
                    return Check::too_many_requests(decision, headers);
                }
            };

            if !self.breaker.admit() {
                // SPEC R6: this probe never reaches Redis; the entries stay for the next one.
                probe.release();
                break 'call self.store_error_check();
            }
            let call = self.call(std::mem::take(&mut plan.charges), &plan);
            let started = Instant::now();
            let result = match call.kind {
                CallKind::Acquire => self.store.acquire(&call).await.map(Ok),
                CallKind::Take | CallKind::Window => self.store.take(&call).await.map(Err),
            };
            self.telemetry
                .call_duration
                .record(started.elapsed().as_secs_f64());
            let what = match call.kind {
                CallKind::Acquire => "TB.ACQUIRE",
                CallKind::Window => "TB.WINDOW",
                CallKind::Take if call.charges.len() == 1 => "TB.TAKE",
                CallKind::Take => "TB.MTAKE",
            };
            let Call { charges, .. } = call;
            plan.charges = charges;
            let reply = match result {
                Ok(reply) => reply,
                // SPEC K6, L5: a configuration error, never the failure mode; the breaker
                // is untouched.
                Err(e) if e.is_cross_slot() => {
                    drop(probe);
                    return self.cross_slot(&plan, what);
                }
                Err(e) => {
                    self.failed(&e, what);
                    drop(probe);
                    break 'call self.store_error_check();
                }
            };
            self.breaker.success();
            let (buckets, acquired) = match &reply {
                Err(multi) => (&multi.buckets, None),
                Ok(acq) => (&acq.buckets, Some(acq)),
            };
            let mut decision = plan_results(&plan, buckets, acquired, &self.policies);
            let order = plan.result_policies();
            self.decide(&decision, &order);
            match decision.outcome {
                // SPEC R4: a refusal renews the probed entries (and caches new ones, R1).
                Outcome::Limited => self.remember(&decision),
                // SPEC R5: after any admission that leaves a bucket below the cost.
                Outcome::Allowed if decision.charged() => self.remember_spent(&decision),
                _ => {}
            }
            drop(probe);
            let headers = self.headers(&decision, &order);
            if decision.outcome == Outcome::Limited {
                return Check::too_many_requests(decision, headers);
            }
            // SPEC N1, N6: a granted lease is the decision's; the gauge goes up (M2).
            let lease = match (acquired, &plan.in_flight) {
                (Some(a), Some(f)) if a.granted => match &a.id {
                    Some(id) => {
                        let l = Lease {
                            key: f.key.clone(),
                            id: id.clone(),
                            policy: self.policies[f.policy].name.clone(),
                        };
                        decision.lease = Some(l.clone());
                        self.stats
                            .0
                            .leases_in_flight
                            .fetch_add(1, Ordering::Relaxed);
                        if let Some(l) = &self.runtime[f.policy].metrics.leases {
                            l.in_flight.increment(1.0);
                        }
                        LeaseHandle {
                            state: Some(Arc::new(LeaseState::new(
                                this.clone(),
                                l,
                                f.policy,
                                f.lease_ms,
                                f.max_duration_ms,
                            ))),
                            scope: None,
                        }
                    }
                    None => LeaseHandle::default(),
                },
                _ => LeaseHandle::default(),
            };
            // SPEC F3: only the bucket policies are refunded.
            let refund = match decision.charged() {
                true => plan
                    .into_refundable()
                    .map_or_else(RefundHandle::default, |p| {
                        RefundHandle::new(this.clone(), p)
                    }),
                false => RefundHandle::default(),
            };
            let mut lease = lease;
            lease.scope = self.settle_later(this, &mut decision, settle);
            // Returned from here, not moved out of the block and again out of the future.
            return Check {
                decision,
                headers,
                problem: None,
                refund,
                lease,
            };
        };
        // A store error (a refusal when failing closed, an admission when failing open).
        if check.problem.is_none() {
            check.lease.scope = self.settle_later(this, &mut check.decision, settle);
        }
        check
    }

    /// SPEC G1: the settle_later policies' keys and limits, for `decision.hold`, and the
    /// request's scope, whose end stops the renewals of the holds taken (G5).
    fn settle_later(
        &self,
        this: &Arc<Inner<S>>,
        decision: &mut Decision,
        settle: Vec<SettleTarget>,
    ) -> Option<Arc<RequestScope>> {
        if settle.is_empty() {
            return None;
        }
        let scope = Arc::new(RequestScope::default());
        decision.settle_later = settle;
        decision.holds = Some(Holds {
            store: this.clone(),
            scope: scope.clone(),
        });
        Some(scope)
    }

    /// SPEC L3: the application gave an out-of-range cost or limit. Nothing is sent,
    /// nothing admitted; counted, logged at most once a second per policy, 500.
    fn invalid_input(&self, i: usize, what: &str, value: f64) -> Check {
        bump(&self.stats.0.invalid_inputs);
        let rt = &self.runtime[i];
        rt.metrics.invalid_inputs.increment(1);
        let name = &self.policies[i].name;
        if let Some(held_back) = rt.invalid_log.admit(&*self.clock) {
            tracing::error!(
                target: "redis_tb",
                "redis-tb: policy '{name}' got an invalid {what} from the application ({value}); the request is answered 500 ({} since the last line)",
                held_back + 1
            );
        }
        let mut c = Check::pass(Decision::without_results(Outcome::InvalidInput, false));
        c.problem = Some((
            StatusCode::INTERNAL_SERVER_ERROR,
            problem::invalid_input(name),
        ));
        c
    }

    fn store_error_check(&self) -> Check {
        bump(&self.stats.0.degraded);
        self.telemetry.degraded.increment(1);
        let fail_open = self.failure_mode == FailureMode::FailOpen;
        let mut c = Check::pass(Decision::store_error(fail_open));
        if !fail_open {
            c.problem = Some((StatusCode::SERVICE_UNAVAILABLE, problem::unavailable()));
        }
        c
    }

    fn applies(&self, p: &Policy, method: &Method, route: Option<&str>) -> bool {
        p.applies(method, route)
    }

    /// SPEC L1, A8: whether any policy applies to this request; if so, its resolved
    /// [`crate::ClientIp`] is put in the extensions (key, cost and limit functions read it).
    fn in_scope(&self, parts: &mut Parts, peer: Option<IpAddr>, route: Option<&str>) -> bool {
        if route.is_none() && !self.limit_unmatched {
            return false;
        }
        if let Some(route) = route
            && self.exclude.iter().any(|r| {
                r.template == route && r.method.as_ref().is_none_or(|m| *m == parts.method)
            })
        {
            return false;
        }
        if !self
            .policies
            .iter()
            .any(|p| self.applies(p, &parts.method, route))
        {
            return false;
        }
        if let Some(peer) = peer {
            let client = self.ip.resolve(peer, &parts.headers);
            parts.extensions.insert(client);
        }
        true
    }

    /// What the applicable policies' async key functions give for this request (SPEC I1),
    /// by policy index, awaited one after another before the plan is made.
    async fn resolve_async_keys(
        &self,
        parts: &Parts,
        route: Option<&str>,
    ) -> Vec<Option<Option<String>>> {
        let mut resolved = Vec::with_capacity(self.policies.len());
        for p in self.policies.iter() {
            resolved.push(match self.applies(p, &parts.method, route) {
                true => p.key.resolve_async(parts).await,
                false => None,
            });
        }
        resolved
    }

    /// SPEC L1, I, K, L2, L3: the applicable policies' keys, limits and costs, for a
    /// request [`Self::in_scope`] admitted; `resolved` holds the async keys' answers.
    fn plan(
        &self,
        parts: &Parts,
        route: Option<&str>,
        resolved: &mut [Option<Option<String>>],
    ) -> Planned {
        let tag = self.hash_tag.as_ref().and_then(|f| f(parts));
        let tag = tag.as_deref().map(str::as_bytes).filter(|t| !t.is_empty());
        let mut route_segment: Option<String> = None;
        let mut plan = Plan {
            charges: Vec::with_capacity(self.policies.len()),
            policy: Vec::with_capacity(self.policies.len()),
            window: None,
            in_flight: None,
            settle: Vec::new(),
        };
        for (i, p) in self.policies.iter().enumerate() {
            if !self.applies(p, &parts.method, route) {
                continue;
            }
            let answer = resolved.get_mut(i).and_then(Option::take);
            let identity = match p.key.identity_now(parts, answer) {
                Identity::Skip => continue,
                Identity::BadRequest => {
                    let name = p.key.header_name().map_or("", |h| h.as_str());
                    return Planned::BadRequest(name.to_owned());
                }
                Identity::Value(v) => v,
            };
            let Some(limit) = p.limit_for(parts) else {
                continue;
            };
            // SPEC L3, C10: a per-request limit is checked as its kind, and keeps the
            // policy's kind.
            if std::mem::discriminant(&limit.kind) != std::mem::discriminant(&p.kind) {
                return Planned::Invalid(i, "limit kind", limit.capacity);
            }
            if let LimitKind::Bucket = limit.kind {
                if !(limit.capacity > 0.0 && limit.capacity <= MAX_NUMBER) {
                    return Planned::Invalid(i, "capacity", limit.capacity);
                }
                if !(MIN_RATE..=MAX_NUMBER).contains(&limit.rate) {
                    return Planned::Invalid(i, "rate", limit.rate);
                }
            } else if check_limit(&limit).is_err() {
                return Planned::Invalid(i, "limit", limit.capacity);
            }
            let segment = match (route, p.per_route) {
                (Some(route), true) => Some(
                    route_segment
                        .get_or_insert_with(|| {
                            keys::route_segment(&format!("{} {route}", parts.method))
                        })
                        .as_str(),
                ),
                _ => None,
            };
            if p.settle_later {
                // SPEC G1: resolved now, charged by the handler's hold.
                let key = self.runtime[i].head.key(tag, segment, &identity);
                plan.settle.push(SettleTarget {
                    policy: p.name.clone(),
                    key,
                    capacity: limit.capacity,
                    rate: limit.rate,
                });
                continue;
            }
            if let LimitKind::InFlight {
                lease,
                max_duration,
            } = limit.kind
            {
                // SPEC N2, C9: one slot, no cost.
                let key = self.runtime[i].head.key(tag, segment, &identity);
                plan.in_flight = Some(InFlight {
                    key,
                    n: limit.capacity,
                    lease_ms: ceil_ms(lease),
                    max_duration_ms: ceil_ms(max_duration),
                    policy: i,
                    pos: plan.charges.len(),
                });
                continue;
            }
            if let LimitKind::Window { seconds, mode } = limit.kind {
                plan.window = Some((seconds, mode));
            }
            let cost = p.cost_for(parts);
            if !valid_cost(cost) {
                return Planned::Invalid(i, "cost", cost);
            }
            let key = self.runtime[i].head.key(tag, segment, &identity);
            plan.charges.push(Charge {
                key,
                capacity: limit.capacity,
                rate: limit.rate,
                n: cost,
            });
            plan.policy.push(i);
        }
        if plan.charges.is_empty() && plan.in_flight.is_none() {
            Planned::NotLimited(plan.settle)
        } else {
            Planned::Charges(plan)
        }
    }

    /// `TB.TAKE key capacity rate cost` for one bucket (SPEC L4), else `TB.MTAKE n key..
    /// (capacity rate cost)..`, the fixed limits' and costs' numbers formatted once.
    fn call(&self, charges: Vec<Charge>, plan: &Plan) -> Call {
        let policy = &plan.policy;
        let n = charges.len();
        let mut cmd = redis::Cmd::with_capacity(
            6 + 4 * n,
            48 + charges.iter().map(|c| c.key.len() + 32).sum::<usize>(),
        );
        if let (Some((seconds, mode)), [c]) = (plan.window, charges.as_slice()) {
            // SPEC W2: TB.WINDOW key limit seconds cost MODE.
            cmd.arg("TB.WINDOW")
                .arg(c.key.as_str())
                .arg(num(c.capacity))
                .arg(num(seconds))
                .arg(num(c.n))
                .arg(match mode {
                    WindowMode::Fixed => "FIXED",
                    _ => "SLIDING",
                });
            return Call {
                charges,
                cmd,
                kind: CallKind::Window,
            };
        }
        let kind = if let Some(f) = &plan.in_flight {
            // SPEC N2: TB.ACQUIRE key n lease_ms [TAKE numkeys keys.. (capacity rate cost)..].
            cmd.arg("TB.ACQUIRE")
                .arg(f.key.as_str())
                .arg(num(f.n))
                .arg(f.lease_ms);
            if n > 0 {
                cmd.arg("TAKE").arg(n);
            }
            CallKind::Acquire
        } else {
            if n == 1 {
                cmd.arg("TB.TAKE");
            } else {
                cmd.arg("TB.MTAKE").arg(n);
            }
            CallKind::Take
        };
        for c in &charges {
            cmd.arg(c.key.as_str());
        }
        for (c, &i) in charges.iter().zip(policy) {
            let rt = &self.runtime[i];
            match &rt.fixed {
                Some((l, capacity, rate)) if l.capacity == c.capacity && l.rate == c.rate => {
                    cmd.arg(capacity.as_str()).arg(rate.as_str());
                }
                _ => {
                    cmd.arg(num(c.capacity)).arg(num(c.rate));
                }
            }
            match &rt.cost {
                Some((cost, text)) if *cost == c.n => {
                    cmd.arg(text.as_str());
                }
                _ => {
                    cmd.arg(num(c.n));
                }
            }
        }
        Call { charges, cmd, kind }
    }

    /// Counts a Redis decision (allowed, limited, shadow-limited, SPEC M1) and logs shadow
    /// refusals; by reference, so the decision is not copied on the request path.
    fn decide(&self, decision: &Decision, policy_index: &[usize]) {
        let results = decision.results.iter().zip(policy_index);
        match decision.outcome {
            Outcome::Allowed if decision.charged() => {
                bump(&self.stats.0.allowed);
                for (_, &i) in results.clone() {
                    self.runtime[i].metrics.allowed.increment(1);
                }
            }
            Outcome::Limited => {
                bump(&self.stats.0.limited);
                for (_, &i) in results.clone().filter(|(p, _)| !p.allowed && !p.shadow) {
                    self.runtime[i].metrics.limited.increment(1);
                }
            }
            _ => {}
        }
        if !decision.shadow_limited.is_empty() {
            bump(&self.stats.0.shadow_limited);
            for (p, &i) in results.filter(|(p, _)| !p.allowed && p.shadow) {
                let rt = &self.runtime[i];
                rt.metrics.shadow_limited.increment(1);
                if let Some(held_back) = rt.shadow_log.admit(&*self.clock) {
                    tracing::warn!(
                        target: "redis_tb",
                        "redis-tb: shadow policy '{}' would have limited a request ({} since the last line)",
                        p.name,
                        held_back + 1
                    );
                }
            }
        }
    }

    /// A refusal from the deny cache (`Err`, SPEC R2, R4, H6), else the entries this
    /// request is to probe.
    fn cached_refusal(&self, plan: &Plan) -> Result<Probe<'_>, Box<Decision>> {
        let Some(cache) = self.deny_cache.as_ref() else {
            return Ok(Probe::none());
        };
        let now = self.clock.monotonic();
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
        bump(&self.stats.0.limited);
        bump(&self.stats.0.deny_cache_hits);
        let mut results = Vec::with_capacity(hits.len());
        for (j, e) in hits {
            let (Some(c), Some(&i)) = (plan.charges.get(j), plan.policy.get(j)) else {
                continue;
            };
            let rt = &self.runtime[i];
            rt.metrics.deny_cache_hits.increment(1);
            rt.metrics.limited.increment(1);
            results.push(PolicyResult {
                name: self.policies[i].name.clone(),
                key: c.key.clone(),
                capacity: c.capacity,
                rate: c.rate,
                cost: c.n,
                allowed: false,
                remaining: 0.0,
                retry_after: e.deny_until.saturating_sub(now).as_secs_f64(),
                reset_after: e.reset_at.saturating_sub(now).as_secs_f64(),
                shadow: false,
                kind: self.policies[i].kind,
            });
        }
        let mut decision = Decision::from_results(results);
        decision.from_cache = true;
        Err(Box::new(decision))
    }

    fn cache_entry(&self, cache: &DenyCache, p: &PolicyResult, wait: f64) {
        let now = self.clock.monotonic();
        let (Ok(wait), Ok(full)) = (
            Duration::try_from_secs_f64(wait),
            Duration::try_from_secs_f64(p.reset_after.max(0.0)),
        ) else {
            return;
        };
        let (Some(deny_until), Some(reset_at)) = (now.checked_add(wait), now.checked_add(full))
        else {
            return;
        };
        cache.insert(
            &p.key,
            Entry::new(p.capacity, p.rate, p.cost, deny_until, reset_at),
        );
    }

    /// SPEC R1: a Redis refusal's enforced violated buckets that a wait can cure.
    fn remember(&self, decision: &Decision) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        // SPEC R10: an in-flight refusal is never cached.
        for p in decision
            .violated_results()
            .filter(|p| p.retry_after > 0.0 && !matches!(p.kind, LimitKind::InFlight { .. }))
        {
            self.cache_entry(cache, p, p.retry_after);
        }
    }

    /// SPEC R5: after any admission, an enforced bucket left with `remaining < cost` is
    /// refused by Redis to the next such request until `(cost - remaining) / rate`.
    fn remember_spent(&self, decision: &Decision) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        for p in &decision.results {
            // R5 is for buckets only (SPEC W3, R10).
            if p.shadow || p.kind != LimitKind::Bucket || p.rate <= 0.0 || p.remaining >= p.cost {
                continue;
            }
            self.cache_entry(cache, p, (p.cost - p.remaining) / p.rate);
        }
    }

    fn headers(&self, decision: &Decision, order: &[usize]) -> Option<RateLimitHeaders> {
        let items = order.iter().map(|&i| &self.runtime[i].header);
        let now = match self.legacy_headers {
            Some(LegacyReset::UnixTime) => self.clock.unix(),
            _ => 0.0,
        };
        layer_headers(decision, items, self.legacy_headers, now)
    }

    /// Counts a failed call, opens the breaker on a connection error or a timeout (SPEC
    /// B1; also when the module is gone), and logs at most one line per second (B5).
    fn failed(&self, e: &Error, what: &str) {
        let errors = bump(&self.stats.0.store_errors);
        self.telemetry.store_errors.increment(1);
        let unknown_command = matches!(e, Error::Server { source, .. }
            if source.to_string().to_ascii_lowercase().contains("unknown command"));
        let server_wide =
            unknown_command || matches!(e, Error::Connection { .. } | Error::Timeout { .. });
        if server_wide {
            self.breaker.failure();
        }
        let Some(unlogged) = self.log.admit(&*self.clock) else {
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
            self.store.addr()
        );
    }

    /// SPEC F1, B2, B3, R8: one TB.REFUND per charged policy, now.
    async fn refund(&self, plan: &Plan) -> bool {
        let given: Vec<Charge> = plan.charges.iter().filter(|c| c.n > 0.0).cloned().collect();
        if given.is_empty() {
            return false;
        }
        if !self.breaker.admit() {
            // B2: Redis is known to be failing; a refund after the cool-down may be the
            // probe (B3).
            bump(&self.stats.0.refund_errors);
            return false;
        }
        let started = Instant::now();
        let result = self.store.refund(&given).await;
        self.telemetry
            .call_duration
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(_) => {
                self.breaker.success();
                bump(&self.stats.0.refunds);
                for (c, &i) in plan.charges.iter().zip(&plan.policy) {
                    if c.n > 0.0 {
                        self.runtime[i].metrics.refunded.increment(1);
                    }
                    if let Some(cache) = &self.deny_cache {
                        cache.remove(&c.key);
                    }
                }
                true
            }
            Err(e) => {
                bump(&self.stats.0.refund_errors);
                self.failed(&e, "TB.REFUND");
                false
            }
        }
    }
}

/// The decision's per-policy results: the per-bucket replies with the plan's shapes, and
/// the in-flight result (SPEC N3) at its place.
fn plan_results(
    plan: &Plan,
    buckets: &[Reply],
    acquired: Option<&Acquired>,
    policies: &[Policy],
) -> Decision {
    let mut results: Vec<PolicyResult> = plan
        .charges
        .iter()
        .zip(&plan.policy)
        .zip(buckets)
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
            kind: policies[i].kind,
        })
        .collect();
    if let (Some(f), Some(a)) = (&plan.in_flight, acquired) {
        // SPEC N3: refused for the slot only when not granted and `in_flight >= n`.
        let slot_free = a.granted || a.in_flight < f.n;
        let wait = if slot_free {
            0.0
        } else {
            a.ms.max(0.0) / 1000.0
        };
        let p = &policies[f.policy];
        let r = PolicyResult {
            name: p.name.clone(),
            key: f.key.clone(),
            capacity: f.n,
            rate: 0.0,
            cost: 1.0,
            allowed: slot_free,
            remaining: (f.n - a.in_flight).max(0.0),
            retry_after: wait,
            reset_after: wait,
            shadow: p.shadow,
            kind: p.kind,
        };
        results.insert(f.pos.min(results.len()), r);
    }
    Decision::from_results(results)
}

type RefundFuture<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

trait Refunder: Send + Sync {
    fn refund<'a>(&'a self, plan: &'a Plan) -> RefundFuture<'a>;
    /// SPEC F2: whether the handler's status asks for the refund.
    fn refund_on(&self, status: StatusCode) -> bool;
}

impl<S: Store> Refunder for Inner<S> {
    fn refund<'a>(&'a self, plan: &'a Plan) -> RefundFuture<'a> {
        Box::pin(Inner::refund(self, plan))
    }

    fn refund_on(&self, status: StatusCode) -> bool {
        self.refund_on.as_ref().is_some_and(|f| f(status))
    }
}

struct RefundState {
    limiter: Arc<dyn Refunder>,
    plan: Plan,
    done: AtomicBool,
}

/// Gives an admitted request's tokens back (SPEC F1): in the request extensions of every
/// request the limiter lets through. Clones share the state.
#[derive(Clone, Default)]
pub struct RefundHandle {
    state: Option<Arc<RefundState>>,
}

impl fmt::Debug for RefundHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefundHandle")
            .field("charged", &self.state.is_some())
            .finish()
    }
}

impl RefundHandle {
    fn new<S: Store>(limiter: Arc<Inner<S>>, plan: Plan) -> RefundHandle {
        RefundHandle {
            state: Some(Arc::new(RefundState {
                limiter,
                plan,
                done: AtomicBool::new(false),
            })),
        }
    }

    /// Sends TB.REFUND for every policy that charged the request, now, and returns true
    /// when every refund succeeded. Returns false and sends nothing when nothing was
    /// charged (limited, shadow-only refusal, from the cache, store error, not limited) or
    /// it was already refunded; a failed refund returns false and counts `refund_errors`.
    pub async fn refund(&self) -> bool {
        let Some(state) = &self.state else {
            return false;
        };
        if state.done.swap(true, Ordering::AcqRel) {
            return false;
        }
        state.limiter.refund(&state.plan).await
    }

    /// SPEC F2: the handler answered `status`; when the limiter's `refund_on` lists it, the
    /// tokens go back as with [`RefundHandle::refund`]. Returns whether a refund was made
    /// and succeeded; sends nothing for another status or when nothing was charged.
    pub async fn answered(&self, status: StatusCode) -> bool {
        match &self.state {
            Some(state) if state.limiter.refund_on(status) => self.refund().await,
            _ => false,
        }
    }

    /// Whether the request was charged (so a refund has something to give back).
    pub fn is_charged(&self) -> bool {
        self.state.is_some()
    }

    /// Whether a refund was already made or attempted.
    pub fn is_refunded(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.done.load(Ordering::Acquire))
    }
}
