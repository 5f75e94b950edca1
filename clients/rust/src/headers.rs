//! The header mapping: a [`Decision`] becomes IETF httpapi ratelimit-headers (draft -10/-11:
//! `RateLimit-Policy` and `RateLimit`, one list item per policy, written with the `sfv`
//! structured-field serializer), optional legacy `X-RateLimit-*`, and `Retry-After`.
//!
//! | field | value | why |
//! |---|---|---|
//! | `q` | `floor(capacity)` | the burst: what a client may use at once |
//! | `w` | `ceil(capacity / rate)`, at least 1 | seconds to refill the whole quota: the policy's window |
//! | `r` | `max(0, floor(remaining))` | whole requests left now (a reservation's debt shows as 0) |
//! | `t` | `ceil(reset_after)`, 0 when full | seconds until the full quota is back |
//! | `Retry-After` | `max(1, ceil(retry_after))` | whole seconds, never earlier than the bucket allows |
//!
//! `w` snaps to the nearest whole second when `capacity / rate` is within 1e-9 of it:
//! `per_minute(11)` has rate 11/60 and 11 / (11/60) is 60.00000000000001 in floating point,
//! which is a 60 s window, not 61. `t` and `Retry-After` are never snapped (rounding down
//! would send clients back too early). Integers are capped at the structured-field maximum,
//! 999,999,999,999,999.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use sfv::{Integer, ItemSerializer, KeyRef, ListSerializer, StringRef};

use crate::decision::{Decision, Outcome, PolicyResult};
use crate::policy::{Limit, LimitKind};

/// Largest integer a structured field may carry.
pub const SF_INTEGER_MAX: i64 = 999_999_999_999_999;

const Q: &KeyRef = KeyRef::constant("q");
const W: &KeyRef = KeyRef::constant("w");
const R: &KeyRef = KeyRef::constant("r");
const T: &KeyRef = KeyRef::constant("t");

/// `RateLimit-Policy`.
pub static RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub static RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit` (legacy).
pub static X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining` (legacy).
pub static X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset` (legacy: a Unix time, or delta seconds; see [`LegacyReset`]).
pub static X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

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

fn to_sf_int(x: f64) -> i64 {
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

/// Seconds since the Unix epoch on this machine's wall clock (0 if it is before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

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

/// One policy's header pieces, serialized once when the layer is built: its name as an
/// sf-string, and its whole `RateLimit-Policy` item for its fixed limit (a per-request
/// limit is serialized per request).
#[derive(Clone, Debug)]
pub(crate) struct PolicyHeader {
    name: sfv::String,
    fixed: Option<(f64, f64, String)>,
}

impl PolicyHeader {
    /// `None` when the name is not a valid sf-string (never for a validated policy name).
    pub(crate) fn new(name: &str, fixed: Option<Limit>) -> Option<PolicyHeader> {
        let mut header = PolicyHeader {
            name: sfv::String::from_string(name.to_owned()).ok()?,
            fixed: None,
        };
        if let Some(l) = fixed
            .filter(|l| l.kind == LimitKind::Bucket || matches!(l.kind, LimitKind::Window { .. }))
        {
            let mut item = String::new();
            header.policy_item(l.capacity, l.rate, &mut item)?;
            header.fixed = Some((l.capacity, l.rate, item));
        }
        Some(header)
    }

    /// Appends `"name";q=..;w=..` (from the cache when the limit is the fixed one).
    fn policy_item(&self, capacity: f64, rate: f64, out: &mut String) -> Option<()> {
        if let Some((c, r, item)) = &self.fixed
            && *c == capacity
            && *r == rate
        {
            out.push_str(item);
            return Some(());
        }
        let q = Integer::try_from(quota(capacity)).ok()?;
        let w = Integer::try_from(window(capacity, rate)).ok()?;
        let _ = ItemSerializer::with_buffer(out)
            .bare_item(&*self.name)
            .parameter(Q, q)
            .parameter(W, w)
            .finish();
        Some(())
    }
}

/// The layer's headers for a decision from Redis: [`rate_limit_headers_at`] with the
/// policies' pieces serialized once (`items[j]` belongs to `decision.policies[j]`).
pub(crate) fn layer_headers<'h>(
    decision: &Decision,
    items: impl IntoIterator<Item = &'h PolicyHeader>,
    legacy: Option<LegacyReset>,
    now_unix: f64,
) -> Option<RateLimitHeaders> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut s) => {
            let (policy, rate_limit) = &mut *s;
            policy.clear();
            rate_limit.clear();
            serialize_layer_headers(decision, items, legacy, now_unix, policy, rate_limit)
        }
        // Not reentrant in practice; a nested call gets buffers of its own.
        Err(_) => serialize_layer_headers(
            decision,
            items,
            legacy,
            now_unix,
            &mut String::new(),
            &mut String::new(),
        ),
    })
}

thread_local! {
    /// The serializer's buffers, kept per thread: the values are then copied once into
    /// strings of their exact length, which become header values without another
    /// allocation (`Bytes::from` a string with spare capacity allocates a control block).
    static SCRATCH: std::cell::RefCell<(String, String)> =
        const { std::cell::RefCell::new((String::new(), String::new())) };
}

fn serialize_layer_headers<'h>(
    decision: &Decision,
    items: impl IntoIterator<Item = &'h PolicyHeader>,
    legacy: Option<LegacyReset>,
    now_unix: f64,
    policy: &mut String,
    rate_limit: &mut String,
) -> Option<RateLimitHeaders> {
    let mut lowest: Option<&PolicyResult> = None;
    for (p, h) in decision.results.iter().zip(items) {
        if p.shadow {
            continue;
        }
        let (Ok(r), Ok(t)) = (
            Integer::try_from(remaining(p.remaining)),
            Integer::try_from(reset(p.reset_after)),
        ) else {
            continue;
        };
        let mark = policy.len();
        if !policy.is_empty() {
            policy.push_str(", ");
        }
        if matches!(p.kind, LimitKind::InFlight { .. }) {
            // SPEC N3: `"name";q=<n>`, no `w`.
            let Ok(q) = Integer::try_from(quota(p.capacity)) else {
                policy.truncate(mark);
                continue;
            };
            let _ = ItemSerializer::with_buffer(&mut *policy)
                .bare_item(&*h.name)
                .parameter(Q, q)
                .finish();
        } else if h.policy_item(p.capacity, p.rate, policy).is_none() {
            policy.truncate(mark);
            continue;
        }
        if !rate_limit.is_empty() {
            rate_limit.push_str(", ");
        }
        let _ = ItemSerializer::with_buffer(&mut *rate_limit)
            .bare_item(&*h.name)
            .parameter(R, r)
            .parameter(T, t)
            .finish();
        if lowest.is_none_or(|l| p.remaining < l.remaining) {
            lowest = Some(p);
        }
    }
    let lowest = lowest?;
    let legacy = legacy.map(|mode| LegacyHeaders {
        limit: quota(lowest.capacity),
        remaining: remaining(lowest.remaining),
        reset: match mode {
            LegacyReset::UnixTime => unix_reset(now_unix, lowest.reset_after),
            LegacyReset::DeltaSeconds => reset(lowest.reset_after),
        },
    });
    let retry = if decision.outcome == Outcome::Limited {
        decision.retry_after.and_then(retry_after)
    } else {
        None
    };
    Some(RateLimitHeaders {
        policy: policy.as_str().to_owned(),
        rate_limit: rate_limit.as_str().to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::PolicyResult;
    use sfv::{BareItem, List, ListEntry, Parser};
    use std::sync::Arc;

    fn result(
        name: &str,
        capacity: f64,
        rate: f64,
        remaining: f64,
        retry: f64,
        reset: f64,
    ) -> PolicyResult {
        PolicyResult {
            name: Arc::from(name),
            key: format!("rl:{name}:1.2.3.4"),
            capacity,
            rate,
            cost: 1.0,
            allowed: retry == 0.0,
            remaining,
            retry_after: retry,
            reset_after: reset,
            shadow: false,
            kind: LimitKind::Bucket,
        }
    }

    fn decision(status: Outcome, retry_after: f64, results: Vec<PolicyResult>) -> Decision {
        let mut d = Decision::from_results(results);
        d.outcome = status;
        d.allowed = status == Outcome::Allowed;
        d.retry_after = (status == Outcome::Limited && retry_after >= 0.0).then_some(retry_after);
        d
    }

    /// Parses a header back with sfv's parser: (name, [(param, integer)]) per item.
    fn parse(field: &str) -> Vec<(String, Vec<(String, i64)>)> {
        let list: List = Parser::new(field).parse().unwrap();
        list.iter()
            .map(|entry| match entry {
                ListEntry::Item(item) => {
                    let name = match &item.bare_item {
                        BareItem::String(s) => s.as_str().to_owned(),
                        other => panic!("expected a string item, got {other:?}"),
                    };
                    let params = item
                        .params
                        .iter()
                        .map(|(k, v)| match v {
                            BareItem::Integer(i) => (k.as_str().to_owned(), i64::from(*i)),
                            other => panic!("expected an integer, got {other:?}"),
                        })
                        .collect();
                    (name, params)
                }
                ListEntry::InnerList(_) => panic!("unexpected inner list in {field}"),
            })
            .collect()
    }

    fn p(k: &str, v: i64) -> (String, i64) {
        (k.to_owned(), v)
    }

    #[test]
    fn fractional_remaining_is_floored() {
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![result("persec", 10.0, 10.0, 8.7, 0.0, 0.13)],
        );
        let h = rate_limit_headers(&d, None).unwrap();
        assert_eq!(h.rate_limit, r#""persec";r=8;t=1"#);
        assert_eq!(
            parse(&h.rate_limit),
            vec![("persec".into(), vec![p("r", 8), p("t", 1)])]
        );
        assert_eq!(h.retry_after, None);
    }

    #[test]
    fn cost_above_capacity_is_never_no_retry_after() {
        let mut r = result("perhour", 5.0, 5.0 / 3600.0, 5.0, -1.0, 0.0);
        r.cost = 6.0;
        let d = decision(Outcome::Limited, -1.0, vec![r]);
        assert!(d.never());
        let h = rate_limit_headers(&d, None).unwrap();
        assert_eq!(h.retry_after, None);
        assert_eq!(h.policy, r#""perhour";q=5;w=3600"#);
        assert_eq!(h.rate_limit, r#""perhour";r=5;t=0"#);
    }

    #[test]
    fn full_bucket_has_reset_zero() {
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![result("perip", 100.0, 1.0, 100.0, 0.0, 0.0)],
        );
        let h = rate_limit_headers(&d, Some(LegacyReset::DeltaSeconds)).unwrap();
        assert_eq!(h.rate_limit, r#""perip";r=100;t=0"#);
        assert_eq!(h.policy, r#""perip";q=100;w=100"#);
        assert_eq!(
            h.legacy,
            Some(LegacyHeaders {
                limit: 100,
                remaining: 100,
                reset: 0
            })
        );
    }

    #[test]
    fn reset_after_zero_and_tiny_reset_round_up() {
        assert_eq!(reset(0.0), 0);
        assert_eq!(reset(1e-6), 1);
        assert_eq!(reset(-0.0), 0);
        assert_eq!(reset(1200.000001), 1201);
    }

    #[test]
    fn sub_second_retry_after_is_one() {
        assert_eq!(retry_after(0.2), Some(1));
        assert_eq!(retry_after(0.000001), Some(1));
        assert_eq!(retry_after(0.0), Some(1));
        assert_eq!(retry_after(1.0), Some(1));
        assert_eq!(retry_after(1.000001), Some(2));
        assert_eq!(retry_after(-1.0), None);
        assert_eq!(retry_after(f64::NAN), None);
        assert_eq!(retry_after(1e300), Some(SF_INTEGER_MAX as u64));
        let d = decision(
            Outcome::Limited,
            0.25,
            vec![result("persec", 2.0, 4.0, 0.0, 0.25, 0.5)],
        );
        assert_eq!(rate_limit_headers(&d, None).unwrap().retry_after, Some(1));
    }

    #[test]
    fn several_policies_one_item_each_in_order() {
        let d = decision(
            Outcome::Limited,
            18.2,
            vec![
                result("perhour", 1000.0, 1000.0 / 3600.0, 42.4, 0.0, 17.5),
                result("persec", 10.0, 10.0, 0.0, 0.05, 0.95),
                result("orders", 3.0, 3.0 / 60.0, 0.0, 18.2, 60.0),
            ],
        );
        let h = rate_limit_headers(&d, Some(LegacyReset::DeltaSeconds)).unwrap();
        assert_eq!(
            h.policy,
            r#""perhour";q=1000;w=3600, "persec";q=10;w=1, "orders";q=3;w=60"#
        );
        assert_eq!(
            h.rate_limit,
            r#""perhour";r=42;t=18, "persec";r=0;t=1, "orders";r=0;t=60"#
        );
        assert_eq!(
            parse(&h.policy),
            vec![
                ("perhour".into(), vec![p("q", 1000), p("w", 3600)]),
                ("persec".into(), vec![p("q", 10), p("w", 1)]),
                ("orders".into(), vec![p("q", 3), p("w", 60)]),
            ]
        );
        assert_eq!(parse(&h.rate_limit).len(), 3);
        assert_eq!(h.retry_after, Some(19));
        // Legacy: the smallest remaining, the first of equals.
        assert_eq!(
            h.legacy,
            Some(LegacyHeaders {
                limit: 10,
                remaining: 0,
                reset: 1
            })
        );
        assert_eq!(
            d.violated,
            vec![Arc::<str>::from("persec"), Arc::from("orders")]
        );
    }

    #[test]
    fn negative_remaining_after_a_reservation_shows_zero() {
        assert_eq!(remaining(-2.5), 0);
        assert_eq!(remaining(0.999), 0);
    }

    #[test]
    fn window_snaps_float_noise_but_rounds_real_fractions_up() {
        for n in 1..=20_000u32 {
            let n = f64::from(n);
            assert_eq!(window(n, n / 60.0), 60, "per_minute({n})");
            assert_eq!(window(n, n / 3600.0), 3600, "per_hour({n})");
            assert_eq!(window(n, n / 86400.0), 86400, "per_day({n})");
            assert_eq!(window(n, n), 1, "per_second({n})");
        }
        assert_eq!(window(10.0, 3.0), 4);
        assert_eq!(window(1.0, 1000.0), 1);
        assert_eq!(window(2.5, 1.0), 3);
    }

    #[test]
    fn huge_values_are_capped_at_the_structured_field_maximum() {
        let max = crate::client::MAX_NUMBER;
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![result(
                "big",
                max,
                crate::client::MIN_RATE,
                max - 1.0,
                0.0,
                1e20,
            )],
        );
        let h = rate_limit_headers(&d, None).unwrap();
        let parsed = parse(&h.policy);
        assert_eq!(
            parsed[0].1,
            vec![p("q", SF_INTEGER_MAX), p("w", SF_INTEGER_MAX)]
        );
        assert_eq!(
            parse(&h.rate_limit)[0].1,
            vec![p("r", SF_INTEGER_MAX), p("t", SF_INTEGER_MAX)]
        );
        assert_eq!(quota(f64::NAN), 0);
        assert_eq!(quota(0.5), 0);
    }

    #[test]
    fn store_error_sends_no_headers() {
        assert_eq!(
            rate_limit_headers(&Decision::store_error(true), Some(LegacyReset::UnixTime)),
            None
        );
    }

    #[test]
    fn headers_are_written_into_a_map() {
        let d = decision(
            Outcome::Limited,
            2.5,
            vec![result("persec", 1.0, 0.5, 0.0, 2.5, 2.5)],
        );
        let mut map = HeaderMap::new();
        rate_limit_headers(&d, Some(LegacyReset::DeltaSeconds))
            .unwrap()
            .apply(&mut map);
        assert_eq!(map["ratelimit-policy"], r#""persec";q=1;w=2"#);
        assert_eq!(map["ratelimit"], r#""persec";r=0;t=3"#);
        assert_eq!(map["retry-after"], "3");
        assert_eq!(map["x-ratelimit-limit"], "1");
        assert_eq!(map["x-ratelimit-remaining"], "0");
        assert_eq!(map["x-ratelimit-reset"], "3");
    }

    #[test]
    fn legacy_reset_is_a_unix_time_by_default_or_delta_seconds() {
        assert_eq!(LegacyReset::default(), LegacyReset::UnixTime);
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![
                result("a", 10.0, 1.0, 7.0, 0.0, 3.0),
                result("b", 100.0, 1.0, 2.5, 0.0, 97.5),
            ],
        );
        let now = 1_764_460_000.25;
        let unix = rate_limit_headers_at(&d, Some(LegacyReset::UnixTime), now).unwrap();
        // The policy with the smallest remaining: b. ceil(now + 97.5).
        assert_eq!(
            unix.legacy,
            Some(LegacyHeaders {
                limit: 100,
                remaining: 2,
                reset: 1_764_460_098
            })
        );
        let delta = rate_limit_headers_at(&d, Some(LegacyReset::DeltaSeconds), now).unwrap();
        assert_eq!(delta.legacy.map(|l| l.reset), Some(98));
        assert_eq!(rate_limit_headers_at(&d, None, now).unwrap().legacy, None);
        // A full bucket resets now.
        assert_eq!(unix_reset(now, 0.0), 1_764_460_001);
        assert_eq!(unix_reset(1000.0, 0.0), 1000);
        let wall = unix_now();
        assert!(wall > 1.7e9, "{wall}");
    }

    #[test]
    fn shadow_policies_have_no_header_items() {
        let mut shadow = result("user", 5.0, 5.0, 0.0, 4.0, 1.0);
        shadow.shadow = true;
        shadow.allowed = false;
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![result("ip", 10.0, 10.0, 9.0, 0.0, 0.1), shadow.clone()],
        );
        let h = rate_limit_headers(&d, Some(LegacyReset::DeltaSeconds)).unwrap();
        assert_eq!(h.policy, r#""ip";q=10;w=1"#);
        assert_eq!(h.rate_limit, r#""ip";r=9;t=1"#);
        // Legacy headers describe the enforced policy even though the shadow one has less.
        assert_eq!(h.legacy.map(|l| l.remaining), Some(9));
        // Only shadow policies: no header at all.
        let d = decision(Outcome::Allowed, 0.0, vec![shadow]);
        assert_eq!(rate_limit_headers(&d, Some(LegacyReset::UnixTime)), None);
    }

    #[test]
    fn the_layer_path_writes_exactly_what_the_list_serializer_writes() {
        let fixed = Limit::new(10.0, 10.0);
        let items = [
            PolicyHeader::new("ip", Some(fixed)).unwrap(),
            PolicyHeader::new("user", None).unwrap(),
            PolicyHeader::new("orders", Some(Limit::per_minute(11.0))).unwrap(),
        ];
        let refs: Vec<&PolicyHeader> = items.iter().collect();
        let cases = [
            (10.0, 10.0, 9.5, 0.05),
            (1000.0, 1000.0 / 3600.0, 0.0, 3599.2),
            (11.0, 11.0 / 60.0, 1e20, 1e20),
        ];
        for shadow_second in [false, true] {
            for (status, retry) in [(Outcome::Allowed, 0.0), (Outcome::Limited, 2.5)] {
                let mut policies = vec![
                    result("ip", 10.0, 10.0, cases[0].2, retry, cases[0].3),
                    result(
                        "user", cases[1].0, cases[1].1, cases[1].2, retry, cases[1].3,
                    ),
                    result(
                        "orders", cases[2].0, cases[2].1, cases[2].2, 0.0, cases[2].3,
                    ),
                ];
                policies[1].shadow = shadow_second;
                let d = decision(status, retry, policies);
                for legacy in [None, Some(LegacyReset::DeltaSeconds)] {
                    let h = layer_headers(&d, refs.iter().copied(), legacy, 0.0);
                    assert_eq!(h, rate_limit_headers(&d, legacy), "{d:?}");
                    // The values are exact-length strings (no spare capacity to carry into
                    // the header values), and a call while the thread's buffers are in
                    // use writes the same from buffers of its own.
                    if let Some(h) = &h {
                        assert_eq!(h.policy.capacity(), h.policy.len());
                        assert_eq!(h.rate_limit.capacity(), h.rate_limit.len());
                    }
                    let nested = SCRATCH.with(|s| {
                        let _held = s.borrow_mut();
                        layer_headers(&d, refs.iter().copied(), legacy, 0.0)
                    });
                    assert_eq!(nested, h, "{d:?}");
                }
            }
        }
        // A per-request limit that differs from the cached fixed one is serialized anew.
        let d = decision(
            Outcome::Allowed,
            0.0,
            vec![result("ip", 20.0, 5.0, 3.0, 0.0, 1.0)],
        );
        let h = layer_headers(&d, refs[..1].iter().copied(), None, 0.0).unwrap();
        assert_eq!(h.policy, r#""ip";q=20;w=4"#);
        let mut map = HeaderMap::new();
        h.apply_owned(&mut map);
        assert_eq!(map["ratelimit"], r#""ip";r=3;t=1"#);
    }
}
