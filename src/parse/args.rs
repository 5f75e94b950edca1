//! Command arguments: raw argument bytes in, validated parameters out. No Redis types, so
//! every byte sequence a client can send is tested directly. Each command's parser names
//! its arguments in its errors and accepts TB.TAKE's ranges.

use crate::algo::bucket::{Limit, MAX_AMOUNT, MIN_RATE, valid_time};
use crate::algo::num::parse_f64;
use crate::algo::window::Mode;
use crate::algo::window::{MAX_WINDOW, MIN_WINDOW, Window};
use crate::error::{Arg, TbError};

/// The most entries one LOG call may add: each admitted request is a sorted-set member,
/// and one call must not block the server adding millions of them.
pub const LOG_MAX_N: f64 = 100_000.0;

/// The largest LOG `limit`: a LOG key holds at most `limit` members, so this bounds its
/// memory (1.37 MB at 10,000, measured) and the work of its worst call (removing a full
/// log that left the window and adding `limit` entries: 9-14 ms at 10,000, against
/// 104-195 ms at 100,000; `bench/studies/log_worst_call.py`, docs/commands.md). Above it,
/// SLIDING keeps 181 bytes per key at any limit.
pub const LOG_MAX_LIMIT: f64 = 10_000.0;

/// Validated TB.WINDOW arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowArgs {
    pub window: Window,
    pub n: f64,
    pub now: Option<f64>,
    /// Where `now`'s text is among the arguments after the key.
    pub now_at: Option<usize>,
    pub mode: Mode,
}

/// Parses `limit window n [now] [FIXED | SLIDING | LOG]`: the arguments after the key.
/// The mode defaults to SLIDING; a fourth argument that is a mode word is the mode.
pub fn parse_window(args: &[&[u8]]) -> Result<WindowArgs, TbError> {
    let (limit, window, n, rest) = match *args {
        [l, w, n, ref rest @ ..] if rest.len() <= 2 => (l, w, n, rest),
        _ => return Err(TbError::WrongArity),
    };
    let (now_at, mode) = match *rest {
        [] => (None, Mode::Sliding),
        [x] => match parse_mode(x) {
            Some(mode) => (None, mode),
            None => (Some(3), Mode::Sliding),
        },
        [_, m] => (Some(3), parse_mode(m).ok_or(TbError::InvalidMode)?),
        _ => return Err(TbError::WrongArity),
    };
    let limit = number(limit, Arg::Limit, |v| v > 0.0 && v <= MAX_AMOUNT)?;
    let window = number(window, Arg::Window, |v| {
        (MIN_WINDOW..=MAX_WINDOW).contains(&v)
    })?;
    let n = number(n, Arg::N, |v| (0.0..=MAX_AMOUNT).contains(&v))?;
    let now = parse_now(now_at.and_then(|i| args.get(i).copied()))?;
    if mode == Mode::Log {
        if limit.fract() != 0.0 || n.fract() != 0.0 {
            return Err(TbError::LogNotWhole);
        }
        if limit > LOG_MAX_LIMIT {
            return Err(TbError::LogLimitTooLarge);
        }
        if n > LOG_MAX_N {
            return Err(TbError::LogTooMany);
        }
    }
    Ok(WindowArgs {
        window: Window { limit, window },
        n: n + 0.0,
        now,
        now_at,
        mode,
    })
}

fn parse_mode(word: &[u8]) -> Option<Mode> {
    [
        (&b"FIXED"[..], Mode::Fixed),
        (b"SLIDING", Mode::Sliding),
        (b"LOG", Mode::Log),
    ]
    .into_iter()
    .find(|(name, _)| word.eq_ignore_ascii_case(name))
    .map(|(_, mode)| mode)
}

/// The module's load arguments (`loadmodule libredis_tb.so [CL.THROTTLE]
/// [max-clock-ahead-ms <ms>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadArgs {
    /// The alias words given (`CL.THROTTLE`), as given.
    pub aliases: Vec<String>,
    /// How far ahead of the server's clock a client's `now` may be, in milliseconds.
    pub max_clock_ahead_ms: u64,
}

/// The load argument that sets `LoadArgs::max_clock_ahead_ms` (compared without case).
pub const MAX_CLOCK_AHEAD_ARG: &str = "max-clock-ahead-ms";

/// Parses the load arguments: alias words (`is_alias` says which are known) and
/// `max-clock-ahead-ms <ms>`, a whole number of milliseconds from 0 to
/// `clock::MAX_MAX_AHEAD_MS`. Anything else: the reason, for the log line that fails the
/// load.
pub fn parse_load_args(
    args: &[&[u8]],
    is_alias: impl Fn(&str) -> bool,
) -> Result<LoadArgs, String> {
    let mut out = LoadArgs {
        aliases: Vec::new(),
        max_clock_ahead_ms: crate::algo::clock::DEFAULT_MAX_AHEAD_MS,
    };
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let text = String::from_utf8_lossy(arg).into_owned();
        if text.eq_ignore_ascii_case(MAX_CLOCK_AHEAD_ARG) {
            let value = rest.next().map(|v| String::from_utf8_lossy(v).into_owned());
            let ms = value.as_deref().and_then(parse_millis).ok_or_else(|| {
                format!(
                    "{MAX_CLOCK_AHEAD_ARG} needs a whole number of milliseconds from 0 to {} (got {})",
                    crate::algo::clock::MAX_MAX_AHEAD_MS,
                    value.map_or("nothing".to_string(), |v| format!("'{v}'"))
                )
            })?;
            out.max_clock_ahead_ms = ms;
        } else if is_alias(&text) {
            out.aliases.push(text);
        } else {
            return Err(format!(
                "unknown load argument '{text}' (known: CL.THROTTLE, which also registers TB.THROTTLE as CL.THROTTLE; {MAX_CLOCK_AHEAD_ARG} <ms>)"
            ));
        }
    }
    Ok(out)
}

/// Plain decimal digits, at most `clock::MAX_MAX_AHEAD_MS`.
fn parse_millis(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>()
        .ok()
        .filter(|&ms| ms <= crate::algo::clock::MAX_MAX_AHEAD_MS)
}

/// Validated `capacity rate n [now]` (TB.TAKE, TB.REFUND; the key is handled by the caller).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TakeArgs {
    pub limit: Limit,
    pub n: f64,
    /// Seconds since the epoch, or `None` for the server's clock.
    pub now: Option<f64>,
}

/// Parses `capacity rate n [now]`: the arguments after the key.
pub fn parse_take(args: &[&[u8]]) -> Result<TakeArgs, TbError> {
    let (capacity, rate, n, now) = match *args {
        [c, r, n] => (c, r, n, None),
        [c, r, n, now] => (c, r, n, Some(now)),
        _ => return Err(TbError::WrongArity),
    };
    let (limit, n) = parse_triple(capacity, rate, n)?;
    Ok(TakeArgs {
        limit,
        n,
        now: parse_now(now)?,
    })
}

/// Validated TB.RESERVE arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReserveArgs {
    pub limit: Limit,
    pub n: f64,
    /// Seconds a caller accepts to wait, finite and >= 0.
    pub max_wait: f64,
    pub now: Option<f64>,
}

/// Parses `capacity rate n max_wait [now]`: the arguments after the key.
pub fn parse_reserve(args: &[&[u8]]) -> Result<ReserveArgs, TbError> {
    let (capacity, rate, n, max_wait, now) = match *args {
        [c, r, n, w] => (c, r, n, w, None),
        [c, r, n, w, now] => (c, r, n, w, Some(now)),
        _ => return Err(TbError::WrongArity),
    };
    let (limit, n) = parse_triple(capacity, rate, n)?;
    let max_wait = number(max_wait, Arg::MaxWait, |v| v >= 0.0)?;
    Ok(ReserveArgs {
        limit,
        n,
        max_wait: max_wait + 0.0,
        now: parse_now(now)?,
    })
}

/// Validated TB.PEEK arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeekArgs {
    pub limit: Limit,
    pub now: Option<f64>,
}

/// Parses `capacity rate [now]`: the arguments after the key.
pub fn parse_peek(args: &[&[u8]]) -> Result<PeekArgs, TbError> {
    let (capacity, rate, now) = match *args {
        [c, r] => (c, r, None),
        [c, r, now] => (c, r, Some(now)),
        _ => return Err(TbError::WrongArity),
    };
    Ok(PeekArgs {
        limit: parse_limit(capacity, rate)?,
        now: parse_now(now)?,
    })
}

/// Validated TB.THROTTLE (CL.THROTTLE) arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleArgs {
    /// A bucket of `max_burst + 1` refilling `count_per_period / period` per second.
    pub limit: Limit,
    /// Tokens to take; negative gives them back.
    pub quantity: f64,
}

/// Parses `max_burst count_per_period period [quantity]`: the arguments after the key.
/// `max_burst` is a whole number (the reply's `limit` is `max_burst + 1`); the rate may be
/// fractional and above 1000 per second.
pub fn parse_throttle(args: &[&[u8]]) -> Result<ThrottleArgs, TbError> {
    let (max_burst, count, period, quantity) = match *args {
        [b, c, p] => (b, c, p, None),
        [b, c, p, q] => (b, c, p, Some(q)),
        _ => return Err(TbError::WrongArity),
    };
    let max_burst = number(max_burst, Arg::MaxBurst, |v| {
        (0.0..MAX_AMOUNT).contains(&v) && v.fract() == 0.0
    })?;
    let count = number(count, Arg::CountPerPeriod, |v| v > 0.0)?;
    let period = number(period, Arg::Period, |v| v > 0.0)?;
    let rate = count / period;
    if !(MIN_RATE..=MAX_AMOUNT).contains(&rate) {
        return Err(TbError::ThrottleRate);
    }
    let quantity = match quantity {
        Some(q) => number(q, Arg::Quantity, |v| v.abs() <= MAX_AMOUNT)?,
        None => 1.0,
    };
    Ok(ThrottleArgs {
        limit: Limit {
            capacity: max_burst + 1.0,
            rate,
        },
        quantity: quantity + 0.0,
    })
}

/// Where TB.MTAKE's arguments are, from `numkeys` and the argument count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MTakeLayout {
    /// How many keys (and so triples) follow numkeys.
    pub keys: usize,
    /// Whether a `now` ends the arguments.
    pub has_now: bool,
}

/// The most buckets one TB.MTAKE or TB.ACQUIRE ... TAKE takes: it bounds one call's work
/// (about 2 us a bucket; 100,000 of them held the server for 1.3 s).
pub const MAX_KEYS: usize = 64;

/// Checks `numkeys` against the number of arguments after it (`rest`): numkeys keys,
/// numkeys `capacity rate n` triples, then an optional `now`.
pub fn mtake_layout(numkeys: &[u8], rest: usize) -> Result<MTakeLayout, TbError> {
    let keys = parse_count(numkeys).ok_or(TbError::NumKeysNotPositive)?;
    if keys > MAX_KEYS {
        return Err(TbError::TooManyKeys);
    }
    let needed = keys.checked_mul(4).ok_or(TbError::NumKeysMismatch)?;
    match rest.checked_sub(needed) {
        Some(0) => Ok(MTakeLayout {
            keys,
            has_now: false,
        }),
        Some(1) => Ok(MTakeLayout {
            keys,
            has_now: true,
        }),
        _ => Err(TbError::NumKeysMismatch),
    }
}

/// A count: plain decimal digits, no sign, no leading zero, at least 1.
fn parse_count(bytes: &[u8]) -> Option<usize> {
    if bytes.first() == Some(&b'0') || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

/// Parses TB.MTAKE's triples (`capacity rate n`, three slices each) in key order.
pub fn parse_triples(triples: &[&[u8]]) -> Result<Vec<(Limit, f64)>, TbError> {
    triples
        .chunks(3)
        .map(|t| match *t {
            [c, r, n] => parse_triple(c, r, n),
            _ => Err(TbError::NumKeysMismatch),
        })
        .collect()
}

/// Whether any two of `names` are byte-equal. Small lists (every real TB.MTAKE) compare
/// pairwise without allocating; long ones sort a copy.
pub fn has_duplicates(names: &[&[u8]]) -> bool {
    if names.len() <= 16 {
        return names
            .iter()
            .enumerate()
            .any(|(i, a)| names.iter().skip(i + 1).any(|b| a == b));
    }
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    sorted.windows(2).any(|w| w.first() == w.get(1))
}

/// Parses `now` when given.
pub fn parse_now(now: Option<&[u8]>) -> Result<Option<f64>, TbError> {
    // -0 is accepted as 0; store and reply the plain zero.
    Ok(now
        .map(|t| number(t, Arg::Now, valid_time))
        .transpose()?
        .map(|t| t + 0.0))
}

fn parse_limit(capacity: &[u8], rate: &[u8]) -> Result<Limit, TbError> {
    let capacity = number(capacity, Arg::Capacity, |v| v > 0.0 && v <= MAX_AMOUNT)?;
    let rate = number(rate, Arg::Rate, |v| (MIN_RATE..=MAX_AMOUNT).contains(&v))?;
    Ok(Limit { capacity, rate })
}

fn parse_triple(capacity: &[u8], rate: &[u8], n: &[u8]) -> Result<(Limit, f64), TbError> {
    let limit = parse_limit(capacity, rate)?;
    let n = number(n, Arg::N, |v| (0.0..=MAX_AMOUNT).contains(&v))?;
    Ok((limit, n + 0.0))
}

fn number(bytes: &[u8], arg: Arg, in_range: impl Fn(f64) -> bool) -> Result<f64, TbError> {
    let value = parse_f64(bytes).ok_or(TbError::InvalidNumber(arg))?;
    if in_range(value) {
        Ok(value)
    } else {
        Err(TbError::OutOfRange(arg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(args: &[&str]) -> Result<TakeArgs, TbError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_take(&bytes)
    }

    #[test]
    fn accepts_the_documented_forms() {
        let a = parse(&["10", "1.6666666666666667", "1", "1764456268.123456"]).unwrap();
        assert_eq!(a.limit.capacity, 10.0);
        assert_eq!(a.limit.rate, 1.6666666666666667);
        assert_eq!(a.n, 1.0);
        assert_eq!(a.now, Some(1764456268.123456));
        assert_eq!(parse(&["10", "2", "0"]).unwrap().now, None);
        assert_eq!(
            parse(&["10", "2", "-0"]).unwrap().n.to_bits(),
            0.0f64.to_bits()
        );
        assert_eq!(parse(&["10", "2", "11"]).unwrap().n, 11.0);
    }

    #[test]
    fn rejects_bad_numbers_naming_the_argument() {
        use Arg::*;
        use TbError::*;
        let cases: &[(&[&str], TbError)] = &[
            (&["", "1", "1"], InvalidNumber(Capacity)),
            (&["abc", "1", "1"], InvalidNumber(Capacity)),
            (&[" 10", "1", "1"], InvalidNumber(Capacity)),
            (&["0x10", "1", "1"], InvalidNumber(Capacity)),
            (&["nan", "1", "1"], InvalidNumber(Capacity)),
            (&["inf", "1", "1"], InvalidNumber(Capacity)),
            (&["1e999", "1", "1"], InvalidNumber(Capacity)),
            (&["0", "1", "1"], OutOfRange(Capacity)),
            (&["-5", "1", "1"], OutOfRange(Capacity)),
            (&["1e16", "1", "1"], OutOfRange(Capacity)),
            (&["10", "0", "1"], OutOfRange(Rate)),
            (&["10", "-1", "1"], OutOfRange(Rate)),
            (&["10", "1e-300", "1"], OutOfRange(Rate)),
            (&["10", "-inf", "1"], InvalidNumber(Rate)),
            (&["10", "1", "-1"], OutOfRange(N)),
            (&["10", "1", "99999999999999999999"], OutOfRange(N)),
            (&["10", "1", "NaN"], InvalidNumber(N)),
            (&["10", "1", "1", "-1"], OutOfRange(Now)),
            (&["10", "1", "1", "1764456268123"], OutOfRange(Now)),
            (&["10", "1", "1", "+inf"], InvalidNumber(Now)),
            (&["10", "1", "1", ""], InvalidNumber(Now)),
            (&["10", "1"], WrongArity),
            (&["10", "1", "1", "1", "1"], WrongArity),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args), Err(*want), "{args:?}");
        }
    }

    #[test]
    fn window_arguments_take_an_optional_now_and_mode() {
        let bytes = |a: &[&'static str]| a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        let w = parse_window(&bytes(&["100", "60", "1"])).unwrap();
        assert_eq!(
            (w.window.limit, w.window.window, w.n, w.now, w.mode),
            (100.0, 60.0, 1.0, None, Mode::Sliding)
        );
        let w = parse_window(&bytes(&["100", "0.5", "1", "log"])).unwrap();
        assert_eq!((w.now, w.mode), (None, Mode::Log));
        let w = parse_window(&bytes(&["100", "60", "1", "1764456268.5"])).unwrap();
        assert_eq!(
            (w.now, w.now_at, w.mode),
            (Some(1764456268.5), Some(3), Mode::Sliding)
        );
        let w = parse_window(&bytes(&["100", "60", "1", "1764456268.5", "Fixed"])).unwrap();
        assert_eq!((w.now, w.mode), (Some(1764456268.5), Mode::Fixed));
        use Arg::*;
        use TbError::*;
        let cases: &[(&[&str], TbError)] = &[
            (&["0", "60", "1"], OutOfRange(Limit)),
            (&["x", "60", "1"], InvalidNumber(Limit)),
            (&["10", "0", "1"], OutOfRange(Window)),
            (&["10", "1e13", "1"], OutOfRange(Window)),
            (&["10", "60", "-1"], OutOfRange(N)),
            (&["10", "60", "1", "SLIDE"], InvalidNumber(Now)),
            (&["10", "60", "1", "5", "SLIDE"], InvalidMode),
            (&["10.5", "60", "1", "LOG"], LogNotWhole),
            (&["10", "60", "1.5", "LOG"], LogNotWhole),
            (&["10000", "60", "100001", "LOG"], LogTooMany),
            (&["10001", "60", "1", "LOG"], LogLimitTooLarge),
            (
                &["9007199254740992", "60", "100000", "LOG"],
                LogLimitTooLarge,
            ),
            (&["10", "60"], WrongArity),
            (&["10", "60", "1", "5", "LOG", "x"], WrongArity),
        ];
        for (args, want) in cases {
            assert_eq!(parse_window(&bytes(args)), Err(*want), "{args:?}");
        }
    }

    #[test]
    fn load_arguments_are_aliases_and_the_clock_bound() {
        let alias = |t: &str| t.eq_ignore_ascii_case("CL.THROTTLE");
        let parse = |a: &[&str]| {
            let b: Vec<&[u8]> = a.iter().map(|s| s.as_bytes()).collect();
            parse_load_args(&b, alias)
        };
        let default = crate::algo::clock::DEFAULT_MAX_AHEAD_MS;
        assert_eq!(
            parse(&[]),
            Ok(LoadArgs {
                aliases: vec![],
                max_clock_ahead_ms: default
            })
        );
        assert_eq!(
            parse(&["cl.throttle", "MAX-CLOCK-AHEAD-MS", "250"]),
            Ok(LoadArgs {
                aliases: vec!["cl.throttle".into()],
                max_clock_ahead_ms: 250
            })
        );
        assert_eq!(
            parse(&["max-clock-ahead-ms", "0"])
                .unwrap()
                .max_clock_ahead_ms,
            0
        );
        assert_eq!(
            parse(&["max-clock-ahead-ms", "253402300800000"])
                .unwrap()
                .max_clock_ahead_ms,
            crate::algo::clock::MAX_MAX_AHEAD_MS
        );
        for bad in [
            &["max-clock-ahead-ms"][..],
            &["max-clock-ahead-ms", "-1"],
            &["max-clock-ahead-ms", "1.5"],
            &["max-clock-ahead-ms", "+5"],
            &["max-clock-ahead-ms", "10s"],
            &["max-clock-ahead-ms", ""],
            &["max-clock-ahead-ms", "253402300800001"],
            &["max-clock-ahead-ms", "99999999999999999999999"],
        ] {
            let e = parse(bad).unwrap_err();
            assert!(
                e.starts_with("max-clock-ahead-ms needs a whole number"),
                "{bad:?}: {e}"
            );
        }
        let e = parse(&["max-clock-ahead", "5"]).unwrap_err();
        assert!(
            e.starts_with("unknown load argument 'max-clock-ahead'"),
            "{e}"
        );
    }

    proptest! {
        #[test]
        fn fuzz_load_arguments_never_panic(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..5)) {
            let b: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            if let Ok(a) = parse_load_args(&b, |t| t == "CL.THROTTLE") {
                prop_assert!(a.max_clock_ahead_ms <= crate::algo::clock::MAX_MAX_AHEAD_MS);
            }
        }
    }

    #[test]
    fn throttle_arguments_follow_cl_throttle_with_fractional_rates() {
        let bytes = |a: &[&'static str]| a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        let t = parse_throttle(&bytes(&["15", "30", "60"])).unwrap();
        assert_eq!(
            t.limit,
            crate::algo::bucket::Limit {
                capacity: 16.0,
                rate: 0.5
            }
        );
        assert_eq!(t.quantity, 1.0);
        let t = parse_throttle(&bytes(&["99", "2500", "1", "-3"])).unwrap();
        assert_eq!((t.limit.rate, t.quantity), (2500.0, -3.0));
        let t = parse_throttle(&bytes(&["0", "1.5", "0.25", "0"])).unwrap();
        assert_eq!((t.limit.capacity, t.limit.rate), (1.0, 6.0));
        use Arg::*;
        use TbError::*;
        let cases: &[(&[&str], TbError)] = &[
            (&["1.5", "1", "1"], OutOfRange(MaxBurst)),
            (&["-1", "1", "1"], OutOfRange(MaxBurst)),
            (&["9007199254740992", "1", "1"], OutOfRange(MaxBurst)),
            (&["x", "1", "1"], InvalidNumber(MaxBurst)),
            (&["1", "0", "1"], OutOfRange(CountPerPeriod)),
            (&["1", "nan", "1"], InvalidNumber(CountPerPeriod)),
            (&["1", "1", "0"], OutOfRange(Period)),
            (&["1", "1", "-60"], OutOfRange(Period)),
            (&["1", "1", "1e300"], ThrottleRate),
            (&["1", "1e300", "1e-10"], ThrottleRate),
            (&["1", "1", "1", "1e16"], OutOfRange(Quantity)),
            (&["1", "1", "1", "q"], InvalidNumber(Quantity)),
            (&["1", "1"], WrongArity),
            (&["1", "1", "1", "1", "1"], WrongArity),
        ];
        for (args, want) in cases {
            assert_eq!(parse_throttle(&bytes(args)), Err(*want), "{args:?}");
        }
    }

    #[test]
    fn mtake_layout_checks_numkeys_against_the_count() {
        use TbError::*;
        let ok = |keys, has_now| Ok(MTakeLayout { keys, has_now });
        let cases: &[(&str, usize, Result<MTakeLayout, TbError>)] = &[
            ("1", 4, ok(1, false)),
            ("1", 5, ok(1, true)),
            ("3", 12, ok(3, false)),
            ("3", 13, ok(3, true)),
            ("3", 11, Err(NumKeysMismatch)),
            ("3", 14, Err(NumKeysMismatch)),
            ("2", 4, Err(NumKeysMismatch)),
            ("1", 3, Err(NumKeysMismatch)),
            ("0", 4, Err(NumKeysNotPositive)),
            ("-1", 4, Err(NumKeysNotPositive)),
            ("+1", 4, Err(NumKeysNotPositive)),
            ("01", 4, Err(NumKeysNotPositive)),
            ("1.5", 4, Err(NumKeysNotPositive)),
            ("1e0", 4, Err(NumKeysNotPositive)),
            ("x", 4, Err(NumKeysNotPositive)),
            ("", 4, Err(NumKeysNotPositive)),
            (" 1", 4, Err(NumKeysNotPositive)),
            ("99999999999999999999999", 4, Err(NumKeysNotPositive)),
            ("4611686018427387904", 4, Err(TooManyKeys)),
            ("64", 256, ok(64, false)),
            ("65", 260, Err(TooManyKeys)),
            ("100000", 400_000, Err(TooManyKeys)),
        ];
        for (numkeys, rest, want) in cases {
            assert_eq!(
                &mtake_layout(numkeys.as_bytes(), *rest),
                want,
                "{numkeys} {rest}"
            );
        }
    }

    #[test]
    fn triples_parse_in_order_and_name_the_bad_argument() {
        let args: Vec<&[u8]> = vec![b"10", b"1", b"1", b"5", b"0.5", b"2"];
        let parsed = parse_triples(&args).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[1].0,
            Limit {
                capacity: 5.0,
                rate: 0.5
            }
        );
        assert_eq!(parsed[1].1, 2.0);
        let bad: Vec<&[u8]> = vec![b"10", b"1", b"1", b"5", b"x", b"2"];
        assert_eq!(parse_triples(&bad), Err(TbError::InvalidNumber(Arg::Rate)));
    }

    #[test]
    fn duplicates_are_found_in_short_and_long_lists() {
        assert!(!has_duplicates(&[b"a".as_slice(), b"b", b"ab"]));
        assert!(has_duplicates(&[b"a".as_slice(), b"b", b"a"]));
        let names: Vec<Vec<u8>> = (0..100).map(|i| format!("k{i}").into_bytes()).collect();
        let mut refs: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
        assert!(!has_duplicates(&refs));
        refs.push(b"k42");
        assert!(has_duplicates(&refs));
    }

    #[test]
    fn reserve_and_peek_arguments() {
        let bytes = |a: &[&'static str]| a.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        let r = parse_reserve(&bytes(&["10", "2", "1", "1e308"])).unwrap();
        assert_eq!((r.max_wait, r.now), (1e308, None));
        let r = parse_reserve(&bytes(&["10", "2", "1", "-0", "5"])).unwrap();
        assert_eq!((r.max_wait.to_bits(), r.now), (0.0f64.to_bits(), Some(5.0)));
        use Arg::*;
        use TbError::*;
        assert_eq!(
            parse_reserve(&bytes(&["10", "2", "1", "-1"])),
            Err(OutOfRange(MaxWait))
        );
        assert_eq!(
            parse_reserve(&bytes(&["10", "2", "1", "inf"])),
            Err(InvalidNumber(MaxWait))
        );
        assert_eq!(parse_reserve(&bytes(&["10", "2", "1"])), Err(WrongArity));
        assert_eq!(
            parse_reserve(&bytes(&["10", "2", "1", "1", "1", "1"])),
            Err(WrongArity)
        );
        let p = parse_peek(&bytes(&["10", "2"])).unwrap();
        assert_eq!(
            p.limit,
            crate::algo::bucket::Limit {
                capacity: 10.0,
                rate: 2.0
            }
        );
        assert_eq!(
            parse_peek(&bytes(&["10", "2", "7"])).unwrap().now,
            Some(7.0)
        );
        assert_eq!(parse_peek(&bytes(&["10", "0", "7"])), Err(OutOfRange(Rate)));
        assert_eq!(parse_peek(&bytes(&["10"])), Err(WrongArity));
        assert_eq!(parse_peek(&bytes(&["10", "1", "1", "1"])), Err(WrongArity));
    }

    proptest! {
        #[test]
        fn fuzz_mtake_and_reserve_arguments_never_panic(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..14)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            if let Some((numkeys, rest)) = refs.split_first()
                && let Ok(layout) = mtake_layout(numkeys, rest.len())
            {
                prop_assert!(layout.keys * 4 + usize::from(layout.has_now) == rest.len());
                let triples = rest.get(layout.keys..layout.keys * 4).unwrap_or(&[]);
                if let Ok(parsed) = parse_triples(triples) {
                    prop_assert_eq!(parsed.len(), layout.keys);
                }
            }
            if let Ok(r) = parse_reserve(&refs) {
                let d = crate::algo::bucket::reserve(r.limit, r.n, r.max_wait, r.now.unwrap_or(1.0), None);
                prop_assert!(d.remaining.is_finite() && d.retry_after.is_finite());
            }
            let _ = parse_peek(&refs);
            let _ = has_duplicates(&refs);
        }

        #[test]
        fn fuzz_arbitrary_argument_bytes_never_panic(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..7)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            if let Ok(a) = parse_take(&refs) {
                prop_assert!(a.limit.capacity > 0.0 && a.limit.capacity <= MAX_AMOUNT);
                prop_assert!(a.limit.rate >= MIN_RATE && a.n >= 0.0);
                // Whatever was accepted drives the math to finite answers.
                let d = crate::algo::bucket::take(a.limit, a.n, a.now.unwrap_or(1.0), None);
                prop_assert!(d.remaining.is_finite() && d.reset_after.is_finite());
            }
        }

        #[test]
        fn fuzz_numeric_looking_arguments_never_panic(
            c in "[-+]?[0-9.eE+-]{0,20}", r in "[-+]?[0-9.eE+-]{0,20}",
            n in "[-+]?[0-9.eE+-]{0,20}", now in "[-+]?[0-9.eE+-]{0,20}",
        ) {
            let args = [c.as_bytes(), r.as_bytes(), n.as_bytes(), now.as_bytes()];
            if let Ok(a) = parse_take(&args) {
                let d = crate::algo::bucket::take(a.limit, a.n, a.now.unwrap_or(0.0), None);
                prop_assert!(d.retry_after.is_finite());
            }
        }
    }
}
