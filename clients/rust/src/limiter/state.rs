//! What a built limiter holds: its policies and what is prepared once per policy, its
//! settings (SPEC C), store, breaker, deny cache, counters and clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use http::request::Parts;

use crate::breaker::{Breaker, LogLimiter};
use crate::client::TbClient;
use crate::clock::Clock;
use crate::deny_cache::DenyCache;
use crate::headers::{LegacyReset, PolicyHeader};
use crate::ip::ClientIpConfig;
use crate::keys::Head;
use crate::policy::{Limit, Policy, Route};
use crate::telemetry::{LimiterMetrics, PolicyMetrics};

use super::stats::Stats;
use super::store::Store;

pub(super) type TagFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

pub(super) type StatusFn = dyn Fn(StatusCode) -> bool + Send + Sync;

/// What a request gets when Redis cannot be asked (SPEC B4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// Let the request through unlimited (the default), no rate-limit headers.
    #[default]
    FailOpen,
    /// Answer 503 with `Retry-After: 1` and a problem body (SPEC P3).
    FailClosed,
}

/// The limiter (SPEC `RateLimiter`). Clones share configuration, store, caches and
/// [`Stats`].
pub struct RateLimiter<S: Store = TbClient> {
    pub(super) inner: Arc<Inner<S>>,
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

pub(super) struct Inner<S: Store> {
    pub(super) store: S,
    pub(super) policies: Vec<Policy>,
    pub(super) runtime: Vec<PolicyRuntime>,
    pub(super) telemetry: LimiterMetrics,
    pub(super) name: Arc<str>,
    pub(super) deny_cache: Option<DenyCache>,
    pub(super) drain_limit: usize,
    pub(super) drain_wait: Duration,
    pub(super) ip: ClientIpConfig,
    pub(super) needs_peer: bool,
    /// Whether a policy's key is an async function: only then is the plan's key step
    /// awaited (SPEC I1).
    pub(super) async_keys: bool,
    pub(super) hash_tag: Option<Arc<TagFn>>,
    pub(super) failure_mode: FailureMode,
    pub(super) legacy_headers: Option<LegacyReset>,
    pub(super) refund_on: Option<Arc<StatusFn>>,
    pub(super) limit_unmatched: bool,
    pub(super) exclude: Vec<Route>,
    pub(super) stats: Stats,
    pub(super) breaker: Breaker,
    pub(super) log: LogLimiter,
    /// `CROSSSLOT` answers (SPEC K6), logged at most once a second per limiter.
    pub(super) cross_slot_log: LogLimiter,
    pub(super) clock: Arc<dyn Clock>,
}

/// What the limiter prepares once per policy.
pub(super) struct PolicyRuntime {
    pub(super) metrics: PolicyMetrics,
    pub(super) shadow_log: LogLimiter,
    pub(super) invalid_log: LogLimiter,
    /// Lost leases (SPEC N5), logged at most once a second per policy.
    pub(super) lease_log: LogLimiter,
    /// Requests ended at `max_duration` (SPEC N7), likewise.
    pub(super) timeout_log: LogLimiter,
    /// Lost holds (SPEC G5), likewise.
    pub(super) hold_log: LogLimiter,
    pub(super) head: Head,
    /// The fixed limit with its capacity and rate as command arguments.
    pub(super) fixed: Option<(Limit, String, String)>,
    /// The fixed cost as an argument.
    pub(super) cost: Option<(f64, String)>,
    pub(super) header: PolicyHeader,
}
