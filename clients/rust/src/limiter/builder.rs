//! Building a limiter (SPEC C): the settings, each checked with a message naming the
//! setting and the value, and what is prepared once per policy.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::{Method, StatusCode};

use crate::breaker::{Breaker, LogLimiter};
use crate::client::{TbClient, num};
use crate::clock::{Clock, SystemClock};
use crate::deny_cache::DenyCache;
use crate::error::BuildError;
use crate::headers::{LegacyReset, PolicyHeader};
use crate::ip::{ClientIpConfig, ForwardedHeader};
use crate::keys::{self, Head};
use crate::policy::limit::valid_cost;
use crate::policy::{LimitKind, Policy, Route, check_limit, valid_name};
use crate::telemetry::{LimiterMetrics, PolicyMetrics};

use super::state::{FailureMode, Inner, PolicyRuntime, RateLimiter, StatusFn, TagFn};
use super::stats::Stats;
use super::store::Store;

/// SPEC C11: the most policies one limiter holds (the module's bound on the buckets of one
/// TB.MTAKE or TB.ACQUIRE ... TAKE).
pub const MAX_POLICIES: usize = 64;

/// How much of an unread request body an adapter reads before answering itself.
pub(super) const DRAIN_LIMIT: usize = 64 * 1024;

pub(super) const DRAIN_WAIT: Duration = Duration::from_secs(1);

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

impl<S: Store> RateLimiter<S> {
    /// Starts a builder over a store (a connected [`TbClient`]).
    pub fn builder(store: S) -> RateLimiterBuilder<S, RateLimiter<S>> {
        RateLimiterBuilder::new(store)
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
