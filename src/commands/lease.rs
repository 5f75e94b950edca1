//! The in-flight limit: TB.ACQUIRE key limit lease_ms, TB.RELEASE key lease_id,
//! TB.RENEW key lease_id lease_ms, and TB.PEEK key LEASES. Timed on the server's clock
//! only (no `now` argument: a client clock can neither extend nor steal a lease). Every
//! writing call first reclaims the expired leases; the math is `algo::lease`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use redis_module::raw::RedisModuleString;

use crate::algo::lease::{self, ID_STEP, mix};
use crate::binding::stats::Outcome;
use crate::binding::store::{Access, OwnedString};
use crate::binding::store_lease::{Held, LeaseKey};
use crate::error::TbError;
use crate::parse::lease::{parse_lease_id, parse_lease_ms, parse_limit};

use super::{Call, Clock};

/// The server's clock in whole microseconds.
pub(crate) fn server_micros() -> u64 {
    match Clock::new(None, None) {
        Clock::Server { micros } => micros,
        Clock::Client { .. } => 0,
    }
}

/// The id counter (`lease::mix` of it is the next id), seeded from the kernel's random
/// source on first use, so a promoted replica's ids are independent of its old master's.
static ID_COUNTER: AtomicU64 = AtomicU64::new(0);

pub(crate) fn next_id() -> u64 {
    let mut c = ID_COUNTER.load(Relaxed);
    if c == 0 {
        let mut seed = [0u8; 8];
        // SAFETY: getrandom writes at most seed.len() bytes into the buffer we pass.
        let got = unsafe { libc::getrandom(seed.as_mut_ptr().cast(), seed.len(), 0) };
        c = u64::from_ne_bytes(seed);
        if got != 8 {
            // No random source: the clock and the pid still differ between servers.
            c = server_micros() ^ (u64::from(std::process::id()) << 40);
        }
        c |= 1;
    }
    // Commands run one at a time (main thread), so a plain load and store is enough.
    let next = c.wrapping_add(ID_STEP);
    ID_COUNTER.store(if next == 0 { 1 } else { next }, Relaxed);
    mix(c)
}

/// Opens the key for writing and reads what every writing call needs: the expired
/// leases (to reclaim) and the live count.
fn open_reclaiming<'a>(
    call: &Call<'a>,
    key: *mut RedisModuleString,
    now_ms: u64,
) -> Result<(LeaseKey<'a>, Vec<Held<'a>>, u64), TbError> {
    let leases = LeaseKey::open(call.api, call.ctx, key, Access::Write)?;
    let expired = leases.expired(now_ms)?;
    let live = leases.count().saturating_sub(expired.len() as u64);
    if expired.is_empty() && live > 0 {
        // Nothing reclaimed: read the first live member, so a sorted set that is not
        // ours is refused even by a call that would only look up one id.
        leases.earliest_live(now_ms, 1)?;
    }
    Ok((leases, expired, live))
}

fn pointers(held: &[Held]) -> Vec<*mut RedisModuleString> {
    held.iter().map(|h| h.member.ptr).collect()
}

/// TB.ACQUIRE key limit lease_ms -> [granted, in_flight, lease_id | nil, ms].
pub fn acquire(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<2>()?;
    let [limit, lease_ms] = raw;
    if count != 2 {
        return Err(TbError::WrongArity);
    }
    let limit = parse_limit(limit)?;
    let lease_ms = parse_lease_ms(lease_ms)?;
    let now_us = server_micros();
    let now_ms = lease::now_ms(now_us);
    let (leases, expired, live) = open_reclaiming(call, key, now_ms)?;
    let earliest = leases.earliest_live(now_ms, lease::needed_earliest(limit, live))?;
    let decision = lease::acquire(limit, lease_ms, live, &earliest, now_us);
    // A fresh id not on the key already (a collision is a 2^-64 event; a few tries).
    let granted = match decision.expiry_ms {
        Some(expiry) => {
            let mut found = None;
            for _ in 0..4 {
                let member = lease::member(next_id());
                let string = leases.string(&member);
                if leases.expiry_of(&string)?.is_none() {
                    found = Some((member, string, expiry));
                    break;
                }
            }
            Some(found.ok_or(TbError::Internal)?)
        }
        None => None,
    };
    leases.remove(&pointers(&expired));
    match &granted {
        Some((_, string, expiry)) => leases.put(string, *expiry, lease_ms, false),
        None if !expired.is_empty() => leases.fit_expiry(now_ms),
        None => {}
    }
    drop(leases);

    let reply = call.reply();
    reply.array(4);
    reply.integer(i64::from(decision.granted));
    reply.integer(i64::try_from(decision.in_flight).unwrap_or(i64::MAX));
    match &granted {
        Some((member, _, _)) => reply.bulk(lease::id_text(member)),
        None => reply.null(),
    }
    reply.integer(i64::try_from(decision.ms).unwrap_or(i64::MAX));
    Ok(Outcome::of(decision.granted))
}

/// The member string of a lease id given by a client.
fn member_of<'a>(leases: &LeaseKey<'a>, id: &[u8]) -> Result<OwnedString<'a>, TbError> {
    Ok(leases.string(&lease::member(parse_lease_id(id)?)))
}

/// TB.RELEASE key lease_id -> [released, in_flight].
pub fn release(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<1>()?;
    let [id] = raw;
    if count != 1 {
        return Err(TbError::WrongArity);
    }
    parse_lease_id(id)?;
    let now_ms = lease::now_ms(server_micros());
    let (leases, expired, live) = open_reclaiming(call, key, now_ms)?;
    let member = member_of(&leases, id)?;
    let held = leases
        .expiry_of(&member)?
        .is_some_and(|e| lease::is_live(e, now_ms));
    let mut gone = pointers(&expired);
    if held {
        gone.push(member.ptr);
    }
    if !gone.is_empty() {
        leases.remove(&gone);
        leases.fit_expiry(now_ms);
    }
    drop(leases);
    let in_flight = live.saturating_sub(u64::from(held));
    call.reply().integers(&[
        i64::from(held),
        i64::try_from(in_flight).unwrap_or(i64::MAX),
    ]);
    Ok(Outcome::of(held))
}

/// TB.RENEW key lease_id lease_ms -> [renewed, in_flight, ms].
pub fn renew(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<2>()?;
    let [id, lease_ms] = raw;
    if count != 2 {
        return Err(TbError::WrongArity);
    }
    parse_lease_id(id)?;
    let lease_ms = parse_lease_ms(lease_ms)?;
    let now_us = server_micros();
    let now_ms = lease::now_ms(now_us);
    let (leases, expired, live) = open_reclaiming(call, key, now_ms)?;
    let member = member_of(&leases, id)?;
    let current = leases
        .expiry_of(&member)?
        .filter(|&e| lease::is_live(e, now_ms));
    let renewed = lease::renew(current, lease_ms, now_us);
    leases.remove(&pointers(&expired));
    match renewed {
        Some(expiry) => leases.put(&member, expiry, lease_ms, true),
        None if !expired.is_empty() => leases.fit_expiry(now_ms),
        None => {}
    }
    drop(leases);
    let ms = renewed.map_or(0, |e| e.saturating_sub(now_ms));
    call.reply().integers(&[
        i64::from(renewed.is_some()),
        i64::try_from(live).unwrap_or(i64::MAX),
        i64::try_from(ms).unwrap_or(i64::MAX),
    ]);
    Ok(Outcome::of(renewed.is_some()))
}

/// TB.PEEK key LEASES -> [in_flight, ms until the earliest live lease expires (0: none)].
/// Read-only: expired leases are not counted, and not removed.
pub fn peek(call: &Call, key: *mut RedisModuleString) -> Result<Outcome, TbError> {
    let now_ms = lease::now_ms(server_micros());
    let leases = LeaseKey::open(call.api, call.ctx, key, Access::Read)?;
    let expired = leases.expired(now_ms)?.len() as u64;
    let live = leases.count().saturating_sub(expired);
    let earliest = leases.earliest_live(now_ms, 1)?;
    drop(leases);
    let ms = earliest.first().map_or(0, |e| e.saturating_sub(now_ms));
    call.reply().integers(&[
        i64::try_from(live).unwrap_or(i64::MAX),
        i64::try_from(ms).unwrap_or(i64::MAX),
    ]);
    // A query that succeeded: nothing was asked for, so nothing was refused.
    Ok(Outcome::Allowed)
}
