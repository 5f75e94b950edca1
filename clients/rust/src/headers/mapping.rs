//! SPEC H1-H4: a [`Decision`] becomes the headers' values, and the values a response's
//! headers.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use sfv::{Integer, ListSerializer, StringRef};

use super::fields::{
    Q, R, RATELIMIT, RATELIMIT_POLICY, T, W, quota, remaining, reset, retry_after, window,
};
use super::legacy::{
    LegacyHeaders, LegacyReset, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
    unix_reset,
};
use crate::clock::unix_now;
use crate::decision::{Decision, Outcome};
use crate::policy::LimitKind;

/// The header values for one decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimitHeaders {
    /// `RateLimit-Policy`, e.g. `"perhour";q=1000;w=3600, "persec";q=10;w=1`.
    pub policy: String,
    /// `RateLimit`, e.g. `"perhour";r=42;t=18, "persec";r=9;t=1`.
    pub rate_limit: String,
    /// Legacy headers, when switched on.
    pub legacy: Option<LegacyHeaders>,
    /// `Retry-After` on a refusal that a wait can cure.
    pub retry_after: Option<u64>,
}

/// The headers for `decision`; `None` when it has no enforced policy result (a store
/// error, no policy applied to the request, or only shadow policies): then no rate-limit
/// header is sent. Shadow policies are left out of every header: a client must not slow
/// down for a limit that is not enforced. `legacy`: also `X-RateLimit-*`.
pub fn rate_limit_headers(
    decision: &Decision,
    legacy: Option<LegacyReset>,
) -> Option<RateLimitHeaders> {
    let now = match legacy {
        Some(LegacyReset::UnixTime) => unix_now(),
        _ => 0.0,
    };
    rate_limit_headers_at(decision, legacy, now)
}

/// [`rate_limit_headers`] with the wall clock given (`now_unix`, seconds since the epoch),
/// for `LegacyReset::UnixTime`.
pub fn rate_limit_headers_at(
    decision: &Decision,
    legacy: Option<LegacyReset>,
    now_unix: f64,
) -> Option<RateLimitHeaders> {
    let mut policy = ListSerializer::new();
    let mut rate_limit = ListSerializer::new();
    let mut lowest: Option<&crate::decision::PolicyResult> = None;
    let mut any = false;
    for p in decision.results.iter().filter(|p| !p.shadow) {
        // Names are validated tokens when the layer is built; a name that is not a valid
        // sf-string still never reaches the wire.
        let Ok(name) = StringRef::from_str(&p.name) else {
            continue;
        };
        let w = if matches!(p.kind, LimitKind::InFlight { .. }) {
            1
        } else {
            window(p.capacity, p.rate)
        };
        let (Ok(q), Ok(w), Ok(r), Ok(t)) = (
            Integer::try_from(quota(p.capacity)),
            Integer::try_from(w),
            Integer::try_from(remaining(p.remaining)),
            Integer::try_from(reset(p.reset_after)),
        ) else {
            continue;
        };
        any = true;
        if matches!(p.kind, LimitKind::InFlight { .. }) {
            // SPEC N3: an in-flight item has no `w` (there is no window).
            policy.bare_item(name).parameter(Q, q);
        } else {
            policy.bare_item(name).parameter(Q, q).parameter(W, w);
        }
        rate_limit.bare_item(name).parameter(R, r).parameter(T, t);
        if lowest.is_none_or(|l| p.remaining < l.remaining) {
            lowest = Some(p);
        }
    }
    if !any {
        return None;
    }
    let legacy = legacy.and_then(|mode| {
        lowest.map(|p| LegacyHeaders {
            limit: quota(p.capacity),
            remaining: remaining(p.remaining),
            reset: match mode {
                LegacyReset::UnixTime => unix_reset(now_unix, p.reset_after),
                LegacyReset::DeltaSeconds => reset(p.reset_after),
            },
        })
    });
    let retry = if decision.outcome == Outcome::Limited {
        decision.retry_after.and_then(retry_after)
    } else {
        None
    };
    Some(RateLimitHeaders {
        policy: policy.finish()?,
        rate_limit: rate_limit.finish()?,
        legacy,
        retry_after: retry,
    })
}

impl RateLimitHeaders {
    /// Moves the headers into `map` (replacing any the handler set), without copying the
    /// serialized fields.
    pub fn apply_owned(self, map: &mut HeaderMap) {
        if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(self.policy)) {
            map.insert(RATELIMIT_POLICY.clone(), v);
        }
        if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(self.rate_limit)) {
            map.insert(RATELIMIT.clone(), v);
        }
        Self::apply_rest(self.legacy, self.retry_after, map);
    }

    /// Writes the headers into `map` (replacing any the handler set).
    pub fn apply(&self, map: &mut HeaderMap) {
        // Serializer output is visible ASCII, so these conversions do not fail; if one
        // did, the header would be left out rather than the response broken.
        if let Ok(v) = HeaderValue::from_str(&self.policy) {
            map.insert(RATELIMIT_POLICY.clone(), v);
        }
        if let Ok(v) = HeaderValue::from_str(&self.rate_limit) {
            map.insert(RATELIMIT.clone(), v);
        }
        Self::apply_rest(self.legacy, self.retry_after, map);
    }

    fn apply_rest(legacy: Option<LegacyHeaders>, retry_after: Option<u64>, map: &mut HeaderMap) {
        if let Some(l) = legacy {
            map.insert(X_RATELIMIT_LIMIT.clone(), HeaderValue::from(l.limit));
            map.insert(
                X_RATELIMIT_REMAINING.clone(),
                HeaderValue::from(l.remaining),
            );
            map.insert(X_RATELIMIT_RESET.clone(), HeaderValue::from(l.reset));
        }
        if let Some(s) = retry_after {
            map.insert(http::header::RETRY_AFTER, HeaderValue::from(s));
        }
    }
}
