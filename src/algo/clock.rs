//! How far ahead of the server's clock a client's `now` may be. Pure: the server's time and
//! the bound are parameters.
//!
//! A stored time never moves backwards (`bucket::take`, the windows), so a `now` far in the
//! future pins the key: every caller on the server's clock is then refused until the server
//! catches up. Refusing such a `now` bounds how far any stored time can get ahead of the
//! server, and so how long a wrong client clock can pin a key. A `now` in the past is never
//! refused: it cannot pin anything (it gets no refill and is served at the stored time).

/// The default bound, in milliseconds (the `max-clock-ahead-ms` load argument): an app
/// server synchronized by NTP is milliseconds off; one that is 10 s ahead pins a key for at
/// most 10 s; a `now` in milliseconds or microseconds is above `bucket::MAX_TIME` anyway.
pub const DEFAULT_MAX_AHEAD_MS: u64 = 10_000;

/// The largest bound accepted at load: the last accepted time in milliseconds (a bound
/// this large switches the check off for every accepted `now`).
pub const MAX_MAX_AHEAD_MS: u64 = 253_402_300_800_000;

/// The latest `now` (seconds since the epoch) accepted when the server's clock reads
/// `server_micros` and the bound is `max_ahead_ms`.
pub fn latest_now(server_micros: u64, max_ahead_ms: u64) -> f64 {
    let latest = server_micros.saturating_add(max_ahead_ms.saturating_mul(1000));
    latest as f64 / 1e6
}

/// Whether a client's `now` is at most `max_ahead_ms` ahead of the server's clock
/// (`server_micros`). Any `now` at or before the server's time is within it.
pub fn within_bound(now: f64, server_micros: u64, max_ahead_ms: u64) -> bool {
    now <= latest_now(server_micros, max_ahead_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::bucket::{Limit, MAX_TIME, State, take};
    use proptest::prelude::*;

    const SERVER: u64 = 1_764_456_268_123_456;

    #[test]
    fn the_bound_refuses_what_is_further_ahead_and_nothing_behind() {
        let server = SERVER as f64 / 1e6;
        let bound = DEFAULT_MAX_AHEAD_MS;
        assert!(within_bound(server, SERVER, bound));
        assert!(within_bound(0.0, SERVER, bound));
        assert!(within_bound(server - 86_400.0, SERVER, bound));
        assert!(within_bound(server + 10.0, SERVER, bound));
        assert!(!within_bound(server + 10.001, SERVER, bound));
        // The case: an hour ahead.
        assert!(!within_bound(server + 3600.0, SERVER, bound));
        // A bound of 0: not even a microsecond ahead.
        assert!(within_bound(server, SERVER, 0));
        assert!(!within_bound(server + 1e-5, SERVER, 0));
        // The largest bound accepts every accepted `now`.
        assert!(within_bound(MAX_TIME.next_down(), 0, MAX_MAX_AHEAD_MS));
        assert!(within_bound(MAX_TIME.next_down(), u64::MAX, u64::MAX));
    }

    proptest! {
        /// Arbitrary clocks and bounds: never a panic, the past always accepted, and a
        /// bucket taken at an accepted `now` stores no time past the bound unless it was
        /// stored there already (the stored time is max(stored, now)).
        #[test]
        fn fuzz_clock_bound_never_pushes_a_stored_time_past_it(
            now in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
            server in prop_oneof![Just(0u64), Just(SERVER), Just(u64::MAX), any::<u64>()],
            bound in prop_oneof![Just(0u64), Just(DEFAULT_MAX_AHEAD_MS), Just(MAX_MAX_AHEAD_MS), any::<u64>()],
            last in proptest::option::of(0.0..MAX_TIME),
        ) {
            let ok = within_bound(now, server, bound);
            if now <= server as f64 / 1e6 {
                prop_assert!(ok);
            }
            if !ok {
                // Refused: the caller writes nothing.
                return Ok(());
            }
            let stored = last.map(|t| State { tokens: 0.0, last_refill_time: t });
            let limit = Limit { capacity: 10.0, rate: 10.0 };
            if let Some(s) = take(limit, 1.0, now, stored).new_state {
                let ceiling = latest_now(server, bound).max(last.unwrap_or(0.0));
                prop_assert!(s.last_refill_time <= ceiling, "{s:?} {ceiling}");
            }
        }
    }
}
