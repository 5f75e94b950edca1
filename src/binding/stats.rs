//! Per-command counters for `INFO tb` (each command's row in the command table holds its
//! own).
//!
//! Only commands write them, and Redis runs commands one at a time (on its main thread,
//! or under the GIL), so a counter is bumped with a plain load and store: atomics for
//! soundness, without the cost of a locked read-modify-write on every call. `calls` is
//! the sum of the outcomes, so a call touches one counter.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one command.
pub struct CommandStats {
    allowed: AtomicU64,
    denied: AtomicU64,
    errors: AtomicU64,
}

impl CommandStats {
    pub const fn new() -> Self {
        CommandStats {
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn record(&self, outcome: Outcome) {
        let counter = match outcome {
            Outcome::Allowed => &self.allowed,
            Outcome::Denied => &self.denied,
            Outcome::Error => &self.errors,
        };
        counter.store(counter.load(Relaxed).wrapping_add(1), Relaxed);
    }

    pub fn snapshot(&self) -> [(&'static str, u64); 4] {
        let allowed = self.allowed.load(Relaxed);
        let denied = self.denied.load(Relaxed);
        let errors = self.errors.load(Relaxed);
        [
            ("calls", allowed.wrapping_add(denied).wrapping_add(errors)),
            ("allowed", allowed),
            ("denied", denied),
            ("errors", errors),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    Error,
}

impl Default for CommandStats {
    fn default() -> Self {
        Self::new()
    }
}

impl Outcome {
    /// Allowed or denied, as a reply's `allowed` says.
    pub fn of(allowed: bool) -> Outcome {
        if allowed {
            Outcome::Allowed
        } else {
            Outcome::Denied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_the_sum_of_the_outcomes() {
        let s = CommandStats::new();
        for outcome in [
            Outcome::Allowed,
            Outcome::Allowed,
            Outcome::Denied,
            Outcome::Error,
        ] {
            s.record(outcome);
        }
        assert_eq!(
            s.snapshot(),
            [("calls", 4), ("allowed", 2), ("denied", 1), ("errors", 1)]
        );
    }
}
