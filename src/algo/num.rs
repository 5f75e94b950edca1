//! Number text: strict parsing of client and stored numbers, and shortest round-trip
//! formatting into stack buffers (the hot path allocates nothing).

/// Longest numeric text accepted. Far above any real value (a full-precision epoch time is
/// 17 bytes); it bounds the work a hostile argument can cause.
const MAX_NUMBER_LEN: usize = 128;

/// Parses a decimal number with the grammar `-? digits (. digits)? ([eE] [+-]? digits)?`
/// (`digits`: one or more ASCII digits).
///
/// Rejects everything else up front (empty, spaces, hex, `inf`, `nan`, `1_000`, a leading
/// `+`, a bare `.5` or `5.`: texts no client library formats a number as), because
/// Rust's own `f64::from_str` accepts `inf` and `nan`, and Redis users expect `strtod`-free
/// strictness. A value that overflows to infinity is rejected too: the result is always
/// finite.
pub fn parse_f64(bytes: &[u8]) -> Option<f64> {
    if bytes.is_empty() || bytes.len() > MAX_NUMBER_LEN {
        return None;
    }
    if let Some(value) = parse_exact_decimal(bytes) {
        return Some(value);
    }
    if !is_decimal(bytes) {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let value: f64 = text.parse().ok()?;
    value.is_finite().then_some(value)
}

/// Whether a client's number text is already in the form we would store: plain digits
/// with an optional fraction, no sign, no leading zeros, no trailing fraction zeros, and
/// short. Such a text can be stored as sent (it parses to the value used), which spares
/// formatting the client's `now` on every call.
pub fn is_plain_decimal(bytes: &[u8]) -> bool {
    if bytes.is_empty() || bytes.len() > 24 {
        return false;
    }
    let (int_part, frac_part) = match bytes.iter().position(|&b| b == b'.') {
        Some(dot) => (bytes.get(..dot), bytes.get(dot + 1..)),
        None => (Some(bytes), None),
    };
    let Some(int_part) = int_part else {
        return false;
    };
    let int_ok = !int_part.is_empty()
        && int_part.iter().all(u8::is_ascii_digit)
        && (int_part.len() == 1 || int_part.first() != Some(&b'0'));
    let frac_ok = match frac_part {
        None => true,
        Some(f) => !f.is_empty() && f.iter().all(u8::is_ascii_digit) && f.last() != Some(&b'0'),
    };
    int_ok && frac_ok
}

/// Exact powers of ten representable in an f64.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The fast path for what clients send on every call (`10`, `1.5`, `1764456268.123456`):
/// `[-]digits[.digits]` whose digits form an integer m <= 2^53 with k <= 22 fraction digits.
/// Then m and 10^k are exact f64s and one IEEE division gives the correctly rounded value
/// (Clinger's fast path), the same f64 `from_str` returns. Anything else: `None`, and the
/// general path decides.
fn parse_exact_decimal(bytes: &[u8]) -> Option<f64> {
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    // At most 19 digits and one dot; checked before the loop so it can run without a
    // per-digit bound (19 digits cannot overflow a u64).
    if digits.len() > 20 {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut dot = None;
    for (i, &b) in digits.iter().enumerate() {
        let d = b.wrapping_sub(b'0');
        if d < 10 {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
        } else if b == b'.' && dot.is_none() {
            dot = Some(i);
        } else {
            return None;
        }
    }
    let count = digits.len() - usize::from(dot.is_some());
    if count == 0 || count > 19 {
        return None;
    }
    // A digit on both sides of the dot: `.5` and `5.` are not numbers here.
    if dot.is_some_and(|i| i == 0 || i + 1 == digits.len()) {
        return None;
    }
    let fraction_digits = dot.map_or(0, |i| digits.len() - i - 1);
    let value = if mantissa <= 1 << 53 {
        mantissa as f64 / *POW10.get(fraction_digits)?
    } else {
        divide_exactly(mantissa, fraction_digits)?
    };
    Some(if negative { -value } else { value })
}

/// `m / 10^k`, correctly rounded, for the 16-19 digit texts Clinger's fast path cannot
/// take (m above 2^53): shortest round-trip texts of token counts such as
/// `57.123456789012345`, which the server-clock path stores on most calls. One u128
/// division gives the quotient with 56-57 significant bits and the remainder; rounding
/// that to 53 bits (half to even, the remainder as sticky bit) is exact, at a fraction of
/// the general parser's cost. `None` (k > 19, or a result outside the normal range,
/// which these texts never reach) leaves it to the general path.
fn divide_exactly(m: u64, k: usize) -> Option<f64> {
    let d = 10u64.checked_pow(u32::try_from(k).ok()?)?;
    if m == 0 {
        return Some(0.0);
    }
    let m_bits = 64 - m.leading_zeros();
    let d_bits = 64 - d.leading_zeros();
    // m * 2^s / d >= 2^(m_bits - 1 + s - d_bits) = 2^55: at least 56 bits of quotient, and
    // m << s has at most 56 + d_bits <= 120 bits.
    let s = 56 + d_bits - m_bits;
    let numerator = u128::from(m) << s;
    let (q, r) = (numerator / u128::from(d), numerator % u128::from(d));
    let q_bits = 128 - q.leading_zeros();
    let shift = q_bits.checked_sub(53)?;
    let mut mant = u64::try_from(q >> shift).ok()?;
    let rest = q & ((1u128 << shift) - 1);
    let half = 1u128 << (shift - 1);
    let mut exp = i64::from(shift) - i64::from(s);
    if rest > half || (rest == half && (r != 0 || mant & 1 == 1)) {
        mant += 1;
        if mant == 1 << 53 {
            mant >>= 1;
            exp += 1;
        }
    }
    // mant in [2^52, 2^53): the value is 1.f x 2^(exp + 52).
    let biased = exp + 52 + 1023;
    if !(1..=2046).contains(&biased) {
        return None;
    }
    let biased = u64::try_from(biased).ok()?;
    Some(f64::from_bits((biased << 52) | (mant & ((1 << 52) - 1))))
}

fn is_decimal(bytes: &[u8]) -> bool {
    let mut i = 0;
    let len = bytes.len();
    let digits_from = |mut j: usize| {
        while j < len && bytes.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        j
    };
    if bytes.first() == Some(&b'-') {
        i += 1;
    }
    let int_end = digits_from(i);
    if int_end == i {
        return false;
    }
    i = int_end;
    if bytes.get(i) == Some(&b'.') {
        let frac_end = digits_from(i + 1);
        if frac_end == i + 1 {
            return false;
        }
        i = frac_end;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_end = digits_from(i);
        if exp_end == i {
            return false;
        }
        i = exp_end;
    }
    i == len
}

/// "00" to "99": the two-digit groups `push_u64` writes.
const DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// A small stack buffer that numbers are formatted into.
pub struct NumText {
    buf: [u8; 56],
    len: usize,
}

impl NumText {
    fn new() -> Self {
        NumText {
            buf: [0; 56],
            len: 0,
        }
    }

    /// This text, `separator` and `next`: two numbers in one value (at most 24 + 1 + 24
    /// bytes: `format_f64` writes at most 24).
    pub fn followed_by(mut self, separator: u8, next: &NumText) -> NumText {
        self.push_bytes(&[separator]);
        self.push_bytes(next.as_bytes());
        self
    }

    /// Appends bytes; past the buffer's end they are dropped (never reached: one number is
    /// at most 26 bytes, two joined by `followed_by` at most 49).
    fn push_bytes(&mut self, bytes: &[u8]) {
        let end = (self.len + bytes.len()).min(self.buf.len());
        if let (Some(dst), Some(src)) =
            (self.buf.get_mut(self.len..end), bytes.get(..end - self.len))
        {
            dst.copy_from_slice(src);
            self.len = end;
        }
    }

    /// Appends `value` in decimal, zero-padded to at least `width` (<= 20) digits.
    /// Integers are most of what is stored and replied, and this skips the formatting
    /// machinery: two digits per division, from a table.
    fn push_u64(&mut self, mut value: u64, width: usize) {
        let mut digits = [b'0'; 20];
        let mut start = digits.len();
        let mut put_pair = |start: usize, pair: u64| {
            let at = (pair as usize) * 2;
            if let (Some(dst), Some(src)) = (
                digits.get_mut(start..start + 2),
                DIGIT_PAIRS.get(at..at + 2),
            ) {
                dst.copy_from_slice(src);
            }
        };
        // u64::MAX has 20 digits: at most nine pairs here, leaving value < 100.
        while value >= 100 && start >= 2 {
            start -= 2;
            put_pair(start, value % 100);
            value /= 100;
        }
        if start >= 2 {
            start -= 2;
            put_pair(start, value);
            if value < 10 {
                start += 1;
            }
        }
        let start = start.min(digits.len().saturating_sub(width));
        self.push_bytes(digits.get(start..).unwrap_or(&[]));
    }

    /// Appends `micros` as seconds with six fraction digits; `trim` drops trailing
    /// fraction zeros (and the dot with them).
    fn push_micros(&mut self, micros: u64, trim: bool) {
        self.push_u64(micros / 1_000_000, 0);
        let mut fraction = micros % 1_000_000;
        let mut width = 6;
        while trim && width > 0 && fraction.is_multiple_of(10) {
            fraction /= 10;
            width -= 1;
        }
        if width > 0 {
            self.push_bytes(b".");
            self.push_u64(fraction, width);
        }
    }

    /// The formatted bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

/// Formats `value` as the shortest text that parses back to exactly `value`.
///
/// Integral values print as integers (`99`, not `99.0`): Redis stores such hash values as
/// integers, which is smaller, and Lua's `tonumber` and our parser read them the same.
/// Very small or large magnitudes use exponent form (`1e-7`) so the text stays short.
/// Non-finite input (never produced by the bucket math) prints as `0` rather than as text
/// that no reader would accept.
pub fn format_f64(value: f64) -> NumText {
    let mut out = NumText::new();
    if !value.is_finite() || value == 0.0 {
        out.push_bytes(b"0");
    } else if value.abs() < 1e16 && value == (value as i64) as f64 {
        // Integral (checked by a round trip through i64, which needs no libm call).
        if value < 0.0 {
            out.push_bytes(b"-");
        }
        out.push_u64((value as i64).unsigned_abs(), 0);
    } else if let Some(micros) = whole_micros(value.abs()) {
        // Times and server-clock durations: exactly m / 10^6, printed without the
        // formatting machinery (the text parses to the same rational, so to `value`).
        if value < 0.0 {
            out.push_bytes(b"-");
        }
        out.push_micros(micros, true);
    } else {
        // Shortest round-trip digits (Ryu): the same digits as `{}` / `{:e}`, for about a
        // tenth of core::fmt's cost on the server-clock path, where a token count is
        // rarely integral. Plain decimals for moderate magnitudes, `1.5e-7` / `1e16`
        // beyond: at most 24 bytes, and text Lua's tonumber and HINCRBYFLOAT read too.
        out.push_bytes(ryu::Buffer::new().format_finite(value).as_bytes());
    }
    out
}

/// `value` (>= 0) as whole microseconds m, when m / 10^6 is exactly `value` as an f64 and
/// `value` is below 2^32 (so m is exact, and the text is the shortest).
fn whole_micros(value: f64) -> Option<u64> {
    // Below 2^32 one step of an f64 is under a microsecond, so at most one m / 10^6 reads
    // back as `value` and its text is the shortest; above, several do and the one found
    // may not be.
    if value >= 4_294_967_296.0 {
        return None;
    }
    let scaled = (value * 1e6).round();
    (scaled / 1e6 == value).then_some(scaled as u64)
}

/// Formats a whole number held in an f64 (a LOG score) as its integer digits, at every
/// magnitude up to 2^64 (`format_f64` switches to exponent form from 1e16 on). Anything
/// else falls back to `format_f64`.
pub fn format_whole(value: f64) -> NumText {
    if (0.0..18_446_744_073_709_551_616.0).contains(&value) && value.fract() == 0.0 {
        let mut out = NumText::new();
        out.push_u64(value as u64, 0);
        out
    } else {
        format_f64(value)
    }
}

/// `seconds` rounded up to whole microseconds, as an f64. The server clock ticks in
/// microseconds, so a server-clock wait reported this way is still long enough, and reads
/// `0.486913` instead of `0.48691296577453613`. Negative (the "never" -1) and huge values
/// pass through.
pub fn ceil_micros(seconds: f64) -> f64 {
    if !(0.0..9e9).contains(&seconds) {
        return seconds;
    }
    let micros = (seconds * 1e6).ceil() / 1e6;
    // The division can round below `seconds`; step up until it does not.
    if micros >= seconds {
        micros
    } else {
        micros.next_up()
    }
}

/// Formats a server-clock time given in whole microseconds as fixed-width seconds
/// (`1764456268.123456`). The text parses to the same f64 as `micros as f64 / 1e6`, since
/// both are the correctly rounded value of the same rational (`micros` is exact in an f64
/// below 2^53, that is until the year 2255); fixed width lets Redis overwrite the hash
/// value in place.
pub fn format_micros(micros: u64) -> NumText {
    let mut out = NumText::new();
    out.push_micros(micros, false);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn format_whole_prints_the_digits_of_whole_scores_at_every_magnitude() {
        let text = |v: f64| String::from_utf8_lossy(format_whole(v).as_bytes()).into_owned();
        assert_eq!(text(0.0), "0");
        assert_eq!(text(1_764_456_240_000_001.0), "1764456240000001");
        assert_eq!(text(1e16), "10000000000000000");
        assert_eq!(text(10_000_000_000_500_000.0), "10000000000500000");
        assert_eq!(text(253_402_300_800_000_000.0), "253402300800000000");
        // Not whole or out of range: the shortest text, as everywhere else.
        assert_eq!(text(2.5), "2.5");
        assert_eq!(text(-1.0), "-1");
        assert_eq!(
            text(1e300),
            String::from_utf8_lossy(format_f64(1e300).as_bytes())
        );
    }

    #[test]
    fn parse_accepts_plain_decimals() {
        let cases: &[(&str, f64)] = &[
            ("0", 0.0),
            ("10", 10.0),
            ("-2.5", -2.5),
            ("1.6666666666666667", 1.6666666666666667),
            ("0.5", 0.5),
            ("05", 5.0),
            ("-0", 0.0),
            ("1e3", 1000.0),
            ("5e-05", 5e-5),
            ("1.5e+20", 1.5e20),
            ("1E-3", 0.001),
            ("2.5e+2", 250.0),
            ("1764456268.123456", 1764456268.123456),
            ("1e-400", 0.0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_f64(text.as_bytes()), Some(*want), "{text}");
        }
    }

    #[test]
    fn parse_rejects_everything_else() {
        let cases = [
            "",
            " 1",
            "1 ",
            "0x10",
            "inf",
            "-inf",
            "+inf",
            "nan",
            "NaN",
            "infinity",
            "1e",
            "1e+",
            "e5",
            ".",
            "-",
            "+",
            "1.2.3",
            "1_000",
            "١",
            "1e400",
            "--1",
            "1,5",
            "\t1",
            "0b1",
            "1f",
            "1d",
            // A sign other than `-`, and a dot without a digit on each side (accepted
            // before; commands.md says numbers are parsed strictly).
            "+10",
            "+0",
            "+1.5",
            ".5",
            "-.5",
            "5.",
            "-5.",
            "5.e3",
            ".5e3",
            "+.5",
            "1e3.5",
            // Long texts take the general path: the same grammar there.
            "+1.2345678901234567890123",
            ".12345678901234567890123",
            "12345678901234567890123.",
        ];
        for text in cases {
            assert_eq!(parse_f64(text.as_bytes()), None, "{text:?}");
        }
        assert_eq!(parse_f64(&[b'1', 0]), None);
        assert_eq!(parse_f64(&[0xff, b'1']), None);
        let long = "1".repeat(MAX_NUMBER_LEN + 1);
        assert_eq!(parse_f64(long.as_bytes()), None);
    }

    #[test]
    fn plain_decimals_are_recognised() {
        for yes in ["0", "7", "1764456268", "1764456268.123456", "0.5", "10.25"] {
            assert!(is_plain_decimal(yes.as_bytes()), "{yes}");
        }
        for no in [
            "",
            "+1",
            "-1",
            "01",
            "00.5",
            ".5",
            "5.",
            "1.50",
            "1e5",
            "1.2.3",
            "0.0",
            "12345678901234567890.1234",
        ] {
            assert!(!is_plain_decimal(no.as_bytes()), "{no}");
        }
    }

    /// A number's text as (significant digits, decimal exponent of the first digit).
    fn sci(text: &str) -> (String, i32) {
        let t = text.trim_start_matches('-');
        let (mantissa, exp) = match t.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i32>().unwrap()),
            None => (t, 0),
        };
        let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let all = format!("{int_part}{frac_part}");
        let lead = all.len() - all.trim_start_matches('0').len();
        let digits = all
            .trim_start_matches('0')
            .trim_end_matches('0')
            .to_string();
        (digits, int_part.len() as i32 - 1 - lead as i32 + exp)
    }

    #[test]
    fn format_prints_integers_without_fraction() {
        assert_eq!(format_f64(99.0).as_bytes(), b"99");
        assert_eq!(format_f64(-1.0).as_bytes(), b"-1");
        assert_eq!(format_f64(-0.0).as_bytes(), b"0");
        assert_eq!(format_f64(0.1).as_bytes(), b"0.1");
        assert_eq!(format_f64(1e-7).as_bytes(), b"1e-7");
        assert_eq!(
            format_f64(9007199254740992.0).as_bytes(),
            b"9007199254740992"
        );
        assert_eq!(format_f64(1e300).as_bytes(), b"1e300");
        assert_eq!(format_f64(99.99871).as_bytes(), b"99.99871");
        assert_eq!(
            format_f64(-0.017485618591308594).as_bytes(),
            b"-0.017485618591308594"
        );
        assert_eq!(format_f64(1.5e-7).as_bytes(), b"1.5e-7");
        assert_eq!(format_f64(5e-324).as_bytes(), b"5e-324");
        assert_eq!(
            format_f64(1.7976931348623157e308).as_bytes(),
            b"1.7976931348623157e308"
        );
        assert_eq!(
            format_f64(1764456268.123456).as_bytes(),
            b"1764456268.123456"
        );
    }

    #[test]
    fn micro_values_print_short_and_exact() {
        assert_eq!(format_f64(0.5).as_bytes(), b"0.5");
        assert_eq!(format_f64(0.486913).as_bytes(), b"0.486913");
        assert_eq!(format_f64(-2.25).as_bytes(), b"-2.25");
        assert_eq!(format_f64(0.000001).as_bytes(), b"0.000001");
        assert_eq!(format_f64(1764456268.5).as_bytes(), b"1764456268.5");
        assert_eq!(ceil_micros(0.48691296577453613), 0.486913);
        assert_eq!(ceil_micros(2.0), 2.0);
        assert_eq!(ceil_micros(-1.0), -1.0);
        assert_eq!(ceil_micros(0.0), 0.0);
    }

    #[test]
    fn format_micros_is_fixed_width_and_exact() {
        assert_eq!(
            format_micros(1_764_456_268_000_001).as_bytes(),
            b"1764456268.000001"
        );
        assert_eq!(
            format_micros(1_764_456_268_120_000).as_bytes(),
            b"1764456268.120000"
        );
    }

    proptest! {
        #[test]
        fn format_round_trips_every_finite_f64(bits in any::<u64>()) {
            let value = f64::from_bits(bits);
            prop_assume!(value.is_finite());
            let text = format_f64(value);
            let back = parse_f64(text.as_bytes());
            // -0.0 prints as "0", which is the same number.
            prop_assert_eq!(back, Some(if value == 0.0 { 0.0 } else { value }));
        }

        /// Ryu's text is std's shortest round-trip text, for every class of double:
        /// integers, subnormals, powers of ten and their neighbours, random bits.
        #[test]
        fn format_has_std_shortest_digits(
            value in prop_oneof![
                any::<u64>().prop_map(f64::from_bits),
                (-(1i64 << 53)..(1i64 << 53)).prop_map(|i| i as f64),
                (0u64..(1u64 << 52)).prop_map(f64::from_bits),
                (-323i32..309).prop_map(|e| 10f64.powi(e)),
                (-323i32..309).prop_map(|e| 10f64.powi(e).next_up()),
                (-323i32..309).prop_map(|e| 10f64.powi(e).next_down()),
                (0.0..1e9f64),
                (0.0..1.0f64),
            ]
        ) {
            if !value.is_finite() || value == 0.0 {
                return Ok(());
            }
            let ours = format_f64(value);
            let ours = std::str::from_utf8(ours.as_bytes()).unwrap();
            // As short as std's shortest text, with the same leading digit position. (The
            // digits themselves may differ in the last place where two shortest texts
            // are equally near: 11370826604600.0625 is both ...062 and ...063.)
            let (digits, exponent) = sci(ours);
            let (std_digits, std_exponent) = sci(&format!("{value:e}"));
            prop_assert_eq!((digits.len(), exponent), (std_digits.len(), std_exponent), "{} vs {:e}", ours, value);
            prop_assert_eq!(parse_f64(ours.as_bytes()), Some(value));
            prop_assert_eq!(ours.starts_with('-'), value < 0.0);
        }

        #[test]
        fn ceil_micros_never_shortens_a_wait(seconds in 0.0..1e7f64) {
            let up = ceil_micros(seconds);
            prop_assert!(up >= seconds && up - seconds < 1.01e-6, "{seconds} -> {up}");
        }

        #[test]
        fn micros_text_parses_to_the_same_f64(micros in 0u64..(1u64 << 53)) {
            let text = format_micros(micros);
            prop_assert_eq!(parse_f64(text.as_bytes()), Some(micros as f64 / 1e6));
        }

        #[test]
        fn push_u64_matches_std_formatting(value in any::<u64>(), width in 0usize..=20) {
            let mut out = NumText::new();
            out.push_u64(value, width);
            let want = format!("{value:0width$}");
            prop_assert_eq!(out.as_bytes(), want.as_bytes());
        }

        #[test]
        fn fuzz_parse_never_panics_and_is_finite(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Some(v) = parse_f64(&bytes) {
                prop_assert!(v.is_finite());
            }
        }

        #[test]
        fn fast_path_agrees_with_std(text in "-?[0-9]{0,19}(\\.[0-9]{0,24})?") {
            // std also takes `.5` and `5.`, which this grammar refuses.
            let strict = !text.trim_start_matches('-').starts_with('.') && !text.ends_with('.');
            let std_value = text.parse::<f64>().ok().filter(|v| v.is_finite() && strict);
            prop_assert_eq!(parse_f64(text.as_bytes()).map(f64::to_bits), std_value.map(f64::to_bits));
        }

        /// The exact-division path: 16-19 digit mantissas above 2^53, every fraction length.
        #[test]
        fn long_mantissas_parse_as_std_does(
            m in (1u64 << 53)..=9_999_999_999_999_999_999u64,
            k in 0usize..=19,
            negative in any::<bool>(),
        ) {
            let digits = m.to_string();
            let text = if k == 0 {
                digits
            } else if k >= digits.len() {
                format!("0.{}{digits}", "0".repeat(k - digits.len()))
            } else {
                format!("{}.{}", &digits[..digits.len() - k], &digits[digits.len() - k..])
            };
            let text = if negative { format!("-{text}") } else { text };
            let want: f64 = text.parse().unwrap();
            prop_assert_eq!(parse_f64(text.as_bytes()).map(f64::to_bits), Some(want.to_bits()), "{}", text);
        }

        /// What the module stores on the server-clock path reads back exactly and fast.
        #[test]
        fn stored_token_counts_round_trip(value in 0.0..1e9f64) {
            let text = format_f64(value);
            prop_assert_eq!(parse_f64(text.as_bytes()), Some(value));
        }

        #[test]
        fn parse_agrees_with_std_on_decimal_text(text in "[+-]?[0-9]{1,12}(\\.[0-9]{0,8})?([eE][+-]?[0-9]{1,3})?") {
            let ours = parse_f64(text.as_bytes());
            let std_value: f64 = text.parse().unwrap();
            // The grammar std shares, minus a leading `+` and a dot without fraction digits.
            let mantissa = text.split(['e', 'E']).next().unwrap_or("");
            let strict = !text.starts_with('+') && !mantissa.ends_with('.');
            prop_assert_eq!(ours, (std_value.is_finite() && strict).then_some(std_value));
        }
    }
}
