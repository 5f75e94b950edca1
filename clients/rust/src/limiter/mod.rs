//! The framework-neutral limiter (SPEC L, D, R, B, F, S, T): for one request head, the
//! applicable policies, their keys (one key builder, SPEC K), the deny cache, the breaker,
//! one TB.TAKE or TB.MTAKE through a [`Store`], and the [`Check`] an adapter turns into a
//! response (the tower layer in [`crate::tower`]). Time comes from the limiter's
//! [`Clock`](crate::Clock).
//!
//! One module per part of the SPEC, each importing only those listed before it:
//! [`store`] (the seam to Redis, one check's call), [`stats`], [`state`] (what a built
//! limiter holds), [`builder`] (C), [`plan`] (L1-L4), [`decide`] (D), [`deny`] (R),
//! [`guarded`] (B), [`refund`] (F), [`check`] (one check's story), and the startup check
//! on a cluster ([`cluster`], U3, K6) and the store of leases and holds ([`stores`], N, G).
//! This file holds none of their code: the limiter's public methods and the re-exports.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use http::StatusCode;
use http::request::Parts;

use crate::deny_cache::DenyCache;

mod builder;
mod check;
mod cluster;
mod decide;
mod deny;
mod guarded;
mod plan;
mod refund;
mod state;
mod stats;
mod store;
mod stores;

pub use builder::{FromLimiter, MAX_POLICIES, RateLimiterBuilder};
pub use check::Check;
pub(crate) use check::write_problem_headers;
pub use refund::RefundHandle;
pub use state::{FailureMode, RateLimiter};
#[allow(deprecated)]
pub use stats::Metrics;
pub use stats::Stats;
pub use store::{Call, CallKind, Store};

impl<S: Store> RateLimiter<S> {
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
