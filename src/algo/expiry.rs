//! When to (re)set a bucket's TTL. Pure: server-clock milliseconds in, a plan out.
//!
//! The key must outlive the time until its bucket is full again (a missing key means a
//! full bucket, so expiring any earlier would hand out tokens), and should not live
//! wildly longer (idle buckets should cost no memory). Between those bounds an existing
//! TTL is kept, so most calls neither set nor replicate an expiry.

/// Beyond this TTL (about 31,700 years) the key is simply kept without one.
pub const MAX_TTL_MS: i64 = 1_000_000_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryPlan {
    /// The current expiry is within bounds: touch nothing.
    Keep,
    /// Set this absolute expiry (Unix milliseconds, server clock).
    SetAt(i64),
    /// Remove the expiry: time-to-full is beyond any sensible TTL.
    Persist,
}

/// Plans the expiry of a key whose bucket is full `reset_after` seconds from `now_ms`.
/// `current` is the key's absolute expiry in ms, or `None` when it has none.
pub fn plan(current: Option<i64>, now_ms: i64, reset_after: f64) -> ExpiryPlan {
    // Round up to whole milliseconds so the key never expires a fraction early.
    let ttl = (reset_after.max(0.0) * 1000.0).ceil();
    if ttl >= MAX_TTL_MS as f64 {
        return match current {
            None => ExpiryPlan::Keep,
            Some(_) => ExpiryPlan::Persist,
        };
    }
    let ttl = ttl as i64;
    // Slack grows with the TTL so that busy buckets, whose time-to-full creeps forward
    // with every take, rewrite their expiry only every so often: at most 1 s + 25% late.
    let slack = 1000 + ttl / 4;
    let earliest = now_ms.saturating_add(ttl);
    let latest = earliest.saturating_add(slack);
    match current {
        Some(at) if (earliest..=latest).contains(&at) => ExpiryPlan::Keep,
        _ => ExpiryPlan::SetAt(earliest.saturating_add(slack / 2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NOW: i64 = 1_764_456_268_123;

    #[test]
    fn sets_an_expiry_on_a_key_without_one() {
        // Slack is 1 s + 25% of 5 s; the expiry lands in the middle of the window.
        assert_eq!(plan(None, NOW, 5.0), ExpiryPlan::SetAt(NOW + 5000 + 1125));
    }

    #[test]
    fn keeps_an_expiry_that_still_covers_time_to_full() {
        assert_eq!(plan(Some(NOW + 5200), NOW, 5.0), ExpiryPlan::Keep);
    }

    #[test]
    fn moves_an_expiry_that_is_too_short_or_far_too_long() {
        assert!(matches!(
            plan(Some(NOW + 4999), NOW, 5.0),
            ExpiryPlan::SetAt(_)
        ));
        assert!(matches!(
            plan(Some(NOW + 60_000), NOW, 5.0),
            ExpiryPlan::SetAt(_)
        ));
    }

    #[test]
    fn rounds_sub_millisecond_waits_up() {
        assert_eq!(plan(None, NOW, 0.0001), ExpiryPlan::SetAt(NOW + 1 + 500));
    }

    #[test]
    fn huge_waits_mean_no_expiry() {
        assert_eq!(plan(None, NOW, 1e20), ExpiryPlan::Keep);
        assert_eq!(plan(Some(NOW + 10), NOW, 1e20), ExpiryPlan::Persist);
    }

    proptest! {
        #[test]
        fn the_key_outlives_the_refill_and_not_wildly(
            current in proptest::option::of(NOW - 10_000..NOW + 10_000_000),
            reset_after in 0.0..100_000.0f64,
        ) {
            let expires_at = match plan(current, NOW, reset_after) {
                ExpiryPlan::Keep => current.unwrap(),
                ExpiryPlan::SetAt(at) => at,
                ExpiryPlan::Persist => unreachable!(),
            };
            let ttl_s = (expires_at - NOW) as f64 / 1000.0;
            prop_assert!(ttl_s >= reset_after);
            prop_assert!(ttl_s <= reset_after * 1.25 + 1.002);
        }
    }
}
