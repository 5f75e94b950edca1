//! Prometheus-style metrics through the `metrics` facade crate: the layer records, the
//! application picks the exporter (`metrics-exporter-prometheus` in the example). Labels
//! are `limiter` (the layer's name) and `policy` only, never a client identity, so the
//! number of series stays bounded by configuration.
//!
//! Handles are registered when the layer is built: install the recorder (the exporter)
//! before building the layer, or the layer records into the no-op recorder.

use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Unit};

/// `redis_tb_allowed_total{limiter,policy}`: +1 per applied policy of a charged request.
pub const ALLOWED_TOTAL: &str = "redis_tb_allowed_total";
/// `redis_tb_limited_total{limiter,policy}`: +1 per enforced policy that refused a
/// request answered with 429 (by Redis or by the deny cache).
pub const LIMITED_TOTAL: &str = "redis_tb_limited_total";
/// `redis_tb_shadow_limited_total{limiter,policy}`: +1 per shadow policy that refused.
pub const SHADOW_LIMITED_TOTAL: &str = "redis_tb_shadow_limited_total";
/// `redis_tb_refunded_total{limiter,policy}`: +1 per policy whose tokens a refund gave back.
pub const REFUNDED_TOTAL: &str = "redis_tb_refunded_total";
/// `redis_tb_deny_cache_hits_total{limiter,policy}`: +1 per request the local deny cache
/// refused, for the policy whose cached refusal answered it.
pub const DENY_CACHE_HITS_TOTAL: &str = "redis_tb_deny_cache_hits_total";
/// `redis_tb_invalid_inputs_total{limiter,policy}`: +1 per out-of-range cost or limit
/// from the application (SPEC L3).
pub const INVALID_INPUTS_TOTAL: &str = "redis_tb_invalid_inputs_total";
/// `redis_tb_leases_in_flight{limiter,policy}`: leases this process holds now, per
/// in-flight policy (SPEC M2).
pub const LEASES_IN_FLIGHT: &str = "redis_tb_leases_in_flight";
/// `redis_tb_leases_expired_total{limiter,policy}`: leases that ended without a release
/// (SPEC M2).
pub const LEASES_EXPIRED_TOTAL: &str = "redis_tb_leases_expired_total";
/// `redis_tb_leases_timed_out_total{limiter,policy}`: requests ended at their in-flight
/// policy's `max_duration` (SPEC N7, M2).
pub const LEASES_TIMED_OUT_TOTAL: &str = "redis_tb_leases_timed_out_total";
/// `redis_tb_holds_lost_total{limiter,policy}`: holds whose renewal answered 0 (SPEC G5,
/// M2).
pub const HOLDS_LOST_TOTAL: &str = "redis_tb_holds_lost_total";
/// `redis_tb_store_errors_total{limiter}`: failed Redis calls (errors, timeouts).
pub const STORE_ERRORS_TOTAL: &str = "redis_tb_store_errors_total";
/// `redis_tb_degraded_total{limiter}`: requests decided by the failure mode.
pub const DEGRADED_TOTAL: &str = "redis_tb_degraded_total";
/// `redis_tb_backend{limiter,backend}`: 1 for the store's backend in use (`module` or
/// `scripts`), 0 for the other, from the moment it is chosen (SPEC E6).
pub const BACKEND: &str = "redis_tb_backend";
/// `redis_tb_redis_call_duration_seconds{limiter}`: each Redis call of the layer (the
/// check, TB.MTAKE or TB.TAKE for one policy, and refunds), failed and timed-out calls
/// included.
pub const REDIS_CALL_DURATION_SECONDS: &str = "redis_tb_redis_call_duration_seconds";

/// The histogram buckets of [`REDIS_CALL_DURATION_SECONDS`], in seconds. Histogram
/// buckets belong to the exporter: with `metrics-exporter-prometheus`, pass them with
/// `PrometheusBuilder::set_buckets_for_metric(Matcher::Full(REDIS_CALL_DURATION_SECONDS
/// .into()), &CALL_DURATION_BUCKETS)`.
pub const CALL_DURATION_BUCKETS: [f64; 9] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];

/// One policy's counters.
pub(crate) struct PolicyMetrics {
    pub(crate) allowed: Counter,
    pub(crate) limited: Counter,
    pub(crate) shadow_limited: Counter,
    pub(crate) refunded: Counter,
    pub(crate) deny_cache_hits: Counter,
    pub(crate) invalid_inputs: Counter,
    /// SPEC M2, for in-flight policies only.
    pub(crate) leases: Option<LeaseMetrics>,
    /// SPEC M2, for `settle_later` policies only.
    pub(crate) holds_lost: Option<Counter>,
}

/// An in-flight policy's series (SPEC M2).
pub(crate) struct LeaseMetrics {
    pub(crate) in_flight: Gauge,
    pub(crate) expired: Counter,
    pub(crate) timed_out: Counter,
}

/// The layer's own series.
pub(crate) struct LimiterMetrics {
    pub(crate) store_errors: Counter,
    pub(crate) degraded: Counter,
    pub(crate) call_duration: Histogram,
}

fn describe() {
    metrics::describe_counter!(
        ALLOWED_TOTAL,
        Unit::Count,
        "Applied policies of requests redis-tb admitted and charged"
    );
    metrics::describe_counter!(
        LIMITED_TOTAL,
        Unit::Count,
        "Enforced policies that refused a request (answered 429)"
    );
    metrics::describe_counter!(
        SHADOW_LIMITED_TOTAL,
        Unit::Count,
        "Shadow policies that would have refused a request"
    );
    metrics::describe_counter!(
        REFUNDED_TOTAL,
        Unit::Count,
        "Policies whose tokens a refund gave back"
    );
    metrics::describe_counter!(
        DENY_CACHE_HITS_TOTAL,
        Unit::Count,
        "Requests refused by the local deny cache without a Redis call"
    );
    metrics::describe_counter!(
        INVALID_INPUTS_TOTAL,
        Unit::Count,
        "Out-of-range costs or limits from the application (answered 500)"
    );
    metrics::describe_counter!(
        STORE_ERRORS_TOTAL,
        Unit::Count,
        "Failed Redis calls of the rate limiter (errors, timeouts)"
    );
    metrics::describe_counter!(
        DEGRADED_TOTAL,
        Unit::Count,
        "Requests decided by the rate limiter's failure mode"
    );
    metrics::describe_histogram!(
        REDIS_CALL_DURATION_SECONDS,
        Unit::Seconds,
        "Duration of the rate limiter's Redis calls (TB.MTAKE, refunds)"
    );
}

/// SPEC E6: the gauge [`BACKEND`] of `limiter` set to `backend` (`module` or `scripts`).
pub(crate) fn backend_chosen(limiter: &str, backend: &'static str) {
    metrics::describe_gauge!(
        BACKEND,
        Unit::Count,
        "The store's backend in use: 1 for it (module or scripts, SPEC E6)"
    );
    for b in ["module", "scripts"] {
        let v = if b == backend { 1.0 } else { 0.0 };
        metrics::gauge!(BACKEND, "limiter" => limiter.to_owned(), "backend" => b).set(v);
    }
}

impl LimiterMetrics {
    pub(crate) fn register(limiter: &Arc<str>) -> LimiterMetrics {
        describe();
        let l = limiter.to_string();
        LimiterMetrics {
            store_errors: metrics::counter!(STORE_ERRORS_TOTAL, "limiter" => l.clone()),
            degraded: metrics::counter!(DEGRADED_TOTAL, "limiter" => l.clone()),
            call_duration: metrics::histogram!(REDIS_CALL_DURATION_SECONDS, "limiter" => l),
        }
    }
}

impl PolicyMetrics {
    /// Adds SPEC M2's gauge and counter (an in-flight policy).
    pub(crate) fn with_leases(mut self, limiter: &Arc<str>, policy: &str) -> PolicyMetrics {
        metrics::describe_gauge!(
            LEASES_IN_FLIGHT,
            Unit::Count,
            "Leases of in-flight policies this process holds now"
        );
        metrics::describe_counter!(
            LEASES_EXPIRED_TOTAL,
            Unit::Count,
            "Leases that ended without a release (a release or renewal answered 0)"
        );
        metrics::describe_counter!(
            LEASES_TIMED_OUT_TOTAL,
            Unit::Count,
            "Requests ended at their in-flight policy's max_duration (lease released, response ended)"
        );
        self.leases = Some(LeaseMetrics {
            in_flight: metrics::gauge!(LEASES_IN_FLIGHT, "limiter" => limiter.to_string(), "policy" => policy.to_owned()),
            expired: metrics::counter!(LEASES_EXPIRED_TOTAL, "limiter" => limiter.to_string(), "policy" => policy.to_owned()),
            timed_out: metrics::counter!(LEASES_TIMED_OUT_TOTAL, "limiter" => limiter.to_string(), "policy" => policy.to_owned()),
        });
        self
    }

    /// Adds SPEC M2's lost-holds counter (a `settle_later` policy).
    pub(crate) fn with_holds(mut self, limiter: &Arc<str>, policy: &str) -> PolicyMetrics {
        metrics::describe_counter!(
            HOLDS_LOST_TOTAL,
            Unit::Count,
            "Holds whose renewal answered 0 (lost before their settle)"
        );
        self.holds_lost = Some(
            metrics::counter!(HOLDS_LOST_TOTAL, "limiter" => limiter.to_string(), "policy" => policy.to_owned()),
        );
        self
    }

    pub(crate) fn register(limiter: &Arc<str>, policy: &str) -> PolicyMetrics {
        let counter = |name: &'static str| metrics::counter!(name, "limiter" => limiter.to_string(), "policy" => policy.to_owned());
        PolicyMetrics {
            allowed: counter(ALLOWED_TOTAL),
            limited: counter(LIMITED_TOTAL),
            shadow_limited: counter(SHADOW_LIMITED_TOTAL),
            refunded: counter(REFUNDED_TOTAL),
            deny_cache_hits: counter(DENY_CACHE_HITS_TOTAL),
            invalid_inputs: counter(INVALID_INPUTS_TOTAL),
            leases: None,
            holds_lost: None,
        }
    }
}
