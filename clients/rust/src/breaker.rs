//! The breaker (SPEC B1-B3) and the once-a-second log limiter, both on the limiter's clock
//! (SPEC T1).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::clock::Clock;

fn ms(clock: &dyn Clock) -> u64 {
    u64::try_from(clock.monotonic().as_millis()).unwrap_or(u64::MAX)
}

/// After a connection error or a timeout Redis is skipped for the cool-down (B1, B2); then
/// exactly one call, a check or a refund, is the probe (B3): the others keep the failure
/// mode until it answers. Lock-free: one compare-and-swap elects the probe across threads
/// and tasks.
pub(crate) struct Breaker {
    clock: Arc<dyn Clock>,
    pub(crate) cooldown_ms: u64,
    /// 0 = closed; else the time (clock ms, at least 1) until which Redis is skipped.
    open_until: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(cooldown: Duration, clock: Arc<dyn Clock>) -> Breaker {
        Breaker {
            clock,
            cooldown_ms: u64::try_from(cooldown.as_millis()).unwrap_or(u64::MAX),
            open_until: AtomicU64::new(0),
        }
    }

    /// Whether this call may go to Redis: the breaker is closed, or the cool-down is over
    /// and this call won the probe (B3).
    pub(crate) fn admit(&self) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        let now = ms(&*self.clock);
        if now < until {
            return false;
        }
        // The call that moves the window forward is the probe.
        let next = now.saturating_add(self.cooldown_ms).max(1);
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub(crate) fn success(&self) {
        if self.open_until.load(Ordering::Acquire) != 0 {
            self.open_until.store(0, Ordering::Release);
        }
    }

    pub(crate) fn failure(&self) {
        if self.cooldown_ms > 0 {
            let until = ms(&*self.clock).saturating_add(self.cooldown_ms).max(1);
            self.open_until.store(until, Ordering::Release);
        }
    }
}

/// At most one log line per second; counts the lines it held back.
pub(crate) struct LogLimiter {
    last_ms: AtomicU64,
    suppressed: AtomicU64,
    warned: AtomicBool,
}

impl LogLimiter {
    pub(crate) fn new() -> LogLimiter {
        LogLimiter {
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
            warned: AtomicBool::new(false),
        }
    }

    /// `Some(lines held back since the last one)` when a line may be written now.
    pub(crate) fn admit(&self, clock: &dyn Clock) -> Option<u64> {
        // +1000 so that the very first line is written even within the first second.
        let now = ms(clock).saturating_add(1000);
        let last = self.last_ms.load(Ordering::Acquire);
        if now.saturating_sub(last) >= 1000
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::AcqRel))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    pub(crate) fn warn_once(&self, message: &str) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(target: "redis_tb_client", "{message}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn breaker_skips_during_cooldown_then_admits_one_probe() {
        let clock = ManualClock::new(0);
        let b = Breaker::new(Duration::from_secs(1), Arc::new(clock.clone()));
        assert!(b.admit());
        b.failure();
        assert!(!b.admit());
        clock.set_ms(999);
        assert!(!b.admit());
        clock.set_ms(1000);
        assert!(b.admit(), "the first call after the cool-down probes");
        assert!(!b.admit(), "the others wait for the probe");
        b.success();
        assert!(b.admit());
        let b = Breaker::new(Duration::ZERO, Arc::new(clock));
        b.failure();
        assert!(b.admit(), "cool-down 0 never skips");
    }

    #[test]
    fn log_limiter_writes_the_first_line_then_holds_back() {
        let clock = ManualClock::new(0);
        let l = LogLimiter::new();
        assert_eq!(l.admit(&clock), Some(0));
        assert_eq!(l.admit(&clock), None);
        assert_eq!(l.admit(&clock), None);
        clock.set_ms(1000);
        assert_eq!(l.admit(&clock), Some(2));
    }
}
