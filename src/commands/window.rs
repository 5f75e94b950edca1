//! TB.WINDOW key limit window n [now] [FIXED | SLIDING | LOG]: at most `limit` per
//! `window` seconds. FIXED and SLIDING keep a small hash, LOG a sorted set; the reply is
//! TB.TAKE's, so header code is shared.

use redis_module::raw::RedisModuleString;

use crate::args::parse_window;
use crate::bucket::Decision;
use crate::error::TbError;
use crate::expiry;
use crate::fields::{Mode, WindowFields, decode_fixed, decode_sliding};
use crate::num::{NumText, format_f64};
use crate::stats::Outcome;
use crate::store::{Access, BucketKey, Field};
use crate::store_log::LogKey;
use crate::window::{self, Window};

use super::{Call, Clock};

pub fn run(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<5>()?;
    let args = parse_window(raw.get(..count).unwrap_or(&[]))?;
    let clock = Clock::new(args.now, args.now_at.and_then(|i| raw.get(i).copied()));
    let (w, n) = (args.window, args.n);
    let decision = match args.mode {
        Mode::Fixed => counter(call, key, &clock, |now, f| {
            let d = window::fixed(w, n, now, decode_fixed(f)?);
            let write = d
                .new_state
                .map(|s| vec![(Field::Start, s.start), (Field::Count, s.count)]);
            Ok((
                d.allowed,
                d.remaining,
                d.retry_after,
                d.reset_after,
                d.expires_at,
                write,
            ))
        })?,
        Mode::Sliding => counter(call, key, &clock, |now, f| {
            let d = window::sliding(w, n, now, decode_sliding(f)?);
            let write = d.new_state.map(|s| {
                vec![
                    (Field::Start, s.start),
                    (Field::Count, s.count),
                    (Field::Previous, s.previous),
                ]
            });
            Ok((
                d.allowed,
                d.remaining,
                d.retry_after,
                d.reset_after,
                d.expires_at,
                write,
            ))
        })?,
        Mode::Log => log(call, key, &clock, w, n)?,
    };
    call.reply()
        .decision(&decision, &format_f64(decision.remaining));
    Ok(Outcome::of(decision.allowed))
}

/// What FIXED and SLIDING decide: the reply's four fields, when the state stops
/// mattering, and the fields to store (with their values) when the call wrote.
type Counted = (bool, f64, f64, f64, f64, Option<Vec<(Field, f64)>>);

/// FIXED and SLIDING: a hash of counts. Writes only the fields whose value changed (the
/// window's start moves once per window, the count on every admitted call).
fn counter(
    call: &Call,
    key: *mut RedisModuleString,
    clock: &Clock,
    decide: impl FnOnce(f64, &WindowFields) -> Result<Counted, TbError>,
) -> Result<Decision, TbError> {
    let hash = BucketKey::open(call.api, call.ctx, key, Access::Write)?;
    let stored = hash.read_window()?;
    let now = clock.now();
    let (allowed, remaining, retry_after, reset_after, expires_at, write) = decide(now, &stored)?;
    if let Some(fields) = write {
        let old = |field: Field| match field {
            Field::Start => stored.start.as_deref(),
            Field::Count => stored.count.as_deref(),
            Field::Previous => stored.previous.as_deref(),
            _ => None,
        };
        let texts: Vec<(Field, NumText)> = fields
            .into_iter()
            .filter(|&(field, value)| old(field).and_then(crate::num::parse_f64) != Some(value))
            .map(|(field, value)| (field, format_f64(value)))
            .collect();
        let pairs: Vec<(Field, &[u8])> = texts.iter().map(|(f, t)| (*f, t.as_bytes())).collect();
        hash.write_fields(&pairs);
        hash.apply_expiry(expiry::plan(
            hash.expiry(),
            clock.server_ms(),
            expires_at - now,
        ));
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
        // The entries' score as text: the call's own time as it is stored elsewhere, or
        // (a clock behind the log) the newest entry's.
        let formatted;
        let score_text: &[u8] = if d.add_at == now {
            match *clock {
                Clock::Server { micros } => {
                    formatted = crate::num::format_micros(micros);
                    formatted.as_bytes()
                }
                Clock::Client { text, .. } if crate::num::is_plain_decimal(text) => text,
                Clock::Client { .. } => {
                    formatted = format_f64(now);
                    formatted.as_bytes()
                }
            }
        } else {
            formatted = format_f64(d.add_at);
            formatted.as_bytes()
        };
        // Requests in the same microsecond are separate members (the notes' script used
        // the time alone, so they collapsed into one entry and the limit leaked). They are
        // numbered by the log's size when added: between two calls that add at one score
        // the cutoff is the same (it follows the newest entry), so nothing is removed and
        // the size only grows, which keeps every number at that score distinct without
        // reading those entries back.
        let first = crate::window::Entries::count(&set).saturating_sub(d.removed);
        let members: Vec<Vec<u8>> = (0..d.add)
            .map(|i| {
                let mut m = score_text.to_vec();
                m.push(b'-');
                m.extend_from_slice((first as u64 + i).to_string().as_bytes());
                m
            })
            .collect();
        set.write(d.removed, d.add_at, score_text, &members);
        set.apply_expiry(expiry::plan(
            set.expiry(),
            clock.server_ms(),
            d.expires_at - now,
        ));
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
