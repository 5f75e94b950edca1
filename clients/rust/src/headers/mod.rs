//! The header mapping: a [`crate::Decision`] becomes IETF httpapi ratelimit-headers (draft -10/-11:
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
//!
//! The parts: the numbers and the standard fields' names (`fields`, H2, H3), the legacy
//! headers (`legacy`, H4), a decision's headers (`mapping`, H1-H4) and the layer's
//! pieces serialized once per policy (`layer`); this file re-exports them and holds their
//! tests.

mod fields;
mod layer;
mod legacy;
mod mapping;

/// The wall clock's Unix time, which `X-RateLimit-Reset` adds to (SPEC T1: in [`crate::clock`]).
pub use crate::clock::unix_now;
pub use fields::{
    RATELIMIT, RATELIMIT_POLICY, SF_INTEGER_MAX, quota, remaining, reset, retry_after, window,
};
pub(crate) use layer::{PolicyHeader, layer_headers};
pub use legacy::{
    LegacyHeaders, LegacyReset, X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
    unix_reset,
};
pub use mapping::{RateLimitHeaders, rate_limit_headers, rate_limit_headers_at};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Decision, Outcome, PolicyResult};
    use crate::policy::{Limit, LimitKind};
    use http::HeaderMap;
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
                    let nested = layer::SCRATCH.with(|s| {
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
