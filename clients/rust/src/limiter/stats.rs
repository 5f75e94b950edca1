//! The counters of one limiter (SPEC "Names": `stats`), shared by its clones.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::client::Backend;

/// Counters of one limiter (SPEC "Names": `stats`), shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Stats(pub(super) Arc<Counters>);

/// The old name of [`Stats`].
#[deprecated(note = "renamed Stats (SPEC names: `stats`)")]
pub type Metrics = Stats;

#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) checks: AtomicU64,
    pub(super) allowed: AtomicU64,
    pub(super) limited: AtomicU64,
    pub(super) shadow_limited: AtomicU64,
    pub(super) store_errors: AtomicU64,
    pub(super) degraded: AtomicU64,
    pub(super) deny_cache_hits: AtomicU64,
    pub(super) refunds: AtomicU64,
    pub(super) refund_errors: AtomicU64,
    pub(super) invalid_inputs: AtomicU64,
    pub(super) leases_in_flight: AtomicU64,
    pub(super) leases_expired: AtomicU64,
    pub(super) leases_timed_out: AtomicU64,
    pub(super) holds: AtomicU64,
    pub(super) holds_lost: AtomicU64,
    pub(super) settlements: AtomicU64,
    /// SPEC E6: 0 until the backend is chosen, then 1 (the module) or 2 (the scripts).
    pub(super) backend: AtomicU8,
}

pub(super) fn bump(c: &AtomicU64) -> u64 {
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
    /// SPEC E6: the store's backend, `None` until it is chosen (a degraded start chooses
    /// before its first call that reaches Redis).
    pub fn backend(&self) -> Option<Backend> {
        match self.0.backend.load(Ordering::Relaxed) {
            1 => Some(Backend::Module),
            2 => Some(Backend::Scripts),
            _ => None,
        }
    }
    /// Holds settled (SPEC G3, M2).
    pub fn settlements(&self) -> u64 {
        self.0.settlements.load(Ordering::Relaxed)
    }
}
