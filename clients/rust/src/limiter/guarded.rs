//! One guarded store call's failure (SPEC B): counted, the breaker opened on a
//! connection error or a timeout, one line a second (B1, B5).

use crate::error::Error;

use super::state::{FailureMode, Inner};
use super::stats::bump;
use super::store::Store;

impl<S: Store> Inner<S> {
    /// Counts a failed call, opens the breaker on a connection error or a timeout (SPEC
    /// B1; also when the module is gone), and logs at most one line per second (B5).
    pub(super) fn failed(&self, e: &Error, what: &str) {
        let errors = bump(&self.stats.0.store_errors);
        self.telemetry.store_errors.increment(1);
        let unknown_command = matches!(e, Error::Server { source, .. }
            if source.to_string().to_ascii_lowercase().contains("unknown command"));
        let server_wide =
            unknown_command || matches!(e, Error::Connection { .. } | Error::Timeout { .. });
        if server_wide {
            self.breaker.failure();
        }
        let Some(unlogged) = self.log.admit(&*self.clock) else {
            return;
        };
        let mut reason = match e {
            Error::Timeout { timeout, .. } => {
                format!("no answer within {} ms", timeout.as_millis())
            }
            Error::Connection { source, .. } | Error::Server { source, .. } => source.to_string(),
            Error::UnexpectedReply { detail, .. } => format!("unexpected reply: {detail}"),
            other => other.to_string(),
        };
        if unknown_command {
            reason.push_str(" (is the redis-tb module loaded?)");
        }
        let mode = match self.failure_mode {
            FailureMode::FailOpen => "open: requests pass unlimited",
            FailureMode::FailClosed => "closed: requests get 503",
        };
        let skipped = if server_wide && self.breaker.cooldown_ms > 0 {
            format!(
                ", Redis skipped for {} s",
                self.breaker.cooldown_ms as f64 / 1000.0
            )
        } else {
            String::new()
        };
        let not_logged = if unlogged > 0 {
            format!(" ({unlogged} not logged)")
        } else {
            String::new()
        };
        tracing::warn!(
            target: "redis_tb",
            "redis-tb: {what} on {} failed ({reason}); failing {mode}{skipped}; store errors so far: {errors}{not_logged}",
            self.store.addr()
        );
    }
}
