//! The in-flight limit's arguments: TB.ACQUIRE's `limit lease_ms`, TB.RENEW's
//! `lease_id lease_ms`, TB.RELEASE's `lease_id`. Whole numbers only, written plainly
//! (digits, no sign, no leading zero): a lease is timed in whole milliseconds.

use crate::algo::lease::{MAX_LEASE_MS, MAX_LIMIT, parse_id};
use crate::error::{LeaseError, TbError};

/// A whole number in `[1, max]`, digits only, no leading zero.
fn whole(bytes: &[u8], max: u64) -> Option<u64> {
    if bytes.first() == Some(&b'0') || bytes.len() > 20 || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
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

    #[test]
    fn limits_and_durations_are_plain_whole_numbers_in_range() {
        assert_eq!(parse_limit(b"1"), Ok(1));
        assert_eq!(parse_limit(b"10000"), Ok(10_000));
        assert_eq!(parse_lease_ms(b"31536000000"), Ok(31_536_000_000));
        let limit = Err(TbError::Lease(LeaseError::Limit));
        for bad in [
            &b""[..],
            b"0",
            b"10001",
            b"-1",
            b"+1",
            b"01",
            b"1.0",
            b"1e3",
            b" 1",
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

    proptest! {
        #[test]
        fn any_bytes_parse_or_error_without_panicking(b in prop::collection::vec(any::<u8>(), 0..24)) {
            let _ = parse_limit(&b);
            let _ = parse_lease_ms(&b);
            let _ = parse_lease_id(&b);
        }
    }
}
