//! The window math's unit and property tests (`algo::window`), in a file of their own so
//! the rules read without scrolling past them.

#[test]
fn log_entries_are_recognized_by_their_own_score() {
    use super::is_log_entry;
    let s = 1_764_456_299_000_000.0;
    for yes in [
        "1764456299000000-0",
        "1764456299000000-1",
        "1764456299000000-99999",
    ] {
        assert!(is_log_entry(yes.as_bytes(), s), "{yes}");
    }
    assert!(is_log_entry(b"0-0", 0.0));
    assert!(is_log_entry(
        b"253402300799500000-3",
        253_402_300_799_500_000.0
    ));
    for no in [
        "alice",
        "",
        "1764456299000000",
        "1764456299000000-",
        "1764456299000000-01",
        "1764456299000000-+1",
        "1764456299000000-1a",
        "1764456299000001-0",
        "1764456299-0",
        "1764456299000000-0-0",
        "-1764456299000000-0",
        "1764456299000000-123456789012345678901",
    ] {
        assert!(!is_log_entry(no.as_bytes(), s), "{no}");
    }
    // A leaderboard: member names and points.
    assert!(!is_log_entry(b"bob", 1500.0));
    assert!(!is_log_entry(b"1500", 1500.0));
}

proptest::proptest! {
    /// What LOG writes is always recognized; arbitrary bytes never panic.
    #[test]
    fn fuzz_log_members_are_recognized_only_as_written(
        micros in proptest::prop_oneof![proptest::strategy::Just(0u64), 0u64..253_402_300_800_000_000],
        k in 0u64..(1 << 53),
        junk in proptest::collection::vec(proptest::arbitrary::any::<u8>(), 0..40),
        score in proptest::num::f64::ANY,
    ) {
        let score_f = micros as f64;
        let member = format!("{}-{}", String::from_utf8_lossy(crate::algo::num::format_whole(score_f).as_bytes()), k);
        proptest::prop_assert!(super::is_log_entry(member.as_bytes(), score_f), "{member}");
        let _ = super::is_log_entry(&junk, score);
        if super::is_log_entry(&junk, score_f) {
            proptest::prop_assert!(junk.contains(&b'-'));
        }
    }
}

use super::*;
use crate::algo::bucket::ulp;
use proptest::prelude::*;

/// An epoch time with a fraction, as a client's clock gives.
const T0: f64 = 1_764_456_268.123456;
/// An epoch time that is a multiple of every grid window below (60 s included), so
/// grid times and window starts are exact and a naive model computes them too.
const TG: f64 = 1_764_456_000.0;

fn win(limit: f64, window: f64) -> Window {
    Window { limit, window }
}

fn fx(start: f64, count: f64) -> Option<Fixed> {
    Some(Fixed { start, count })
}

fn sl(start: f64, count: f64, previous: f64) -> Option<Sliding> {
    Some(Sliding {
        start,
        count,
        previous,
    })
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * (1.0 + b.abs())
}

/// Applies a LOG decision to the entries, as the command will to its sorted set.
fn apply(entries: &mut Vec<f64>, d: &LogDecision) {
    if let Some(cut) = d.remove_up_to {
        let k = entries.partition_point(|&e| e <= cut);
        assert_eq!(k, d.removed, "removing by score and by rank differ");
        entries.drain(..k);
    } else {
        assert_eq!(d.removed, 0);
    }
    entries.extend(std::iter::repeat_n(d.add_at, d.add as usize));
}

/// The four reply fields, for tables.
fn reply<S>(d: &Decision<S>) -> (bool, f64, f64, f64) {
    (d.allowed, d.remaining, d.retry_after, d.reset_after)
}

fn assert_reply(name: &str, got: (bool, f64, f64, f64), want: (bool, f64, f64, f64)) {
    assert_eq!(got.0, want.0, "{name}: allowed in {got:?}");
    assert!(
        close(got.1, want.1),
        "{name}: remaining in {got:?}, want {want:?}"
    );
    assert!(
        close(got.2, want.2),
        "{name}: retry_after in {got:?}, want {want:?}"
    );
    assert!(
        close(got.3, want.3),
        "{name}: reset_after in {got:?}, want {want:?}"
    );
}

/// One row of a FIXED or SLIDING table: the call, then what it must answer and write.
struct Case<S> {
    name: &'static str,
    w: Window,
    n: f64,
    now: f64,
    stored: Option<S>,
    reply: (bool, f64, f64, f64),
    writes: Option<S>,
    expires_at: f64,
}

fn check<S: PartialEq + std::fmt::Debug + Copy>(
    cases: &[Case<S>],
    decide: fn(Window, f64, f64, Option<S>) -> Decision<S>,
) {
    for c in cases {
        let d = decide(c.w, c.n, c.now, c.stored);
        assert_reply(c.name, reply(&d), c.reply);
        assert_eq!(d.new_state, c.writes, "{}", c.name);
        assert!(close(d.expires_at, c.expires_at), "{}: {d:?}", c.name);
    }
}

#[test]
fn fixed_table_of_cases() {
    let w = win(3.0, 10.0);
    let cases = [
        Case {
            name: "missing key is an empty window",
            w,
            n: 1.0,
            now: 101.0,
            stored: None,
            reply: (true, 2.0, 0.0, 9.0),
            writes: fx(100.0, 1.0),
            expires_at: 110.0,
        },
        Case {
            name: "counts add up in one window",
            w,
            n: 2.0,
            now: 105.0,
            stored: fx(100.0, 1.0),
            reply: (true, 0.0, 0.0, 5.0),
            writes: fx(100.0, 3.0),
            expires_at: 110.0,
        },
        Case {
            name: "a full window denies until it ends",
            w,
            n: 1.0,
            now: 101.0,
            stored: fx(100.0, 3.0),
            reply: (false, 0.0, 9.0, 9.0),
            writes: None,
            expires_at: 110.0,
        },
        Case {
            name: "a new window starts from zero",
            w,
            n: 1.0,
            now: 110.0,
            stored: fx(100.0, 3.0),
            reply: (true, 2.0, 0.0, 10.0),
            writes: fx(110.0, 1.0),
            expires_at: 120.0,
        },
        Case {
            name: "a window long gone is forgotten",
            w,
            n: 3.0,
            now: 155.5,
            stored: fx(100.0, 3.0),
            reply: (true, 0.0, 0.0, 4.5),
            writes: fx(150.0, 3.0),
            expires_at: 160.0,
        },
        Case {
            name: "n above the limit is never",
            w,
            n: 4.0,
            now: 101.0,
            stored: None,
            reply: (false, 3.0, -1.0, 0.0),
            writes: None,
            expires_at: 101.0,
        },
        Case {
            name: "n zero reports and writes nothing",
            w,
            n: 0.0,
            now: 104.0,
            stored: fx(100.0, 2.0),
            reply: (true, 1.0, 0.0, 6.0),
            writes: None,
            expires_at: 110.0,
        },
        Case {
            name: "a clock behind counts against the stored window",
            w,
            n: 1.0,
            now: 105.0,
            stored: fx(110.0, 1.0),
            reply: (true, 1.0, 0.0, 15.0),
            writes: fx(110.0, 2.0),
            expires_at: 120.0,
        },
        Case {
            name: "a clock behind waits for the stored window to end",
            w,
            n: 1.0,
            now: 105.0,
            stored: fx(110.0, 3.0),
            reply: (false, 0.0, 15.0, 15.0),
            writes: None,
            expires_at: 120.0,
        },
        Case {
            name: "a fractional window is aligned to its multiples",
            w: win(3.0, 0.5),
            n: 1.0,
            now: 100.3,
            stored: None,
            reply: (true, 2.0, 0.0, 0.2),
            writes: fx(100.0, 1.0),
            expires_at: 100.5,
        },
        Case {
            name: "a lowered limit: over it, n zero is not allowed",
            w,
            n: 0.0,
            now: 101.0,
            stored: fx(100.0, 5.0),
            reply: (false, 0.0, 9.0, 9.0),
            writes: None,
            expires_at: 110.0,
        },
        Case {
            name: "a fractional limit admits whole requests while they fit",
            w: win(2.5, 10.0),
            n: 1.0,
            now: 101.0,
            stored: fx(100.0, 2.0),
            reply: (false, 0.5, 9.0, 9.0),
            writes: None,
            expires_at: 110.0,
        },
    ];
    check(&cases, fixed);
}

#[test]
fn sliding_table_of_cases() {
    let w = win(10.0, 10.0);
    let cases = [
        Case {
            name: "missing key is empty",
            w,
            n: 1.0,
            now: 105.0,
            stored: None,
            reply: (true, 9.0, 0.0, 15.0),
            writes: sl(100.0, 1.0, 0.0),
            expires_at: 120.0,
        },
        Case {
            name: "the stored window becomes the previous one, weighted by overlap",
            w,
            n: 1.0,
            now: 115.0,
            stored: sl(100.0, 8.0, 0.0),
            reply: (true, 5.0, 0.0, 15.0),
            writes: sl(110.0, 1.0, 8.0),
            expires_at: 130.0,
        },
        Case {
            name: "denied until enough of the previous window slid out",
            w,
            n: 2.0,
            now: 112.0,
            stored: sl(110.0, 2.0, 8.0),
            reply: (false, 1.6, 0.5, 18.0),
            writes: None,
            expires_at: 130.0,
        },
        Case {
            name: "denied until the next window when the count alone is too much",
            w,
            n: 2.0,
            now: 115.0,
            stored: sl(110.0, 9.0, 0.0),
            reply: (false, 1.0, 5.0 + 10.0 / 9.0, 15.0),
            writes: None,
            expires_at: 130.0,
        },
        Case {
            name: "the whole limit needs both windows over",
            w,
            n: 10.0,
            now: 115.0,
            stored: sl(110.0, 10.0, 0.0),
            reply: (false, 0.0, 15.0, 15.0),
            writes: None,
            expires_at: 130.0,
        },
        Case {
            name: "two windows back is forgotten",
            w,
            n: 1.0,
            now: 125.0,
            stored: sl(100.0, 10.0, 10.0),
            reply: (true, 9.0, 0.0, 15.0),
            writes: sl(120.0, 1.0, 0.0),
            expires_at: 140.0,
        },
        Case {
            name: "n above the limit is never",
            w,
            n: 11.0,
            now: 105.0,
            stored: None,
            reply: (false, 10.0, -1.0, 0.0),
            writes: None,
            expires_at: 105.0,
        },
        Case {
            name: "n zero reports and writes nothing",
            w,
            n: 0.0,
            now: 115.0,
            stored: sl(110.0, 2.0, 8.0),
            reply: (true, 4.0, 0.0, 15.0),
            writes: None,
            expires_at: 130.0,
        },
        Case {
            name: "a clock behind weighs the previous window in full",
            w,
            n: 1.0,
            now: 105.0,
            stored: sl(110.0, 3.0, 6.0),
            reply: (true, 0.0, 0.0, 25.0),
            writes: sl(110.0, 4.0, 6.0),
            expires_at: 130.0,
        },
        Case {
            name: "a clock behind waits from the stored window",
            w,
            n: 2.0,
            now: 105.0,
            stored: sl(110.0, 3.0, 6.0),
            reply: (false, 1.0, 5.0 + 10.0 / 6.0, 25.0),
            writes: None,
            expires_at: 130.0,
        },
        Case {
            name: "only a previous count left: worthless when its window ends",
            w,
            n: 0.0,
            now: 112.0,
            stored: sl(110.0, 0.0, 5.0),
            reply: (true, 6.0, 0.0, 8.0),
            writes: None,
            expires_at: 120.0,
        },
    ];
    check(&cases, sliding);
}

#[test]
fn whole_steps_are_the_next_whole_numbers_and_the_fast_path_changes_nothing() {
    for j in [
        0.0,
        1.0,
        -1.0,
        1e9,
        4_503_599_627_370_495.0,
        -4_503_599_627_370_495.0,
    ] {
        assert_eq!(whole_above(j), (j + 1.0).max(f64::next_up(j)), "{j}");
        assert_eq!(whole_below(j), (j - 1.0).min(f64::next_down(j)), "{j}");
    }
    for j in [EXACT_STEPS, 9_007_199_254_740_992.0, 1e300] {
        assert!(whole_above(j) > j && whole_below(j) < j, "{j}");
    }
}

#[test]
fn log_scores_are_the_nearest_whole_microsecond() {
    let cases: &[(f64, f64)] = &[
        (0.0, 0.0),
        (1.0, 1_000_000.0),
        (0.3, 300_000.0),
        (1_764_456_240.0000004, 1_764_456_240_000_000.0),
        (1_764_456_240.0000006, 1_764_456_240_000_001.0),
        (1_764_456_239.999999, 1_764_456_239_999_999.0),
        (1_764_456_268.123456, 1_764_456_268_123_456.0),
        (MAX_TIME, MAX_TIME * 1e6),
    ];
    for &(t, score) in cases {
        assert_eq!(log_score(t), score, "{t}");
        assert_eq!(log_tick(t), score / 1e6, "{t}");
    }
}

proptest! {
    /// The score is the whole microsecond nearest to `t` (within the f64 step of `t`
    /// itself), keeps order, and a whole-microsecond time ticks to itself and is the
    /// last score at or before itself (below 4e15 µs, where an f64 time still tells
    /// every microsecond apart).
    #[test]
    fn log_score_rounds_once_and_keeps_order(
        a in 0.0..9e9f64, b in 0.0..9e9f64, m in 0u64..4_000_000_000_000_000,
    ) {
        let s = log_score(a);
        prop_assert_eq!(s.fract(), 0.0);
        prop_assert!((s / 1e6 - a).abs() <= 0.5e-6 + ulp(a), "{} -> {}", a, s);
        if a <= b {
            prop_assert!(log_score(a) <= log_score(b));
        }
        let t = m as f64 / 1e6;
        prop_assert_eq!(log_tick(t), t);
        prop_assert_eq!(log_score_at_or_before(t), m as f64);
        let below = log_score_at_or_before(a);
        prop_assert!(log_time(below) <= a && log_time(below + 1.0) > a, "{} -> {}", a, below);
    }
}

#[test]
fn log_table_of_cases() {
    let w = win(3.0, 10.0);
    struct Case {
        name: &'static str,
        w: Window,
        n: u64,
        now: f64,
        entries: &'static [f64],
        reply: (bool, f64, f64, f64),
        remove_up_to: Option<f64>,
        add: u64,
        add_at: f64,
        expires_at: f64,
    }
    let cases = [
        Case {
            name: "empty log admits",
            w,
            n: 1,
            now: 100.0,
            entries: &[],
            reply: (true, 2.0, 0.0, 10.0),
            remove_up_to: None,
            add: 1,
            add_at: 100.0,
            expires_at: 110.0,
        },
        Case {
            name: "entries in the window count",
            w,
            n: 1,
            now: 100.0,
            entries: &[95.0, 98.0],
            reply: (true, 0.0, 0.0, 10.0),
            remove_up_to: None,
            add: 1,
            add_at: 100.0,
            expires_at: 110.0,
        },
        Case {
            name: "full: wait for the oldest to leave",
            w,
            n: 1,
            now: 100.0,
            entries: &[95.0, 98.0, 99.0],
            reply: (false, 0.0, 5.0, 9.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 109.0,
        },
        Case {
            name: "two needed: wait for the second oldest",
            w,
            n: 2,
            now: 100.0,
            entries: &[95.0, 98.0, 99.0],
            reply: (false, 0.0, 8.0, 9.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 109.0,
        },
        Case {
            name: "an entry exactly one window old is out, and removed by a write",
            w,
            n: 2,
            now: 100.0,
            entries: &[85.0, 90.0, 95.0],
            reply: (true, 0.0, 0.0, 10.0),
            remove_up_to: Some(90.0),
            add: 2,
            add_at: 100.0,
            expires_at: 110.0,
        },
        Case {
            name: "n zero removes nothing",
            w,
            n: 0,
            now: 100.0,
            entries: &[85.0, 90.0, 95.0],
            reply: (true, 2.0, 0.0, 5.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 105.0,
        },
        Case {
            name: "n above the limit is never",
            w,
            n: 4,
            now: 100.0,
            entries: &[95.0],
            reply: (false, 2.0, -1.0, 5.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 105.0,
        },
        Case {
            name: "same-microsecond requests are separate entries",
            w,
            n: 1,
            now: 100.0,
            entries: &[100.0, 100.0, 100.0],
            reply: (false, 0.0, 10.0, 10.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 110.0,
        },
        Case {
            name: "a clock behind is served at the newest entry",
            w,
            n: 1,
            now: 95.0,
            entries: &[93.0, 100.0, 104.0],
            reply: (true, 0.0, 0.0, 19.0),
            remove_up_to: Some(94.0),
            add: 1,
            add_at: 104.0,
            expires_at: 114.0,
        },
        Case {
            name: "a clock behind waits for entries newer than it",
            w,
            n: 1,
            now: 95.0,
            entries: &[100.0, 101.0, 104.0],
            reply: (false, 0.0, 15.0, 19.0),
            remove_up_to: None,
            add: 0,
            add_at: 104.0,
            expires_at: 114.0,
        },
        Case {
            name: "a fractional limit holds its floor",
            w: win(2.5, 10.0),
            n: 1,
            now: 100.0,
            entries: &[99.0, 99.5],
            reply: (false, 0.0, 9.0, 9.5),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 109.5,
        },
        Case {
            name: "a lowered limit: over it, n zero is not allowed",
            w: win(1.0, 10.0),
            n: 0,
            now: 100.0,
            entries: &[95.0, 98.0, 99.0],
            reply: (false, 0.0, 8.0, 9.0),
            remove_up_to: None,
            add: 0,
            add_at: 100.0,
            expires_at: 109.0,
        },
    ];
    for c in cases {
        let d = log(c.w, c.n, c.now, c.entries);
        let name = c.name;
        assert_reply(
            name,
            (d.allowed, d.remaining, d.retry_after, d.reset_after),
            c.reply,
        );
        assert_eq!(d.remove_up_to, c.remove_up_to, "{name}");
        assert_eq!((d.add, d.add_at), (c.add, c.add_at), "{name}");
        assert!(close(d.expires_at, c.expires_at), "{name}: {d:?}");
    }
}

/// The notes' boundary problem: N requests at the end of one window and N at the
/// start of the next. A fixed window admits 2N within a millisecond; the sliding
/// counter and the log admit N.
#[test]
fn boundary_burst_fixed_admits_twice_the_limit_sliding_and_log_do_not() {
    let limit = 100.0;
    let w = win(limit, 60.0);
    let (before, after) = (TG - 0.001, TG);
    let mut admitted = [0.0; 3];
    let mut f = None;
    let mut s = None;
    let mut entries = Vec::new();
    for now in std::iter::repeat_n(before, 100).chain(std::iter::repeat_n(after, 100)) {
        let d = fixed(w, 1.0, now, f);
        f = d.new_state.or(f);
        admitted[0] += f64::from(u8::from(d.allowed));
        let d = sliding(w, 1.0, now, s);
        s = d.new_state.or(s);
        admitted[1] += f64::from(u8::from(d.allowed));
        let d = log(w, 1, now, &entries);
        apply(&mut entries, &d);
        admitted[2] += f64::from(u8::from(d.allowed));
    }
    assert_eq!(admitted, [2.0 * limit, limit, limit]);
    // The sliding counter and the log both say when: the counter once the previous
    // window has slid out enough for one (0.6 s into the window), the log when the
    // burst before the boundary leaves (59.999 s); each to the first epoch time
    // representable at or after that instant (steps of 2.4e-7 s).
    let d = sliding(w, 1.0, after, s);
    assert!(!d.allowed && (d.retry_after - 0.6).abs() < 3e-7, "{d:?}");
    let d = log(w, 1, after, &entries);
    assert!(!d.allowed && (d.retry_after - 59.999).abs() < 3e-7, "{d:?}");
}

#[test]
fn every_time_is_in_exactly_one_window_at_the_edges() {
    let windows = [
        MIN_WINDOW,
        1e-3,
        0.1,
        1.0 / 3.0,
        0.7,
        60.0,
        86_400.0,
        1e9,
        MAX_WINDOW,
    ];
    let times = [0.0, 1e-300, 0.1, 1.0, T0, TG, 1e11, MAX_TIME.next_down()];
    for &w in &windows {
        for &t in &times {
            for t in [t, t.next_up(), t.next_down().max(0.0)] {
                let (start, end) = bounds(t, w);
                assert!(start <= t && t < end, "w={w} t={t}: [{start}, {end})");
                assert_eq!(bounds(start, w), (start, end), "w={w} t={t}");
                assert_eq!(bounds(end, w).0, end, "w={w} t={t}");
                if w > 1e6 * ulp(t) {
                    assert!((end - (start + w)).abs() <= 2.0 * ulp(end), "w={w} t={t}");
                }
            }
        }
    }
    // The issue's own formula where it is exact.
    assert_eq!(bounds(TG + 59.999, 60.0), (TG, TG + 60.0));
    assert_eq!(bounds(100.3, 0.5), (100.0, 100.5));
    assert_eq!(bounds(0.0, 10.0), (0.0, 10.0));
    assert_eq!(bounds(MAX_TIME.next_down(), MAX_WINDOW), (0.0, MAX_WINDOW));
}

/// The estimate weighs the previous window as if its requests were spread evenly, so
/// it can be above or below the count of the window-long interval ending now: that
/// count bounds nothing. The two windows' counts do.
#[test]
fn sliding_estimate_is_bounded_by_the_window_counts_not_by_the_sliding_count() {
    let w = win(100.0, 10.0);
    // Ten requests at the very start of a window, or ten at its very end: the same
    // state, so the same estimate 5 at 115, half-way through the next window.
    let run = |at: f64| (0..10).fold(None, |s, _| sliding(w, 1.0, at, s).new_state.or(s));
    let (early, late) = (run(100.0), run(109.9));
    assert_eq!(early, late);
    let estimate = sliding_view(w, 115.0, early).estimate();
    assert_eq!(estimate, 5.0);
    // The true count of (105, 115] is 0 for the early ten (the estimate is above it)
    // and 10 for the late ten (below it); either way the estimate is between the
    // current window's count (0) and that of both windows (10).
    let in_interval = |at: f64| if at > 105.0 { 10.0 } else { 0.0 };
    assert!(estimate > in_interval(100.0) && estimate < in_interval(109.9));
    assert!((0.0..=10.0).contains(&estimate));
}

#[test]
fn retry_after_is_exact_at_epoch_scale_with_awkward_windows() {
    for window in [0.1, 1.0 / 3.0, 7.7, 60.0, 3600.0 / 7.0] {
        let w = win(5.0, window);
        let (mut f, mut s, mut entries) = (None, None, Vec::new());
        let (mut tf, mut ts, mut tl) = (T0, T0, T0);
        for _ in 0..200 {
            let d = fixed(w, 1.0, tf, f);
            if !d.allowed {
                let again = fixed(w, 1.0, tf + d.retry_after, f);
                assert!(again.allowed, "w={window} now={tf} {d:?}");
                tf += d.retry_after;
            }
            f = fixed(w, 1.0, tf, f).new_state.or(f);

            let d = sliding(w, 1.0, ts, s);
            if !d.allowed {
                assert!(
                    sliding(w, 1.0, ts + d.retry_after, s).allowed,
                    "w={window} {d:?}"
                );
                ts += d.retry_after;
            }
            s = sliding(w, 1.0, ts, s).new_state.or(s);

            let d = log(w, 1, tl, &entries);
            if !d.allowed {
                assert!(
                    log(w, 1, tl + d.retry_after, &entries).allowed,
                    "w={window} {d:?}"
                );
                tl += d.retry_after;
            }
            let d = log(w, 1, tl, &entries);
            apply(&mut entries, &d);
        }
    }
}

fn grid_window() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.25), Just(0.5), Just(1.0), Just(10.0), Just(60.0)]
}

/// Steps on a grid of window / 16, mostly forward, some back (clock skew between
/// app servers), some long.
fn grid_calls<N: Strategy + Clone>(n: N) -> impl Strategy<Value = Vec<(N::Value, i32)>>
where
    N::Value: Clone,
{
    proptest::collection::vec(
        (
            n,
            prop_oneof![4 => 0i32..8, 2 => Just(0), 1 => -24i32..0, 1 => 8i32..80],
        ),
        1..100,
    )
}

fn cost() -> impl Strategy<Value = f64> + Clone {
    prop_oneof![
        4 => Just(1.0),
        1 => Just(0.0),
        2 => (1u32..5).prop_map(f64::from),
        1 => 0.0..4.0f64
    ]
}

fn limit() -> impl Strategy<Value = f64> {
    prop_oneof![(1u32..30).prop_map(f64::from), 0.5..30.0f64]
}

/// The cost admitted in the window starting at `start`.
fn sum_in<'a>(items: impl Iterator<Item = &'a (f64, f64)>, start: f64) -> f64 {
    items.filter(|(s, _)| *s == start).map(|(_, n)| n).sum()
}

proptest! {
    /// Every admission is attributed to the window the state counted it in (the window
    /// of `now`, or the stored one when `now` is behind it), and no window gets more
    /// than the limit.
    #[test]
    fn fixed_never_exceeds_limit_per_aligned_window(
        limit in limit(), window in grid_window(), calls in grid_calls(cost()),
    ) {
        let w = win(limit, window);
        let (mut now, mut state, mut last_start) = (TG, None, f64::NEG_INFINITY);
        let mut admitted: Vec<(f64, f64)> = Vec::new();
        for (n, k) in calls {
            now += f64::from(k) * window / 16.0;
            let d = fixed(w, n, now, state);
            let model_start = ((now / window).floor() * window).max(last_start);
            if let Some(s) = d.new_state {
                prop_assert!(d.allowed && n > 0.0);
                prop_assert_eq!(s.start, model_start);
                admitted.push((s.start, n));
                last_start = s.start;
                state = Some(s);
                prop_assert!(sum_in(admitted.iter(), s.start) <= limit * (1.0 + 1e-12));
                prop_assert_eq!(d.expires_at, s.start + window);
            }
            let count = sum_in(admitted.iter(), model_start);
            prop_assert!(close(d.remaining, (limit - count).max(0.0)), "{:?} count {}", d, count);
        }
    }

    /// No aligned window gets more than the limit, and the estimate lies between the
    /// current window's true count and the true count of it and the window before
    /// (the interval `[start - window, now]`); the count of `(now - window, now]`
    /// lies there too, but bounds nothing (see the unit test above).
    #[test]
    fn sliding_never_exceeds_limit_per_aligned_window_and_estimate_is_bounded(
        limit in limit(), window in grid_window(), calls in grid_calls(cost()),
    ) {
        let w = win(limit, window);
        let (mut now, mut state) = (TG, None);
        let mut admitted: Vec<(f64, f64)> = Vec::new();
        for (n, k) in calls {
            now += f64::from(k) * window / 16.0;
            let v = sliding_view(w, now, state);
            let current = sum_in(admitted.iter(), v.start);
            let previous = sum_in(admitted.iter(), v.start - window);
            let tol = 1e-9 * (1.0 + limit);
            prop_assert!(close(v.count, current) && close(v.previous, previous), "{:?} {} {}", v, current, previous);
            prop_assert!(current <= v.estimate() + tol && v.estimate() <= current + previous + tol);
            let d = sliding(w, n, now, state);
            prop_assert_eq!(d.allowed, n <= limit && v.estimate() + n <= limit);
            if let Some(s) = d.new_state {
                prop_assert!(d.allowed && n > 0.0);
                prop_assert_eq!(s.start, v.start);
                admitted.push((s.start, n));
                state = Some(s);
                prop_assert!(sum_in(admitted.iter(), s.start) <= limit * (1.0 + 1e-12));
            }
        }
    }

    /// Against a model that keeps every admission forever: same decisions, the log
    /// holds exactly the admissions still in the window and never more than the limit,
    /// and no window-long interval `(t - window, t]` holds more than the limit.
    #[test]
    fn log_never_exceeds_limit_in_any_window_long_interval(
        limit in prop_oneof![(1u32..30).prop_map(f64::from), 0.5..30.0f64],
        window in grid_window(),
        calls in grid_calls(prop_oneof![4 => Just(1u64), 1 => Just(0u64), 2 => 1u64..5]),
    ) {
        let w = win(limit, window);
        let cap = limit.floor();
        let (mut now, mut entries) = (TG, Vec::new());
        let mut recorded: Vec<(f64, f64)> = Vec::new();
        for (n, k) in calls {
            now += f64::from(k) * window / 16.0;
            let at = recorded.iter().map(|r| r.0).fold(now, f64::max);
            let live: f64 = recorded.iter().filter(|r| r.0 > at - window).map(|r| r.1).sum();
            let nf = n as f64;
            let d = log(w, n, now, &entries);
            prop_assert_eq!(d.allowed, nf <= cap && live + nf <= cap);
            prop_assert_eq!(d.remaining, (cap - live - if d.allowed { nf } else { 0.0 }).max(0.0));
            apply(&mut entries, &d);
            if d.allowed && n > 0 {
                prop_assert_eq!(d.add_at, at);
                recorded.push((at, nf));
                prop_assert_eq!(entries.len() as f64, live + nf);
            } else {
                prop_assert!(d.add == 0 && d.remove_up_to.is_none());
            }
            prop_assert!(entries.len() as f64 <= cap);
        }
        for &(t, _) in &recorded {
            let inside: f64 = recorded.iter().filter(|r| r.0 > t - window && r.0 <= t).map(|r| r.1).sum();
            prop_assert!(inside <= cap, "{} in ({}, {}]", inside, t - window, t);
        }
    }
}

/// Any reachable state of each mode, from calls at jittery float times.
#[derive(Debug, Clone)]
struct States {
    w: Window,
    now: f64,
    fixed: Option<Fixed>,
    sliding: Option<Sliding>,
    entries: Vec<f64>,
}

fn states() -> impl Strategy<Value = States> {
    (
        prop_oneof![(1u32..50).prop_map(f64::from), 0.5..50.0f64],
        prop_oneof![
            Just(1.0),
            Just(60.0),
            Just(0.1),
            0.001..1000.0f64,
            Just(1.0 / 3.0)
        ],
        proptest::collection::vec(
            (
                prop_oneof![Just(1u64), 0u64..4],
                prop_oneof![Just(0.0), -0.2..1.5f64],
            ),
            0..80,
        ),
    )
        .prop_map(|(limit, window, calls)| {
            let w = win(limit, window);
            let mut s = States {
                w,
                now: T0,
                fixed: None,
                sliding: None,
                entries: Vec::new(),
            };
            for (n, dt) in calls {
                s.now += dt * window / 4.0;
                let nf = n as f64;
                s.fixed = fixed(w, nf, s.now, s.fixed).new_state.or(s.fixed);
                s.sliding = sliding(w, nf, s.now, s.sliding).new_state.or(s.sliding);
                let d = log(w, n, s.now, &s.entries);
                apply(&mut s.entries, &d);
            }
            s
        })
}

/// A LOG as the command stores it: sorted-set scores in whole microseconds, read as
/// times through `log_time`.
struct Scores(Vec<f64>);

impl Entries for Scores {
    fn count(&self) -> usize {
        self.0.len()
    }
    fn newest(&self) -> Option<f64> {
        self.0.last().copied().map(log_time)
    }
    fn count_up_to(&self, t: f64) -> usize {
        self.0.partition_point(|&s| clamp_entry(log_time(s)) <= t)
    }
    fn nth(&self, i: usize) -> Option<f64> {
        self.0.get(i).copied().map(log_time)
    }
}

/// Earlier than `wait` by one microsecond and a millionth of it, if that is after now.
fn early(wait: f64) -> Option<f64> {
    let e = wait - 1e-6 - wait * 1e-6;
    (e > 0.0).then_some(e)
}

proptest! {
    /// A denied call is admitted at `now + retry_after`: exactly then for FIXED and
    /// LOG, and not noticeably earlier for SLIDING either (its closed form is exact;
    /// only rounding is nudged).
    #[test]
    fn waiting_retry_after_is_enough_and_not_noticeably_early(
        s in states(),
        n in prop_oneof![Just(1u64), 0u64..6],
        dt in prop_oneof![Just(0.0), -1.0..2.0f64],
    ) {
        let (w, nf) = (s.w, n as f64);
        let now = s.now + dt * s.w.window;
        let d = fixed(w, nf, now, s.fixed);
        if !d.allowed && d.retry_after >= 0.0 {
            prop_assert!(d.retry_after > 0.0);
            prop_assert!(fixed(w, nf, now + d.retry_after, s.fixed).allowed, "{:?}", d);
            if let Some(e) = early(d.retry_after) {
                prop_assert!(!fixed(w, nf, now + e, s.fixed).allowed, "{:?}", d);
            }
        } else {
            prop_assert!(d.allowed || nf > w.limit);
        }
        let d = sliding(w, nf, now, s.sliding);
        if !d.allowed && d.retry_after >= 0.0 {
            prop_assert!(d.retry_after > 0.0);
            prop_assert!(sliding(w, nf, now + d.retry_after, s.sliding).allowed, "{:?}", d);
            if let Some(e) = early(d.retry_after) {
                prop_assert!(!sliding(w, nf, now + e, s.sliding).allowed, "{:?}", d);
            }
        } else {
            prop_assert!(d.allowed || nf > w.limit);
        }
        let d = log(w, n, now, &s.entries);
        if !d.allowed && d.retry_after >= 0.0 {
            prop_assert!(d.retry_after > 0.0);
            prop_assert!(log(w, n, now + d.retry_after, &s.entries).allowed, "{:?}", d);
            if let Some(e) = early(d.retry_after) {
                prop_assert!(!log(w, n, now + e, &s.entries).allowed, "{:?}", d);
            }
        } else {
            prop_assert!(d.allowed || nf > w.limit.floor());
        }
    }

    /// Stored as the command stores it (whole-microsecond scores, the new entries'
    /// score the larger of `log_score(now)` and the newest score), every entry reads
    /// back as exactly the time the decision added it at, and the decisions are those
    /// of a log kept in seconds; waiting retry_after from the raw `now` (with its
    /// sub-microsecond fraction) is enough, far from today's epoch too.
    #[test]
    fn log_scores_read_back_as_the_times_decided(
        limit in 1u32..20,
        window in prop_oneof![Just(1.0), Just(60.0), Just(1.5e-6), 1e-6..100.0f64, Just(1.0 / 3.0)],
        start in prop_oneof![Just(T0), 0.0..1e6f64, 1e9..9e9f64, Just(MAX_TIME - 1e5)],
        calls in proptest::collection::vec((prop_oneof![3 => Just(1u64), 1 => 0u64..4], -0.3..1.2f64), 1..60),
    ) {
        let w = win(f64::from(limit), window);
        let (mut now, mut scores, mut seconds) = (start, Scores(Vec::new()), Vec::new());
        for (n, dt) in calls {
            now = (now + dt * window / 3.0).clamp(0.0, MAX_TIME.next_down());
            let d = log(w, n, now, &scores);
            let model = log(w, n, now, &seconds);
            prop_assert_eq!(
                (d.allowed, d.remaining, d.retry_after, d.reset_after, d.removed, d.add, d.add_at),
                (model.allowed, model.remaining, model.retry_after, model.reset_after, model.removed, model.add, model.add_at)
            );
            if !d.allowed && d.retry_after > 0.0 {
                prop_assert!(log(w, n, now + d.retry_after, &scores).allowed, "{:?}", d);
            }
            apply(&mut seconds, &d);
            scores.0.drain(..d.removed);
            if d.add > 0 {
                let score = scores.0.last().map_or(log_score(now), |&s| s.max(log_score(now)));
                prop_assert_eq!(score.fract(), 0.0);
                prop_assert_eq!(log_time(score), d.add_at);
                prop_assert!(valid_entry(log_time(score)));
                scores.0.extend(std::iter::repeat_n(score, d.add as usize));
            }
            prop_assert!(scores.0.windows(2).all(|p| p[0] <= p[1]));
        }
    }

    /// At `now + reset_after` the whole limit is there again (and not noticeably
    /// before); from `expires_at` on, the state left behind decides nothing: every call
    /// gets the answer a missing key would.
    #[test]
    fn reset_after_and_expires_at_are_when_the_state_stops_mattering(
        s in states(),
        n in prop_oneof![Just(1u64), 0u64..3],
        later in prop_oneof![Just(0.0), 0.0..3.0f64],
    ) {
        let (w, nf, now) = (s.w, n as f64, s.now);
        let d = fixed(w, nf, now, s.fixed);
        let kept = d.new_state.or(s.fixed);
        prop_assert_eq!(fixed(w, 0.0, now + d.reset_after, kept).remaining, w.limit);
        if let Some(e) = early(d.reset_after) {
            prop_assert!(fixed(w, 0.0, now + e, kept).remaining < w.limit);
        }
        let t = d.expires_at + later * w.window;
        for m in [0.0, 1.0] {
            let (a, b) = (fixed(w, m, t, kept), fixed(w, m, t, None));
            prop_assert_eq!((reply(&a), a.new_state), (reply(&b), b.new_state));
        }

        let d = sliding(w, nf, now, s.sliding);
        let kept = d.new_state.or(s.sliding);
        prop_assert_eq!(sliding(w, 0.0, now + d.reset_after, kept).remaining, w.limit);
        if let Some(e) = early(d.reset_after) {
            prop_assert!(sliding(w, 0.0, now + e, kept).remaining < w.limit);
        }
        let t = d.expires_at + later * w.window;
        for m in [0.0, 1.0] {
            let (a, b) = (sliding(w, m, t, kept), sliding(w, m, t, None));
            prop_assert_eq!((reply(&a), a.new_state), (reply(&b), b.new_state));
        }

        let d = log(w, n, now, &s.entries);
        let mut entries = s.entries.clone();
        apply(&mut entries, &d);
        prop_assert_eq!(log(w, 0, now + d.reset_after, &entries).remaining, w.limit.floor());
        if let Some(e) = early(d.reset_after) {
            prop_assert!(log(w, 0, now + e, &entries).remaining < w.limit.floor());
        }
        let t = d.expires_at + later * w.window;
        for m in [0, 1] {
            let (a, b) = (log(w, m, t, &entries), log(w, m, t, &[][..]));
            prop_assert_eq!(
                (a.allowed, a.remaining, a.retry_after, a.reset_after, a.add, a.add_at),
                (b.allowed, b.remaining, b.retry_after, b.reset_after, b.add, b.add_at)
            );
        }
    }

    /// Windows are aligned, gapless and monotone for any accepted time and window.
    #[test]
    fn bounds_are_aligned_monotone_and_hold_their_time(
        t in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME, T0 - 1.0..T0 + 1.0],
        dt in prop_oneof![Just(0.0), 0.0..1.0f64, 0.0..1e9f64],
        exp in -6.0..12.0f64,
    ) {
        let w = 10f64.powf(exp).clamp(MIN_WINDOW, MAX_WINDOW);
        let (start, end) = bounds(t, w);
        prop_assert!(start <= t && t < end);
        prop_assert_eq!(bounds(start, w), (start, end));
        prop_assert_eq!(bounds(end, w).0, end);
        let (later, _) = bounds(t + dt, w);
        prop_assert!(later >= start);
        if later > start {
            prop_assert!(later >= end);
        }
        if w > 1e6 * ulp(t) {
            prop_assert!((end - (start + w)).abs() <= 2.0 * ulp(end));
        }
    }

    /// The extremes of every accepted range (and any sane stored state) give finite
    /// answers in range, and the retry still works.
    #[test]
    fn extreme_but_accepted_inputs_give_finite_answers(
        limit in prop_oneof![Just(MAX_AMOUNT), Just(1e-300), Just(1.0), 1e-9..MAX_AMOUNT],
        window in prop_oneof![Just(MIN_WINDOW), Just(MAX_WINDOW), (-6.0..12.0f64).prop_map(|e| 10f64.powf(e).clamp(MIN_WINDOW, MAX_WINDOW))],
        n in prop_oneof![Just(0.0), Just(1.0), Just(MAX_AMOUNT), 0.0..MAX_AMOUNT],
        now in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
        start in prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME],
        counts in (prop_oneof![Just(0.0), Just(MAX_AMOUNT), 0.0..MAX_AMOUNT], prop_oneof![Just(0.0), Just(MAX_AMOUNT), 0.0..MAX_AMOUNT]),
        entries in proptest::collection::vec(prop_oneof![Just(0.0), Just(MAX_TIME.next_down()), 0.0..MAX_TIME], 0..8),
    ) {
        let w = win(limit, window);
        // Stored states as any earlier call may have left them: the stored start
        // aligned to this window, or (after a change of window) not.
        let aligned = bounds(start, window).0;
        for st in [start, aligned] {
            let f = Fixed { start: st, count: counts.0 };
            let s = Sliding { start: st, count: counts.0, previous: counts.1 };
            prop_assert!(f.is_sane() && s.is_sane());
            for state in [None, Some(f)] {
                let d = fixed(w, n, now, state);
                prop_assert!(finite_in_range(w, &reply(&d), d.expires_at), "{:?}", d);
                prop_assert!(d.new_state.is_none_or(|s| s.is_sane() && s.count <= limit));
                if !d.allowed && d.retry_after > 0.0 {
                    prop_assert!(fixed(w, n, now + d.retry_after, state).allowed, "{:?}", d);
                }
            }
            for state in [None, Some(s)] {
                let d = sliding(w, n, now, state);
                prop_assert!(finite_in_range(w, &reply(&d), d.expires_at), "{:?}", d);
                prop_assert!(d.new_state.is_none_or(|s| s.is_sane() && s.count <= limit));
                if !d.allowed && d.retry_after > 0.0 {
                    prop_assert!(sliding(w, n, now + d.retry_after, state).allowed, "{:?}", d);
                }
            }
        }
        let mut entries = entries;
        entries.sort_by(f64::total_cmp);
        let m = n as u64;
        let d = log(w, m, now, &entries);
        let r = (d.allowed, d.remaining, d.retry_after, d.reset_after);
        prop_assert!(finite_in_range(w, &r, d.expires_at) && d.add_at.is_finite(), "{:?}", d);
        prop_assert!(d.remove_up_to.is_none_or(f64::is_finite));
        if !d.allowed && d.retry_after > 0.0 {
            prop_assert!(log(w, m, now + d.retry_after, &entries).allowed, "{:?}", d);
        }
    }
}

fn finite_in_range(w: Window, r: &(bool, f64, f64, f64), expires_at: f64) -> bool {
    let (_, remaining, retry, reset) = *r;
    (0.0..=w.limit).contains(&remaining)
        && retry.is_finite()
        && (retry == -1.0 || retry >= 0.0)
        && reset.is_finite()
        && reset >= 0.0
        && expires_at.is_finite()
}
