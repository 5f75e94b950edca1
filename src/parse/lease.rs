//! The in-flight limit's arguments: TB.ACQUIRE's `limit lease_ms`, TB.RENEW's
//! `lease_id lease_ms`, TB.RELEASE's `lease_id`. Whole numbers only (a lease is timed in
//! whole milliseconds), in any spelling of the number grammar: `1000`, `1e3`, `1000.0`. Also the
//! holds' TB.HOLD `capacity rate estimate ttl_ms` and TB.SETTLE `capacity rate hold_id
//! actual [max_wait]` (TB.TAKE's ranges for the bucket's numbers).

use crate::algo::bucket::{Limit, MAX_AMOUNT};
use crate::algo::lease::{MAX_LEASE_MS, MAX_LIMIT, parse_id};
use crate::algo::num::parse_f64;
use crate::error::{Arg, LeaseError, TbError};
use crate::parse::args::{parse_reserve, parse_take};

/// TB.TAKE's parser names its third number `n`: here it is `estimate` or `actual`.
fn named(e: TbError, as_: LeaseError) -> TbError {
    match e {
        TbError::OutOfRange(Arg::N) | TbError::InvalidNumber(Arg::N) => TbError::Lease(as_),
        e => e,
    }
}

/// Validated TB.HOLD arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HoldArgs {
    pub limit: Limit,
    pub estimate: f64,
    pub ttl_ms: u64,
}

/// Parses `capacity rate estimate ttl_ms`: the arguments after the key.
pub fn parse_hold(args: &[&[u8]]) -> Result<HoldArgs, TbError> {
    let [c, r, estimate, ttl] = *args else {
        return Err(TbError::WrongArity);
    };
    let t = parse_take(&[c, r, estimate]).map_err(|e| named(e, LeaseError::Estimate))?;
    if t.n <= 0.0 {
        return Err(TbError::Lease(LeaseError::Estimate));
    }
    let ttl_ms = whole(ttl, MAX_LEASE_MS).ok_or(TbError::Lease(LeaseError::TtlMs))?;
    Ok(HoldArgs {
        limit: t.limit,
        estimate: t.n,
        ttl_ms,
    })
}

/// Validated TB.SETTLE arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettleArgs {
    pub limit: Limit,
    pub id: u64,
    pub actual: f64,
    /// The deepest debt the excess may leave: `max_wait * rate`, at most `MAX_AMOUNT`.
    pub max_debt: f64,
}

/// Parses `capacity rate hold_id actual [max_wait]`: the arguments after the key.
pub fn parse_settle(args: &[&[u8]]) -> Result<SettleArgs, TbError> {
    let (c, r, id, actual, max_wait) = match *args {
        [c, r, id, a] => (c, r, id, a, None),
        [c, r, id, a, w] => (c, r, id, a, Some(w)),
        _ => return Err(TbError::WrongArity),
    };
    let (limit, actual, max_debt) = match max_wait {
        None => {
            let t = parse_take(&[c, r, actual]).map_err(|e| named(e, LeaseError::Actual))?;
            (t.limit, t.n, MAX_AMOUNT)
        }
        Some(w) => {
            let t = parse_reserve(&[c, r, actual, w]).map_err(|e| named(e, LeaseError::Actual))?;
            (t.limit, t.n, (t.max_wait * t.limit.rate).min(MAX_AMOUNT))
        }
    };
    let id = parse_id(id).ok_or(TbError::Lease(LeaseError::HoldId))?;
    Ok(SettleArgs {
        limit,
        id,
        actual,
        max_debt,
    })
}

/// A whole number in `[1, max]`: any text of the number grammar (`algo::num`) whose value
/// is whole, so `1000`, `1e3` and `1000.0` are the same number (a client that formats
/// every number as a float is not refused) and `1.5` is not whole.
fn whole(bytes: &[u8], max: u64) -> Option<u64> {
    plain_whole(bytes, max).or_else(|| {
        let v = parse_f64(bytes)?;
        // Up to 2^53 every whole value is exact, and `as` is then exact too.
        let top = max.min(EXACT) as f64;
        (v.fract() == 0.0 && v >= 1.0 && v <= top).then_some(v as u64)
    })
}

/// The largest whole number a double holds exactly (every bound here is far below it).
const EXACT: u64 = 1 << 53;

/// The common spelling, fast: plain digits with no leading zero.
fn plain_whole(bytes: &[u8], max: u64) -> Option<u64> {
    if bytes.first() == Some(&b'0') || bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    // Digit by digit with checked arithmetic: no UTF-8 check or generic parser on the
    // hot path (every TB.ACQUIRE and TB.RENEW parses two of these).
    let mut v: u64 = 0;
    for &b in bytes {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    (1..=max).contains(&v).then_some(v)
}

/// TB.ACQUIRE's limit.
pub fn parse_limit(bytes: &[u8]) -> Result<u64, TbError> {
    whole(bytes, MAX_LIMIT).ok_or(TbError::Lease(LeaseError::Limit))
}

/// A lease duration in ms.
pub fn parse_lease_ms(bytes: &[u8]) -> Result<u64, TbError> {
    whole(bytes, MAX_LEASE_MS).ok_or(TbError::Lease(LeaseError::LeaseMs))
}

/// A lease id as TB.ACQUIRE replied it.
pub fn parse_lease_id(bytes: &[u8]) -> Result<u64, TbError> {
    parse_id(bytes).ok_or(TbError::Lease(LeaseError::LeaseId))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The rule `whole` implements, written with the standard library: plain digits as an
    /// integer; any other text of the number grammar by its value, when whole.
    fn reference_whole(bytes: &[u8], max: u64) -> Option<u64> {
        let text = std::str::from_utf8(bytes).ok()?;
        if !text.is_empty() && !text.starts_with('0') && text.bytes().all(|b| b.is_ascii_digit()) {
            return text.parse::<u64>().ok().filter(|v| (1..=max).contains(v));
        }
        let (mantissa, exponent) = match text.split_once(['e', 'E']) {
            Some((m, e)) => (m, Some(e)),
            None => (text, None),
        };
        let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
        let unsigned = mantissa.strip_prefix('-').unwrap_or(mantissa);
        let mantissa_ok = match unsigned.split_once('.') {
            Some((i, f)) => digits(i) && digits(f),
            None => digits(unsigned),
        };
        let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
        if !mantissa_ok || !exponent_ok || text.len() > 128 {
            return None;
        }
        let v: f64 = text.parse().ok().filter(|v: &f64| v.is_finite())?;
        (v.fract() == 0.0 && v >= 1.0 && v <= max.min(1 << 53) as f64).then_some(v as u64)
    }

    proptest! {
        #[test]
        fn whole_is_the_standard_parse_of_any_whole_number_text(
            bytes in proptest::collection::vec(
                prop_oneof![8 => b'0'..=b'9', 1 => proptest::sample::select(b".eE+-".to_vec()),
                            1 => any::<u8>()], 0..24),
            max in prop_oneof![Just(u64::MAX), Just(MAX_LEASE_MS), Just(MAX_LIMIT), any::<u64>()],
        ) {
            prop_assert_eq!(whole(&bytes, max), reference_whole(&bytes, max));
        }

        #[test]
        fn lease_ids_are_the_standard_hex_parse(
            bytes in proptest::collection::vec(
                prop_oneof![6 => proptest::sample::select(b"0123456789abcdefABCDEF".to_vec()),
                            1 => any::<u8>()], 14..18),
        ) {
            let reference = (bytes.len() == 16 && bytes.iter().all(u8::is_ascii_hexdigit))
                .then(|| std::str::from_utf8(&bytes).ok().and_then(|t| u64::from_str_radix(t, 16).ok()))
                .flatten();
            prop_assert_eq!(parse_id(&bytes), reference);
        }
    }

    #[test]
    fn limits_and_durations_are_plain_whole_numbers_in_range() {
        assert_eq!(parse_limit(b"1"), Ok(1));
        assert_eq!(parse_limit(b"10000"), Ok(10_000));
        // Any spelling of a whole number (issue 39: 1e3 and 1.0 are numbers too).
        for (text, v) in [
            (&b"1e3"[..], 1000),
            (b"1000.0", 1000),
            (b"01", 1),
            (b"1E0", 1),
            (b"10e-1", 1),
        ] {
            assert_eq!(parse_limit(text), Ok(v), "{text:?}");
        }
        assert_eq!(parse_lease_ms(b"3.6e6"), Ok(3_600_000));
        assert_eq!(parse_lease_ms(b"31536000000"), Ok(31_536_000_000));
        let limit = Err(TbError::Lease(LeaseError::Limit));
        for bad in [
            &b""[..],
            b"0",
            b"10001",
            b"-1",
            b"+1",
            b"1.5",
            b"1e-3",
            b"1e5",
            b" 1",
            b"1.",
            b".5",
            b"99999999999999999999999",
        ] {
            assert_eq!(parse_limit(bad), limit, "{bad:?}");
        }
        let ms = Err(TbError::Lease(LeaseError::LeaseMs));
        assert_eq!(parse_lease_ms(b"0"), ms);
        assert_eq!(parse_lease_ms(b"31536000001"), ms);
        assert_eq!(parse_lease_ms(b"18446744073709551616"), ms);
        assert_eq!(
            parse_lease_id(b"xyz"),
            Err(TbError::Lease(LeaseError::LeaseId))
        );
    }

    #[test]
    fn hold_and_settle_arguments() {
        let b = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let call = |v: &[&str]| {
            let owned = b(v);
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            parse_hold(&refs)
        };
        let h = call(&["10", "1", "2.5", "1000"]).unwrap();
        assert_eq!((h.estimate, h.ttl_ms), (2.5, 1000));
        assert_eq!(
            call(&["10", "1", "0", "1000"]),
            Err(TbError::Lease(LeaseError::Estimate))
        );
        assert_eq!(
            call(&["10", "1", "-1", "1000"]),
            Err(TbError::Lease(LeaseError::Estimate))
        );
        assert_eq!(
            call(&["10", "1", "1", "0"]),
            Err(TbError::Lease(LeaseError::TtlMs))
        );
        assert_eq!(call(&["10", "1", "1"]), Err(TbError::WrongArity));
        let settle = |v: &[&str]| {
            let owned = b(v);
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            parse_settle(&refs)
        };
        let s = settle(&["10", "2", "0123456789abcdef", "3"]).unwrap();
        assert_eq!(
            (s.id, s.actual, s.max_debt),
            (0x0123_4567_89ab_cdef, 3.0, MAX_AMOUNT)
        );
        let s = settle(&["10", "2", "0123456789abcdef", "3", "1.5"]).unwrap();
        assert_eq!(s.max_debt, 3.0);
        assert_eq!(
            settle(&["10", "2", "xyz", "3"]),
            Err(TbError::Lease(LeaseError::HoldId))
        );
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_error_without_panicking(b in prop::collection::vec(any::<u8>(), 0..24)) {
            let _ = parse_limit(&b);
            let _ = parse_lease_ms(&b);
            let _ = parse_lease_id(&b);
        }
    }
}
