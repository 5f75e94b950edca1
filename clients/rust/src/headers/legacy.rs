//! SPEC H4: the legacy `X-RateLimit-*` headers (off by default), for the enforced policy
//! with the smallest remaining.

use http::HeaderName;

use super::fields::to_sf_int;

/// `X-RateLimit-Limit` (legacy).
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy: a Unix time, or delta seconds; see [`LegacyReset`]).
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// What `X-RateLimit-Reset` carries when the legacy headers are on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LegacyReset {
    /// A Unix timestamp in whole seconds, `ceil(now + reset_after)` on the app server's
    /// wall clock: what GitHub sends and most clients of `X-RateLimit-*` expect. The default.
    #[default]
    UnixTime,
    /// Seconds from now, the same number as `t` in `RateLimit`.
    DeltaSeconds,
}

/// Legacy `X-RateLimit-*` values, for the enforced policy with the smallest remaining
/// (ties: the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegacyHeaders {
    /// `X-RateLimit-Limit` = q.
    pub limit: i64,
    /// `X-RateLimit-Remaining` = r.
    pub remaining: i64,
    /// `X-RateLimit-Reset`: a Unix time or t, as [`LegacyReset`] says.
    pub reset: i64,
}

/// `X-RateLimit-Reset` as a Unix time: `ceil(now_unix + reset_after)`.
pub fn unix_reset(now_unix: f64, reset_after: f64) -> i64 {
    to_sf_int((now_unix + reset_after.max(0.0)).ceil()).max(0)
}
