//! TB.TAKE: argument bytes -> validated parameters -> stored state -> bucket math ->
//! storage, expiry and replication of what changed -> reply. Each step lives in its own
//! module; this file only sequences them and keeps the counters.

use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw::{RedisModuleCtx, RedisModuleString};

use crate::api::{Api, api};
use crate::args::parse_take;
use crate::bucket;
use crate::error::TbError;
use crate::expiry;
use crate::num::{ceil_micros, format_f64, format_micros, is_plain_decimal};
use crate::reply;
use crate::stats::{self, Outcome};
use crate::store::{BucketKey, string_bytes};

/// The C entry point Redis calls for TB.TAKE.
///
/// # Safety
/// Called by Redis with a live context and `argc` valid argument strings.
pub unsafe extern "C" fn tb_take(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(api) = api() else {
        return 1; // REDISMODULE_ERR: cannot even reply without the API.
    };
    // No input should be able to panic (clippy denies unwrap/expect/panic/indexing in this
    // crate), but a panic unwinding into Redis would abort the server with everyone's
    // data: turn any into an error reply instead.
    match catch_unwind(AssertUnwindSafe(|| take(api, ctx, argv, argc))) {
        Ok(Ok(outcome)) => {
            stats::TAKE.record(outcome);
            reply::OK
        }
        Ok(Err(e)) => {
            stats::TAKE.record(Outcome::Error);
            reply::error(api, ctx, e)
        }
        Err(_) => {
            stats::TAKE.record(Outcome::Error);
            crate::log_warning("TB.TAKE: caught a panic; replied an error");
            reply::error(api, ctx, TbError::Internal)
        }
    }
}

fn take(
    api: &Api,
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> Result<Outcome, TbError> {
    let argv = arguments(argv, argc);
    let (key, rest) = match argv {
        [_, key, rest @ ..] => (*key, rest),
        _ => return Err(TbError::WrongArity),
    };
    let mut raw = [&[][..]; 4];
    if rest.len() > raw.len() {
        return Err(TbError::WrongArity);
    }
    for (slot, s) in raw.iter_mut().zip(rest) {
        *slot = string_bytes(api, *s);
    }
    let args = parse_take(raw.get(..rest.len()).unwrap_or(&[]))?;

    // A time the client gave is used as is; otherwise the server's clock, read once at
    // microsecond precision (RedisModule_Milliseconds would make a client that waits a
    // sub-millisecond retry_after come back too early).
    let server_micros = args.now.is_none().then(now_micros);
    let now = args
        .now
        .or(server_micros.map(|us| us as f64 / 1e6))
        .unwrap_or(0.0);

    let bucket = BucketKey::open(api, ctx, key)?;
    let stored = bucket.read()?;
    let mut decision = bucket::take(args.limit, args.n, now, stored);
    if server_micros.is_some() {
        // The caller waits on the server's microsecond clock: report whole microseconds.
        decision.retry_after = ceil_micros(decision.retry_after);
        decision.reset_after = ceil_micros(decision.reset_after);
    }

    // Formatted once: stored and replied alike.
    let remaining_text = format_f64(decision.remaining);
    if let Some(state) = decision.new_state {
        // Only fields whose value changed are written (a text someone else stored that
        // reads as the same number is left as it is).
        let changed = |field: fn(&bucket::State) -> f64| {
            stored.is_none_or(|old| field(&old) != field(&state))
        };
        let tokens_text = changed(|s| s.tokens).then_some(remaining_text.as_bytes());
        // The stored time, as text that parses to exactly `state.last_refill_time`:
        // server-clock times fixed-width (the same length every call, so Redis rewrites
        // them in place), a client's `now` as it sent it when that is already plain. A
        // time that changed is `now` (it never moves backwards, so it moved to `now`).
        let formatted;
        let time_text: Option<&[u8]> = if !changed(|s| s.last_refill_time) {
            None
        } else if let Some(us) = server_micros {
            formatted = format_micros(us);
            Some(formatted.as_bytes())
        } else if let Some(sent) = raw.get(3).copied().filter(|t| is_plain_decimal(t)) {
            Some(sent)
        } else {
            formatted = format_f64(state.last_refill_time);
            Some(formatted.as_bytes())
        };
        bucket.write(tokens_text, time_text);
        let now_ms = server_micros.map_or_else(|| now_micros() / 1000, |us| us / 1000);
        let now_ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        bucket.apply_expiry(expiry::plan(bucket.expiry(), now_ms, decision.reset_after));
    }
    drop(bucket);
    reply::decision(api, ctx, &decision, &remaining_text);
    Ok(if decision.allowed {
        Outcome::Allowed
    } else {
        Outcome::Denied
    })
}

/// The argument vector as a slice.
fn arguments<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> &'a [*mut RedisModuleString] {
    match usize::try_from(argc) {
        // SAFETY: Redis passes argc valid pointers in argv for the duration of the call.
        Ok(len) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, len) },
        _ => &[],
    }
}

/// The server's wall clock in microseconds since the epoch: the clock Redis itself reads.
fn now_micros() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let micros = u64::try_from(ts.tv_nsec / 1000).unwrap_or(0);
    secs.saturating_mul(1_000_000).saturating_add(micros)
}
