//! The limiter's time source (SPEC T1): a monotonic clock for the deny cache (R) and the
//! breaker (B), and a wall clock for `X-RateLimit-Reset` (H4). Tests replace it with a
//! [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A time source. `monotonic` never goes back; its origin is arbitrary.
pub trait Clock: Send + Sync + 'static {
    /// Monotonic time since the clock's origin.
    fn monotonic(&self) -> Duration;
    /// Seconds since the Unix epoch (the wall clock).
    fn unix(&self) -> f64;
}

/// The machine's clocks: [`Instant`] and [`std::time::SystemTime`]. The default.
#[derive(Clone, Copy, Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    pub fn new() -> SystemClock {
        SystemClock {
            origin: Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }

    fn unix(&self) -> f64 {
        unix_now()
    }
}

/// A clock that moves only when told (tests): monotonic milliseconds and a wall clock at
/// a fixed offset from them. Clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    ms: Arc<AtomicU64>,
    unix_origin_ms: u64,
}

impl ManualClock {
    /// Monotonic time 0; the wall clock reads `unix_origin_ms` (ms since the epoch) then.
    pub fn new(unix_origin_ms: u64) -> ManualClock {
        ManualClock {
            ms: Arc::default(),
            unix_origin_ms,
        }
    }

    /// Sets the monotonic time to `ms` milliseconds.
    pub fn set_ms(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn monotonic(&self) -> Duration {
        Duration::from_millis(self.ms.load(Ordering::SeqCst))
    }

    fn unix(&self) -> f64 {
        self.unix_origin_ms
            .saturating_add(self.ms.load(Ordering::SeqCst)) as f64
            / 1000.0
    }
}

/// Seconds since the Unix epoch on this machine's wall clock (0 if it is before 1970).
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
