//! Limits (SPEC C2, C8, C9, W1, N1): a token bucket, a window or an in-flight limit, the
//! bounds each kind's numbers are checked against, and a cost's bounds (C3).

use crate::client::{MAX_NUMBER, MIN_RATE, WindowMode};

/// A limit: a token bucket (`capacity` tokens refilled at `rate` per second), a window
/// (SPEC W1: `capacity` is its `n`, `rate` is `n / seconds`) or an in-flight limit (SPEC
/// N1: `capacity` is its `n`, `rate` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// Bucket size: the burst (`q` in `RateLimit-Policy`); a window's or in-flight
    /// limit's `n`.
    pub capacity: f64,
    /// Tokens added per second (a window's `n / seconds`; 0 for an in-flight limit).
    pub rate: f64,
    /// Which kind of limit (SPEC W, N); [`LimitKind::Bucket`] for the constructors that
    /// name a rate.
    pub kind: LimitKind,
}

/// The kind of a [`Limit`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum LimitKind {
    /// A token bucket (TB.TAKE / TB.MTAKE).
    #[default]
    Bucket,
    /// At most `n` per window of `seconds` (SPEC W1, TB.WINDOW).
    Window {
        /// The window in seconds.
        seconds: f64,
        /// `Sliding` (the default) or `Fixed` (SPEC C8: `Log` is not offered).
        mode: WindowMode,
    },
    /// At most `n` in progress, each holding a lease of `lease` seconds (SPEC N1), for
    /// at most `max_duration` seconds after its grant (N7).
    InFlight {
        /// The lease in seconds (renewed every half, SPEC N5).
        lease: f64,
        /// The longest a request holds its slot, in seconds (SPEC N7; default 300).
        max_duration: f64,
    },
}

impl LimitKind {
    /// `bucket`, `window` or `in_flight`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LimitKind::Bucket => "bucket",
            LimitKind::Window { .. } => "window",
            LimitKind::InFlight { .. } => "in_flight",
        }
    }
}

impl Limit {
    /// `capacity` tokens refilled at `rate` per second.
    pub const fn new(capacity: f64, rate: f64) -> Limit {
        Limit {
            capacity,
            rate,
            kind: LimitKind::Bucket,
        }
    }

    /// At most `n` requests (costs) per window of `seconds` (SPEC W1), checked with
    /// TB.WINDOW on the server's clock; a window policy is the only policy of its limiter
    /// (SPEC C10, W3).
    pub fn window(n: f64, seconds: f64, mode: WindowMode) -> Limit {
        Limit {
            capacity: n,
            rate: n / seconds,
            kind: LimitKind::Window { seconds, mode },
        }
    }
    /// `n` per second, as a window (SPEC W1).
    pub fn window_per_second(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 1.0, mode)
    }
    /// `n` per minute, as a window (SPEC W1).
    pub fn window_per_minute(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 60.0, mode)
    }
    /// `n` per hour, as a window (SPEC W1).
    pub fn window_per_hour(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 3600.0, mode)
    }
    /// `n` per day, as a window (SPEC W1).
    pub fn window_per_day(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 86400.0, mode)
    }

    /// At most `n` requests of the policy's key in progress at once, each holding a lease
    /// of `lease` seconds (SPEC N1; 30 is the usual choice), released when its response
    /// ends (N4) and renewed while it runs (N5), for at most [`DEFAULT_MAX_DURATION`]
    /// seconds (N7; [`Limit::max_duration`] sets another). Such a policy has no cost (C9).
    pub fn in_flight(n: f64, lease: f64) -> Limit {
        Limit {
            capacity: n,
            rate: 0.0,
            kind: LimitKind::InFlight {
                lease,
                max_duration: DEFAULT_MAX_DURATION,
            },
        }
    }

    /// An in-flight limit whose requests hold their slot for at most `seconds` after the
    /// grant (SPEC N7: then the lease is released, the request counted in
    /// `leases_timed_out` and its response ended, whatever its client does). Checked when
    /// the limiter is built (C9: finite, in `[0.001, 31536000]`). Other limits are
    /// returned unchanged.
    pub fn max_duration(mut self, seconds: f64) -> Limit {
        if let LimitKind::InFlight { max_duration, .. } = &mut self.kind {
            *max_duration = seconds;
        }
        self
    }

    /// The lease in whole milliseconds (SPEC C9: `ceil(lease x 1000)`), for an in-flight
    /// limit.
    pub fn lease_ms(&self) -> Option<u64> {
        match self.kind {
            LimitKind::InFlight { lease, .. } => Some(ceil_ms(lease)),
            _ => None,
        }
    }

    /// The maximum duration in whole milliseconds (SPEC C9, N7: `ceil(max_duration x
    /// 1000)`), for an in-flight limit.
    pub fn max_duration_ms(&self) -> Option<u64> {
        match self.kind {
            LimitKind::InFlight { max_duration, .. } => Some(ceil_ms(max_duration)),
            _ => None,
        }
    }
    /// `n` per second (burst `n`).
    pub fn per_second(n: f64) -> Limit {
        Limit::new(n, n)
    }
    /// `n` per minute (burst `n`).
    pub fn per_minute(n: f64) -> Limit {
        Limit::new(n, n / 60.0)
    }
    /// `n` per hour (burst `n`).
    pub fn per_hour(n: f64) -> Limit {
        Limit::new(n, n / 3600.0)
    }
    /// `n` per day (burst `n`).
    pub fn per_day(n: f64) -> Limit {
        Limit::new(n, n / 86400.0)
    }
}

/// How long an in-flight request may hold its slot by default, in seconds (SPEC N7).
pub const DEFAULT_MAX_DURATION: f64 = 300.0;

/// `ceil(seconds x 1000)` (SPEC C9, G1), with float noise below 1e-9 snapped.
pub(crate) fn ceil_ms(seconds: f64) -> u64 {
    let t = seconds * 1000.0;
    let r = t.round();
    let ms = if (t - r).abs() <= 1e-9 * t.abs().max(1.0) {
        r
    } else {
        t.ceil()
    };
    if ms.is_finite() && ms >= 0.0 {
        ms as u64
    } else {
        0
    }
}

/// SPEC C2, C8, C9: one limit of its kind; the message names the setting and the value.
pub(crate) fn check_limit(l: &Limit) -> Result<(), String> {
    match l.kind {
        LimitKind::Bucket if !valid_limit(*l) => Err(format!(
            "capacity {} and rate {} must be finite, capacity in (0, 2^53], rate in [1e-9, 2^53]",
            l.capacity, l.rate
        )),
        LimitKind::Bucket => Ok(()),
        LimitKind::Window { seconds, mode } => {
            if !(l.capacity >= 1.0 && l.capacity <= MAX_NUMBER && l.capacity.fract() == 0.0) {
                Err(format!(
                    "window limit {} must be a whole number in [1, 2^53]",
                    l.capacity
                ))
            } else if !(seconds.is_finite() && (0.000_001..=1e12).contains(&seconds)) {
                Err(format!(
                    "window seconds {seconds} must be finite, in [0.000001, 1e12]"
                ))
            } else if !matches!(mode, WindowMode::Sliding | WindowMode::Fixed) {
                Err(format!("window mode {mode:?} must be sliding or fixed"))
            } else {
                Ok(())
            }
        }
        LimitKind::InFlight {
            lease,
            max_duration,
        } => {
            if !(l.capacity >= 1.0 && l.capacity <= 10_000.0 && l.capacity.fract() == 0.0) {
                Err(format!(
                    "in-flight limit {} must be a whole number in [1, 10000]",
                    l.capacity
                ))
            } else if !(lease.is_finite() && (0.001..=31_536_000.0).contains(&lease)) {
                Err(format!(
                    "lease {lease} must be finite, in [0.001, 31536000] seconds"
                ))
            } else if !(max_duration.is_finite() && (0.001..=31_536_000.0).contains(&max_duration))
            {
                Err(format!(
                    "max_duration {max_duration} must be finite, in [0.001, 31536000] seconds (SPEC C9)"
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// SPEC C2: capacity finite in `(0, 2^53]`, rate finite in `[1e-9, 2^53]`.
pub fn valid_limit(l: Limit) -> bool {
    l.capacity > 0.0 && l.capacity <= MAX_NUMBER && (MIN_RATE..=MAX_NUMBER).contains(&l.rate)
}

/// SPEC C3: a cost finite in `[0, 2^53]`.
pub fn valid_cost(c: f64) -> bool {
    (0.0..=MAX_NUMBER).contains(&c)
}
