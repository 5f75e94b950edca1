//! The stored hash fields as text, and back: which texts are a valid bucket or window
//! state, and which hash holds which kind. Pure, so every byte sequence someone else may
//! have written is tested without a server.

use crate::algo::bucket::{State, valid_stored_tokens, valid_time};
use crate::algo::num::{NumText, format_f64, parse_f64};
use crate::algo::window::{Fixed, Mode, Sliding, valid_count};
use crate::error::{Field, StateKind, TbError};

/// Which of the module's fields a hash holds, for the rule that the module never takes
/// over a hash that is not its own state. `len` is the hash's field count (0: no key).
///
/// The caller fills `bucket` (how many of `tokens`, `last_refill_time` are there) and
/// `window` (how many of `start`, `count`, `counts`, `previous`) from the fields it read.
/// When the fields it found are all the hash has (`len`), the other kind's are known to be
/// absent without reading them: only a hash with more fields than those, or with none of
/// the command's own, has the rest read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub len: usize,
    pub bucket: usize,
    pub window: usize,
}

impl Held {
    /// Whether the fields counted are all the hash holds, so nothing else needs reading.
    pub fn complete(&self) -> bool {
        self.bucket + self.window >= self.len
    }
}

/// Whether a command keeping `wanted` state (a token bucket, or a FIXED / SLIDING window)
/// may use a hash holding `held`:
///
/// - no key: yes (a new bucket or window);
/// - none of the module's fields: no, it is someone else's data (a user record);
/// - both a bucket's and a window's fields: no, it is neither;
/// - only the other kind's fields: no (a window read as a bucket, or the reverse);
/// - the command's own fields (any others beside them are left alone): yes, and the
///   stored texts are then decoded (`decode`, `decode_fixed`, `decode_sliding`), where a
///   field missing or garbled is corrupt.
pub fn check_owner(wanted: StateKind, held: Held) -> Result<(), TbError> {
    if held.len == 0 {
        return Ok(());
    }
    match (held.bucket > 0, held.window > 0) {
        (false, false) => Err(TbError::NotLimiterState(wanted)),
        (true, true) => Err(TbError::MixedState),
        (true, false) if wanted != StateKind::Bucket => Err(TbError::BucketNotWindow),
        (false, true) if wanted == StateKind::Bucket => Err(TbError::WindowNotBucket),
        _ => Ok(()),
    }
}

/// A FIXED or SLIDING window's hash fields as stored (`None`: absent, or not read because
/// the fields read already tell the mode), and whether the hash holds a token bucket's
/// fields instead.
///
/// FIXED stores `start` and `count`. SLIDING stores `start` and `counts` (this window's
/// count and the previous window's, `"<count> <previous>"`); SLIDING keys written before
/// `counts` existed hold `start`, `count`, `previous` instead (`Layout::Split`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowFields<'a> {
    pub start: Option<&'a [u8]>,
    pub count: Option<&'a [u8]>,
    pub counts: Option<&'a [u8]>,
    pub previous: Option<&'a [u8]>,
    pub holds_bucket: bool,
}

/// How a SLIDING window is stored: `start`, `counts` (what is written), or the earlier
/// `start`, `count`, `previous`, which the next write replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Counts,
    Split,
}

/// Decodes a FIXED window. A SLIDING window's hash (it has `counts`, or `previous`) or a
/// token bucket's is a clear error, never read as something else; neither is a new
/// window.
pub fn decode_fixed(f: &WindowFields<'_>) -> Result<Option<Fixed>, TbError> {
    if f.holds_bucket {
        return Err(TbError::BucketNotWindow);
    }
    if f.counts.is_some() || f.previous.is_some() {
        return Err(TbError::WrongMode {
            found: Mode::Sliding,
            wanted: Mode::Fixed,
        });
    }
    let Some((start, count)) = start_and_count(f)? else {
        return Ok(None);
    };
    Ok(Some(Fixed { start, count }))
}

/// Decodes a SLIDING window, and how it is stored. A FIXED window's hash (`count`
/// without `previous`) or a token bucket's is a clear error.
pub fn decode_sliding(f: &WindowFields<'_>) -> Result<Option<(Sliding, Layout)>, TbError> {
    if f.holds_bucket {
        return Err(TbError::BucketNotWindow);
    }
    if let Some(counts) = f.counts {
        let start = stored(f.start, valid_time, Field::Start)?;
        let (count, previous) = parse_counts(counts).ok_or(TbError::CorruptState(Field::Counts))?;
        let state = Sliding {
            start,
            count,
            previous,
        };
        return Ok(Some((state, Layout::Counts)));
    }
    if f.count.is_none() && f.previous.is_none() {
        // `start` alone lacks its counts; nothing at all is a new window.
        return match f.start {
            Some(_) => Err(TbError::CorruptState(Field::Counts)),
            None => Ok(None),
        };
    }
    let Some((start, count)) = start_and_count(f)? else {
        return Err(TbError::CorruptState(Field::Start));
    };
    if f.previous.is_none() {
        return Err(TbError::WrongMode {
            found: Mode::Fixed,
            wanted: Mode::Sliding,
        });
    }
    let previous = stored(f.previous, valid_count, Field::Previous)?;
    let state = Sliding {
        start,
        count,
        previous,
    };
    Ok(Some((state, Layout::Split)))
}

/// A stored field's number: present, a number, and `valid`; else `field` is corrupt.
fn stored(text: Option<&[u8]>, valid: impl Fn(f64) -> bool, field: Field) -> Result<f64, TbError> {
    text.and_then(parse_f64)
        .filter(|v| valid(*v))
        .ok_or(TbError::CorruptState(field))
}

/// `counts` as stored: two valid counts separated by one space.
fn parse_counts(text: &[u8]) -> Option<(f64, f64)> {
    let space = text.iter().position(|&b| b == b' ')?;
    let count = text.get(..space).and_then(parse_f64)?;
    let previous = text.get(space + 1..).and_then(parse_f64)?;
    (valid_count(count) && valid_count(previous)).then_some((count, previous))
}

/// The text of `counts`: `count` and `previous` as `format_f64` writes them, one space
/// apart (at most 49 bytes, within `NumText`).
pub fn format_counts(count: f64, previous: f64) -> NumText {
    format_f64(count).followed_by(b' ', &format_f64(previous))
}

/// `start` and `count`, both or neither (one alone, or a bad number, is corrupt).
fn start_and_count(f: &WindowFields<'_>) -> Result<Option<(f64, f64)>, TbError> {
    if f.start.is_none() && f.count.is_none() {
        return Ok(None);
    }
    let start = stored(f.start, valid_time, Field::Start)?;
    let count = stored(f.count, valid_count, Field::Count)?;
    Ok(Some((start, count)))
}

/// Decodes the `tokens` and `last_refill_time` field values (`None`: field absent).
///
/// Neither field: a new bucket (the hash may hold other fields, which are not ours). One
/// without the other, or a value that is not a sane number, is corrupt: reported, never
/// silently reset, because resetting would hand out a full bucket.
pub fn decode(
    tokens: Option<&[u8]>,
    last_refill_time: Option<&[u8]>,
) -> Result<Option<State>, TbError> {
    if tokens.is_none() && last_refill_time.is_none() {
        return Ok(None);
    }
    let tokens = stored(tokens, valid_stored_tokens, Field::Tokens)?;
    let last_refill_time = stored(last_refill_time, valid_time, Field::LastRefillTime)?;
    Ok(Some(State {
        tokens,
        last_refill_time,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::bucket::{Limit, take};
    use crate::algo::num::format_f64;
    use proptest::prelude::*;

    #[test]
    fn decodes_what_the_module_and_the_lua_script_write() {
        let s = decode(Some(b"9"), Some(b"1764456268.123456"))
            .unwrap()
            .unwrap();
        assert_eq!(
            s,
            State {
                tokens: 9.0,
                last_refill_time: 1764456268.123456
            }
        );
        // Lua's %.14g and HINCRBYFLOAT texts.
        let s = decode(Some(b"8.5999999999999996"), Some(b"1764456268"))
            .unwrap()
            .unwrap();
        assert_eq!(s.tokens, 8.6);
        assert_eq!(decode(None, None), Ok(None));
    }

    /// Fields as read: `start`, `count`, `previous` (FIXED and the split SLIDING layout).
    fn window<'a>(
        start: Option<&'a str>,
        count: Option<&'a str>,
        previous: Option<&'a str>,
    ) -> WindowFields<'a> {
        WindowFields {
            start: start.map(str::as_bytes),
            count: count.map(str::as_bytes),
            counts: None,
            previous: previous.map(str::as_bytes),
            holds_bucket: false,
        }
    }

    /// Fields as read from SLIDING's `start`, `counts`.
    fn sliding<'a>(start: Option<&'a str>, counts: &'a str) -> WindowFields<'a> {
        WindowFields {
            start: start.map(str::as_bytes),
            counts: Some(counts.as_bytes()),
            ..WindowFields::default()
        }
    }

    const S37: Sliding = Sliding {
        start: 1764456240.0,
        count: 3.0,
        previous: 7.0,
    };

    #[test]
    fn window_state_is_read_only_as_the_mode_that_wrote_it() {
        let fixed = window(Some("1764456240"), Some("3"), None);
        let split = window(Some("1764456240"), Some("3"), Some("7"));
        let counts = sliding(Some("1764456240"), "3 7");
        assert_eq!(
            decode_fixed(&fixed),
            Ok(Some(Fixed {
                start: 1764456240.0,
                count: 3.0
            }))
        );
        assert_eq!(decode_sliding(&counts), Ok(Some((S37, Layout::Counts))));
        assert_eq!(decode_sliding(&split), Ok(Some((S37, Layout::Split))));
        assert_eq!(
            decode_sliding(&fixed),
            Err(TbError::WrongMode {
                found: Mode::Fixed,
                wanted: Mode::Sliding
            })
        );
        for f in [split, counts] {
            assert_eq!(
                decode_fixed(&f),
                Err(TbError::WrongMode {
                    found: Mode::Sliding,
                    wanted: Mode::Fixed
                })
            );
        }
        let bucket = WindowFields {
            holds_bucket: true,
            ..WindowFields::default()
        };
        assert_eq!(decode_fixed(&bucket), Err(TbError::BucketNotWindow));
        assert_eq!(decode_sliding(&bucket), Err(TbError::BucketNotWindow));
        assert_eq!(decode_fixed(&WindowFields::default()), Ok(None));
        assert_eq!(decode_sliding(&WindowFields::default()), Ok(None));
    }

    #[test]
    fn window_fields_alone_or_garbage_are_corrupt() {
        let start = Err(TbError::CorruptState(Field::Start));
        let count = Err(TbError::CorruptState(Field::Count));
        assert_eq!(decode_fixed(&window(None, Some("3"), None)), start);
        assert_eq!(decode_fixed(&window(Some("5"), None, None)), count);
        assert_eq!(decode_fixed(&window(Some("x"), Some("3"), None)), start);
        assert_eq!(decode_fixed(&window(Some("5"), Some("-1"), None)), count);
        assert_eq!(
            decode_fixed(&window(Some("1764456240123"), Some("3"), None)),
            start
        );
        let start = Err(TbError::CorruptState(Field::Start));
        assert_eq!(decode_sliding(&window(None, None, Some("3"))), start);
        assert_eq!(decode_sliding(&window(None, Some("3"), Some("3"))), start);
        assert_eq!(
            decode_sliding(&window(Some("5"), Some("3"), Some("nan"))),
            Err(TbError::CorruptState(Field::Previous))
        );
        // `counts` without `start`, `start` without its counts, and every malformed pair.
        assert_eq!(decode_sliding(&sliding(None, "3 7")), start);
        assert_eq!(decode_sliding(&sliding(Some("x"), "3 7")), start);
        assert_eq!(
            decode_sliding(&window(Some("1764456240"), None, None)),
            Err(TbError::CorruptState(Field::Counts))
        );
        for bad in [
            "", "3", "3 ", " 7", "3  7", "3 7 ", " 3 7", "3\t7", "3,7", "3 7 1", "-1 7", "3 -1",
            "3 nan", "inf 7", "3 1e300", "x y", "3 7x",
        ] {
            assert_eq!(
                decode_sliding(&sliding(Some("1764456240"), bad)),
                Err(TbError::CorruptState(Field::Counts)),
                "{bad:?}"
            );
        }
    }

    proptest! {
        /// What SLIDING writes as `counts` reads back as exactly the counts written, for
        /// every valid count, integral or not.
        #[test]
        fn counts_read_back_exactly(
            count in prop_oneof![Just(0.0), Just(crate::algo::bucket::MAX_AMOUNT), Just(5e-324), 0.0..crate::algo::bucket::MAX_AMOUNT, 0.0..1e-3f64],
            previous in prop_oneof![Just(0.0), Just(crate::algo::bucket::MAX_AMOUNT), Just(1.2345678901234567e-5), 0.0..crate::algo::bucket::MAX_AMOUNT],
        ) {
            prop_assume!(valid_count(count) && valid_count(previous));
            let text = format_counts(count, previous);
            prop_assert!(text.as_bytes().len() <= 49);
            prop_assert_eq!(parse_counts(text.as_bytes()), Some((count, previous)));
        }
    }

    fn held(len: usize, bucket: usize, window: usize) -> Held {
        Held {
            len,
            bucket,
            window,
        }
    }

    #[test]
    fn only_a_missing_key_or_the_commands_own_fields_are_used() {
        use StateKind::*;
        let ok = Ok(());
        for wanted in [Bucket, Window] {
            assert_eq!(check_owner(wanted, held(0, 0, 0)), ok);
            // `HSET user:2 name bob`: someone else's record.
            assert_eq!(
                check_owner(wanted, held(1, 0, 0)),
                Err(TbError::NotLimiterState(wanted))
            );
            assert_eq!(check_owner(wanted, held(2, 1, 1)), Err(TbError::MixedState));
            assert_eq!(check_owner(wanted, held(5, 2, 2)), Err(TbError::MixedState));
        }
        assert_eq!(check_owner(Bucket, held(2, 2, 0)), ok);
        // The bucket's fields with others beside them (written after the bucket).
        assert_eq!(check_owner(Bucket, held(4, 2, 0)), ok);
        // One of the two: decoded, and reported as corrupt there.
        assert_eq!(check_owner(Bucket, held(1, 1, 0)), ok);
        assert_eq!(
            check_owner(Bucket, held(2, 0, 2)),
            Err(TbError::WindowNotBucket)
        );
        assert_eq!(check_owner(Window, held(2, 0, 2)), ok);
        assert_eq!(check_owner(Window, held(3, 0, 3)), ok);
        assert_eq!(
            check_owner(Window, held(2, 2, 0)),
            Err(TbError::BucketNotWindow)
        );
        assert!(held(2, 2, 0).complete() && !held(3, 2, 0).complete());
    }

    proptest! {
        /// Any hash shape: never a panic, and a hash is used only when it is missing or
        /// holds some of the command's own fields and none of the other kind's.
        #[test]
        fn fuzz_hash_owner_is_never_someone_elses(
            len in 0usize..8, bucket in 0usize..3, window in 0usize..5, wanted_bucket in any::<bool>(),
        ) {
            let wanted = if wanted_bucket { StateKind::Bucket } else { StateKind::Window };
            let h = held(len, bucket.min(len), window.min(len.saturating_sub(bucket.min(len))));
            if check_owner(wanted, h).is_ok() && h.len > 0 {
                let (own, other) = if wanted_bucket { (h.bucket, h.window) } else { (h.window, h.bucket) };
                prop_assert!(own > 0 && other == 0, "{h:?}");
            }
        }
    }

    #[test]
    fn one_field_alone_or_garbage_is_corrupt() {
        let tokens = Err(TbError::CorruptState(Field::Tokens));
        let time = Err(TbError::CorruptState(Field::LastRefillTime));
        assert_eq!(decode(Some(b"5"), None), time);
        assert_eq!(decode(None, Some(b"5")), tokens);
        assert_eq!(decode(Some(b"nan"), Some(b"5")), tokens);
        assert_eq!(decode(Some(b"-1e300"), Some(b"5")), tokens);
        assert_eq!(decode(Some(b"5"), Some(b"-1")), time);
        assert_eq!(decode(Some(b"5"), Some(b"1764456268123")), time);
    }

    /// Texts a fuzzer should try: extremes, near-misses and garbage.
    fn nasty_text() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"4.9e-324".to_vec()),
            Just(b"2.2250738585072014e-308".to_vec()),
            Just(b"1e308".to_vec()),
            Just(b"1.7976931348623157e308".to_vec()),
            Just(b"-0".to_vec()),
            Just(b"-0.0".to_vec()),
            Just(b"9007199254740993".to_vec()),
            Just(b"1e-300".to_vec()),
            Just(b"1e300".to_vec()),
            Just(b"253402300799.999999".to_vec()),
            Just(b"0".to_vec()),
            "[-+]?[0-9]{0,20}(\\.[0-9]{0,20})?([eE][-+]?[0-9]{1,3})?".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 0..30),
        ]
    }

    proptest! {
        /// Arbitrary argument text and arbitrary stored text, end to end through parse,
        /// math and formatting: never a panic, never a non-finite number stored or
        /// replied, stored tokens within [0, capacity], and stored text that decodes to
        /// exactly the state computed.
        #[test]
        fn fuzz_arguments_and_stored_state(
            capacity in nasty_text(), rate in nasty_text(), n in nasty_text(), now in nasty_text(),
            tokens in proptest::option::of(nasty_text()), last in proptest::option::of(nasty_text()),
        ) {
            let args = [capacity.as_slice(), rate.as_slice(), n.as_slice(), now.as_slice()];
            let Ok(a) = crate::parse::args::parse_take(&args) else { return Ok(()) };
            let Ok(stored) = decode(tokens.as_deref(), last.as_deref()) else { return Ok(()) };
            let d = take(a.limit, a.n, a.now.unwrap_or(0.0), stored);
            for v in [d.remaining, d.retry_after, d.reset_after] {
                prop_assert!(v.is_finite(), "{d:?}");
            }
            prop_assert!(d.reset_after >= 0.0 && (d.retry_after >= 0.0 || d.retry_after == -1.0));
            if let Some(s) = d.new_state {
                prop_assert!(s.tokens >= 0.0 && s.tokens <= a.limit.capacity, "{s:?}");
                let t = format_f64(s.tokens);
                let l = format_f64(s.last_refill_time);
                prop_assert_eq!(decode(Some(t.as_bytes()), Some(l.as_bytes())), Ok(Some(s)));
            }
        }

        /// Arbitrary stored window texts in any combination of fields: never a panic; a
        /// state decoded is sane, and what the command would write back for it (`counts`
        /// of the new layout) decodes to exactly that state.
        #[test]
        fn fuzz_stored_window_state(
            start in proptest::option::of(nasty_text()),
            count in proptest::option::of(nasty_text()),
            counts in proptest::option::of(prop_oneof![
                nasty_text(),
                (nasty_text(), nasty_text()).prop_map(|(a, b)| [a, b].join(&b' ')),
            ]),
            previous in proptest::option::of(nasty_text()),
            holds_bucket in any::<bool>(),
        ) {
            let f = WindowFields {
                start: start.as_deref(),
                count: count.as_deref(),
                counts: counts.as_deref(),
                previous: previous.as_deref(),
                holds_bucket,
            };
            if let Ok(Some(s)) = decode_fixed(&f) {
                prop_assert!(s.is_sane() && f.counts.is_none() && f.previous.is_none());
            }
            if let Ok(Some((s, layout))) = decode_sliding(&f) {
                prop_assert!(s.is_sane());
                prop_assert_eq!(layout == Layout::Counts, f.counts.is_some());
                let start = format_f64(s.start);
                let counts = format_counts(s.count, s.previous);
                let again = WindowFields {
                    start: Some(start.as_bytes()),
                    counts: Some(counts.as_bytes()),
                    ..WindowFields::default()
                };
                prop_assert_eq!(decode_sliding(&again), Ok(Some((s, Layout::Counts))));
            }
        }

        #[test]
        fn fuzz_extreme_accepted_parameters_keep_the_invariants(
            capacity in prop_oneof![Just(1e-300), Just(5e-324), Just(crate::algo::bucket::MAX_AMOUNT), 1e-9..1e15f64],
            rate in prop_oneof![Just(crate::algo::bucket::MIN_RATE), Just(crate::algo::bucket::MAX_AMOUNT), 1e-9..1e15f64],
            n in prop_oneof![Just(0.0), Just(5e-324), Just(crate::algo::bucket::MAX_AMOUNT), 0.0..1e15f64],
            now in prop_oneof![Just(0.0), Just(crate::algo::bucket::MAX_TIME.next_down()), 0.0..crate::algo::bucket::MAX_TIME],
            steps in proptest::collection::vec((0.0..1e9f64, prop_oneof![Just(0.0), Just(1.0), 0.0..1e15f64]), 1..20),
        ) {
            let limit = Limit { capacity, rate };
            let mut stored = take(limit, n, now, None).new_state;
            let mut t = now;
            for (dt, m) in steps {
                t = (t + dt).min(crate::algo::bucket::MAX_TIME.next_down());
                let d = take(limit, m, t, stored);
                prop_assert!(d.remaining.is_finite() && d.retry_after.is_finite() && d.reset_after.is_finite());
                if let Some(s) = d.new_state {
                    prop_assert!(s.tokens >= 0.0 && s.tokens <= capacity && s.is_sane());
                    stored = Some(s);
                }
            }
        }
    }
}
