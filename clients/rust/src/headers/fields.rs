//! SPEC H2, H3: the numbers of the headers (`q`, `w`, `r`, `t`, `Retry-After`), capped at
//! the structured-field maximum, and the names of the standard fields.

use http::HeaderName;
use sfv::KeyRef;

/// Largest integer a structured field may carry.
pub const SF_INTEGER_MAX: i64 = 999_999_999_999_999;

pub(super) const Q: &KeyRef = KeyRef::constant("q");
pub(super) const W: &KeyRef = KeyRef::constant("w");
pub(super) const R: &KeyRef = KeyRef::constant("r");
pub(super) const T: &KeyRef = KeyRef::constant("t");

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `q`: the quota a client may use at once.
pub fn quota(capacity: f64) -> i64 {
    to_sf_int(capacity.floor()).max(0)
}

/// `w`: seconds in which the full quota is replenished, at least 1.
pub fn window(capacity: f64, rate: f64) -> i64 {
    let w = capacity / rate;
    let nearest = w.round();
    let w = if (w - nearest).abs() <= 1e-9 * w.max(1.0) {
        nearest
    } else {
        w.ceil()
    };
    to_sf_int(w).max(1)
}

/// `r`: whole tokens left, never negative.
pub fn remaining(remaining: f64) -> i64 {
    to_sf_int(remaining.floor()).max(0)
}

/// `t`: whole seconds until the full quota is back; 0 when full.
pub fn reset(reset_after: f64) -> i64 {
    to_sf_int(reset_after.ceil()).max(0)
}

/// `Retry-After` seconds for a refusal's `retry_after`: at least 1, rounded up; `None` when
/// no wait helps (`-1`) or the value is not a number.
pub fn retry_after(retry_after: f64) -> Option<u64> {
    if retry_after >= 0.0 {
        // ceil keeps the client from coming back early; capped like the other integers.
        Some((to_sf_int(retry_after.ceil()).max(1)) as u64)
    } else {
        None
    }
}

pub(super) fn to_sf_int(x: f64) -> i64 {
    if x.is_nan() {
        0
    } else if x >= SF_INTEGER_MAX as f64 {
        SF_INTEGER_MAX
    } else if x <= -(SF_INTEGER_MAX as f64) {
        -SF_INTEGER_MAX
    } else {
        x as i64
    }
}
