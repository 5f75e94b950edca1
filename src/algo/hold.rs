//! Holds, settled later (TB.HOLD, TB.SETTLE, TB.PEEK key HOLDS): take an estimated cost
//! from a token bucket now, and settle it with the actual cost later: the surplus goes
//! back (never above capacity), an excess is charged, as debt where the bucket is short,
//! bounded the way TB.RESERVE bounds a debt. Pure: times passed in (server-clock
//! microseconds; holds expire on whole milliseconds like leases), no Redis types.
//!
//! A bucket's outstanding holds are one text, `<id hex>:<amount>:<expiry ms>` separated by
//! spaces, kept in the bucket hash's `holds` field beside `tokens` and `last_refill_time`
//! (the other bucket commands read neither it nor anything it changes). A hold never
//! settled keeps its estimate charged; once expired, its record is dropped by the next
//! TB.HOLD or TB.SETTLE on the bucket.

use crate::algo::bucket::{self, Decision, Limit, MAX_AMOUNT, State, tokens_at, wait_until};
use crate::algo::lease::{is_live, now_ms};
use crate::algo::num::{format_f64, parse_f64};

/// The most outstanding holds one bucket keeps: it bounds the `holds` field to about 4 KB
/// (and the work of one call). A full table refuses the next hold like an empty bucket
/// would (a refusal with a wait, never an error a client could mistake for Redis down).
pub const MAX_HOLDS: usize = 100;

/// What a hold of `estimate` charges: at least `capacity / MAX_HOLDS`, one place's share
/// of the bucket, so a full table of holds has reserved at least the whole capacity.
/// Holds that cost nothing (an estimate of 5e-324) could otherwise fill the table for a
/// year and refuse every later hold on the bucket; the surplus comes back at settlement.
pub fn charge(limit: Limit, estimate: f64) -> f64 {
    estimate.max(limit.capacity / MAX_HOLDS as f64)
}

/// One outstanding hold.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    pub id: u64,
    /// The estimate charged, in `(0, MAX_AMOUNT]`.
    pub amount: f64,
    pub expiry_ms: u64,
}

/// Parses the `holds` field (`None`: not a list of holds; an empty text is no hold).
pub fn parse_holds(text: &[u8]) -> Option<Vec<Hold>> {
    let text = std::str::from_utf8(text).ok()?;
    let mut out = Vec::new();
    for item in text.split(' ').filter(|s| !s.is_empty()) {
        let mut parts = item.split(':');
        let (id, amount, expiry) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || id.len() != 16 {
            return None;
        }
        let id = u64::from_str_radix(id, 16).ok()?;
        let amount = parse_f64(amount.as_bytes()).filter(|a| *a > 0.0 && *a <= MAX_AMOUNT)?;
        if expiry.is_empty() || !expiry.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let expiry_ms = expiry.parse().ok()?;
        out.push(Hold {
            id,
            amount,
            expiry_ms,
        });
        if out.len() > MAX_HOLDS {
            return None;
        }
    }
    Some(out)
}

/// The `holds` field's text for `holds` (empty: the field is deleted).
pub fn format_holds(holds: &[Hold]) -> Vec<u8> {
    let mut out = Vec::with_capacity(holds.len() * 40);
    for (i, h) in holds.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        out.extend_from_slice(format!("{:016x}:", h.id).as_bytes());
        out.extend_from_slice(format_f64(h.amount).as_bytes());
        out.extend_from_slice(format!(":{}", h.expiry_ms).as_bytes());
    }
    out
}

/// The holds still live at `now_us` (an expired one keeps its estimate charged and its
/// record goes).
pub fn live(holds: &[Hold], now_us: u64) -> Vec<Hold> {
    let now = now_ms(now_us);
    holds
        .iter()
        .copied()
        .filter(|h| is_live(h.expiry_ms, now))
        .collect()
}

/// What TB.PEEK key HOLDS reports: the live holds' count, the sum of their estimates, and
/// the ms until the earliest expires (0: none).
pub fn summary(holds: &[Hold], now_us: u64) -> (usize, f64, u64) {
    let live = live(holds, now_us);
    let now = now_ms(now_us);
    let amount = live.iter().map(|h| h.amount).sum();
    let earliest = live.iter().map(|h| h.expiry_ms).min();
    (
        live.len(),
        amount,
        earliest.map_or(0, |e| e.saturating_sub(now)),
    )
}

fn seconds(now_us: u64) -> f64 {
    now_us as f64 / 1e6
}

/// TB.HOLD: takes `charge(estimate)` (estimate > 0) as TB.TAKE would at `now_us`, when
/// fewer than `MAX_HOLDS` of the bucket's holds are `live`; when taken, the hold `id`
/// lasts `ttl_ms` (expiry as a lease's: never early). With the table full it is refused
/// and nothing is charged: the wait is until a place frees (the earliest live hold's
/// expiry, a settlement may free one sooner) and the bucket has the tokens.
pub fn hold(
    limit: Limit,
    estimate: f64,
    ttl_ms: u64,
    id: u64,
    now_us: u64,
    stored: Option<State>,
    live: &[Hold],
) -> (Decision, Option<Hold>) {
    let amount = charge(limit, estimate);
    let now = seconds(now_us);
    if live.len() >= MAX_HOLDS {
        let d = bucket::report(limit, amount, now, stored);
        let place = live
            .iter()
            .map(|h| h.expiry_ms)
            .min()
            .map_or(0.0, |e| e.saturating_sub(now_ms(now_us)) as f64 / 1000.0);
        let retry_after = if d.retry_after < 0.0 {
            d.retry_after
        } else {
            d.retry_after.max(place)
        };
        return (
            Decision {
                allowed: false,
                retry_after,
                ..d
            },
            None,
        );
    }
    let d = bucket::take(limit, amount, now, stored);
    let hold = d.new_state.map(|_| Hold {
        id,
        amount,
        expiry_ms: crate::algo::lease::expiry_of(now_us, ttl_ms),
    });
    (d, hold)
}

/// TB.RENEW of hold `id` among the `live` holds at `now_us`: its new expiry (`ttl_ms` from
/// now, as a lease's renewal: it may also shorten it), or `None` when it is not live
/// (settled, expired or never made: a hold once lost is not handed back).
pub fn renew(live: &mut [Hold], id: u64, ttl_ms: u64, now_us: u64) -> Option<u64> {
    let hold = live.iter_mut().find(|h| h.id == id)?;
    hold.expiry_ms = crate::algo::lease::expiry_of(now_us, ttl_ms);
    Some(hold.expiry_ms)
}

/// The outcome of a TB.SETTLE.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settle {
    /// Whether a live hold was settled (false: unknown, settled already or expired).
    pub settled: bool,
    /// Tokens charged by the settlement: `actual - estimate` as applied (negative: given
    /// back; a refund stops at capacity, a charge at the debt bound).
    pub charged: f64,
    /// The bucket after it (`allowed` is `settled`; `retry_after` 0).
    pub decision: Decision,
}

/// TB.SETTLE of `hold` (`None`: not live) with the `actual` cost at `now_us`. The balance
/// never goes below `-max_debt` (TB.RESERVE's bounds: `max_wait * rate` when given,
/// `MAX_AMOUNT` always): an excess beyond it is not charged.
pub fn settle(
    limit: Limit,
    hold: Option<Hold>,
    actual: f64,
    max_debt: f64,
    now_us: u64,
    stored: Option<State>,
) -> Settle {
    let now = seconds(now_us);
    let Some(hold) = hold else {
        let d = bucket::peek(limit, now, stored);
        return Settle {
            settled: false,
            charged: 0.0,
            decision: Decision {
                allowed: false,
                retry_after: 0.0,
                ..d
            },
        };
    };
    let effective = stored.map_or(now, |s| s.last_refill_time.max(now));
    let current = tokens_at(limit, stored, effective);
    let delta = actual - hold.amount;
    let floor = -max_debt.clamp(0.0, MAX_AMOUNT);
    let tokens = if delta < 0.0 {
        // The surplus back, never above capacity (nor below what is there).
        (current - delta).min(limit.capacity).max(current)
    } else {
        // The excess charged, down to the floor (a balance already below it stays).
        (current - delta).max(floor.min(current))
    };
    let new_state = (tokens != current || stored.is_none()).then_some(State {
        tokens,
        last_refill_time: effective,
    });
    let after = new_state.or(stored);
    Settle {
        settled: true,
        charged: current - tokens,
        decision: Decision {
            allowed: true,
            remaining: tokens,
            retry_after: 0.0,
            reset_after: wait_until(limit, after, limit.capacity, now),
            new_state,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW_US: u64 = 1_764_456_268_123_456;
    const L: Limit = Limit {
        capacity: 10.0,
        rate: 1.0,
    };

    #[test]
    fn holds_round_trip_through_their_text() {
        let holds = vec![
            Hold {
                id: 0x0123_4567_89ab_cdef,
                amount: 2.5,
                expiry_ms: 1_764_456_269_124,
            },
            Hold {
                id: 1,
                amount: 3.0,
                expiry_ms: 7,
            },
        ];
        let text = format_holds(&holds);
        assert_eq!(
            text,
            b"0123456789abcdef:2.5:1764456269124 0000000000000001:3:7".to_vec()
        );
        assert_eq!(parse_holds(&text), Some(holds));
        assert_eq!(parse_holds(b""), Some(vec![]));
        for bad in [
            &b"x"[..],
            b"0123456789abcdef:2.5",
            b"0123456789abcdef:0:5",
            b"0123456789abcdef:-1:5",
            b"0123456789abcdef:1:-5",
            b"0123456789abcdef:1:5:6",
            b"123:1:5",
            b"0123456789abcdef:nan:5",
        ] {
            assert_eq!(parse_holds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_hold_takes_the_estimate_and_a_settle_charges_actual_minus_estimate() {
        let (d, h) = hold(L, 4.0, 1000, 9, NOW_US, None, &[]);
        assert!(d.allowed);
        assert_eq!(d.remaining, 6.0);
        let h = h.unwrap();
        assert_eq!(h.expiry_ms, 1_764_456_269_124);
        let s = settle(L, Some(h), 1.0, MAX_AMOUNT, NOW_US, d.new_state);
        assert!(s.settled);
        assert_eq!(s.charged, -3.0);
        assert_eq!(s.decision.remaining, 9.0);
        let s = settle(L, Some(h), 7.0, MAX_AMOUNT, NOW_US, d.new_state);
        assert_eq!(s.charged, 3.0);
        assert_eq!(s.decision.remaining, 3.0);
        // An excess beyond the bucket goes into debt, bounded.
        let s = settle(L, Some(h), 20.0, MAX_AMOUNT, NOW_US, d.new_state);
        assert_eq!(s.decision.remaining, -10.0);
        let s = settle(L, Some(h), 20.0, 2.0, NOW_US, d.new_state);
        assert_eq!(s.decision.remaining, -2.0);
        assert_eq!(s.charged, 8.0);
        // A refund never fills above capacity.
        let s = settle(L, Some(h), 0.0, MAX_AMOUNT, NOW_US + 3_000_000, d.new_state);
        assert_eq!(s.decision.remaining, 10.0);
        assert_eq!(s.charged, -1.0);
        // Not live: nothing changes.
        let s = settle(L, None, 0.0, MAX_AMOUNT, NOW_US, d.new_state);
        assert!(!s.settled);
        assert_eq!(s.decision.new_state, None);
        assert_eq!(s.decision.remaining, 6.0);
    }

    #[test]
    fn a_short_bucket_refuses_the_hold() {
        let (d, h) = hold(L, 11.0, 1000, 9, NOW_US, None, &[]);
        assert!(!d.allowed && h.is_none());
        assert_eq!(d.retry_after, -1.0);
    }

    #[test]
    fn a_hold_charges_at_least_one_place_and_settles_against_what_it_charged() {
        // 5e-324 of a bucket of 10: one place is 10 / 100.
        let (d, h) = hold(L, 5e-324, 1000, 9, NOW_US, None, &[]);
        let h = h.unwrap();
        assert_eq!(h.amount, 0.1);
        assert_eq!(d.remaining, 9.9);
        let s = settle(L, Some(h), 0.0, MAX_AMOUNT, NOW_US, d.new_state);
        assert_eq!(s.decision.remaining, 10.0);
        assert_eq!(charge(L, 4.0), 4.0);
        // A hundred holds of no cost spend the whole bucket: no table of free holds.
        let mut stored = None;
        let mut live = Vec::new();
        for id in 0..100 {
            let (d, h) = hold(L, 5e-324, 1000, id, NOW_US, stored, &live);
            live.extend(h);
            stored = d.new_state.or(stored);
        }
        assert_eq!(live.len(), 100);
        assert!(stored.unwrap().tokens.abs() < 1e-9);
    }

    #[test]
    fn a_full_table_refuses_with_the_wait_for_a_place_and_charges_nothing() {
        let now_ms = NOW_US / 1000;
        let big = Limit {
            capacity: 1e9,
            rate: 1.0,
        };
        let live: Vec<Hold> = (0..100)
            .map(|i| Hold {
                id: i,
                amount: 1e7,
                expiry_ms: now_ms + 5_000 + i,
            })
            .collect();
        let (d, h) = hold(big, 1.0, 1000, 999, NOW_US, None, &live);
        assert!(h.is_none() && !d.allowed && d.new_state.is_none());
        assert_eq!(d.retry_after, 5.0);
        assert_eq!(d.remaining, 1e9);
        // 99 live: a place is free.
        let (d, h) = hold(big, 1.0, 1000, 999, NOW_US, None, &live[1..]);
        assert!(d.allowed && h.is_some());
        // Full and short of tokens: the longer of the two waits; never stays never.
        let stored = Some(State {
            tokens: 0.0,
            last_refill_time: NOW_US as f64 / 1e6,
        });
        let (d, _) = hold(big, 1e7, 1000, 999, NOW_US, stored, &live);
        assert!(d.retry_after >= 1e7);
        let (d, _) = hold(big, 2e9, 1000, 999, NOW_US, stored, &live);
        assert_eq!(d.retry_after, -1.0);
    }

    #[test]
    fn renew_moves_a_live_holds_expiry_and_finds_nothing_else() {
        let now_ms = NOW_US / 1000;
        let mut live = vec![Hold {
            id: 7,
            amount: 1.0,
            expiry_ms: now_ms + 10,
        }];
        assert_eq!(
            renew(&mut live, 7, 60_000, NOW_US),
            Some(now_ms + 1 + 60_000)
        );
        assert_eq!(live[0].expiry_ms, now_ms + 1 + 60_000);
        assert_eq!(renew(&mut live, 8, 60_000, NOW_US), None);
    }

    #[test]
    fn expired_holds_leave_the_list_and_the_summary() {
        let h = |id, expiry_ms| Hold {
            id,
            amount: 2.0,
            expiry_ms,
        };
        let now_ms = NOW_US / 1000;
        let holds = [h(1, now_ms), h(2, now_ms + 5), h(3, now_ms + 9)];
        assert_eq!(
            live(&holds, NOW_US),
            vec![h(2, now_ms + 5), h(3, now_ms + 9)]
        );
        assert_eq!(summary(&holds, NOW_US), (2, 4.0, 5));
        assert_eq!(summary(&[], NOW_US), (0, 0.0, 0));
    }

    proptest! {
        /// Hold then settle changes the bucket by exactly the actual cost, when neither the
        /// capacity nor the debt bound clips it.
        #[test]
        fn settle_nets_to_the_actual_cost(
            tokens in 0.0f64..10.0,
            estimate in 0.01f64..10.0,
            actual in 0.0f64..30.0,
        ) {
            let stored = Some(State { tokens, last_refill_time: NOW_US as f64 / 1e6 });
            let (d, h) = hold(L, estimate, 1000, 1, NOW_US, stored, &[]);
            prop_assume!(d.allowed);
            let s = settle(L, h, actual, MAX_AMOUNT, NOW_US, d.new_state.or(stored));
            let after = s.decision.remaining;
            prop_assert!((after - (tokens - actual)).abs() < 1e-9, "{} {}", after, tokens - actual);
        }

        #[test]
        fn any_bytes_parse_or_fail_without_panicking(b in prop::collection::vec(any::<u8>(), 0..64)) {
            if let Some(h) = parse_holds(&b) {
                prop_assert_eq!(parse_holds(&format_holds(&h)), Some(h));
            }
        }

        #[test]
        fn the_balance_stays_between_the_debt_bound_and_capacity(
            tokens in -20.0f64..10.0,
            amount in 0.01f64..10.0,
            actual in 0.0f64..1e6,
            max_debt in 0.0f64..100.0,
        ) {
            let stored = Some(State { tokens, last_refill_time: NOW_US as f64 / 1e6 });
            let h = Hold { id: 1, amount, expiry_ms: u64::MAX };
            let s = settle(L, Some(h), actual, max_debt, NOW_US, stored);
            let r = s.decision.remaining;
            prop_assert!(r <= L.capacity.max(tokens));
            prop_assert!(r >= (-max_debt).min(tokens));
        }
    }
}
