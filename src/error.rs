//! Every error text the module replies with, in one place. Each starts with a Redis error
//! code, and reuses Redis's own wording where Redis has one.

use crate::algo::window::Mode;

/// An error a command replies with. The texts are NUL-terminated for the C API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TbError {
    WrongArity,
    WrongType,
    InvalidNumber(Arg),
    OutOfRange(Arg),
    CorruptState(Field),
    /// TB.MTAKE's numkeys is not an integer >= 1.
    NumKeysNotPositive,
    /// TB.MTAKE's argument count does not fit numkeys.
    NumKeysMismatch,
    /// TB.MTAKE's (or TB.ACQUIRE ... TAKE's) numkeys above `MAX_KEYS`.
    TooManyKeys,
    /// TB.MTAKE named one key twice.
    DuplicateKey,
    /// TB.THROTTLE's count_per_period / period is outside the accepted rates.
    ThrottleRate,
    /// TB.WINDOW's mode word is not FIXED, SLIDING or LOG.
    InvalidMode,
    /// TB.WINDOW LOG with a fractional limit or n.
    LogNotWhole,
    /// TB.WINDOW LOG with more entries per call than it adds at once.
    LogTooMany,
    /// A window key holding another mode's state.
    WrongMode {
        found: Mode,
        wanted: Mode,
    },
    /// A token-bucket command on a hash holding a window.
    WindowNotBucket,
    /// TB.WINDOW on a hash holding a token bucket.
    BucketNotWindow,
    /// A LOG entry whose score is not an accepted time.
    CorruptLog,
    /// A key holding data that is not the command's kind of state (none of its fields, or
    /// a sorted set member that is not a LOG entry): refused, left as it is.
    NotLimiterState(StateKind),
    /// A hash holding both a token bucket's and a window's fields.
    MixedState,
    /// A client's `now` further ahead of the server's clock than `max-clock-ahead-ms`.
    ClockAhead,
    /// TB.WINDOW LOG with a limit above `LOG_MAX_LIMIT` (10,000).
    LogLimitTooLarge,
    /// TB.ACQUIRE, TB.RELEASE, TB.RENEW and TB.PEEK ... LEASES.
    Lease(LeaseError),
    Internal,
}

/// The errors of the in-flight limit's commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseError {
    Limit,
    LeaseMs,
    LeaseId,
    /// A sorted set with a member or score that is not a lease of this module.
    NotLeases,
    /// TB.WINDOW LOG on a key of leases.
    LeasesNotWindow,
    /// TB.HOLD's ttl_ms.
    TtlMs,
    /// TB.HOLD's estimate of 0.
    Estimate,
    /// TB.SETTLE's hold_id.
    HoldId,
    /// TB.SETTLE's actual.
    Actual,
    /// TB.ACQUIRE's TAKE part does not fit its syntax.
    TakeSyntax,
    /// TB.ACQUIRE ... TAKE naming a key twice (or the lease key).
    TakeDuplicate,
    /// `TB.PEEK key LEASES` with anything after LEASES.
    PeekLeasesSyntax,
    /// `TB.PEEK key HOLDS` with anything after HOLDS.
    PeekHoldsSyntax,
}

impl LeaseError {
    fn text(self) -> &'static str {
        match self {
            LeaseError::Limit => "ERR limit must be a whole number >= 1 and <= 10000\0",
            LeaseError::LeaseMs => {
                "ERR lease_ms must be a whole number of milliseconds >= 1 and <= 31536000000\0"
            }
            LeaseError::LeaseId => "ERR lease_id must be the 16 hex digits TB.ACQUIRE replied\0",
            LeaseError::TtlMs => {
                "ERR ttl_ms must be a whole number of milliseconds >= 1 and <= 31536000000\0"
            }
            LeaseError::Estimate => "ERR estimate must be > 0 and <= 9007199254740992\0",
            LeaseError::TakeSyntax => {
                "ERR syntax: TB.ACQUIRE key limit lease_ms [TAKE numkeys key [key ...] capacity rate n [capacity rate n ...]] (no now: the server's clock)\0"
            }
            LeaseError::TakeDuplicate => {
                "ERR tb.acquire got the same key more than once (the lease key and every bucket must differ)\0"
            }
            LeaseError::Actual => "ERR actual must be >= 0 and <= 9007199254740992\0",
            LeaseError::HoldId => "ERR hold_id must be the 16 hex digits TB.HOLD replied\0",
            LeaseError::PeekLeasesSyntax => {
                "ERR syntax: TB.PEEK key LEASES takes nothing after LEASES\0"
            }
            LeaseError::PeekHoldsSyntax => {
                "ERR syntax: TB.PEEK key HOLDS takes nothing after HOLDS\0"
            }
            LeaseError::LeasesNotWindow => {
                "ERR key holds TB.ACQUIRE's leases, not a TB.WINDOW LOG window\0"
            }
            LeaseError::NotLeases => {
                "ERR key holds a sorted set that is not TB.ACQUIRE's leases (members lease:<16 hex digits>, scores whole ms)\0"
            }
        }
    }
}

/// The numeric arguments of the commands, named in error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg {
    Capacity,
    Rate,
    N,
    Now,
    MaxWait,
    MaxBurst,
    CountPerPeriod,
    Period,
    Quantity,
    Limit,
    Window,
}

/// The kinds of state a command keeps at its key, named when a key holds something else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateKind {
    /// The token-bucket commands' hash (`tokens`, `last_refill_time`).
    Bucket,
    /// TB.WINDOW FIXED and SLIDING's hash (`start` with `count` or `counts`).
    Window,
    /// TB.WINDOW LOG's sorted set (members `<score>-<k>`).
    Log,
}

/// The hash fields the module reads and writes (`store` holds their names), named in
/// corrupt-state texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Token bucket: the tokens left at `last_refill_time`.
    Tokens,
    LastRefillTime,
    /// FIXED and SLIDING windows: the aligned start of the current window and its count.
    Start,
    Count,
    /// SLIDING: this window's count and the previous window's, in one value
    /// (`"<count> <previous>"`), so a call reads two fields, not three.
    Counts,
    /// Token bucket: the outstanding holds of TB.HOLD (`algo::hold`).
    Holds,
    /// SLIDING keys written before `counts` (`start`, `count`, `previous`): still read,
    /// and rewritten as `start`, `counts` by their next write.
    Previous,
}

impl TbError {
    /// The reply text, NUL-terminated. Wrong arity names the command: see `arity_text`.
    pub fn text(self) -> &'static str {
        use Arg::*;
        use Field::*;
        use TbError::*;
        match self {
            WrongArity => "ERR wrong number of arguments\0",
            WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value\0",
            InvalidNumber(Capacity) => "ERR capacity is not a valid number\0",
            InvalidNumber(Rate) => "ERR rate is not a valid number\0",
            InvalidNumber(N) => "ERR n is not a valid number\0",
            InvalidNumber(Now) => "ERR now is not a valid number\0",
            InvalidNumber(MaxWait) => "ERR max_wait is not a valid number\0",
            OutOfRange(Capacity) => "ERR capacity must be > 0 and <= 9007199254740992\0",
            OutOfRange(Rate) => {
                "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second\0"
            }
            OutOfRange(N) => "ERR n must be >= 0 and <= 9007199254740992\0",
            OutOfRange(Now) => {
                "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800\0"
            }
            OutOfRange(MaxWait) => "ERR max_wait must be >= 0 seconds\0",
            InvalidNumber(MaxBurst) => "ERR max_burst is not a valid number\0",
            OutOfRange(MaxBurst) => {
                "ERR max_burst must be a whole number >= 0 and < 9007199254740992\0"
            }
            InvalidNumber(CountPerPeriod) => "ERR count_per_period is not a valid number\0",
            OutOfRange(CountPerPeriod) => "ERR count_per_period must be > 0\0",
            InvalidNumber(Period) => "ERR period is not a valid number\0",
            OutOfRange(Period) => "ERR period must be > 0 seconds\0",
            InvalidNumber(Quantity) => "ERR quantity is not a valid number\0",
            OutOfRange(Quantity) => {
                "ERR quantity must be >= -9007199254740992 and <= 9007199254740992\0"
            }
            InvalidNumber(Limit) => "ERR limit is not a valid number\0",
            OutOfRange(Limit) => "ERR limit must be > 0 and <= 9007199254740992\0",
            InvalidNumber(Window) => "ERR window is not a valid number\0",
            OutOfRange(Window) => "ERR window must be >= 0.000001 and <= 1000000000000 seconds\0",
            InvalidMode => "ERR mode must be FIXED, SLIDING or LOG\0",
            LogNotWhole => "ERR LOG counts whole requests: limit and n must be whole numbers\0",
            LogTooMany => "ERR n must be <= 100000 with LOG (each request is one entry)\0",
            WrongMode {
                found: Mode::Fixed,
                wanted: Mode::Sliding,
            } => "ERR key holds a FIXED window, not a SLIDING one\0",
            WrongMode {
                found: Mode::Sliding,
                wanted: Mode::Fixed,
            } => "ERR key holds a SLIDING window, not a FIXED one\0",
            WrongMode { .. } => "ERR key holds another window mode's state\0",
            WindowNotBucket => "ERR key holds a TB.WINDOW window, not a token bucket\0",
            BucketNotWindow => "ERR key holds a token bucket, not a TB.WINDOW window\0",
            NotLimiterState(StateKind::Bucket) => {
                "ERR key holds a hash that is not a token bucket (it has neither 'tokens' nor 'last_refill_time'): left unchanged\0"
            }
            NotLimiterState(StateKind::Window) => {
                "ERR key holds a hash that is not a TB.WINDOW window (it has none of 'start', 'count', 'counts', 'previous'): left unchanged\0"
            }
            NotLimiterState(StateKind::Log) => {
                "ERR key holds a sorted set that is not a TB.WINDOW LOG (a member is not '<score>-<n>'): left unchanged\0"
            }
            MixedState => {
                "ERR key holds both a token bucket's and a TB.WINDOW window's fields: left unchanged\0"
            }
            ClockAhead => {
                "ERR now is further ahead of the server clock than max-clock-ahead-ms allows (now must be seconds since the Unix epoch)\0"
            }
            LogLimitTooLarge => "ERR limit must be <= 10000 with LOG (each request is one entry)\0",
            CorruptLog => {
                "ERR window log is corrupt: an entry's score is not a valid time in microseconds\0"
            }
            CorruptState(Start) => {
                "ERR window state is corrupt: field 'start' is not a valid time in seconds\0"
            }
            CorruptState(Count) => {
                "ERR window state is corrupt: field 'count' is not a valid count\0"
            }
            CorruptState(Counts) => {
                "ERR window state is corrupt: field 'counts' is not two valid counts\0"
            }
            CorruptState(Previous) => {
                "ERR window state is corrupt: field 'previous' is not a valid count\0"
            }
            ThrottleRate => {
                "ERR count_per_period / period must be >= 1e-9 and <= 9007199254740992 per second\0"
            }
            NumKeysNotPositive => "ERR numkeys must be a positive integer\0",
            TooManyKeys => "ERR numkeys must be at most 64 (the buckets one call may take)\0",
            NumKeysMismatch => {
                "ERR numkeys does not match the arguments: tb.mtake takes numkeys keys, then capacity rate n for each key, then an optional now\0"
            }
            DuplicateKey => "ERR tb.mtake got the same key more than once\0",
            CorruptState(Holds) => {
                "ERR bucket state is corrupt: field 'holds' is not a list of holds\0"
            }
            CorruptState(Tokens) => {
                "ERR bucket state is corrupt: field 'tokens' is not a valid token count\0"
            }
            CorruptState(LastRefillTime) => {
                "ERR bucket state is corrupt: field 'last_refill_time' is not a valid time in seconds\0"
            }
            Lease(e) => e.text(),
            Internal => "ERR internal error in the tb module (see the server log)\0",
        }
    }
}

/// Redis's own wrong-arity text for `command` (its lower-case name), NUL-terminated.
pub fn arity_text(command: &str) -> String {
    let mut text = format!("ERR wrong number of arguments for '{command}' command");
    text.retain(|c| c != '\0');
    text.push('\0');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_text_has_a_code_and_one_trailing_nul() {
        let all = [
            TbError::WrongArity,
            TbError::WrongType,
            TbError::Internal,
            TbError::CorruptState(Field::Tokens),
            TbError::CorruptState(Field::LastRefillTime),
            TbError::NumKeysNotPositive,
            TbError::NumKeysMismatch,
            TbError::DuplicateKey,
            TbError::ThrottleRate,
            TbError::InvalidMode,
            TbError::LogNotWhole,
            TbError::LogTooMany,
            TbError::WindowNotBucket,
            TbError::BucketNotWindow,
            TbError::CorruptLog,
            TbError::NotLimiterState(StateKind::Bucket),
            TbError::NotLimiterState(StateKind::Window),
            TbError::NotLimiterState(StateKind::Log),
            TbError::MixedState,
            TbError::ClockAhead,
            TbError::LogLimitTooLarge,
            TbError::Lease(LeaseError::Limit),
            TbError::Lease(LeaseError::LeaseMs),
            TbError::Lease(LeaseError::LeaseId),
            TbError::Lease(LeaseError::NotLeases),
            TbError::Lease(LeaseError::LeasesNotWindow),
            TbError::Lease(LeaseError::TtlMs),
            TbError::Lease(LeaseError::Estimate),
            TbError::Lease(LeaseError::HoldId),
            TbError::Lease(LeaseError::Actual),
            TbError::Lease(LeaseError::TakeSyntax),
            TbError::Lease(LeaseError::TakeDuplicate),
            TbError::Lease(LeaseError::PeekLeasesSyntax),
            TbError::Lease(LeaseError::PeekHoldsSyntax),
            TbError::TooManyKeys,
            TbError::CorruptState(Field::Holds),
            TbError::CorruptState(Field::Start),
            TbError::CorruptState(Field::Count),
            TbError::CorruptState(Field::Counts),
            TbError::CorruptState(Field::Previous),
            TbError::WrongMode {
                found: Mode::Fixed,
                wanted: Mode::Sliding,
            },
            TbError::WrongMode {
                found: Mode::Sliding,
                wanted: Mode::Fixed,
            },
        ]
        .into_iter()
        .chain(
            [
                Arg::Capacity,
                Arg::Rate,
                Arg::N,
                Arg::Now,
                Arg::MaxWait,
                Arg::MaxBurst,
                Arg::CountPerPeriod,
                Arg::Period,
                Arg::Quantity,
                Arg::Limit,
                Arg::Window,
            ]
            .into_iter()
            .flat_map(|a| [TbError::InvalidNumber(a), TbError::OutOfRange(a)]),
        );
        for e in all {
            let t = e.text();
            assert!(t.starts_with("ERR ") || t.starts_with("WRONGTYPE "), "{t}");
            assert_eq!(t.find('\0'), Some(t.len() - 1), "{t}");
        }
    }

    #[test]
    fn arity_text_names_the_command_as_redis_does() {
        assert_eq!(
            arity_text("tb.mtake"),
            "ERR wrong number of arguments for 'tb.mtake' command\0"
        );
    }
}
