//! TB.THROTTLE, the CL.THROTTLE drop-in: redis-cell's arguments and reply on TB.TAKE's
//! engine. Pure: no Redis types, time a parameter.
//!
//! redis-cell's GCRA with burst `b`, `count` per `period` seconds, admits exactly what a
//! token bucket of capacity `b + 1` refilling at `count / period` admits: its theoretical
//! arrival time `tat` is the time the bucket is full again, and "allowed when
//! `max(now, tat) + q T - (b + 1) T <= now`" (T = period / count) is "allowed when
//! `q` tokens are there". So the state is TB.TAKE's hash, which every other command reads,
//! and only the reply is redis-cell's: `[limited, limit, remaining, retry_after,
//! reset_after]`, five integers.

use crate::algo::bucket::{self, Decision, Limit, State};

/// What redis-cell replies, from one of our decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellReply {
    /// 1 when refused.
    pub limited: i64,
    /// `max_burst + 1`: the bucket's capacity.
    pub limit: i64,
    /// Whole tokens left (never negative, as redis-cell's).
    pub remaining: i64,
    /// Whole seconds until the call would be allowed, rounded up; -1 when allowed, or
    /// when `quantity` is above the limit and never will be.
    pub retry_after: i64,
    /// Whole seconds until the bucket is full, rounded up.
    pub reset_after: i64,
}

impl CellReply {
    pub fn as_array(&self) -> [i64; 5] {
        [
            self.limited,
            self.limit,
            self.remaining,
            self.retry_after,
            self.reset_after,
        ]
    }
}

/// One CL.THROTTLE call: a positive quantity takes, zero only reports (and, unlike
/// redis-cell, writes nothing), a negative one gives tokens back, never above the limit
/// (the refund idiom redis-cell users rely on).
pub fn throttle(limit: Limit, quantity: f64, now: f64, stored: Option<State>) -> Decision {
    if quantity < 0.0 {
        bucket::refund(limit, -quantity, now, stored)
    } else {
        bucket::take(limit, quantity, now, stored)
    }
}

/// redis-cell's reply for a decision on a bucket of `limit.capacity` (an integer:
/// `max_burst + 1`). Waits are rounded up to whole seconds, so a caller that waits the
/// reported time is admitted (redis-cell 0.2.2 truncates them, and such a caller can be
/// refused again).
pub fn cell_reply(d: &Decision, limit: Limit) -> CellReply {
    CellReply {
        limited: i64::from(!d.allowed),
        limit: whole(limit.capacity),
        remaining: whole(d.remaining.max(0.0).floor()),
        retry_after: if d.allowed || d.retry_after < 0.0 {
            -1
        } else {
            seconds_up(d.retry_after)
        },
        reset_after: seconds_up(d.reset_after),
    }
}

/// Float noise below the server clock's tick: 1 / (1 / 49) is 49.00000000000001, and a
/// server-clock wait is already rounded up to whole microseconds (49.000001).
const NOISE: f64 = 2e-6;

/// Whole seconds, rounded up past the float noise: 49.000001 reads 49 (as redis-cell's
/// integer arithmetic says), 49.5 reads 50, and any positive wait at least 1.
fn seconds_up(seconds: f64) -> i64 {
    if seconds > 0.0 {
        whole((seconds - NOISE).ceil()).max(1)
    } else {
        0
    }
}

/// An integral f64 as i64, saturating (every value here is at most about 2^85 seconds,
/// which saturates rather than wraps).
fn whole(v: f64) -> i64 {
    v as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst of 4 at 1 per second is a bucket of 5 refilling 1 per second.
    const LIMIT: Limit = Limit {
        capacity: 5.0,
        rate: 1.0,
    };
    const T0: f64 = 1_700_000_000.0;

    /// The sequence of redis-cell's own rate-limit test (max_burst 4, 1 per second), with
    /// the replies its source computes, waits rounded up to whole seconds. Times are
    /// offsets from T0 in seconds (binary fractions, so the float arithmetic is exact).
    #[test]
    fn answers_as_redis_cell_on_its_own_sequence() {
        // (offset, quantity, [limited, limit, remaining, retry_after, reset_after])
        let table: &[(f64, f64, [i64; 5])] = &[
            // More than the limit can never pass: nothing changes.
            (0.0, 6.0, [1, 5, 5, -1, 0]),
            // A burst of five, then refused until one token is back.
            (0.0, 1.0, [0, 5, 4, -1, 1]),
            (0.0, 1.0, [0, 5, 3, -1, 2]),
            (0.0, 1.0, [0, 5, 2, -1, 3]),
            (0.0, 1.0, [0, 5, 1, -1, 4]),
            (0.0, 1.0, [0, 5, 0, -1, 5]),
            (0.0, 1.0, [1, 5, 0, 1, 5]),
            // Three seconds later three tokens are back.
            (3.0, 1.0, [0, 5, 2, -1, 3]),
            // 0.125 s later: 2.125 tokens, take one; full in 3.875 s (rounded up: 4).
            (3.125, 1.0, [0, 5, 1, -1, 4]),
            (4.0, 1.0, [0, 5, 1, -1, 4]),
            // After a long pause the bucket is full again (and not fuller).
            (8.0, 1.0, [0, 5, 4, -1, 1]),
            (9.5, 1.0, [0, 5, 4, -1, 1]),
            // Quantity 0 reports.
            (9.5, 0.0, [0, 5, 4, -1, 1]),
            // Two at once.
            (9.5, 2.0, [0, 5, 2, -1, 3]),
            // Five at once when two are there: refused, retry when the other three are.
            (9.5, 5.0, [1, 5, 2, 3, 3]),
        ];
        let mut stored = None;
        for (i, &(offset, quantity, want)) in table.iter().enumerate() {
            let d = throttle(LIMIT, quantity, T0 + offset, stored);
            assert_eq!(cell_reply(&d, LIMIT).as_array(), want, "call {i}: {d:?}");
            stored = d.new_state.or(stored);
        }
    }

    #[test]
    fn quantity_zero_writes_nothing_and_negative_gives_back_up_to_the_limit() {
        let stored = Some(State {
            tokens: 1.0,
            last_refill_time: T0,
        });
        assert_eq!(throttle(LIMIT, 0.0, T0, stored).new_state, None);
        assert_eq!(throttle(LIMIT, 0.0, T0, None).new_state, None);
        let back = throttle(LIMIT, -2.0, T0, stored);
        assert_eq!(cell_reply(&back, LIMIT).as_array(), [0, 5, 3, -1, 2]);
        let capped = throttle(LIMIT, -100.0, T0, stored);
        assert_eq!(capped.new_state.map(|s| s.tokens), Some(5.0));
        assert_eq!(cell_reply(&capped, LIMIT).as_array(), [0, 5, 5, -1, 0]);
    }

    #[test]
    fn the_reply_mapping_rounds_as_documented() {
        let d = |allowed, remaining, retry_after, reset_after| Decision {
            allowed,
            remaining,
            retry_after,
            reset_after,
            new_state: None,
        };
        let cases = [
            // Sub-second waits round up to 1, never down to 0.
            (d(false, 0.4, 0.000001, 0.6), [1, 5, 0, 1, 1]),
            // A debt (after TB.RESERVE on the same bucket) shows as 0 remaining.
            (d(false, -2.5, 3.5, 7.5), [1, 5, 0, 4, 8]),
            // Fractional remaining is floored: what can be taken now.
            (d(true, 3.999, 0.0, 1.001), [0, 5, 3, -1, 2]),
            // Never.
            (d(false, 5.0, -1.0, 0.0), [1, 5, 5, -1, 0]),
            // A whole number of seconds off by float noise or a microsecond's rounding
            // stays that number (1 / (1 / 49) is 49.00000000000001).
            (
                d(false, 0.0, 1.0 / (1.0 / 49.0), 49.000001),
                [1, 5, 0, 49, 49],
            ),
            (d(true, 0.0, 0.0, 1e9 + 1e-6), [0, 5, 0, -1, 1_000_000_000]),
            (d(false, 0.0, 49.00001, 0.0), [1, 5, 0, 50, 0]),
        ];
        for (decision, want) in cases {
            assert_eq!(
                cell_reply(&decision, LIMIT).as_array(),
                want,
                "{decision:?}"
            );
        }
    }

    #[test]
    fn fractional_rates_above_a_thousand_per_second_work() {
        // 2500 per second with a burst of 99: redis-cell refuses rates whose interval is
        // below its resolution; here the bucket simply refills 2.5 tokens per ms.
        let limit = Limit {
            capacity: 100.0,
            rate: 2500.0,
        };
        let mut stored = None;
        for _ in 0..100 {
            let d = throttle(limit, 1.0, T0, stored);
            assert!(d.allowed);
            stored = d.new_state;
        }
        let refused = throttle(limit, 1.0, T0, stored);
        assert_eq!(cell_reply(&refused, limit).as_array(), [1, 100, 0, 1, 1]);
        assert!(throttle(limit, 1.0, T0 + 0.001, stored).allowed);
    }
}
