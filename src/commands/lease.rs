//! The in-flight limit: TB.ACQUIRE key limit lease_ms, TB.RELEASE key lease_id,
//! TB.RENEW key lease_id lease_ms, and TB.PEEK key LEASES. Timed on the server's clock
//! only (no `now` argument: a client clock can neither extend nor steal a lease). Every
//! writing call first reclaims the expired leases; the math is `algo::lease`.

use redis_module::raw::RedisModuleString;

use crate::algo::bucket::Limit;
use crate::algo::lease;
use crate::algo::num::format_f64;
use crate::binding::stats::Outcome;
use crate::binding::store::{Access, Key, OwnedString, string_bytes};
use crate::binding::store_lease::{Front, LeaseKey};
use crate::error::{LeaseError, TbError};
use crate::parse::args::{has_duplicates, mtake_layout, parse_triples};
use crate::parse::lease::{parse_lease_id, parse_lease_ms, parse_limit};

use super::{Call, Clock, next_id, open_parts, server_micros, store_parts};

/// Opens the key for writing and reads what every writing call needs: the expired
/// leases (to reclaim) and the live count.
///
/// `k` live expiries are read too (at least the first live member, so a sorted set that
/// is not ours is refused even by a call that only looks up one id).
fn open_reclaiming<'a>(
    call: &Call<'a>,
    key: *mut RedisModuleString,
    now_ms: u64,
    k: impl FnOnce(u64) -> u64,
) -> Result<(LeaseKey<'a>, Front<'a>, u64), TbError> {
    let leases = LeaseKey::open(call.api, call.ctx, key, Access::Write)?;
    // `k` of the count before reclaiming is at least `k` of the live count.
    let front = leases.front(now_ms, k(leases.count()))?;
    let live = leases.count().saturating_sub(front.expired.len() as u64);
    Ok((leases, front, live))
}

/// The member string of lease `id` and its expiry if it is live: the earliest live
/// lease's, already read by [`LeaseKey::front`], when that is the one; else looked up.
fn live_lease<'a>(
    leases: &LeaseKey<'a>,
    first_live: Option<(OwnedString<'a>, u64)>,
    id: u64,
    now_ms: u64,
) -> Result<(OwnedString<'a>, Option<u64>), TbError> {
    let wanted = lease::member(id);
    if let Some((member, expiry)) = first_live
        && member.bytes() == Some(&wanted[..])
    {
        return Ok((member, Some(expiry)));
    }
    let member = leases.string(&wanted);
    let expiry = leases
        .expiry_of(&member)?
        .filter(|&e| lease::is_live(e, now_ms));
    Ok((member, expiry))
}

/// TB.ACQUIRE's optional `TAKE numkeys key [key ...] capacity rate n [...]`: the bucket
/// keys and their limits (none without TAKE).
type TakePart<'a> = (Vec<*mut RedisModuleString>, Vec<(Limit, f64)>);

fn parse_take_part<'a>(call: &Call<'a>) -> Result<TakePart<'a>, TbError> {
    let syntax = TbError::Lease(LeaseError::TakeSyntax);
    if call.argv.len() == 4 {
        return Ok((Vec::new(), Vec::new()));
    }
    if !call
        .bytes(4)
        .is_some_and(|w| w.eq_ignore_ascii_case(b"TAKE"))
    {
        return Err(syntax);
    }
    let numkeys = call.bytes(5).ok_or(syntax)?;
    let layout = mtake_layout(numkeys, call.argv.len().saturating_sub(6)).map_err(|e| match e {
        TbError::NumKeysNotPositive | TbError::TooManyKeys => e,
        _ => syntax,
    })?;
    if layout.has_now {
        return Err(syntax);
    }
    let keys = call.argv.get(6..6 + layout.keys).ok_or(syntax)?.to_vec();
    let first = 6 + layout.keys;
    let triples: Vec<&[u8]> = (first..first + 3 * layout.keys)
        .filter_map(|i| call.bytes(i))
        .collect();
    let limits = parse_triples(&triples)?;
    let names: Vec<&[u8]> = (1..first)
        .filter(|&i| i == 1 || i >= 6)
        .filter_map(|i| call.bytes(i))
        .collect();
    if has_duplicates(&names) {
        return Err(TbError::Lease(LeaseError::TakeDuplicate));
    }
    Ok((keys, limits))
}

/// For TB.ACQUIRE (registered `getkeys-api`): when Redis asks where the keys are, declare
/// the lease key and any TAKE buckets, and return true.
pub fn declare_keys(
    ctx: *mut redis_module::raw::RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: std::os::raw::c_int,
) -> bool {
    let Some(api) = crate::binding::api::api() else {
        return false;
    };
    // SAFETY: ctx is the live command context.
    if unsafe { (api.is_keys_position_request)(ctx) } == 0 {
        return false;
    }
    let count = usize::try_from(argc).unwrap_or(0);
    let args: &[*mut RedisModuleString] = if argv.is_null() {
        &[]
    } else {
        // SAFETY: Redis passes argc valid pointers in argv for the duration of the call.
        unsafe { std::slice::from_raw_parts(argv, count) }
    };
    let word = |i: usize| args.get(i).map(|&s| string_bytes(api, s));
    let mut positions = vec![1usize];
    if word(4).is_some_and(|w| w.eq_ignore_ascii_case(b"TAKE"))
        && let Some(layout) = word(5).and_then(|n| mtake_layout(n, count.saturating_sub(6)).ok())
    {
        positions.extend(6..6 + layout.keys);
    }
    for pos in positions.into_iter().filter(|&p| p < count) {
        if let Ok(pos) = std::os::raw::c_int::try_from(pos) {
            // SAFETY: ctx is a keys-position request context; pos is within argc.
            unsafe { (api.key_at_pos)(ctx, pos) };
        }
    }
    true
}

/// TB.ACQUIRE key limit lease_ms [TAKE numkeys key [key ...] capacity rate n [...]] ->
/// [granted, in_flight, lease_id | nil, ms] (with TAKE: then TB.MTAKE's aggregate
/// `[allowed, remaining, retry_after, reset_after]` and one such array per bucket). All
/// or nothing: every key is opened and read before anything is written, and a lease is
/// granted and the buckets charged only when the slot and every bucket allow it.
pub fn acquire(call: &Call) -> Result<Outcome, TbError> {
    let key = *call.argv.get(1).ok_or(TbError::WrongArity)?;
    let limit = parse_limit(call.bytes(2).ok_or(TbError::WrongArity)?)?;
    let lease_ms = parse_lease_ms(call.bytes(3).ok_or(TbError::WrongArity)?)?;
    let (bucket_keys, limits) = parse_take_part(call)?;
    let now_us = server_micros();
    let now_ms = lease::now_ms(now_us);
    let clock = Clock::Server { micros: now_us };
    let (leases, front, live) = open_reclaiming(call, key, now_ms, |count| {
        lease::needed_earliest(limit, count)
    })?;
    let (expired, mut earliest) = (front.expired, front.live);
    earliest.truncate(usize::try_from(lease::needed_earliest(limit, live)).unwrap_or(0));
    let (buckets, parts) = open_parts(call, &bucket_keys, &limits)?;
    let (decision, mut total, mut each) = lease::acquire_with_buckets(
        limit,
        lease_ms,
        live,
        &earliest,
        now_us,
        clock.now(),
        &parts,
    );
    leases.remove(&expired, None);
    // A fresh id not on the key already (ZADD NX; a collision is a 2^-64 event, and the
    // next draw differs).
    let granted = match decision.expiry_ms {
        Some(expiry) => {
            let mut added = None;
            for _ in 0..4 {
                let member = lease::member(next_id()?);
                if leases.put(&leases.string(&member), expiry, lease_ms, false) {
                    added = Some(member);
                    break;
                }
            }
            Some(added.ok_or(TbError::Internal)?)
        }
        None => {
            if !expired.is_empty() {
                leases.fit_expiry(now_ms);
            }
            None
        }
    };
    let texts = store_parts(&buckets, &parts, &mut total, &mut each, &clock);
    drop(buckets);
    drop(leases);

    let reply = call.reply();
    reply.array(if limits.is_empty() { 4 } else { 6 });
    reply.integer(i64::from(decision.granted));
    reply.integer(i64::try_from(decision.in_flight).unwrap_or(i64::MAX));
    match &granted {
        Some(member) => reply.bulk(lease::id_text(member)),
        None => reply.null(),
    }
    reply.integer(i64::try_from(decision.ms).unwrap_or(i64::MAX));
    if !limits.is_empty() {
        reply.decision(&total, &format_f64(total.remaining));
        reply.array(each.len());
        for (d, text) in each.iter().zip(&texts) {
            reply.decision(d, text);
        }
    }
    Ok(Outcome::of(decision.granted))
}

/// TB.RELEASE key lease_id -> [released, in_flight].
pub fn release(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<1>()?;
    let [id] = raw;
    if count != 1 {
        return Err(TbError::WrongArity);
    }
    let id = parse_lease_id(id)?;
    let now_ms = lease::now_ms(server_micros());
    let (leases, front, live) = open_reclaiming(call, key, now_ms, |_| 0)?;
    let expired = front.expired;
    let (member, expiry) = live_lease(&leases, front.first_live, id, now_ms)?;
    let held = expiry.is_some();
    if held || !expired.is_empty() {
        leases.remove(&expired, held.then_some(member.ptr));
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

/// TB.RENEW key lease_id lease_ms -> [renewed, in_flight, ms]; on a bucket's hash, the
/// hold of that id (`hold::renew`).
pub fn renew(call: &Call) -> Result<Outcome, TbError> {
    let (key, raw, count) = call.key_and_args::<2>()?;
    let [id, lease_ms] = raw;
    if count != 2 {
        return Err(TbError::WrongArity);
    }
    let id = parse_lease_id(id)?;
    let lease_ms = parse_lease_ms(lease_ms)?;
    let now_us = server_micros();
    let now_ms = lease::now_ms(now_us);
    let (leases, front, live) = match open_reclaiming(call, key, now_ms, |_| 0) {
        // A bucket's hash: the id is a hold's (TB.HOLD), renewed on the bucket.
        Err(TbError::WrongType) if Key::holds_hash(call.api, call.ctx, key) => {
            return super::hold::renew(call, key, id, lease_ms, now_us);
        }
        opened => opened?,
    };
    let expired = front.expired;
    let (member, current) = live_lease(&leases, front.first_live, id, now_ms)?;
    let renewed = lease::renew(current, lease_ms, now_us);
    leases.remove(&expired, None);
    match renewed {
        Some(expiry) => {
            leases.put(&member, expiry, lease_ms, true);
        }
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
    let front = leases.front(now_ms, 1)?;
    let live = leases.count().saturating_sub(front.expired.len() as u64);
    drop(leases);
    let ms = front.live.first().map_or(0, |e| e.saturating_sub(now_ms));
    call.reply().integers(&[
        i64::try_from(live).unwrap_or(i64::MAX),
        i64::try_from(ms).unwrap_or(i64::MAX),
    ]);
    // A query that succeeded: nothing was asked for, so nothing was refused.
    Ok(Outcome::Allowed)
}
