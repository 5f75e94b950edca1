//! The one guarded store call every command goes through (SPEC B, L5): not sent while the
//! breaker is open (B2; after the cool-down it may be the probe, B3), timed, the breaker
//! closed by an answer, and a failure counted, the breaker opened on a connection error
//! or a timeout, one line a second (B1, B5). A `CROSSSLOT` answer is a configuration error
//! (K6): neither counted nor the breaker's business.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::client::Backend;
use crate::error::Error;
use crate::telemetry::backend_chosen;

use super::state::{FailureMode, Inner};
use super::stats::bump;
use super::store::Store;

/// What one guarded call came to.
pub(super) enum Guarded<T> {
    /// Not sent: the breaker is open (B2).
    Skipped,
    /// The store answered.
    Answered(T),
    /// The call failed (counted and logged, unless a `CROSSSLOT`).
    Failed(Error),
}

impl<T> Guarded<T> {
    /// The answer mapped; a skipped or failed call stays what it was.
    pub(super) fn map<U>(self, f: impl FnOnce(T) -> U) -> Guarded<U> {
        match self {
            Guarded::Skipped => Guarded::Skipped,
            Guarded::Answered(r) => Guarded::Answered(f(r)),
            Guarded::Failed(e) => Guarded::Failed(e),
        }
    }
}

impl<S: Store> Inner<S> {
    /// `call` through the breaker, timed (`call_duration`), its failure counted and logged
    /// as `what` (`TB.TAKE`, `TB.REFUND`, ...). The future is built by the caller and only
    /// polled when the breaker admits the call.
    pub(super) async fn guarded<T>(
        &self,
        what: &str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Guarded<T> {
        if !self.breaker.admit() {
            return Guarded::Skipped;
        }
        let started = Instant::now();
        let result = call.await;
        self.telemetry
            .call_duration
            .record(started.elapsed().as_secs_f64());
        if self.stats.0.backend.load(Ordering::Relaxed) == 0 {
            // SPEC E6: a degraded start's first call that reached Redis chose it.
            self.note_backend();
        }
        match result {
            Ok(r) => {
                self.breaker.success();
                Guarded::Answered(r)
            }
            // SPEC K6, L5: a configuration error, never the failure mode; the breaker is
            // untouched.
            Err(e) if e.is_cross_slot() => Guarded::Failed(e),
            Err(e) => {
                self.failed(&e, what);
                Guarded::Failed(e)
            }
        }
    }

    /// SPEC E6: the store's backend, once chosen: its one line (tracing INFO, target
    /// `redis_tb`), `stats.backend` and the gauge.
    pub(super) fn note_backend(&self) {
        let Some(chosen) = self.store.backend() else {
            return;
        };
        let code = match chosen.backend {
            Backend::Module => 1,
            Backend::Scripts => 2,
        };
        if self.stats.0.backend.swap(code, Ordering::Relaxed) != code {
            backend_chosen(&self.name, chosen.backend.as_str());
            tracing::info!(target: "redis_tb", "{}", chosen.line);
        }
    }

    /// Counts a failed call, opens the breaker on a connection error or a timeout (SPEC
    /// B1; also when the module is gone), and logs at most one line per second (B5).
    fn failed(&self, e: &Error, what: &str) {
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
