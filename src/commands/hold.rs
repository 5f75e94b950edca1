//! Holds, settled later: TB.HOLD key capacity rate estimate ttl_ms, TB.SETTLE key capacity
//! rate hold_id actual [max_wait], TB.PEEK key HOLDS. The bucket is TB.TAKE's (same hash,
//! same fields); the outstanding holds are its `holds` field (`algo::hold`). Server clock
//! only: a hold's expiry, like a lease's, is not a client's to move.

use crate::algo::bucket::{Decision, State};
use crate::algo::hold::{self, Hold};
use crate::algo::lease;
use crate::algo::num::format_f64;
use crate::binding::stats::Outcome;
use crate::binding::store::{Access, BucketKey};
use crate::error::{Field, TbError};
use crate::parse::lease::{parse_hold, parse_settle};

use super::{Call, Clock, next_id, server_micros, store};

/// The bucket's stored holds (none when the field is missing).
fn read_holds(bucket: &BucketKey) -> Result<Vec<Hold>, TbError> {
    if !bucket.exists() {
        return Ok(Vec::new());
    }
    bucket.read_holds(|text| match text {
        None => Ok(Vec::new()),
        Some(t) => hold::parse_holds(t).ok_or(TbError::CorruptState(Field::Holds)),
    })
}

/// Stores a call's outcome: the bucket's fields (as TB.TAKE stores them), then the holds
/// when they changed, and a TTL that outlives the bucket's time to full and every hold.
fn store_all(
    bucket: &BucketKey,
    stored: Option<State>,
    decision: &Decision,
    clock: &Clock,
    holds: &[Hold],
    holds_changed: bool,
    now_us: u64,
) {
    let now_ms = lease::now_ms(now_us);
    let latest = holds.iter().map(|h| h.expiry_ms).max().unwrap_or(0);
    let cover = decision
        .reset_after
        .max(latest.saturating_sub(now_ms) as f64 / 1000.0);
    let text = format_f64(decision.remaining);
    let for_expiry = Decision {
        reset_after: cover,
        ..*decision
    };
    if holds_changed {
        if holds.is_empty() {
            bucket.delete_field(Field::Holds);
        } else {
            bucket.write_fields(&[(Field::Holds, &hold::format_holds(holds))]);
        }
    }
    store(bucket, stored, &for_expiry, &text, clock);
    if decision.new_state.is_none() && holds_changed {
        bucket.expire_in(clock.server_ms(), cover);
    }
}

/// TB.HOLD -> [allowed, remaining, retry_after, reset_after, hold_id | nil].
pub fn hold(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<4>()?;
    let args = parse_hold(raw.get(..count).unwrap_or(&[]))?;
    let now_us = server_micros();
    let clock = Clock::Server { micros: now_us };
    let bucket = BucketKey::open(call.api, call.ctx, key, Access::Write)?;
    let stored = bucket.read()?;
    let all = read_holds(&bucket)?;
    let mut live = hold::live(&all, now_us);
    // A fresh id not held on this bucket already (a collision is a 2^-64 event).
    let mut id = next_id()?;
    while all.iter().any(|h| h.id == id) {
        id = next_id()?;
    }
    let (mut d, made) = hold::hold(
        args.limit,
        args.estimate,
        args.ttl_ms,
        id,
        now_us,
        stored,
        &live,
    );
    clock.round(&mut d);
    let changed = made.is_some() || live.len() != all.len();
    live.extend(made);
    store_all(&bucket, stored, &d, &clock, &live, changed, now_us);
    drop(bucket);
    let reply = call.reply();
    reply.array(5);
    reply.decision_fields(&d, &format_f64(d.remaining));
    match made {
        Some(h) => reply.bulk(lease::id_text(&lease::member(h.id))),
        None => reply.null(),
    }
    Ok(Outcome::of(d.allowed))
}

/// TB.SETTLE -> [settled, remaining, charged, reset_after].
pub fn settle(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<5>()?;
    let args = parse_settle(raw.get(..count).unwrap_or(&[]))?;
    let now_us = server_micros();
    let clock = Clock::Server { micros: now_us };
    let bucket = BucketKey::open(call.api, call.ctx, key, Access::Write)?;
    let stored = bucket.read()?;
    let all = read_holds(&bucket)?;
    let mut live = hold::live(&all, now_us);
    let found = live.iter().position(|h| h.id == args.id);
    let target = found.and_then(|i| live.get(i).copied());
    let s = hold::settle(
        args.limit,
        target,
        args.actual,
        args.max_debt,
        now_us,
        stored,
    );
    let mut d = s.decision;
    clock.round(&mut d);
    if let Some(i) = found {
        live.remove(i);
    }
    let changed = live.len() != all.len();
    store_all(&bucket, stored, &d, &clock, &live, changed, now_us);
    drop(bucket);
    // TB.TAKE's four fields, the third being what the settlement charged (negative: given
    // back) rather than a wait.
    let shown = Decision {
        allowed: s.settled,
        retry_after: s.charged,
        ..d
    };
    call.reply().decision(&shown, &format_f64(d.remaining));
    Ok(Outcome::of(s.settled))
}

/// TB.PEEK key HOLDS -> [holds, amount held, ms until the earliest expires (0: none)].
pub fn peek(
    call: &Call,
    key: *mut redis_module::raw::RedisModuleString,
) -> Result<Outcome, TbError> {
    let now_us = server_micros();
    let bucket = BucketKey::open(call.api, call.ctx, key, Access::Read)?;
    bucket.read()?;
    let all = read_holds(&bucket)?;
    drop(bucket);
    let (n, amount, ms) = hold::summary(&all, now_us);
    let reply = call.reply();
    reply.array(3);
    reply.integer(i64::try_from(n).unwrap_or(i64::MAX));
    reply.number(amount);
    reply.integer(i64::try_from(ms).unwrap_or(i64::MAX));
    Ok(Outcome::Allowed)
}

/// TB.RENEW key hold_id ttl_ms on a bucket (`lease::renew` sends a hash key here): the
/// hold's expiry moved to `ttl_ms` from now, so a request that runs longer than its hold's
/// first ttl still settles its actual cost -> [renewed, live holds, ms left]. A hold that
/// is not live (settled, expired, never made) is not renewed: `[0, n, 0]`.
pub fn renew(
    call: &Call,
    key: *mut redis_module::raw::RedisModuleString,
    id: u64,
    ttl_ms: u64,
    now_us: u64,
) -> Result<Outcome, TbError> {
    let bucket = BucketKey::open(call.api, call.ctx, key, Access::Write)?;
    bucket.read()?;
    let all = read_holds(&bucket)?;
    let mut live = hold::live(&all, now_us);
    let renewed = hold::renew(&mut live, id, ttl_ms, now_us);
    if renewed.is_some() || live.len() != all.len() {
        if live.is_empty() {
            bucket.delete_field(Field::Holds);
        } else {
            bucket.write_fields(&[(Field::Holds, &hold::format_holds(&live))]);
        }
        // The key outlives the renewed hold (a TTL already beyond it is kept; a bucket
        // without one keeps none).
        if let (Some(expiry), Some(current)) = (renewed, bucket.expiry())
            && let Some(at) = lease::key_expiry(Some(current), expiry, ttl_ms)
        {
            bucket.apply_expiry(crate::algo::expiry::ExpiryPlan::SetAt(at));
        }
    }
    drop(bucket);
    let now_ms = lease::now_ms(now_us);
    call.reply().integers(&[
        i64::from(renewed.is_some()),
        i64::try_from(live.len()).unwrap_or(i64::MAX),
        i64::try_from(renewed.map_or(0, |e| e.saturating_sub(now_ms))).unwrap_or(i64::MAX),
    ]);
    Ok(Outcome::of(renewed.is_some()))
}
