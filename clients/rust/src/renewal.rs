//! The renewal timers an adapter runs while a request is in progress: a lease's (SPEC N5,
//! firing at the request's deadline when that comes sooner, N7) and each hold's (G5). Each
//! is a task of its own on the tokio runtime, so that no response's writes (a client that
//! stops reading) can delay another request's renewals.

use crate::hold::Hold;
use crate::lease::{LeaseHandle, Renewal};

/// Renews `lease` every `lease / 2` until it ends, is lost or times out (the tick at the
/// deadline releases it and fires its time-out signal, which ends the response's body).
/// `None` without a lease or outside a tokio runtime.
pub(crate) fn spawn_lease_renewal(lease: LeaseHandle) -> Option<tokio::task::JoinHandle<()>> {
    lease.next_tick()?;
    let rt = tokio::runtime::Handle::try_current().ok()?;
    Some(rt.spawn(async move {
        while let Some(wait) = lease.next_tick() {
            tokio::time::sleep(wait).await;
            // SPEC N5: a failed renewal tries again at the next tick; a lost lease, a
            // finished one or a time-out stops the timer (next_tick is then None).
            if lease.tick().await == Renewal::TimedOut {
                break;
            }
        }
    }))
}

/// Renews `hold` every `ttl / 2` until it is settled, lost, or its response ends (the
/// request's scope aborts the task then).
pub(crate) fn spawn_hold_renewal(hold: Hold) {
    let Some(every) = hold.renew_every() else {
        return;
    };
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let scope = hold.scope().clone();
    let task = rt.spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if !hold.is_renewing() {
                break;
            }
            hold.renew().await;
        }
    });
    scope.adopt(task.abort_handle());
}
