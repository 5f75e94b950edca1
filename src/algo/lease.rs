//! In-flight limits (TB.ACQUIRE, TB.RELEASE, TB.RENEW, TB.PEEK ... LEASES): at most
//! `limit` leases on a key at once, each timed on the server's clock only. Pure: times
//! are passed in (whole microseconds or milliseconds since the epoch), no Redis types.
//!
//! A lease is live while the server's clock in whole milliseconds is below its expiry;
//! an expiry is `ceil(now in ms) + lease_ms`, so a lease never ends before `lease_ms` has
//! passed on the server's clock, whatever the sub-millisecond part of `now` was. Expired
//! leases are reclaimed first on every writing call, so the count a call decides on is
//! the live count.

use crate::algo::bucket::{self, Decision, Part};

/// The largest `limit` accepted: it bounds the leases one key can hold (and so its memory
/// and the work of one call's reclaim) to 10,000 members.
pub const MAX_LIMIT: u64 = 10_000;
/// The longest lease accepted, in ms (365 days).
pub const MAX_LEASE_MS: u64 = 31_536_000_000;
/// Every lease member starts with this, followed by its id as 16 lowercase hex digits.
pub const MEMBER_PREFIX: &[u8] = b"lease:";
/// A member's length: the prefix and 16 hex digits.
pub const MEMBER_LEN: usize = 22;
/// The member that marks a sorted set as TB.ACQUIRE's own, written with the key's first
/// lease and removed with its last: a sorted set without it is not one this module made,
/// and is never written (a user's set whose lowest member merely looks like a lease
/// included). It is not a lease (`is_member` is false), so it never counts.
pub const MARKER: &[u8] = b"redis-tb:leases";
/// The marker's score: below every expiry, so it is always the set's first member.
pub const MARKER_SCORE: f64 = -1.0;

/// Whether a member and its score are the marker.
pub fn is_marker(bytes: &[u8], score: f64) -> bool {
    score == MARKER_SCORE && bytes == MARKER
}

/// Expiries (sorted-set scores) above this are not ones this module writes: with
/// `MAX_LEASE_MS`, up to the end of year 9999 in ms.
pub const MAX_EXPIRY_MS: u64 = 253_402_300_800_000 + MAX_LEASE_MS;

/// The server's clock in whole milliseconds (rounded down): what liveness is judged on.
pub fn now_ms(now_us: u64) -> u64 {
    now_us / 1000
}

/// The expiry of a lease granted (or renewed) at `now_us` for `lease_ms`: never less than
/// `lease_ms` after `now_us`.
pub fn expiry_of(now_us: u64, lease_ms: u64) -> u64 {
    now_us.div_ceil(1000).saturating_add(lease_ms)
}

/// Whether a lease with this expiry is still held at `now_ms`.
pub fn is_live(expiry_ms: u64, now_ms: u64) -> bool {
    expiry_ms > now_ms
}

/// A stored score that is an expiry this module could have written: a whole number of
/// milliseconds in `[0, MAX_EXPIRY_MS]`.
pub fn valid_expiry(score: f64) -> Option<u64> {
    (score.fract() == 0.0 && (0.0..=MAX_EXPIRY_MS as f64).contains(&score)).then_some(score as u64)
}

/// The outcome of a TB.ACQUIRE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquire {
    pub granted: bool,
    /// Live leases after the call (the new one included when granted).
    pub in_flight: u64,
    /// Granted: the new lease's expiry. Refused: `None`.
    pub expiry_ms: Option<u64>,
    /// Granted: ms until the new lease expires. Refused: ms after which a slot is free
    /// unless someone else took it first (an upper bound: a release may free one sooner).
    pub ms: u64,
}

/// Decides a TB.ACQUIRE at `now_us`, after expired leases were reclaimed: `live` leases
/// are held, and `earliest` holds the expiries of the first `live + 1 - limit` of them,
/// ascending (when `live >= limit`; one when the limit is unchanged).
pub fn acquire(limit: u64, lease_ms: u64, live: u64, earliest: &[u64], now_us: u64) -> Acquire {
    let now = now_ms(now_us);
    if live < limit {
        let expiry = expiry_of(now_us, lease_ms);
        return Acquire {
            granted: true,
            in_flight: live.saturating_add(1),
            expiry_ms: Some(expiry),
            ms: expiry.saturating_sub(now),
        };
    }
    Acquire {
        granted: false,
        in_flight: live,
        expiry_ms: None,
        ms: refused_wait(limit, live, earliest, now),
    }
}

/// TB.ACQUIRE ... TAKE at `now_us` (`now` the same instant in seconds): the slot
/// (`acquire`) and every bucket (`bucket::take_all`), all or nothing. A bucket short
/// refuses the slot too (its `ms` is 0: the buckets' wait is the aggregate's); a slot
/// refused charges no bucket, and then every bucket is reported as it stands and the
/// aggregate is theirs (whether the buckets alone had enough), so the aggregate and the
/// per-bucket decisions always agree.
pub fn acquire_with_buckets(
    limit: u64,
    lease_ms: u64,
    live: u64,
    earliest: &[u64],
    now_us: u64,
    now: f64,
    parts: &[Part],
) -> (Acquire, Decision, Vec<Decision>) {
    let mut slot = acquire(limit, lease_ms, live, earliest, now_us);
    let (mut total, mut each) = bucket::take_all(parts, now);
    if !total.allowed && slot.granted {
        slot = Acquire {
            granted: false,
            in_flight: live,
            expiry_ms: None,
            ms: 0,
        };
    }
    if !slot.granted && total.allowed {
        for (d, p) in each.iter_mut().zip(parts) {
            *d = bucket::report(p.limit, p.n, now, p.stored);
        }
        total = bucket::aggregate(&each);
    }
    (slot, total, each)
}

/// How many of the earliest live expiries `acquire` needs when `live` are held: the one
/// whose end leaves `limit - 1` held.
pub fn needed_earliest(limit: u64, live: u64) -> u64 {
    if live < limit { 0 } else { live - limit + 1 }
}

/// The wait of a refused caller: until the lease whose end brings the count below the
/// limit expires (the earliest one, unless the limit was lowered below the count).
fn refused_wait(limit: u64, live: u64, earliest: &[u64], now_ms: u64) -> u64 {
    let k = needed_earliest(limit, live);
    let index = usize::try_from(k.saturating_sub(1)).unwrap_or(usize::MAX);
    earliest
        .get(index)
        .or(earliest.last())
        .map_or(0, |&e| e.saturating_sub(now_ms))
}

/// TB.RENEW of a lease whose stored expiry is `current` (`None`: not held) at `now_us`:
/// the new expiry, or `None` when the lease is not held (unknown, released or expired: a
/// slot once lost is not handed back by a renewal; the caller must acquire again).
pub fn renew(current: Option<u64>, lease_ms: u64, now_us: u64) -> Option<u64> {
    let current = current?;
    is_live(current, now_ms(now_us)).then(|| expiry_of(now_us, lease_ms))
}

/// The key's expiry when a lease now expires at `expiry_ms` and the key expires at
/// `current` (`None`: no TTL): the key must outlive every lease it holds, so a shorter
/// (or missing) TTL is moved to the expiry plus a slack (a quarter of the lease, and a
/// second), which lets the next leases of a busy key fit without another write; a
/// longer one is kept. `None`: keep.
pub fn key_expiry(current: Option<i64>, expiry_ms: u64, lease_ms: u64) -> Option<i64> {
    let needed = i64::try_from(expiry_ms).unwrap_or(i64::MAX);
    match current {
        Some(at) if at >= needed => None,
        _ => Some(needed.saturating_add(i64::try_from(lease_ms / 4 + 1000).unwrap_or(0))),
    }
}

/// The key's expiry once leases were removed and the latest one left expires at
/// `latest_ms`: a TTL more than two slacks (a quarter of the time left, and a second)
/// beyond it is brought back to one slack, so a key whose long lease was released does not
/// linger for that lease's length. `None`: keep.
pub fn shrunk_expiry(current: Option<i64>, latest_ms: u64, now_ms: u64) -> Option<i64> {
    let latest = i64::try_from(latest_ms).ok()?;
    let slack = i64::try_from(latest_ms.saturating_sub(now_ms) / 4 + 1000).ok()?;
    let target = latest.saturating_add(slack);
    match current {
        Some(at) if at > target.saturating_add(slack) => Some(target),
        _ => None,
    }
}

/// A lease id's member name: the prefix and the id as 16 lowercase hex digits.
pub fn member(id: u64) -> [u8; MEMBER_LEN] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; MEMBER_LEN];
    for (slot, &b) in out.iter_mut().zip(MEMBER_PREFIX) {
        *slot = b;
    }
    for (i, slot) in out.iter_mut().skip(MEMBER_PREFIX.len()).enumerate() {
        let shift = 60 - 4 * i;
        let digit = usize::try_from((id >> shift) & 0xf).unwrap_or(0);
        *slot = HEX.get(digit).copied().unwrap_or(b'0');
    }
    out
}

/// The id part of a member: `&member(id)[6..]`.
pub fn id_text(member: &[u8; MEMBER_LEN]) -> &[u8] {
    member.get(MEMBER_PREFIX.len()..).unwrap_or(&[])
}

/// A lease id as a client sends it back: exactly 16 hex digits (either case).
pub fn parse_id(text: &[u8]) -> Option<u64> {
    if text.len() != 16 {
        return None;
    }
    // 16 digits are exactly 64 bits: no overflow is possible.
    let mut v: u64 = 0;
    for &b in text {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// Whether a stored member is a lease member this module writes (`lease:` + 16 lowercase
/// hex digits).
pub fn is_member(bytes: &[u8]) -> bool {
    bytes.len() == MEMBER_LEN
        && bytes.starts_with(MEMBER_PREFIX)
        && bytes
            .get(MEMBER_PREFIX.len()..)
            .is_some_and(|h| h.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const NOW_US: u64 = 1_764_456_268_123_456;

    #[test]
    fn a_lease_lasts_at_least_lease_ms_on_the_server_clock() {
        // 123.456 ms into the second: the expiry rounds the start up.
        assert_eq!(expiry_of(NOW_US, 1000), 1_764_456_269_124);
        assert_eq!(expiry_of(1_000_000, 5), 1005);
        assert!(is_live(1005, 1004));
        assert!(!is_live(1005, 1005));
    }

    #[test]
    fn acquire_grants_below_the_limit_and_refuses_at_it() {
        let a = acquire(2, 1000, 1, &[], NOW_US);
        assert_eq!(
            a,
            Acquire {
                granted: true,
                in_flight: 2,
                expiry_ms: Some(1_764_456_269_124),
                ms: 1001,
            }
        );
        let now = now_ms(NOW_US);
        let r = acquire(2, 1000, 2, &[now + 300], NOW_US);
        assert_eq!(
            r,
            Acquire {
                granted: false,
                in_flight: 2,
                expiry_ms: None,
                ms: 300,
            }
        );
    }

    #[test]
    fn a_lowered_limit_waits_for_the_lease_that_brings_the_count_below_it() {
        let now = now_ms(NOW_US);
        assert_eq!(needed_earliest(2, 4), 3);
        let r = acquire(2, 1000, 4, &[now + 10, now + 20, now + 30], NOW_US);
        assert_eq!(r.ms, 30);
        assert!(!r.granted);
    }

    #[test]
    fn renew_extends_a_live_lease_and_refuses_an_expired_or_unknown_one() {
        let now = now_ms(NOW_US);
        assert_eq!(
            renew(Some(now + 1), 500, NOW_US),
            Some(expiry_of(NOW_US, 500))
        );
        assert_eq!(renew(Some(now), 500, NOW_US), None);
        assert_eq!(renew(None, 500, NOW_US), None);
        // A renewal may also shorten a lease.
        assert_eq!(renew(Some(now + 9000), 10, NOW_US), Some(now + 11));
    }

    #[test]
    fn the_key_outlives_every_lease() {
        assert_eq!(key_expiry(None, 5000, 1000), Some(6250));
        assert_eq!(key_expiry(Some(4999), 5000, 1000), Some(6250));
        assert_eq!(key_expiry(Some(5000), 5000, 1000), None);
        assert_eq!(key_expiry(Some(9000), 5000, 1000), None);
    }

    #[test]
    fn a_ttl_far_beyond_the_last_lease_is_brought_back() {
        // 4 s left on the latest lease: slack 2 s, so 6 s..8 s is kept, beyond it 6 s.
        assert_eq!(shrunk_expiry(Some(9000), 4000, 0), Some(6000));
        assert_eq!(shrunk_expiry(Some(8000), 4000, 0), None);
        assert_eq!(shrunk_expiry(Some(5000), 4000, 0), None);
        assert_eq!(shrunk_expiry(None, 4000, 0), None);
    }

    #[test]
    fn ids_round_trip_through_members() {
        let m = member(0x0123_4567_89ab_cdef);
        assert_eq!(&m, b"lease:0123456789abcdef");
        assert!(is_member(&m));
        assert_eq!(parse_id(id_text(&m)), Some(0x0123_4567_89ab_cdef));
        assert_eq!(parse_id(b"0123456789ABCDEF"), Some(0x0123_4567_89ab_cdef));
        for bad in [
            &b""[..],
            b"123",
            b"0123456789abcdeg",
            b"0123456789abcdef0",
            b"+123456789abcdef",
            b" 123456789abcdef",
        ] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
        for bad in [
            &b"lease:0123456789ABCDEF"[..],
            b"lease:0123456789abcde",
            b"1764456268123456-0",
            b"lease-0123456789abcdef",
        ] {
            assert!(!is_member(bad), "{bad:?}");
        }
    }

    #[test]
    fn stored_expiries_are_whole_milliseconds_in_range() {
        assert_eq!(valid_expiry(1_764_456_269_124.0), Some(1_764_456_269_124));
        assert_eq!(valid_expiry(1.5), None);
        assert_eq!(valid_expiry(-1.0), None);
        assert_eq!(valid_expiry(f64::NAN), None);
        assert_eq!(valid_expiry(f64::INFINITY), None);
        assert_eq!(valid_expiry(1e300), None);
    }

    /// A lease table as the binding keeps it (id -> expiry), driven through the pure rules
    /// the handlers call.
    #[derive(Default)]
    struct Table(BTreeMap<u64, u64>);

    impl Table {
        fn reclaim(&mut self, now_us: u64) {
            let now = now_ms(now_us);
            self.0.retain(|_, &mut e| is_live(e, now));
        }
        fn earliest(&self, k: u64) -> Vec<u64> {
            let mut v: Vec<u64> = self.0.values().copied().collect();
            v.sort_unstable();
            v.truncate(k as usize);
            v
        }
        fn acquire(&mut self, id: u64, limit: u64, lease_ms: u64, now_us: u64) -> Acquire {
            self.reclaim(now_us);
            let live = self.0.len() as u64;
            let a = acquire(
                limit,
                lease_ms,
                live,
                &self.earliest(needed_earliest(limit, live)),
                now_us,
            );
            if let Some(e) = a.expiry_ms {
                self.0.insert(id, e);
            }
            a
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Acquire { lease_ms: u64 },
        Release(usize),
        Renew(usize, u64),
        Advance(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u64..5000).prop_map(|lease_ms| Op::Acquire { lease_ms }),
            (0usize..16).prop_map(Op::Release),
            ((0usize..16), (1u64..5000)).prop_map(|(i, ms)| Op::Renew(i, ms)),
            (0u64..3_000_000).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Whatever the calls and the times: never more than `limit` live leases, every
        /// lease lives at least its `lease_ms` unless released, and a refused caller who
        /// waits the reply's `ms` (with no one else acquiring) is granted.
        #[test]
        fn never_more_than_limit_and_refusals_wait_long_enough(
            limit in 1u64..6,
            start in 0u64..1_000_000_000,
            ops in prop::collection::vec(op(), 1..80),
        ) {
            let mut t = Table::default();
            let mut now = NOW_US + start;
            let mut next_id = 0u64;
            let mut granted: Vec<(u64, u64, u64)> = Vec::new(); // id, from_us, lease_ms
            let mut released = std::collections::BTreeSet::new();
            for op in ops {
                match op {
                    Op::Acquire { lease_ms } => {
                        next_id += 1;
                        let a = t.acquire(next_id, limit, lease_ms, now);
                        prop_assert!(a.in_flight <= limit);
                        prop_assert_eq!(t.0.len() as u64, a.in_flight);
                        if a.granted {
                            granted.push((next_id, now, lease_ms));
                            prop_assert!(a.ms >= lease_ms);
                        } else {
                            // Retrying after the wait, on a copy, finds a slot.
                            let mut copy = Table(t.0.clone());
                            let later = now + a.ms * 1000;
                            prop_assert!(copy.acquire(u64::MAX, limit, 1, later).granted);
                            // And the wait is the earliest expiry: a millisecond less is
                            // too early.
                            if a.ms > 0 {
                                let mut copy = Table(t.0.clone());
                                let early = (now_ms(now) + a.ms - 1) * 1000 + 999;
                                prop_assert!(!copy.acquire(u64::MAX, limit, 1, early).granted);
                            }
                        }
                    }
                    Op::Release(i) => {
                        if let Some(&(id, _, _)) = granted.get(i) {
                            t.reclaim(now);
                            t.0.remove(&id);
                            released.insert(id);
                        }
                    }
                    Op::Renew(i, ms) => {
                        if let Some(g) = granted.get_mut(i) {
                            t.reclaim(now);
                            if let Some(e) = renew(t.0.get(&g.0).copied(), ms, now) {
                                t.0.insert(g.0, e);
                                g.1 = now;
                                g.2 = ms;
                            }
                        }
                    }
                    Op::Advance(us) => now += us,
                }
                // A lease still inside its lease_ms (from its last grant or renewal) is
                // held, unless it was released.
                t.reclaim(now);
                for &(id, from, ms) in &granted {
                    if now < from + ms * 1000 && !released.contains(&id) {
                        prop_assert!(t.0.contains_key(&id), "lease {} reclaimed early", id);
                    }
                }
            }
        }

        #[test]
        fn expiry_never_ends_a_lease_early(now in 0u64..u64::MAX / 2, ms in 1u64..MAX_LEASE_MS) {
            let e = expiry_of(now, ms);
            // Live at every whole-ms reading of the clock before now + ms.
            prop_assert!(is_live(e, now_ms(now + ms * 1000 - 1)));
        }

        #[test]
        fn member_parse_round_trips(id in any::<u64>()) {
            let m = member(id);
            prop_assert!(is_member(&m));
            prop_assert_eq!(parse_id(id_text(&m)), Some(id));
        }
    }
}
