//! Window arithmetic: the fixed window counter, the sliding window counter and the sliding
//! log. Pure: no Redis types, no clock; time is a parameter in seconds since the Unix epoch.
//! Everything that decides "allowed or not" for TB.WINDOW lives here.
//!
//! Windows are aligned to multiples of `window` since the epoch. Each mode has its own
//! clock that never moves backwards, like the bucket's: a call whose `now` is behind what
//! the state already holds is served as of the state (FIXED and SLIDING count it in the
//! stored window, LOG records it at its newest entry), so a client with a slow clock never
//! gets more than the limit.

use crate::algo::bucket::{MAX_AMOUNT, MAX_TIME, valid_time};

/// The window algorithms a key may hold (TB.WINDOW's mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Fixed,
    Sliding,
    Log,
}

/// Shortest window accepted, in seconds. Below the resolution of an epoch time (about
/// 2.4e-7 s today, 3e-5 s near `MAX_TIME`) a window is narrower than one step of the clock;
/// the arithmetic stays finite and exact-per-window there, it just means little.
pub const MIN_WINDOW: f64 = 1e-6;
/// Longest window accepted, in seconds (about 31,700 years): longer than any accepted time,
/// so every call of such a window falls in the window that starts at 0.
pub const MAX_WINDOW: f64 = 1e12;

/// `limit` requests per `window` seconds, given by the caller on every call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// Requests per window, in `(0, MAX_AMOUNT]`. LOG counts whole entries: it holds at
    /// most `floor(limit)` of them (the command only lets integers through for LOG).
    pub limit: f64,
    /// The window's length in seconds, in `[MIN_WINDOW, MAX_WINDOW]`; fractions allowed.
    pub window: f64,
}

/// FIXED state (a hash with fields `start`, `count`): the aligned start of the window the
/// count belongs to, and the cost admitted in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fixed {
    pub start: f64,
    pub count: f64,
}

impl Fixed {
    /// Whether a stored state is one this module can reason about.
    pub fn is_sane(&self) -> bool {
        valid_time(self.start) && valid_count(self.count)
    }
}

/// SLIDING state (a hash with fields `start`, `count`, `previous`): the cost admitted in
/// the aligned window starting at `start`, and in the one just before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sliding {
    pub start: f64,
    pub count: f64,
    pub previous: f64,
}

impl Sliding {
    /// Whether a stored state is one this module can reason about.
    pub fn is_sane(&self) -> bool {
        valid_time(self.start) && valid_count(self.count) && valid_count(self.previous)
    }
}

/// A stored count: finite, not negative, and no more than any accepted limit. A count
/// above a lowered limit is fine (the window is just over its limit).
pub fn valid_count(count: f64) -> bool {
    (0.0..=MAX_AMOUNT).contains(&count)
}

/// A stored LOG entry (a sorted-set score) this module can reason about: an accepted time.
/// `log` reads anything else (`-inf`, `+inf`, a score set by hand) as clamped into `[0,
/// MAX_TIME]`; the command should refuse it as corrupt state instead.
pub fn valid_entry(t: f64) -> bool {
    // MAX_TIME itself too: a `now` just below it ticks to it.
    valid_time(t) || t == MAX_TIME
}

/// Whether a sorted-set member is a LOG entry: `<score>-<k>`, its own score as the whole
/// number of microseconds LOG writes (`num::format_whole`), a dash, and a count `k` in
/// plain digits (no sign, no leading zero). This is exactly what `LogKey::write` names its
/// members, so every entry the module wrote is recognized, and a sorted set of something
/// else (a leaderboard of user names, the notes' script's bare times) is not adopted.
pub fn is_log_entry(member: &[u8], score: f64) -> bool {
    let prefix = crate::algo::num::format_whole(score);
    let Some(k) = member
        .strip_prefix(prefix.as_bytes())
        .and_then(|rest| rest.strip_prefix(b"-"))
    else {
        return false;
    };
    !k.is_empty()
        && k.len() <= 20
        && k.iter().all(u8::is_ascii_digit)
        && (k.len() == 1 || k.first() != Some(&b'0'))
}

/// LOG's clock ticks in whole microseconds: a call's time is rounded to the nearest one
/// before it is compared or stored, and a sorted-set score is that time as a whole number
/// of microseconds since the epoch (`log_score`), read back by `log_time`. A whole-number
/// score is what lets Redis keep it as an integer in a small sorted set (a listpack) and
/// compare it without parsing decimal text on every insert; rounding the call's time first
/// means an entry reads back as exactly the time the decision used (`log_tick(now)` is
/// `log_time(log_score(now))`, and the score stored is `log_score(now)` itself, never a
/// time converted back), so waits computed from it are neither short nor long by the
/// rounding. Both functions keep order, so scores sort as the times they stand for.
pub fn log_score(t: f64) -> f64 {
    // Whole seconds and the fraction apart: `(t * 1e6).round()` would round twice (the
    // product to the nearest f64, then that to a whole number), so 1764456240.0000004
    // became ...000001. Here the fraction is exact (`t - whole`), its product is rounded
    // once, and both parts and their sum are whole numbers exact in an f64 while
    // `t < 9e9` (the year 2255); beyond, the sum is still whole, to the f64's step.
    let whole = t.floor();
    whole * 1e6 + ((t - whole) * 1e6).round()
}

/// The time (s) a LOG score (whole microseconds) stands for.
pub fn log_time(score: f64) -> f64 {
    score / 1e6
}

/// `t` on LOG's clock: rounded to the nearest microsecond.
pub fn log_tick(t: f64) -> f64 {
    log_time(log_score(t))
}

/// The largest whole score whose time is at or before `t`: every score whose time is
/// after `t` is above it (times keep the scores' order). For a time on LOG's clock, its
/// own score. Where an f64 no longer steps by one (past 2^53 µs), a bound a little lower.
pub fn log_score_at_or_before(t: f64) -> f64 {
    let mut m = log_score(t);
    for _ in 0..4 {
        if log_time(m) > t {
            m -= 1.0;
        } else if m + 1.0 != m && log_time(m + 1.0) <= t {
            m += 1.0;
        } else {
            return m;
        }
    }
    t * 1e6 - (t.abs() * 1e6 * 1e-12 + 1.0)
}

/// The outcome of one FIXED or SLIDING call. Being limited is a normal outcome, not an
/// error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision<S> {
    pub allowed: bool,
    /// What is left in the current window after this call, in `[0, limit]`: `limit -
    /// count` for FIXED, `limit - estimate` for SLIDING (the estimate is weighted, so it
    /// can have a fraction).
    pub remaining: f64,
    /// Seconds until the same call would be admitted: 0 when allowed, -1 when never
    /// (`n > limit`). Exact for FIXED; never too early for SLIDING; both checked by
    /// re-deciding at the floating-point time `now + retry_after`.
    pub retry_after: f64,
    /// Seconds until the whole limit is available again (0: it is now).
    pub reset_after: f64,
    /// The state to store, when this call changed it (allowed and `n > 0`). `None`: write
    /// nothing.
    pub new_state: Option<S>,
    /// Absolute time (s) after which the state left by this call (the new one, else the
    /// stored one) is worthless, so the key may expire then: any call at or after it is
    /// decided as on a missing key. `now` when there is no state.
    pub expires_at: f64,
}

/// The outcome of one LOG call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogDecision {
    pub allowed: bool,
    /// Entries the window still has room for after this call: `floor(limit)` minus the
    /// entries counted, minus those added.
    pub remaining: f64,
    /// Seconds until the same call would be admitted: 0 when allowed, -1 when never
    /// (`n > limit`); otherwise exactly when enough counted entries have left the window.
    pub retry_after: f64,
    /// Seconds until every entry has left the window.
    pub reset_after: f64,
    /// Entries with a time <= this are out of the window: remove them. Set only by a call
    /// that writes (allowed, `n > 0`) and when there is such an entry; `n = 0` and denied
    /// calls remove nothing (reads are reads; they count only the entries in the window
    /// anyway).
    pub remove_up_to: Option<f64>,
    /// How many entries that is: the `removed` oldest ones, so removing by rank (`0` to
    /// `removed - 1`) removes the same entries as removing by score.
    pub removed: usize,
    /// How many entries to add, each its own member: `n` when allowed, else 0.
    pub add: u64,
    /// The time to add them at: `now` on LOG's clock (`log_tick(now)`), or the newest entry
    /// when that is behind it (the log never moves backwards, so a late clock cannot re-open
    /// a window already counted).
    pub add_at: f64,
    /// Absolute time (s) after which every entry left by this call is out of the window,
    /// so the key may expire then (the newest entry + window). `now` when none is left.
    pub expires_at: f64,
}

/// FIXED: one counter per aligned window. Admits `n` if the window's count plus `n` is
/// within the limit. A `now` in an earlier window than the stored `start` counts against
/// the stored window. `n = 0` reports and writes nothing.
pub fn fixed(w: Window, n: f64, now: f64, state: Option<Fixed>) -> Decision<Fixed> {
    let v = fixed_view(w, now, state);
    let allowed = n <= w.limit && v.count + n <= w.limit;
    let write = allowed && n > 0.0;
    let count = if write { v.count + n } else { v.count };
    let kept = if write {
        Some(Fixed {
            start: v.start,
            count,
        })
    } else {
        state
    };
    let retry_after = if allowed {
        0.0
    } else if n > w.limit {
        -1.0
    } else {
        wait_for(now, v.end - now, |t| {
            fixed_view(w, t, state).count + n <= w.limit
        })
    };
    let reset_after = if count > 0.0 {
        wait_for(now, v.end - now, |t| fixed_view(w, t, kept).count <= 0.0)
    } else {
        0.0
    };
    Decision {
        allowed,
        remaining: (w.limit - count).max(0.0).min(w.limit),
        retry_after,
        reset_after,
        new_state: kept.filter(|_| write),
        // At its end the stored window is over for every later call: bounds() is monotone
        // and the next window starts exactly there.
        expires_at: kept.map_or(now, |s| end_of(s.start, (v.start, v.end), w.window)),
    }
}

/// SLIDING: the counts of the current and the previous aligned windows, the previous one
/// weighted by how much of it the window-long interval ending at `now` still overlaps:
/// `estimate = previous * (1 - (now - start) / window) + count`. Admits `n` if the
/// estimate plus `n` is within the limit, so no aligned window ever holds more than the
/// limit. A `now` in an earlier window than the stored `start` counts against the stored
/// window, with the previous one weighted in full. `n = 0` reports and writes nothing.
pub fn sliding(w: Window, n: f64, now: f64, state: Option<Sliding>) -> Decision<Sliding> {
    let v = sliding_view(w, now, state);
    let estimate = v.estimate();
    let allowed = n <= w.limit && estimate + n <= w.limit;
    let write = allowed && n > 0.0;
    let kept = if write {
        Some(Sliding {
            start: v.start,
            count: v.count + n,
            previous: v.previous,
        })
    } else {
        state
    };
    let retry_after = if allowed {
        0.0
    } else if n > w.limit {
        -1.0
    } else {
        // The estimate falls linearly while the previous window slides out, jumps nowhere
        // at the boundary (the count becomes the previous, weighted in full) and falls
        // again: solve for the first time it leaves room for n, then check it.
        let at = if v.count + n <= w.limit {
            let room = w.limit - n - v.count;
            let t = if v.previous > 0.0 {
                v.start + w.window * (1.0 - room / v.previous)
            } else {
                now
            };
            t.min(v.end)
        } else {
            v.end + w.window * (1.0 - (w.limit - n) / v.count)
        };
        wait_for(now, at - now, |t| {
            sliding_view(w, t, state).estimate() + n <= w.limit
        })
    };
    // Worthless once its count has slid out of the window after it, or (no count) once
    // its own window, where the previous count still weighs, is over.
    let expires_at = kept.map_or(now, |s| {
        let end = end_of(s.start, (v.start, v.end), w.window);
        if s.count > 0.0 {
            bounds(end, w.window).1
        } else {
            end
        }
    });
    let after = estimate + if write { n } else { 0.0 };
    let reset_after = if after > 0.0 {
        // From `expires_at` on the state decides nothing (a tested property), so the
        // usual check, at the closed-form guess itself, needs no second look at the windows.
        wait_for(now, expires_at - now, |t| {
            t >= expires_at || sliding_view(w, t, kept).estimate() <= 0.0
        })
    } else {
        0.0
    };
    Decision {
        allowed,
        remaining: (w.limit - after).max(0.0).min(w.limit),
        retry_after,
        reset_after,
        new_state: kept.filter(|_| write),
        expires_at,
    }
}

/// LOG: every admitted request is its own entry; `entries` are the times, ascending, of
/// those the sorted set holds. Admits `n` entries if the entries in the window-long
/// interval `(t - window, t]` plus `n` fit in `floor(limit)`, where `t` is `now` on LOG's
/// microsecond clock (`log_tick`) or the newest entry if that is later (entries newer than
/// `now` count). An admitting call removes the entries out of that interval and adds `n`
/// at `t`, so the log never holds more than `floor(limit)` entries. `n = 0` reports and
/// writes nothing. Waits are from `now` as given: the time the caller comes back at is
/// ticked the same way, so a `now` with a sub-microsecond fraction is never served early.
pub fn log<E: Entries + ?Sized>(w: Window, n: u64, now: f64, entries: &E) -> LogDecision {
    let cap = log_capacity(w.limit);
    let v = log_view(w, log_tick(now), entries);
    let allowed = n <= cap && v.live.saturating_add(n) <= cap;
    let write = allowed && n > 0;
    let add = if write { n } else { 0 };
    let removed = if write { v.first_live } else { 0 };
    let used = v.live.saturating_add(add);
    let retry_after = if allowed {
        0.0
    } else if n > cap {
        -1.0
    } else {
        // The k-th oldest counted entry has to leave (1 <= k <= live, as n <= cap).
        let k = v.live.saturating_add(n).saturating_sub(cap);
        let leaving = usize::try_from(k)
            .ok()
            .and_then(|k| v.first_live.checked_add(k))
            .and_then(|i| i.checked_sub(1))
            .and_then(|i| entries.nth(i))
            .map_or(v.at, clamp_entry);
        wait_for(now, leaving + w.window - now, |t| {
            log_view(w, log_tick(t), entries).live.saturating_add(n) <= cap
        })
    };
    // A writing call's entries are the newest; otherwise the stored newest (read only now:
    // the usual call writes, and never needs it).
    let newest = if write {
        v.at
    } else {
        entries.newest().map_or(v.at, clamp_entry)
    };
    let out = |t: f64| newest <= log_tick(t).max(newest) - w.window;
    let reset_after = if used > 0 {
        wait_for(now, newest + w.window - now, out)
    } else {
        0.0
    };
    let left = entries.count().saturating_sub(removed) > 0 || add > 0;
    LogDecision {
        allowed,
        remaining: cap.saturating_sub(used) as f64,
        retry_after,
        reset_after,
        remove_up_to: (removed > 0).then_some(v.cutoff),
        removed,
        add,
        add_at: v.at,
        expires_at: if left {
            wait_for(0.0, newest + w.window, out)
        } else {
            now
        },
    }
}

/// A LOG's entries as `log` reads them: the sorted set's scores, ascending. A slice is
/// one; the command reads a sorted set lazily, from the oldest entry up, only as far as a
/// call asks (the entries leaving the window, and on a refusal the one whose leaving
/// frees room), so a call costs what it removes, not what the log holds.
pub trait Entries {
    /// How many entries there are.
    fn count(&self) -> usize;
    /// The newest entry's time.
    fn newest(&self) -> Option<f64>;
    /// The newest entry's time if it is after `t`: what a call needs to know to place its
    /// entries (a sorted set can tell "nothing after `t`" without reading an entry).
    fn newest_after(&self, t: f64) -> Option<f64> {
        self.newest().filter(|&n| n > t)
    }
    /// How many entries have a time (read into the accepted range) `<= t`.
    fn count_up_to(&self, t: f64) -> usize;
    /// The `i`-th oldest entry's time.
    fn nth(&self, i: usize) -> Option<f64>;
}

impl Entries for [f64] {
    fn count(&self) -> usize {
        self.len()
    }
    fn newest(&self) -> Option<f64> {
        self.last().copied()
    }
    fn count_up_to(&self, t: f64) -> usize {
        self.partition_point(|&e| clamp_entry(e) <= t)
    }
    fn nth(&self, i: usize) -> Option<f64> {
        self.get(i).copied()
    }
}

impl Entries for Vec<f64> {
    fn count(&self) -> usize {
        self.as_slice().count()
    }
    fn newest(&self) -> Option<f64> {
        self.as_slice().newest()
    }
    fn count_up_to(&self, t: f64) -> usize {
        self.as_slice().count_up_to(t)
    }
    fn nth(&self, i: usize) -> Option<f64> {
        self.as_slice().nth(i)
    }
}

/// The entries a LOG may hold: `floor(limit)`, at most `MAX_AMOUNT`.
fn log_capacity(limit: f64) -> u64 {
    limit.clamp(0.0, MAX_AMOUNT).floor() as u64
}

/// The aligned window holding `t`: `(start, end)`, where `start` is the largest product
/// `j * window` (j a whole number, the product as rounded) not above `t`, and `end` the
/// next such product. So `start <= t < end` however the arithmetic rounds, every time is
/// in exactly one window, the windows follow one another without gap or overlap, and the
/// window of `end` starts at `end`. `end` is `start + window` within an ulp or so (the sum
/// itself can round one ulp either side of the next product, which would leave a time in
/// no window or in two).
fn bounds(t: f64, window: f64) -> (f64, f64) {
    let mut j = (t / window).floor();
    // The rounded quotient can be a whole number off either way; the products decide.
    for _ in 0..16 {
        if j * window > t {
            j = whole_below(j);
        } else if whole_above(j) * window <= t {
            j = whole_above(j);
        } else {
            break;
        }
    }
    // No-ops once the loop settled, which it does in a step or two.
    let start = (j * window).min(t);
    let end = (whole_above(j) * window).max(t.next_up());
    (start, end)
}

/// The end of the window starting at `start`: `known`'s end when `known` is that window
/// (the usual call: the stored window is the current one), else from `bounds`.
fn end_of(start: f64, known: (f64, f64), window: f64) -> f64 {
    if start == known.0 {
        known.1
    } else {
        bounds(start, window).1
    }
}

/// Below this magnitude `j + 1` and `j - 1` are exact and are the next whole numbers, so
/// the f64 stepping below is not needed (every window of a time before the year 10000,
/// at any accepted window length of a microsecond or more, is numbered below it).
const EXACT_STEPS: f64 = 4_503_599_627_370_496.0; // 2^52

/// The next whole number after `j` as an f64 (above 2^53, the next f64).
#[inline]
fn whole_above(j: f64) -> f64 {
    if j.abs() < EXACT_STEPS {
        j + 1.0
    } else {
        (j + 1.0).max(j.next_up())
    }
}

/// The whole number before `j` as an f64 (above 2^53, the previous f64).
#[inline]
fn whole_below(j: f64) -> f64 {
    if j.abs() < EXACT_STEPS {
        j - 1.0
    } else {
        (j - 1.0).min(j.next_down())
    }
}

/// The window a FIXED call counts in.
#[derive(Debug, Clone, Copy)]
struct FixedView {
    start: f64,
    end: f64,
    count: f64,
}

/// The stored window if it is not over (a stored start at or after `now`'s window), else
/// the empty window holding `now`.
fn fixed_view(w: Window, now: f64, state: Option<Fixed>) -> FixedView {
    let (start, end) = bounds(now, w.window);
    match state {
        Some(s) if s.start >= start => FixedView {
            start: s.start,
            end: end_of(s.start, (start, end), w.window),
            count: s.count,
        },
        _ => FixedView {
            start,
            end,
            count: 0.0,
        },
    }
}

/// The two windows a SLIDING call weighs, as of `now`.
#[derive(Debug, Clone, Copy)]
struct SlidingView {
    start: f64,
    end: f64,
    count: f64,
    previous: f64,
    /// The share of the previous window still inside `(now - window, now]`, in `[0, 1]`.
    weight: f64,
}

impl SlidingView {
    fn estimate(&self) -> f64 {
        self.previous * self.weight + self.count
    }
}

/// The stored windows rolled forward to `now`: kept if the stored window is not over; the
/// stored count becomes the previous one if the stored window is the one just before
/// `now`'s; forgotten if older.
fn sliding_view(w: Window, now: f64, state: Option<Sliding>) -> SlidingView {
    let (start, end) = bounds(now, w.window);
    let (start, end, count, previous) = match state {
        Some(s) if s.start >= start => (
            s.start,
            end_of(s.start, (start, end), w.window),
            s.count,
            s.previous,
        ),
        // The window just before `start` is the one holding the time just before it.
        Some(s) if s.start >= bounds(start.next_down(), w.window).0 => (start, end, 0.0, s.count),
        _ => (start, end, 0.0, 0.0),
    };
    // Below 0 when `now` is behind a stored window; 1 only at its very last instant.
    let elapsed = ((now - start) / w.window).clamp(0.0, 1.0);
    SlidingView {
        start,
        end,
        count,
        previous,
        weight: 1.0 - elapsed,
    }
}

/// The entries a LOG call counts.
#[derive(Debug, Clone, Copy)]
struct LogView {
    /// The log's clock: `now`, or the newest entry if later.
    at: f64,
    /// Entries at or before this are out of the window.
    cutoff: f64,
    /// Index of the oldest entry still in the window.
    first_live: usize,
    /// Entries in the window.
    live: u64,
}

fn log_view<E: Entries + ?Sized>(w: Window, now: f64, entries: &E) -> LogView {
    let at = entries
        .newest_after(now)
        .map_or(now, |n| clamp_entry(n).max(now));
    let cutoff = at - w.window;
    let first_live = entries.count_up_to(cutoff);
    let live = entries.count().saturating_sub(first_live);
    LogView {
        at,
        cutoff,
        first_live,
        live: u64::try_from(live).unwrap_or(u64::MAX),
    }
}

/// A stored entry read into the accepted time range, so that corrupt scores (`-inf`,
/// `+inf`; Redis stores no NaN) cannot make any answer non-finite.
pub fn clamp_entry(e: f64) -> f64 {
    e.clamp(0.0, MAX_TIME)
}

/// See `bucket::settle_wait`: the closed-form wait, checked at the floating-point time
/// the caller will come back at and nudged up if rounding falls short. Every caller's `ok`
/// is monotone: windows only move forward and entries only leave.
fn wait_for(now: f64, guess: f64, ok: impl Fn(f64) -> bool) -> f64 {
    crate::algo::bucket::settle_wait(now, guess, ok)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod accuracy;
