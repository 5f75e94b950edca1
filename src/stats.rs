//! Per-command counters for `INFO tb`. Relaxed atomics: Redis runs commands on one thread,
//! so these cost an add each and never contend.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters of one command.
pub struct CommandStats {
    pub calls: AtomicU64,
    pub allowed: AtomicU64,
    pub denied: AtomicU64,
    pub errors: AtomicU64,
}

impl CommandStats {
    const fn new() -> Self {
        CommandStats {
            calls: AtomicU64::new(0),
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn record(&self, outcome: Outcome) {
        self.calls.fetch_add(1, Relaxed);
        let counter = match outcome {
            Outcome::Allowed => &self.allowed,
            Outcome::Denied => &self.denied,
            Outcome::Error => &self.errors,
        };
        counter.fetch_add(1, Relaxed);
    }

    pub fn snapshot(&self) -> [(&'static str, u64); 4] {
        [
            ("calls", self.calls.load(Relaxed)),
            ("allowed", self.allowed.load(Relaxed)),
            ("denied", self.denied.load(Relaxed)),
            ("errors", self.errors.load(Relaxed)),
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allowed,
    Denied,
    Error,
}

pub static TAKE: CommandStats = CommandStats::new();
