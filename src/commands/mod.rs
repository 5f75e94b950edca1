//! What every command handler shares: the call's arguments and clock, the C entry that
//! catches panics and keeps the counters, and one bucket's open -> read -> decide -> store
//! -> reply sequence. Each command's own file only parses its arguments and picks its
//! bucket math.

pub mod hold;
pub mod lease;
pub mod mtake;
pub mod peek;
pub mod refund;
pub mod reserve;
pub mod take;
pub mod throttle;
pub mod window;

use std::ffi::CStr;
use std::os::raw::c_int;
use std::panic::{AssertUnwindSafe, catch_unwind};

use redis_module::raw::{RedisModuleCtx, RedisModuleString};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::algo::bucket::{Decision, Limit, Part, State};
use crate::algo::clock;
use crate::algo::ids::{IdSource, SEED_LEN};
use crate::algo::num::{NumText, ceil_micros, format_f64, format_micros, is_plain_decimal};
use crate::binding::api::{Api, api};
use crate::binding::reply::{self, Replier};
use crate::binding::stats::{CommandStats, Outcome};
use crate::binding::store::{Access, BucketKey, string_bytes};
use crate::error::TbError;

/// A command's logic: the call in, the outcome to count out (the reply is written by the
/// body; an error is replied by `dispatch`).
pub type Body = fn(&Call) -> Result<Outcome, TbError>;

/// Runs a command body for Redis: counts its outcome and replies its error.
///
/// No input should be able to panic (clippy denies unwrap/expect/panic/indexing in this
/// crate), but a panic unwinding into Redis would abort the server with everyone's data:
/// any is turned into an error reply instead.
pub fn dispatch(
    body: Body,
    stats: &CommandStats,
    name: &CStr,
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> c_int {
    let Some(api) = api() else {
        return 1; // REDISMODULE_ERR: cannot even reply without the API.
    };
    let call = Call {
        api,
        ctx,
        argv: arguments(argv, argc),
    };
    match catch_unwind(AssertUnwindSafe(|| body(&call))) {
        Ok(Ok(outcome)) => {
            stats.record(outcome);
            reply::OK
        }
        Ok(Err(e)) => {
            stats.record(Outcome::Error);
            // Redis names the command as it was called (an alias under its own name).
            let called = call
                .bytes(0)
                .map(|b| String::from_utf8_lossy(b).to_lowercase());
            let called = called.unwrap_or_else(|| name.to_string_lossy().into_owned());
            reply::error(api, ctx, e, &called)
        }
        Err(_) => {
            stats.record(Outcome::Error);
            crate::binding::log::warning(&format!("{name:?}: caught a panic; replied an error"));
            reply::error(api, ctx, TbError::Internal, "")
        }
    }
}

/// For a command registered `getkeys-api` (`numkeys key [key ...]`): when Redis asks
/// where the keys are rather than to run the command, declare them and return true.
///
/// Redis Cluster's routing (MOVED, CROSSSLOT, CLUSTERDOWN) asks a module command for its
/// keys through this callback, not through key specs: without it a node would run a
/// TB.MTAKE on keys of slots it does not own.
pub fn declare_counted_keys(
    ctx: *mut RedisModuleCtx,
    argv: *mut *mut RedisModuleString,
    argc: c_int,
) -> bool {
    let Some(api) = api() else {
        return false;
    };
    // SAFETY: ctx is the live command context.
    if unsafe { (api.is_keys_position_request)(ctx) } == 0 {
        return false;
    }
    let argv = arguments(argv, argc);
    // A bad numkeys declares no keys; the call itself then replies the error.
    let count = argv.get(1).and_then(|s| {
        crate::parse::args::mtake_layout(string_bytes(api, *s), argv.len().saturating_sub(2)).ok()
    });
    if let Some(layout) = count {
        for pos in 2..2 + layout.keys {
            if let Ok(pos) = c_int::try_from(pos) {
                // SAFETY: ctx is a keys-position request context; pos is within argc.
                unsafe { (api.key_at_pos)(ctx, pos) };
            }
        }
    }
    true
}

/// One command call: the context and the argument vector (the command name first).
pub struct Call<'a> {
    pub api: &'a Api,
    pub ctx: *mut RedisModuleCtx,
    pub argv: &'a [*mut RedisModuleString],
}

impl<'a> Call<'a> {
    /// The bytes of argument `i`.
    pub fn bytes(&self, i: usize) -> Option<&'a [u8]> {
        self.argv.get(i).map(|s| string_bytes(self.api, *s))
    }

    /// The key at position 1 and the bytes of the (at most `N`) arguments after it.
    /// More than `N`, or no key: wrong arity.
    pub fn key_and_args<const N: usize>(
        &self,
    ) -> Result<(*mut RedisModuleString, [&'a [u8]; N], usize), TbError> {
        let (key, rest) = match self.argv {
            [_, key, rest @ ..] => (*key, rest),
            _ => return Err(TbError::WrongArity),
        };
        let mut raw = [&[][..]; N];
        if rest.len() > N {
            return Err(TbError::WrongArity);
        }
        for (slot, s) in raw.iter_mut().zip(rest) {
            *slot = string_bytes(self.api, *s);
        }
        Ok((key, raw, rest.len()))
    }

    pub fn reply(&self) -> Replier<'a> {
        Replier::new(self.api, self.ctx)
    }
}

/// The argument vector as a slice.
fn arguments<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> &'a [*mut RedisModuleString] {
    match usize::try_from(argc) {
        // SAFETY: Redis passes argc valid pointers in argv for the duration of the call.
        Ok(len) if !argv.is_null() => unsafe { std::slice::from_raw_parts(argv, len) },
        _ => &[],
    }
}

/// How far ahead of the server's clock a client's `now` may be, in milliseconds: the
/// `max-clock-ahead-ms` load argument (`clock::DEFAULT_MAX_AHEAD_MS` without it).
static MAX_CLOCK_AHEAD_MS: AtomicU64 = AtomicU64::new(clock::DEFAULT_MAX_AHEAD_MS);

/// Sets the bound `Clock::new` applies. Called once from module init.
pub fn set_max_clock_ahead_ms(ms: u64) {
    MAX_CLOCK_AHEAD_MS.store(ms, Ordering::Relaxed);
}

/// The lease and hold ids (`algo::ids`), keyed once at load from the OS's randomness.
/// Commands run one at a time, so the lock is never contended; it makes the static safe.
static IDS: Mutex<Option<IdSource>> = Mutex::new(None);

/// Keys the id source. Called once from module init (again on a reload: a new key).
pub fn set_id_seed(seed: [u8; SEED_LEN]) {
    *IDS.lock().unwrap_or_else(PoisonError::into_inner) = Some(IdSource::new(seed));
}

/// The next lease or hold id (an internal error if the module was never keyed, which its
/// load prevents).
pub(crate) fn next_id() -> Result<u64, TbError> {
    IDS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_mut()
        .map(IdSource::next_id)
        .ok_or(TbError::Internal)
}

/// The server's clock in whole microseconds (leases and holds: their expiries are on it).
pub(crate) fn server_micros() -> u64 {
    match Clock::server() {
        Clock::Server { micros } => micros,
        Clock::Client { server_micros, .. } => server_micros,
    }
}

/// The time a call is decided at.
pub enum Clock<'a> {
    /// A `now` the client sent: its value, its text (stored as sent when plain), and the
    /// server's clock read when it was checked against the bound (TTLs are set on it).
    Client {
        now: f64,
        text: &'a [u8],
        server_micros: u64,
    },
    /// The server's clock, read once at microsecond precision (RedisModule_Milliseconds
    /// would make a client that waits a sub-millisecond retry_after come back too early).
    Server { micros: u64 },
}

impl<'a> Clock<'a> {
    /// The client's `now` (parsed, with its text) or else the server's clock. Every
    /// command that takes a `now` builds its clock here, which applies the one rule on
    /// it: a `now` further ahead of the server's clock than `max-clock-ahead-ms` is
    /// refused (`TbError::ClockAhead`) before any key is opened, so no stored time is
    /// pushed past the bound (a stored time is the later of the stored one and `now`).
    /// A `now` in the past is accepted (it cannot pin a key: it gets no refill).
    ///
    /// A command replicated from a master or replayed from the AOF is never refused
    /// (the module replicates effects, so none should arrive; if one does, the master
    /// already decided it): only a client's call is bounded.
    pub fn new(call: &Call, now: Option<f64>, text: Option<&'a [u8]>) -> Result<Self, TbError> {
        let server_micros = now_micros();
        match (now, text) {
            (Some(now), Some(text)) => {
                let bound = MAX_CLOCK_AHEAD_MS.load(Ordering::Relaxed);
                if !clock::within_bound(now, server_micros, bound) && !replayed(call) {
                    return Err(TbError::ClockAhead);
                }
                Ok(Clock::Client {
                    now,
                    text,
                    server_micros,
                })
            }
            _ => Ok(Clock::Server {
                micros: server_micros,
            }),
        }
    }

    /// The server's clock alone (TB.THROTTLE, which takes no `now`).
    pub fn server() -> Self {
        Clock::Server {
            micros: now_micros(),
        }
    }

    /// Seconds since the epoch.
    pub fn now(&self) -> f64 {
        match *self {
            Clock::Client { now, .. } => now,
            Clock::Server { micros } => micros as f64 / 1e6,
        }
    }

    /// A caller on the server's clock waits on its microsecond ticks: waits are reported
    /// in whole microseconds, rounded up (still long enough, and readable).
    pub fn round(&self, d: &mut Decision) {
        if let Clock::Server { .. } = self {
            d.retry_after = ceil_micros(d.retry_after);
            d.reset_after = ceil_micros(d.reset_after);
        }
    }

    /// The server's clock in ms, which TTLs are measured on whatever `now` says.
    pub fn server_ms(&self) -> i64 {
        let micros = match *self {
            Clock::Server { micros } => micros,
            Clock::Client { server_micros, .. } => server_micros,
        };
        i64::try_from(micros / 1000).unwrap_or(i64::MAX)
    }
}

/// One bucket's whole call for the single-key commands: open, read, decide at the call's
/// time, store what changed, reply `[allowed, remaining, retry_after, reset_after]`.
pub fn on_bucket(
    call: &Call,
    key: *mut RedisModuleString,
    access: Access,
    clock: &Clock,
    decide: impl FnOnce(f64, Option<State>) -> Decision,
) -> Result<Outcome, TbError> {
    let (decision, remaining_text) = settle(call, key, access, clock, decide)?;
    call.reply().decision(&decision, &remaining_text);
    Ok(Outcome::of(decision.allowed))
}

/// Open, read, decide, store what changed and close; the decision and its `remaining`
/// text (formatted once: stored and replied alike) are left for the reply.
pub fn settle(
    call: &Call,
    key: *mut RedisModuleString,
    access: Access,
    clock: &Clock,
    decide: impl FnOnce(f64, Option<State>) -> Decision,
) -> Result<(Decision, NumText), TbError> {
    let bucket = BucketKey::open(call.api, call.ctx, key, access)?;
    let stored = bucket.read()?;
    let mut decision = decide(clock.now(), stored);
    clock.round(&mut decision);
    let remaining_text = format_f64(decision.remaining);
    store(&bucket, stored, &decision, &remaining_text, clock);
    drop(bucket);
    Ok((decision, remaining_text))
}

/// The buckets of an all-or-nothing call (TB.MTAKE, TB.ACQUIRE ... TAKE): every key opened
/// for writing and its state read before anything is written, each paired with its limit
/// and `n` for `bucket::take_all`. The keys stay open for the writes that follow.
pub fn open_parts<'a>(
    call: &Call<'a>,
    keys: &[*mut RedisModuleString],
    limits: &[(Limit, f64)],
) -> Result<(Vec<BucketKey<'a>>, Vec<Part>), TbError> {
    let buckets = keys
        .iter()
        .map(|&key| BucketKey::open(call.api, call.ctx, key, Access::Write))
        .collect::<Result<Vec<_>, _>>()?;
    let parts = buckets
        .iter()
        .zip(limits)
        .map(|(b, &(limit, n))| {
            Ok(Part {
                limit,
                n,
                stored: b.read()?,
            })
        })
        .collect::<Result<Vec<_>, TbError>>()?;
    Ok((buckets, parts))
}

/// The writes of an all-or-nothing call (TB.MTAKE, TB.ACQUIRE ... TAKE) once
/// `bucket::take_all` has decided: the aggregate and each decision rounded to the clock,
/// each bucket stored (none when the call was refused: no decision carries a state), and
/// the per-bucket `remaining` texts the reply writes.
pub fn store_parts(
    buckets: &[BucketKey],
    parts: &[Part],
    total: &mut Decision,
    each: &mut [Decision],
    clock: &Clock,
) -> Vec<NumText> {
    clock.round(total);
    let texts: Vec<NumText> = each
        .iter_mut()
        .map(|d| {
            clock.round(d);
            format_f64(d.remaining)
        })
        .collect();
    for (((bucket, part), d), text) in buckets.iter().zip(parts).zip(each.iter()).zip(&texts) {
        store(bucket, part.stored, d, text, clock);
    }
    texts
}

/// Stores a decision's new state, if it has one: only the fields whose value changed (a
/// text someone else stored that reads as the same number is left as it is), then the
/// expiry. `tokens_text` is `format_f64` of the new token count.
pub fn store(
    bucket: &BucketKey,
    stored: Option<State>,
    decision: &Decision,
    tokens_text: &NumText,
    clock: &Clock,
) {
    let Some(state) = decision.new_state else {
        return;
    };
    let changed = |field: fn(&State) -> f64| stored.is_none_or(|old| field(&old) != field(&state));
    let tokens = changed(|s| s.tokens).then_some(tokens_text.as_bytes());
    // The stored time, as text that parses to exactly `state.last_refill_time`:
    // server-clock times fixed-width (the same length every call, so Redis rewrites them
    // in place), a client's `now` as it sent it when that is already plain. A time that
    // changed is `now` (it never moves backwards, so it moved to `now`).
    let formatted;
    let time: Option<&[u8]> = if !changed(|s| s.last_refill_time) {
        None
    } else {
        match *clock {
            Clock::Server { micros } => {
                formatted = format_micros(micros);
                Some(formatted.as_bytes())
            }
            Clock::Client { text, .. } if is_plain_decimal(text) => Some(text),
            Clock::Client { .. } => {
                formatted = format_f64(state.last_refill_time);
                Some(formatted.as_bytes())
            }
        }
    };
    bucket.write(tokens, time);
    bucket.expire_in(clock.server_ms(), decision.reset_after);
}

/// Whether the call comes from the master's replication stream or the AOF being loaded,
/// not from a client.
fn replayed(call: &Call) -> bool {
    // SAFETY: ctx is this call's live context.
    let flags = unsafe { (call.api.get_context_flags)(call.ctx) };
    let replayed = redis_module::raw::REDISMODULE_CTX_FLAGS_REPLICATED
        | redis_module::raw::REDISMODULE_CTX_FLAGS_LOADING;
    (flags as u32 & replayed) != 0
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
