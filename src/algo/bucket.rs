//! Token-bucket arithmetic. Pure: no Redis types, no clock; time is a parameter in seconds
//! since the Unix epoch. Everything that decides "allowed or not" lives here.

/// Largest capacity, rate and `n` accepted: 2^53, above which token counts stop being exact
/// integers in an f64.
pub const MAX_AMOUNT: f64 = 9_007_199_254_740_992.0;
/// Smallest refill rate accepted (one token per ~31.7 years). With `MAX_AMOUNT` it bounds
/// every wait this module computes to a finite number of seconds.
pub const MIN_RATE: f64 = 1e-9;
/// Times are accepted in `[0, MAX_TIME)`: up to the end of year 9999. A millisecond
/// timestamp passed by mistake (1.7e12) falls outside and is refused rather than freezing
/// the bucket for decades.
pub const MAX_TIME: f64 = 253_402_300_800.0;

/// The bucket's shape, given by the caller on every call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    /// Bucket size (burst), in `(0, MAX_AMOUNT]`.
    pub capacity: f64,
    /// Tokens added per second, in `[MIN_RATE, MAX_AMOUNT]`.
    pub rate: f64,
}

/// What is stored between calls: the `tokens` and `last_refill_time` hash fields.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct State {
    pub tokens: f64,
    pub last_refill_time: f64,
}

impl State {
    /// Whether a stored state is one this module can reason about.
    pub fn is_sane(&self) -> bool {
        valid_stored_tokens(self.tokens) && valid_time(self.last_refill_time)
    }
}

/// Stored tokens above any capacity are fine (they are clamped); non-finite values, or a
/// deficit deeper than any request could leave, are not.
pub fn valid_stored_tokens(tokens: f64) -> bool {
    tokens.is_finite() && tokens >= -MAX_AMOUNT
}

/// A time this module accepts, as an argument or stored.
pub fn valid_time(t: f64) -> bool {
    (0.0..MAX_TIME).contains(&t)
}

/// The outcome of one take. Being limited is a normal outcome, not an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    /// Tokens in the bucket after this call.
    pub remaining: f64,
    /// Seconds until `n` tokens will be there: 0 when allowed, -1 when never (n > capacity).
    pub retry_after: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
    /// The state to store, when this call changed it. `None`: write nothing.
    pub new_state: Option<State>,
}

/// Tokens in the bucket at time `t`. A missing bucket is full. Time before the stored
/// refill time adds nothing (clocks disagree; refill never runs backwards), and stored
/// tokens above a lowered capacity are clamped.
pub fn tokens_at(limit: Limit, stored: Option<State>, t: f64) -> f64 {
    match stored {
        None => limit.capacity,
        Some(s) => {
            let elapsed = (t - s.last_refill_time).max(0.0);
            (s.tokens + elapsed * limit.rate).min(limit.capacity)
        }
    }
}

/// The bucket's own clock: the later of `now` and the stored time. It never moves
/// backwards, so a caller whose clock is behind is served at the stored time.
fn effective_time(stored: Option<State>, now: f64) -> f64 {
    stored.map_or(now, |s| s.last_refill_time.max(now))
}

/// The bucket as it stands at `now`, changing nothing: `allowed` says whether `n` tokens
/// are there (with a balance in debt after reservations, `n = 0` is "not in debt").
pub fn report(limit: Limit, n: f64, now: f64, stored: Option<State>) -> Decision {
    let current = tokens_at(limit, stored, effective_time(stored, now));
    let (allowed, retry_after) = if n > limit.capacity {
        (false, -1.0)
    } else if current >= n {
        (true, 0.0)
    } else {
        (false, wait_until(limit, stored, n, now))
    };
    Decision {
        allowed,
        remaining: current,
        retry_after,
        reset_after: wait_until(limit, stored, limit.capacity, now),
        new_state: None,
    }
}

/// Refill, then take `n` tokens at time `now` if they are there. A call that takes
/// nothing (`n = 0`, `n > capacity`, too few tokens) only reports the bucket.
pub fn take(limit: Limit, n: f64, now: f64, stored: Option<State>) -> Decision {
    let effective = effective_time(stored, now);
    let current = tokens_at(limit, stored, effective);
    if n == 0.0 || n > limit.capacity || current < n {
        return report(limit, n, now, stored);
    }
    let new_state = State {
        tokens: current - n,
        last_refill_time: effective,
    };
    Decision {
        allowed: true,
        remaining: new_state.tokens,
        retry_after: 0.0,
        reset_after: wait_until(limit, Some(new_state), limit.capacity, now),
        new_state: Some(new_state),
    }
}

/// TB.PEEK: the bucket at `now` and whether one token could be taken, changing nothing.
pub fn peek(limit: Limit, now: f64, stored: Option<State>) -> Decision {
    report(limit, 1.0, now, stored)
}

/// TB.REFUND: gives `n` tokens back after the refill, never above the capacity. A
/// missing bucket is already full; a refund that adds nothing writes nothing.
pub fn refund(limit: Limit, n: f64, now: f64, stored: Option<State>) -> Decision {
    let effective = effective_time(stored, now);
    let current = tokens_at(limit, stored, effective);
    let tokens = (current + n).min(limit.capacity);
    if stored.is_none() || tokens <= current {
        return Decision {
            allowed: true,
            remaining: current,
            retry_after: 0.0,
            reset_after: wait_until(limit, stored, limit.capacity, now),
            new_state: None,
        };
    }
    let state = State {
        tokens,
        last_refill_time: effective,
    };
    Decision {
        allowed: true,
        remaining: tokens,
        retry_after: 0.0,
        reset_after: wait_until(limit, Some(state), limit.capacity, now),
        new_state: Some(state),
    }
}

/// TB.RESERVE: a leaky bucket used as a queue. Takes `n` tokens if they are there (wait
/// 0); otherwise, if they will be there within `max_wait` seconds, takes them anyway (the
/// balance goes into debt, paid back by the refill) and answers the wait after which the
/// caller may proceed; otherwise denies, writing nothing, with the wait after which the
/// same reservation would be accepted.
///
/// The debt is bounded twice: by `max_wait * rate` (through the wait) and by `MAX_AMOUNT`,
/// so whatever `max_wait` says (1e308 included) the stored balance stays finite and
/// readable (`valid_stored_tokens`).
pub fn reserve(limit: Limit, n: f64, max_wait: f64, now: f64, stored: Option<State>) -> Decision {
    let effective = effective_time(stored, now);
    let current = tokens_at(limit, stored, effective);
    if n > limit.capacity || n == 0.0 || current >= n {
        return take(limit, n, now, stored);
    }
    if let Some(wait) = reservation_wait(limit, n, max_wait, now, stored) {
        let state = State {
            tokens: current - n,
            last_refill_time: effective,
        };
        return Decision {
            allowed: true,
            remaining: state.tokens,
            retry_after: wait,
            reset_after: wait_until(limit, Some(state), limit.capacity, now),
            new_state: Some(state),
        };
    }
    // The earliest retry: when the wait has shrunk to max_wait and the debt fits, checked
    // (and nudged up) the way the caller will use it, like `wait_until`.
    let deepest = n - MAX_AMOUNT;
    let guess =
        (wait_until(limit, stored, n, now) - max_wait).max(wait_until(limit, stored, deepest, now));
    let retry = settle_wait(now, guess, |t| {
        reservation_wait(limit, n, max_wait, t, stored).is_some()
    });
    Decision {
        allowed: false,
        remaining: current,
        retry_after: retry,
        reset_after: wait_until(limit, stored, limit.capacity, now),
        new_state: None,
    }
}

/// The wait of a reservation of `n` (<= capacity) at `now`, when it is acceptable: within
/// `max_wait`, and leaving a balance no deeper than `-MAX_AMOUNT`.
fn reservation_wait(
    limit: Limit,
    n: f64,
    max_wait: f64,
    now: f64,
    stored: Option<State>,
) -> Option<f64> {
    let current = tokens_at(limit, stored, effective_time(stored, now));
    let wait = wait_until(limit, stored, n, now);
    (wait <= max_wait && current - n >= -MAX_AMOUNT).then_some(wait)
}

/// One bucket of a TB.MTAKE: its shape, the tokens asked for and its stored state.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Part {
    pub limit: Limit,
    pub n: f64,
    pub stored: Option<State>,
}

/// TB.MTAKE: takes from every bucket or from none, at one `now`.
///
/// Returns the aggregate (allowed only if every bucket had enough; the smallest
/// remaining; when denied, -1 if any bucket can never succeed, else the longest wait;
/// the longest reset) and one decision per bucket. When any bucket is short, no decision
/// carries a state to store, and each bucket is reported as it stands (its `allowed`:
/// "this bucket alone had enough").
pub fn take_all(parts: &[Part], now: f64) -> (Decision, Vec<Decision>) {
    let mut each: Vec<Decision> = parts
        .iter()
        .map(|p| take(p.limit, p.n, now, p.stored))
        .collect();
    let allowed = each.iter().all(|d| d.allowed);
    if !allowed {
        for (d, p) in each.iter_mut().zip(parts) {
            if d.new_state.is_some() {
                *d = report(p.limit, p.n, now, p.stored);
            }
        }
    }
    (aggregate(&each), each)
}

/// The aggregate of several buckets' decisions, as TB.MTAKE replies it: allowed only if
/// every one is; the smallest remaining; when denied, -1 if any can never succeed, else
/// the longest wait; the longest reset.
pub fn aggregate(each: &[Decision]) -> Decision {
    let allowed = each.iter().all(|d| d.allowed);
    let never = each.iter().any(|d| d.retry_after < 0.0);
    let max = |f: fn(&Decision) -> f64| each.iter().map(f).fold(0.0, f64::max);
    Decision {
        allowed,
        remaining: each
            .iter()
            .map(|d| d.remaining)
            .reduce(f64::min)
            .unwrap_or(0.0),
        retry_after: if allowed {
            0.0
        } else if never {
            -1.0
        } else {
            max(|d| d.retry_after)
        },
        reset_after: max(|d| d.reset_after),
        new_state: None,
    }
}

/// Seconds `w` from `now` such that the bucket holds at least `target` tokens at the
/// floating-point time `now + w`, and not noticeably earlier (`settle_wait` checks the
/// closed form the way the caller will use it). `target` must be at most the capacity.
pub fn wait_until(limit: Limit, stored: Option<State>, target: f64, now: f64) -> f64 {
    if tokens_at(limit, stored, now) >= target {
        return 0.0;
    }
    let effective = stored.map_or(now, |s| s.last_refill_time.max(now));
    let short = (target - tokens_at(limit, stored, effective)).max(0.0);
    let guess = (effective - now) + short / limit.rate;
    settle_wait(now, guess, |t| tokens_at(limit, stored, t) >= target)
}

/// The wait, from `guess` (the closed form) up, after which `ok` holds at the
/// floating-point time `now + wait`: the time the caller will actually come back at,
/// which at epoch magnitudes is `now + wait` rounded to a step of about 2.4e-7 s. The
/// closed form is kept when that rounding leaves it right (so a wait of 0.6 s reads
/// `0.6`); otherwise it is nudged up by steps that double, so the loop ends after a few
/// rounds even where one step of time moves the state by far less than one ulp. `ok` must
/// be monotone in time (false, then true for good). Shared by the bucket and window math.
pub fn settle_wait(now: f64, guess: f64, ok: impl Fn(f64) -> bool) -> f64 {
    let mut wait = guess.max(0.0);
    let mut step = ulp(now + wait).max(ulp(wait));
    for _ in 0..1100 {
        if ok(now + wait) {
            break;
        }
        let next = wait + step;
        if !next.is_finite() {
            break;
        }
        wait = next;
        step *= 2.0;
    }
    wait
}

/// The distance from `x` to the next larger f64.
pub(crate) fn ulp(x: f64) -> f64 {
    let up = x.next_up();
    if up.is_finite() { up - x } else { f64::EPSILON }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    pub(super) const T0: f64 = 1_764_456_268.123456;

    pub(super) fn lim(capacity: f64, rate: f64) -> Limit {
        Limit { capacity, rate }
    }

    pub(super) fn st(tokens: f64, last_refill_time: f64) -> Option<State> {
        Some(State {
            tokens,
            last_refill_time,
        })
    }

    #[test]
    fn table_of_cases() {
        // (limit, stored, n, now) -> (allowed, remaining, retry_after, reset_after, writes)
        struct Case {
            name: &'static str,
            limit: Limit,
            stored: Option<State>,
            n: f64,
            now: f64,
            allowed: bool,
            remaining: f64,
            retry_after: f64,
            reset_after: f64,
            writes: Option<State>,
        }
        let cases = [
            Case {
                name: "missing key is a full bucket",
                limit: lim(10.0, 2.0),
                stored: None,
                n: 1.0,
                now: 100.0,
                allowed: true,
                remaining: 9.0,
                retry_after: 0.0,
                reset_after: 0.5,
                writes: st(9.0, 100.0),
            },
            Case {
                name: "refill is capped at capacity",
                limit: lim(10.0, 2.0),
                stored: st(0.0, 100.0),
                n: 3.0,
                now: 200.0,
                allowed: true,
                remaining: 7.0,
                retry_after: 0.0,
                reset_after: 1.5,
                writes: st(7.0, 200.0),
            },
            Case {
                name: "denied reports the wait and writes nothing",
                limit: lim(10.0, 2.0),
                stored: st(1.0, 100.0),
                n: 3.0,
                now: 100.5,
                allowed: false,
                remaining: 2.0,
                retry_after: 0.5,
                reset_after: 4.0,
                writes: None,
            },
            Case {
                name: "n above capacity is never",
                limit: lim(10.0, 2.0),
                stored: st(10.0, 100.0),
                n: 11.0,
                now: 100.0,
                allowed: false,
                remaining: 10.0,
                retry_after: -1.0,
                reset_after: 0.0,
                writes: None,
            },
            Case {
                name: "n zero reports and writes nothing",
                limit: lim(10.0, 2.0),
                stored: st(4.0, 100.0),
                n: 0.0,
                now: 101.0,
                allowed: true,
                remaining: 6.0,
                retry_after: 0.0,
                reset_after: 2.0,
                writes: None,
            },
            Case {
                name: "a clock behind the stored time adds no refill and keeps the stored time",
                limit: lim(10.0, 2.0),
                stored: st(5.0, 100.0),
                n: 1.0,
                now: 90.0,
                allowed: true,
                remaining: 4.0,
                retry_after: 0.0,
                reset_after: 13.0,
                writes: st(4.0, 100.0),
            },
            Case {
                name: "a clock behind waits for the stored time too",
                limit: lim(10.0, 2.0),
                stored: st(0.0, 100.0),
                n: 1.0,
                now: 90.0,
                allowed: false,
                remaining: 0.0,
                retry_after: 10.5,
                reset_after: 15.0,
                writes: None,
            },
            Case {
                name: "tokens above a lowered capacity are clamped",
                limit: lim(5.0, 1.0),
                stored: st(50.0, 100.0),
                n: 1.0,
                now: 100.0,
                allowed: true,
                remaining: 4.0,
                retry_after: 0.0,
                reset_after: 1.0,
                writes: st(4.0, 100.0),
            },
            Case {
                name: "fractional rate of 100 per minute",
                limit: lim(100.0, 100.0 / 60.0),
                stored: st(0.0, 0.0),
                n: 1.0,
                now: 0.3,
                allowed: false,
                remaining: 0.5,
                retry_after: 0.3,
                reset_after: 59.7,
                writes: None,
            },
        ];
        for c in cases {
            let d = take(c.limit, c.n, c.now, c.stored);
            assert_eq!(d.allowed, c.allowed, "{}", c.name);
            assert!(
                (d.remaining - c.remaining).abs() < 1e-9,
                "{}: {d:?}",
                c.name
            );
            assert!(
                (d.retry_after - c.retry_after).abs() < 1e-9,
                "{}: {d:?}",
                c.name
            );
            assert!(
                (d.reset_after - c.reset_after).abs() < 1e-9,
                "{}: {d:?}",
                c.name
            );
            assert_eq!(d.new_state, c.writes, "{}", c.name);
        }
    }

    #[test]
    fn retry_after_is_exact_at_epoch_scale_with_awkward_rates() {
        let limit = lim(100.0, 100.0 / 60.0);
        let mut stored = None;
        let mut now = T0;
        for _ in 0..100 {
            stored = take(limit, 1.0, now, stored).new_state.or(stored);
        }
        for _ in 0..1000 {
            let d = take(limit, 1.0, now, stored);
            if d.allowed {
                stored = d.new_state;
                continue;
            }
            let retry = take(limit, 1.0, now + d.retry_after, stored);
            assert!(retry.allowed, "now={now} {d:?}");
            stored = retry.new_state;
            now += d.retry_after;
        }
    }

    /// A straightforward model of the contract, written independently of `take`: a map
    /// of fields, updated as the formula says.
    fn reference(limit: Limit, n: f64, now: f64, hash: &mut Option<(f64, f64)>) -> (bool, f64) {
        let (tokens, last) = match *hash {
            None => (limit.capacity, now),
            Some((tokens, last)) => (
                limit
                    .capacity
                    .min(tokens + (now - last).max(0.0) * limit.rate),
                last,
            ),
        };
        let allowed = n <= limit.capacity && tokens >= n;
        if allowed && n > 0.0 {
            *hash = Some((tokens - n, if now > last { now } else { last }));
            (true, tokens - n)
        } else {
            (allowed, tokens)
        }
    }

    fn limit_strategy() -> impl Strategy<Value = Limit> {
        (
            prop_oneof![1.0..1000.0f64, (1u32..1000).prop_map(f64::from)],
            prop_oneof![0.001..1000.0f64, Just(100.0 / 60.0), Just(1.0)],
        )
            .prop_map(|(capacity, rate)| Limit { capacity, rate })
    }

    /// Calls at increasing-but-jittery times around an epoch time: some steps go back
    /// (clock skew between app servers), most go forward.
    fn calls() -> impl Strategy<Value = Vec<(f64, f64)>> {
        proptest::collection::vec(
            (
                prop_oneof![
                    Just(1.0),
                    Just(0.0),
                    0.0..5.0f64,
                    (0u32..4).prop_map(f64::from)
                ],
                -0.5..2.0f64,
            ),
            1..80,
        )
    }

    proptest! {
        #[test]
        fn tokens_stay_within_zero_and_capacity(limit in limit_strategy(), calls in calls()) {
            let mut stored = None;
            let mut now = T0;
            for (n, dt) in calls {
                now += dt;
                let d = take(limit, n, now, stored);
                if let Some(s) = d.new_state {
                    prop_assert!(s.tokens >= 0.0 && s.tokens <= limit.capacity, "{s:?}");
                    stored = Some(s);
                }
                prop_assert!(d.remaining <= limit.capacity);
                prop_assert!(d.retry_after.is_finite() && d.reset_after.is_finite());
                prop_assert!(d.reset_after >= 0.0);
            }
        }

        #[test]
        fn admitted_total_never_exceeds_capacity_plus_refill(limit in limit_strategy(), calls in calls()) {
            let mut stored = None;
            let mut now = T0;
            let mut latest = T0;
            // The bucket starts full at the time of the call that first writes it, which
            // may be before T0 (the first step can go back).
            let mut origin = None;
            let mut admitted = 0.0;
            for (n, dt) in calls {
                now += dt;
                latest = latest.max(now);
                let d = take(limit, n, now, stored);
                if d.allowed {
                    admitted += n;
                }
                if stored.is_none() && d.new_state.is_some() {
                    origin = Some(now);
                }
                stored = d.new_state.or(stored);
            }
            let bound = limit.capacity + limit.rate * (latest - origin.unwrap_or(latest));
            prop_assert!(admitted <= bound * (1.0 + 1e-12) + 1e-9, "admitted {admitted} > {bound}");
        }

        #[test]
        fn stored_time_never_moves_backwards(limit in limit_strategy(), calls in calls()) {
            let mut stored: Option<State> = None;
            let mut now = T0;
            for (n, dt) in calls {
                now += dt;
                let d = take(limit, n, now, stored);
                if let (Some(old), Some(new)) = (stored, d.new_state) {
                    prop_assert!(new.last_refill_time >= old.last_refill_time);
                }
                stored = d.new_state.or(stored);
            }
        }

        #[test]
        fn denied_take_succeeds_at_retry_after_and_not_noticeably_before(
            limit in limit_strategy(),
            calls in calls(),
            n in prop_oneof![Just(1.0), 0.01..50.0f64],
        ) {
            let mut stored = None;
            let mut now = T0;
            for (m, dt) in calls {
                now += dt;
                stored = take(limit, m, now, stored).new_state.or(stored);
            }
            let d = take(limit, n, now, stored);
            if d.allowed || d.retry_after < 0.0 {
                prop_assert!(d.allowed || n > limit.capacity);
                return Ok(());
            }
            prop_assert!(d.retry_after > 0.0);
            prop_assert!(take(limit, n, now + d.retry_after, stored).allowed, "{d:?}");
            // Earlier by one microsecond plus a millionth of the wait: still denied.
            let early = d.retry_after - 1e-6 - d.retry_after * 1e-6;
            if early > 0.0 {
                prop_assert!(!take(limit, n, now + early, stored).allowed, "{d:?}");
            }
        }

        #[test]
        fn bucket_is_full_at_reset_after(limit in limit_strategy(), calls in calls()) {
            let mut stored = None;
            let mut now = T0;
            for (n, dt) in calls {
                now += dt;
                let d = take(limit, n, now, stored);
                stored = d.new_state.or(stored);
                prop_assert!(tokens_at(limit, stored, now + d.reset_after) >= limit.capacity);
            }
        }

        #[test]
        fn matches_the_reference_model(limit in limit_strategy(), calls in calls()) {
            let mut stored = None;
            let mut model = None;
            let mut now = T0;
            for (n, dt) in calls {
                now += dt;
                let d = take(limit, n, now, stored);
                let (allowed, remaining) = reference(limit, n, now, &mut model);
                prop_assert_eq!(d.allowed, allowed);
                prop_assert_eq!(d.remaining, remaining);
                stored = d.new_state.or(stored);
                prop_assert_eq!(stored.map(|s| (s.tokens, s.last_refill_time)), model);
            }
        }

        #[test]
        fn extreme_but_accepted_inputs_give_finite_answers(
            capacity in prop_oneof![Just(MAX_AMOUNT), Just(1e-300), 1e-9..MAX_AMOUNT],
            rate in prop_oneof![Just(MIN_RATE), Just(MAX_AMOUNT), MIN_RATE..MAX_AMOUNT],
            n in prop_oneof![Just(0.0), Just(MAX_AMOUNT), 0.0..MAX_AMOUNT],
            now in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
            tokens in prop_oneof![Just(-MAX_AMOUNT), Just(f64::MAX), Just(0.0), -MAX_AMOUNT..f64::MAX],
            last in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
        ) {
            let stored = State { tokens, last_refill_time: last };
            prop_assert!(stored.is_sane());
            for s in [None, Some(stored)] {
                let d = take(Limit { capacity, rate }, n, now, s);
                prop_assert!(d.remaining.is_finite() && d.retry_after.is_finite() && d.reset_after.is_finite(), "{d:?}");
                prop_assert!(d.remaining <= capacity);
                if let Some(w) = d.new_state {
                    prop_assert!(w.tokens >= 0.0 && w.tokens <= capacity && w.is_sane());
                }
            }
        }
    }
}

/// The operations TB.MTAKE, TB.RESERVE, TB.PEEK and TB.REFUND add, and how they mix.
#[cfg(test)]
mod toolkit_tests {
    use super::tests::{T0, lim, st};
    use super::*;
    use proptest::prelude::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 + b.abs() * 1e-12
    }

    #[test]
    fn reserve_takes_waits_or_denies() {
        let l = lim(1.0, 2.0);
        // Full: taken, no wait.
        let d = reserve(l, 1.0, 10.0, 100.0, None);
        assert_eq!((d.allowed, d.remaining, d.retry_after), (true, 0.0, 0.0));
        assert_eq!(d.new_state, st(0.0, 100.0));
        // Empty: reserved, wait 0.5 s, balance -1.
        let d = reserve(l, 1.0, 10.0, 100.0, d.new_state);
        assert_eq!((d.allowed, d.remaining, d.retry_after), (true, -1.0, 0.5));
        assert_eq!(d.reset_after, 1.0);
        assert_eq!(d.new_state, st(-1.0, 100.0));
        // A wait of 1 s with max_wait 0.25: denied, retry when the wait is down to 0.25.
        let stored = d.new_state;
        let d = reserve(l, 1.0, 0.25, 100.0, stored);
        assert!(!d.allowed && d.new_state.is_none());
        assert!(close(d.retry_after, 0.75), "{d:?}");
        assert!(reserve(l, 1.0, 0.25, 100.0 + d.retry_after, stored).allowed);
        // n above capacity: never.
        let d = reserve(l, 2.0, 1e308, 100.0, stored);
        assert_eq!((d.allowed, d.retry_after), (false, -1.0));
        // n = 0 only reports: in debt, so "not allowed" with the wait until out of it.
        let d = reserve(l, 0.0, 10.0, 100.0, stored);
        assert_eq!((d.allowed, d.remaining, d.new_state), (false, -1.0, None));
        assert_eq!(d.retry_after, 0.5);
    }

    #[test]
    fn reserve_pins_the_upper_edge_of_max_wait_exactly() {
        let l = lim(1.0, 1.0);
        let empty = st(0.0, 1000.0);
        // The wait is exactly 1 s: a max_wait of exactly 1 s books it.
        let d = reserve(l, 1.0, 1.0, 1000.0, empty);
        assert_eq!((d.allowed, d.retry_after, d.remaining), (true, 1.0, -1.0));
        // Half a microsecond short: refused, nothing written, and the retry is when the
        // wait has shrunk to max_wait (5e-7 s later).
        let d = reserve(l, 1.0, 0.9999995, 1000.0, empty);
        assert!(!d.allowed && d.new_state.is_none(), "{d:?}");
        assert!((d.retry_after - 5e-7).abs() < 1e-9, "{d:?}");
        assert!(reserve(l, 1.0, 0.9999995, 1000.0 + d.retry_after, empty).allowed);
        // One float step short of the wait: still refused, and due almost at once.
        let d = reserve(l, 1.0, 1.0f64.next_down(), 1000.0, empty);
        assert!(!d.allowed && d.new_state.is_none(), "{d:?}");
        assert!(d.retry_after > 0.0 && d.retry_after < 1e-9, "{d:?}");
        // The same edge on a wait that is not a round number (3 tokens short at 7/s).
        let l = lim(3.0, 7.0);
        let wait = wait_until(l, st(0.0, 1000.0), 3.0, 1000.0);
        assert!(reserve(l, 3.0, wait, 1000.0, st(0.0, 1000.0)).allowed);
        assert!(!reserve(l, 3.0, wait.next_down(), 1000.0, st(0.0, 1000.0)).allowed);
    }

    #[test]
    fn take_pins_the_capacity_edge_exactly() {
        let l = lim(5.0, 1.0);
        // n equal to capacity fits a full bucket; one float step more never fits.
        assert!(take(l, 5.0, T0, None).allowed);
        let d = take(l, 5.0f64.next_up(), T0, None);
        assert_eq!((d.allowed, d.retry_after), (false, -1.0));
        let d = reserve(l, 5.0f64.next_up(), 1e308, T0, None);
        assert_eq!((d.allowed, d.retry_after), (false, -1.0));
        // A bucket one float step short of n waits; exactly n is taken.
        assert!(!take(l, 2.0, T0, st(2.0f64.next_down(), T0)).allowed);
        assert!(take(l, 2.0, T0, st(2.0, T0)).allowed);
    }

    #[test]
    fn reserve_never_goes_deeper_than_the_largest_stored_debt() {
        let l = lim(MAX_AMOUNT, MAX_AMOUNT);
        let stored = st(-MAX_AMOUNT + 10.0, T0);
        let d = reserve(l, MAX_AMOUNT, 1e308, T0, stored);
        assert!(!d.allowed && d.new_state.is_none(), "{d:?}");
        assert!(d.retry_after.is_finite() && d.retry_after > 0.0);
        let later = reserve(l, MAX_AMOUNT, 1e308, T0 + d.retry_after, stored);
        assert!(later.allowed, "{later:?}");
        assert!(later.new_state.is_some_and(|s| s.is_sane()), "{later:?}");
    }

    #[test]
    fn refund_gives_back_up_to_capacity_and_a_missing_bucket_is_full() {
        let l = lim(10.0, 1.0);
        let d = refund(l, 3.0, 100.0, None);
        assert_eq!(
            (d.allowed, d.remaining, d.reset_after, d.new_state),
            (true, 10.0, 0.0, None)
        );
        let d = refund(l, 3.0, 100.0, st(4.0, 99.0));
        assert_eq!(d.new_state, st(8.0, 100.0));
        assert_eq!((d.remaining, d.reset_after), (8.0, 2.0));
        let d = refund(l, 30.0, 100.0, st(4.0, 100.0));
        assert_eq!(d.new_state, st(10.0, 100.0));
        // Already full (after the refill), or nothing given: nothing to write.
        assert_eq!(refund(l, 3.0, 100.0, st(9.0, 90.0)).new_state, None);
        assert_eq!(refund(l, 0.0, 100.0, st(4.0, 100.0)).new_state, None);
        // A debt is paid down.
        let d = refund(l, 1.0, 100.0, st(-3.0, 100.0));
        assert_eq!(d.new_state, st(-2.0, 100.0));
    }

    #[test]
    fn peek_reports_one_token_and_never_writes() {
        let l = lim(10.0, 2.0);
        let d = peek(l, 100.0, st(0.5, 100.0));
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after, d.reset_after),
            (false, 0.5, 0.25, 4.75)
        );
        let d = peek(l, 100.0, None);
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after, d.reset_after),
            (true, 10.0, 0.0, 0.0)
        );
        let d = peek(lim(0.5, 1.0), 100.0, None);
        assert_eq!((d.allowed, d.retry_after), (false, -1.0));
        let d = peek(l, 100.0, st(-4.0, 100.0));
        assert_eq!((d.allowed, d.remaining, d.retry_after), (false, -4.0, 2.5));
    }

    #[test]
    fn take_all_aggregates_as_documented() {
        let parts = [
            Part {
                limit: lim(10.0, 1.0),
                n: 1.0,
                stored: st(5.0, 100.0),
            },
            Part {
                limit: lim(3.0, 0.5),
                n: 2.0,
                stored: st(1.0, 100.0),
            },
            Part {
                limit: lim(4.0, 4.0),
                n: 1.0,
                stored: None,
            },
        ];
        let (total, each) = take_all(&parts, 100.0);
        assert!(!total.allowed);
        assert!(each.iter().all(|d| d.new_state.is_none()));
        assert_eq!(
            each.iter().map(|d| d.allowed).collect::<Vec<_>>(),
            [true, false, true]
        );
        // Each bucket as it stands: nothing deducted.
        assert_eq!(
            each.iter().map(|d| d.remaining).collect::<Vec<_>>(),
            [5.0, 1.0, 4.0]
        );
        assert_eq!(total.remaining, 1.0);
        assert_eq!(total.retry_after, 2.0);
        assert_eq!(total.reset_after, 5.0);
        // One bucket that can never succeed makes the aggregate -1.
        let mut never = parts;
        never[2].n = 5.0;
        assert_eq!(take_all(&never, 100.0).0.retry_after, -1.0);
        // Enough everywhere: every bucket deducted as TB.TAKE would.
        let (total, each) = take_all(&parts, 102.0);
        assert!(total.allowed && total.retry_after == 0.0);
        for (d, p) in each.iter().zip(&parts) {
            assert_eq!(*d, take(p.limit, p.n, 102.0, p.stored));
        }
        assert_eq!(total.remaining, 0.0);
    }

    fn limit_strategy() -> impl Strategy<Value = Limit> {
        (
            prop_oneof![1.0..1000.0f64, (1u32..100).prop_map(f64::from)],
            prop_oneof![0.001..1000.0f64, Just(100.0 / 60.0), Just(1.0)],
        )
            .prop_map(|(capacity, rate)| Limit { capacity, rate })
    }

    fn state_strategy() -> impl Strategy<Value = Option<State>> {
        proptest::option::of(
            (-2000.0..2000.0f64, -10.0..10.0f64).prop_map(|(tokens, dt)| State {
                tokens,
                last_refill_time: T0 + dt,
            }),
        )
    }

    /// One step of a mixed sequence on bucket 0 (and, for MTAKE, bucket 1 too).
    #[derive(Debug, Clone)]
    enum Op {
        Take(f64),
        MTake(f64, f64),
        Reserve(f64, f64),
        Refund(f64),
        Peek,
    }

    fn op_strategy() -> impl Strategy<Value = Op> {
        let n = prop_oneof![
            Just(1.0),
            Just(0.0),
            0.0..5.0f64,
            (1u32..4).prop_map(f64::from)
        ];
        prop_oneof![
            n.clone().prop_map(Op::Take),
            (n.clone(), n.clone()).prop_map(|(a, b)| Op::MTake(a, b)),
            (n.clone(), prop_oneof![Just(0.0), 0.0..10.0f64, Just(1e308)])
                .prop_map(|(n, w)| Op::Reserve(n, w)),
            n.prop_map(Op::Refund),
            Just(Op::Peek),
        ]
    }

    proptest! {
        /// A denied MTAKE changes no bucket; an allowed one changes each exactly as TB.TAKE.
        #[test]
        fn take_all_is_all_or_nothing(
            parts in proptest::collection::vec(
                (limit_strategy(), prop_oneof![Just(0.0), 0.0..20.0f64], state_strategy())
                    .prop_map(|(limit, n, stored)| Part { limit, n, stored }),
                1..6,
            ),
            dt in 0.0..5.0f64,
        ) {
            let now = T0 + dt;
            let (total, each) = take_all(&parts, now);
            let alone: Vec<Decision> = parts.iter().map(|p| take(p.limit, p.n, now, p.stored)).collect();
            prop_assert_eq!(total.allowed, alone.iter().all(|d| d.allowed));
            if total.allowed {
                prop_assert_eq!(&each, &alone);
            } else {
                prop_assert!(each.iter().all(|d| d.new_state.is_none()));
                prop_assert!(total.retry_after == -1.0 || total.retry_after > 0.0);
                for (d, p) in each.iter().zip(&parts) {
                    // Waiting the aggregate retry_after is enough for every bucket.
                    if total.retry_after > 0.0 {
                        prop_assert!(take(p.limit, p.n, now + total.retry_after, p.stored).allowed);
                    }
                    prop_assert_eq!(d.remaining, tokens_at(p.limit, p.stored, now.max(p.stored.map_or(now, |s| s.last_refill_time))));
                }
            }
            prop_assert_eq!(total.remaining, each.iter().map(|d| d.remaining).fold(f64::INFINITY, f64::min));
        }

        /// k reservations at one instant wait 0 (while the bucket has tokens), then
        /// 1/rate, 2/rate, ...: the output is smooth at `rate` whatever the burst.
        #[test]
        fn reservations_at_one_instant_are_spaced_by_one_over_rate(
            capacity in (1u32..5).prop_map(f64::from),
            rate in prop_oneof![0.5..500.0f64, Just(100.0 / 60.0)],
            k in 1usize..40,
        ) {
            let limit = lim(capacity, rate);
            let mut stored = None;
            for i in 0..k {
                let d = reserve(limit, 1.0, 1e9, T0, stored);
                prop_assert!(d.allowed);
                let due = ((i as f64) + 1.0 - capacity).max(0.0) / rate;
                prop_assert!(close(d.retry_after, due), "reservation {i}: {d:?}, expected {due}");
                prop_assert!(d.retry_after >= due * (1.0 - 1e-12));
                stored = d.new_state;
            }
        }

        /// A denied reservation is accepted at now + retry_after and not noticeably
        /// before; an accepted one leaves a debt no deeper than max_wait allows.
        #[test]
        fn reserve_honours_max_wait_and_its_retry(
            limit in limit_strategy(),
            stored in state_strategy(),
            n in prop_oneof![Just(1.0), 0.0..10.0f64],
            max_wait in prop_oneof![Just(0.0), 0.0..20.0f64, Just(1e308)],
            dt in -5.0..5.0f64,
        ) {
            let now = T0 + dt;
            let d = reserve(limit, n, max_wait, now, stored);
            prop_assert!(d.remaining.is_finite() && d.retry_after.is_finite() && d.reset_after.is_finite());
            if let Some(s) = d.new_state {
                prop_assert!(d.allowed && s.is_sane());
                prop_assert!(d.retry_after <= max_wait);
                prop_assert!(s.tokens >= -(max_wait * limit.rate) - 1e-9 * limit.capacity.max(1.0), "{s:?}");
                prop_assert!(s.tokens <= limit.capacity);
                // When the wait is over, the tokens really were there.
                prop_assert!(tokens_at(limit, Some(s), now + d.retry_after) >= 0.0);
            } else if !d.allowed && d.retry_after >= 0.0 && n > 0.0 {
                prop_assert!(d.retry_after > 0.0 || max_wait == 0.0);
                prop_assert!(reserve(limit, n, max_wait, now + d.retry_after, stored).allowed, "{d:?}");
                let early = d.retry_after - 1e-6 - d.retry_after * 1e-6;
                if early > 0.0 {
                    prop_assert!(!reserve(limit, n, max_wait, now + early, stored).allowed, "{d:?}");
                }
            }
        }

        #[test]
        fn refund_never_exceeds_capacity(
            limit in limit_strategy(),
            stored in state_strategy(),
            n in prop_oneof![0.0..10.0f64, Just(MAX_AMOUNT)],
            dt in -5.0..5.0f64,
        ) {
            let d = refund(limit, n, T0 + dt, stored);
            prop_assert!(d.allowed && d.remaining <= limit.capacity);
            if let Some(s) = d.new_state {
                prop_assert!(s.tokens <= limit.capacity && s.is_sane());
                prop_assert!(s.tokens > tokens_at(limit, stored, s.last_refill_time));
            }
        }

        #[test]
        fn peek_is_take_of_one_without_the_write(
            limit in limit_strategy(),
            stored in state_strategy(),
            dt in -5.0..5.0f64,
        ) {
            let now = T0 + dt;
            let d = peek(limit, now, stored);
            let one = take(limit, 1.0, now, stored);
            let none = take(limit, 0.0, now, stored);
            prop_assert_eq!(d.new_state, None);
            prop_assert_eq!((d.allowed, d.retry_after), (one.allowed, one.retry_after));
            prop_assert_eq!((d.remaining, d.reset_after), (none.remaining, none.reset_after));
        }

        /// Over any mixed sequence of TAKE / MTAKE / RESERVE / REFUND / PEEK (times moving
        /// forward), the tokens admitted from a bucket, counting a reservation when its
        /// wait is due, less what was given back, never exceed capacity + rate x elapsed.
        #[test]
        fn no_over_admission_over_mixed_sequences(
            limit in limit_strategy(),
            other in limit_strategy(),
            steps in proptest::collection::vec((op_strategy(), prop_oneof![Just(0.0), 0.0..2.0f64]), 1..80),
        ) {
            let mut stored = None;
            let mut other_stored = None;
            let mut now = T0;
            let mut origin = None;
            // (due time, tokens): admissions; (time, tokens): refunds actually applied.
            let mut admitted: Vec<(f64, f64)> = Vec::new();
            let mut refunded: Vec<(f64, f64)> = Vec::new();
            for (op, dt) in steps {
                now += dt;
                let before = stored;
                let d = match op {
                    Op::Take(n) => {
                        let d = take(limit, n, now, stored);
                        if d.allowed { admitted.push((now, n)); }
                        d
                    }
                    Op::MTake(a, b) => {
                        let parts = [
                            Part { limit, n: a, stored },
                            Part { limit: other, n: b, stored: other_stored },
                        ];
                        let (total, each) = take_all(&parts, now);
                        prop_assert_eq!(each.iter().all(|d| d.new_state.is_none()), !total.allowed || (a == 0.0 && b == 0.0));
                        if total.allowed { admitted.push((now, a)); }
                        if let Some(d) = each.get(1) { other_stored = d.new_state.or(other_stored); }
                        each.first().copied().unwrap_or(total)
                    }
                    Op::Reserve(n, w) => {
                        let d = reserve(limit, n, w, now, stored);
                        if d.allowed { admitted.push((now + d.retry_after, n)); }
                        d
                    }
                    Op::Refund(n) => {
                        let d = refund(limit, n, now, stored);
                        if let Some(s) = d.new_state {
                            refunded.push((now, s.tokens - tokens_at(limit, before, s.last_refill_time)));
                        }
                        d
                    }
                    Op::Peek => {
                        let d = peek(limit, now, stored);
                        prop_assert!(d.new_state.is_none());
                        d
                    }
                };
                if stored.is_none() && d.new_state.is_some() {
                    origin = Some(now);
                }
                stored = d.new_state.or(stored);
            }
            let Some(origin) = origin else { return Ok(()) };
            let mut checkpoints: Vec<f64> = admitted.iter().map(|a| a.0).collect();
            checkpoints.push(now);
            // Before its first write a bucket is a full one nobody took from (only n = 0
            // calls are admitted without writing).
            for t in checkpoints.into_iter().filter(|&t| t >= origin) {
                let taken: f64 = admitted.iter().filter(|a| a.0 <= t).map(|a| a.1).sum();
                let back: f64 = refunded.iter().filter(|r| r.0 <= t).map(|r| r.1).sum();
                let bound = limit.capacity + limit.rate * (t - origin);
                prop_assert!(taken - back <= bound * (1.0 + 1e-9) + 1e-6,
                    "at {t}: admitted {taken} - refunded {back} > {bound}");
            }
        }

        /// Accepted but extreme reservation arguments never leave a stored value outside
        /// what TB.TAKE and the corrupt-state check accept.
        #[test]
        fn extreme_reservations_store_only_sane_values(
            capacity in prop_oneof![Just(MAX_AMOUNT), Just(1e-300), 1e-9..MAX_AMOUNT],
            rate in prop_oneof![Just(MIN_RATE), Just(MAX_AMOUNT), MIN_RATE..MAX_AMOUNT],
            n in prop_oneof![Just(MAX_AMOUNT), Just(1e-300), 0.0..MAX_AMOUNT],
            max_wait in prop_oneof![Just(1e308), Just(f64::MAX), Just(0.0), 0.0..1e300],
            now in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
            tokens in prop_oneof![Just(-MAX_AMOUNT), Just(0.0), Just(MAX_AMOUNT), -MAX_AMOUNT..MAX_AMOUNT],
            repeat in 1usize..4,
        ) {
            let limit = lim(capacity, rate);
            let mut stored = Some(State { tokens, last_refill_time: now });
            for _ in 0..repeat {
                let d = reserve(limit, n, max_wait, now, stored);
                prop_assert!(d.remaining.is_finite() && d.retry_after.is_finite() && d.reset_after.is_finite(), "{d:?}");
                if let Some(s) = d.new_state {
                    prop_assert!(s.is_sane() && s.tokens <= capacity, "{s:?}");
                    stored = Some(s);
                }
            }
        }
    }
}
