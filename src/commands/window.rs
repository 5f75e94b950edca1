//! TB.WINDOW key limit window n [now] [FIXED | SLIDING | LOG]: at most `limit` per
//! `window` seconds. FIXED and SLIDING keep a small hash, LOG a sorted set; the reply is
//! TB.TAKE's, so header code is shared.

use redis_module::raw::RedisModuleString;

use crate::algo::bucket::Decision;
use crate::algo::num::{NumText, format_f64};
use crate::algo::window::Mode;
use crate::algo::window::{self, Window};
use crate::binding::stats::Outcome;
use crate::binding::store::{Access, BucketKey};
use crate::binding::store_log::LogKey;
use crate::error::{Field, TbError};
use crate::parse::args::parse_window;
use crate::parse::fields::{Layout, WindowFields, decode_fixed, decode_sliding, format_counts};

use super::{Call, Clock};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<5>()?;
    let args = parse_window(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(
        call,
        args.now,
        args.now_at.and_then(|i| raw.get(i).copied()),
    )?;
    let (w, n) = (args.window, args.n);
    let decision = match args.mode {
        Mode::Fixed => counter(call, key, &clock, Mode::Fixed, |now, f| {
            let stored = decode_fixed(f)?;
            let d = window::fixed(w, n, now, stored);
            let write = d.new_state.map(|s| Write {
                start: changed(s.start, stored.map(|o| o.start)),
                counts: changed(s.count, stored.map(|o| o.count)).map(|t| (Field::Count, t)),
                split: false,
            });
            Ok(counted(&d, write))
        })?,
        Mode::Sliding => counter(call, key, &clock, Mode::Sliding, |now, f| {
            let stored = decode_sliding(f)?;
            let old = stored.map(|(o, _)| o);
            let d = window::sliding(w, n, now, old);
            let split = matches!(stored, Some((_, Layout::Split)));
            let write = d.new_state.map(|s| Write {
                start: changed(s.start, old.map(|o| o.start)),
                counts: (split
                    || old.map(|o| (o.count, o.previous)) != Some((s.count, s.previous)))
                .then(|| (Field::Counts, format_counts(s.count, s.previous))),
                split,
            });
            Ok(counted(&d, write))
        })?,
        Mode::Log => log(call, key, &clock, w, n)?,
    };
    call.reply()
        .decision(&decision, &format_f64(decision.remaining));
    Ok(Outcome::of(decision.allowed))
}

/// What a FIXED or SLIDING call stores: only the fields whose value changed (the
/// window's start moves once per window, the count on every admitted call).
struct Write {
    /// `start`, when it moved.
    start: Option<NumText>,
    /// FIXED's `count` or SLIDING's `counts`, when changed.
    counts: Option<(Field, NumText)>,
    /// The key holds SLIDING's earlier `count`, `previous`: deleted once `counts` is
    /// written.
    split: bool,
}

/// `new` as text, unless it is the stored value.
fn changed(new: f64, old: Option<f64>) -> Option<NumText> {
    (old != Some(new)).then(|| format_f64(new))
}

/// What FIXED and SLIDING decide: the reply's four fields, when the state stops
/// mattering, and what to store when the call wrote.
type Counted = (bool, f64, f64, f64, f64, Option<Write>);

/// A FIXED or SLIDING decision as `counter` takes it, with what to write.
fn counted<S>(d: &window::Decision<S>, write: Option<Write>) -> Counted {
    (
        d.allowed,
        d.remaining,
        d.retry_after,
        d.reset_after,
        d.expires_at,
        write,
    )
}

/// FIXED and SLIDING: a small hash of counts. Nothing on this path allocates.
fn counter(
    call: &Call,
    key: *mut RedisModuleString,
    clock: &Clock,
    mode: Mode,
    decide: impl FnOnce(f64, &WindowFields<'_>) -> Result<Counted, TbError>,
) -> Result<Decision, TbError> {
    let hash = BucketKey::open(call.api, call.ctx, key, Access::Write)?;
    let now = clock.now();
    let (allowed, remaining, retry_after, reset_after, expires_at, write) =
        hash.read_window(mode, |fields| decide(now, fields))?;
    if let Some(write) = write {
        let start = write.start.as_ref().map(|t| (Field::Start, t.as_bytes()));
        let counts = write.counts.as_ref().map(|(f, t)| (*f, t.as_bytes()));
        match (start, counts) {
            (Some(a), Some(b)) => hash.write_fields(&[a, b]),
            (Some(a), None) | (None, Some(a)) => hash.write_fields(&[a]),
            (None, None) => {}
        }
        if write.split {
            hash.delete_fields([Field::Count, Field::Previous]);
        }
        hash.expire_in(clock.server_ms(), expires_at - now);
    }
    drop(hash);
    Ok(rounded(clock, allowed, remaining, retry_after, reset_after))
}

/// LOG: a sorted set, one member per admitted request.
fn log(
    call: &Call,
    key: *mut RedisModuleString,
    clock: &Clock,
    w: Window,
    n: f64,
) -> Result<Decision, TbError> {
    let set = LogKey::open(call.api, call.ctx, key)?;
    let now = clock.now();
    // n is whole and at most LOG_MAX_N (checked by the parser).
    let d = window::log(w, n as u64, now, &set);
    set.finish_reading()?;
    if d.add > 0 || d.removed > 0 {
        // The entries' score: the call's time on LOG's clock, or the newest entry's when
        // that is later (`d.add_at` is the time of this very score, never converted back).
        let now_score = window::log_score(now);
        let score = set.newest_score().map_or(now_score, |s| s.max(now_score));
        let first = crate::algo::window::Entries::count(&set).saturating_sub(d.removed) as u64;
        set.write(d.removed, score, first, d.add);
        set.expire_in(clock.server_ms(), d.expires_at - now);
    }
    drop(set);
    Ok(rounded(
        clock,
        d.allowed,
        d.remaining,
        d.retry_after,
        d.reset_after,
    ))
}

/// The reply's decision, waits rounded to the server clock's microseconds when it is the
/// clock used.
fn rounded(
    clock: &Clock,
    allowed: bool,
    remaining: f64,
    retry_after: f64,
    reset_after: f64,
) -> Decision {
    let mut d = Decision {
        allowed,
        remaining,
        retry_after,
        reset_after,
        new_state: None,
    };
    clock.round(&mut d);
    d
}
