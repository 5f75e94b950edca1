//! Leases of in-flight policies (SPEC N4, N5, N7): the handle an adapter (or a handler)
//! keeps for one request, and the request's scope, whose end also stops the renewals of
//! the holds taken on its decision (G5).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// One request's lease of an in-flight policy (SPEC N1, N6): released when the response
/// ends (N4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The in-flight key.
    pub key: String,
    /// The lease id TB.ACQUIRE gave.
    pub id: String,
    /// The in-flight policy's name.
    pub policy: Arc<str>,
}

/// A boxed, sendable future that owns what it needs.
pub(crate) type OwnedFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a renewal call did (SPEC N5, G5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The lease (or hold) was extended.
    Yes,
    /// It was lost (answered 0): renewals stop, nothing more is sent for it.
    Lost,
    /// The call failed (or the breaker is open): the next tick tries again.
    Failed,
}

/// What one tick of a lease's renewal timer did (SPEC N5, N7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewal {
    /// TB.RENEW extended the lease.
    Renewed,
    /// Nothing was extended: no lease, finished, lost (now or before), or the call failed
    /// (the next tick tries again).
    NotRenewed,
    /// The tick came at or after the request's `max_duration` (N7): the lease was released
    /// instead of renewed, and the response is to be ended.
    TimedOut,
}

/// The limiter side of a lease: TB.RELEASE and TB.RENEW through its store, its clock and
/// its counters.
pub(crate) trait LeaseStore: Send + Sync {
    /// The lease ended (SPEC N4): the gauge goes down now, whatever the answer.
    fn ended(&self, policy: usize);
    /// TB.RELEASE, with the timeout, never retried, not while the breaker is open.
    fn release(self: Arc<Self>, policy: usize, key: String, id: String) -> OwnedFuture<()>;
    /// TB.RENEW (SPEC N5).
    fn renew(
        self: Arc<Self>,
        policy: usize,
        key: String,
        id: String,
        lease_ms: u64,
    ) -> OwnedFuture<Renewed>;
    /// The limiter's monotonic clock (SPEC T1), which the deadline (N7) is on.
    fn now(&self) -> Duration;
    /// SPEC N7: a request ended at its `max_duration`: counted, logged at most once a
    /// second per policy.
    fn timed_out(&self, policy: usize);
}

/// A one-shot event a task can wait for from a `poll` function (the response body, the
/// request future): fired once, it stays fired.
#[derive(Default)]
pub(crate) struct Signal {
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Signal {
    pub(crate) fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    pub(crate) fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// Ready once fired; else the task is woken when it fires (one waiter at a time: the
    /// request future, then its body).
    pub(crate) fn poll_fired(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_fired() {
            return Poll::Ready(());
        }
        {
            let mut slot = self.waker.lock().unwrap_or_else(|e| e.into_inner());
            match slot.as_ref() {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => *slot = Some(cx.waker().clone()),
            }
        }
        // Fired between the first look and the registration: do not sleep through it.
        if self.is_fired() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

pub(crate) struct LeaseState {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) lease: Lease,
    pub(crate) policy: usize,
    pub(crate) lease_ms: u64,
    /// SPEC N7: the grant's time plus `max_duration`, on the limiter's monotonic clock.
    pub(crate) deadline: Duration,
    pub(crate) done: AtomicBool,
    pub(crate) lost: AtomicBool,
    /// Fired when a tick ended the request at its deadline (N7).
    pub(crate) timed_out: Signal,
}

impl LeaseState {
    pub(crate) fn new(
        store: Arc<dyn LeaseStore>,
        lease: Lease,
        policy: usize,
        lease_ms: u64,
        max_duration_ms: u64,
    ) -> LeaseState {
        let deadline = store
            .now()
            .saturating_add(Duration::from_millis(max_duration_ms));
        LeaseState {
            store,
            lease,
            policy,
            lease_ms,
            deadline,
            done: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            timed_out: Signal::default(),
        }
    }

    /// Ends the lease once (SPEC N4): the release to send, if one is to be sent.
    fn end(&self) -> Option<OwnedFuture<()>> {
        if self.done.swap(true, Ordering::AcqRel) {
            return None;
        }
        self.store.ended(self.policy);
        if self.lost.load(Ordering::Acquire) {
            return None;
        }
        Some(
            self.store
                .clone()
                .release(self.policy, self.lease.key.clone(), self.lease.id.clone()),
        )
    }
}

impl Drop for LeaseState {
    /// The last handle went away before `finish` (a cancelled request, a dropped body):
    /// the release is spawned on the tokio runtime, never awaited here (SPEC N4).
    fn drop(&mut self) {
        if let Some(release) = self.end()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(release);
        }
    }
}

/// The request itself, beyond its lease: its end stops the renewals of every hold taken
/// on its decision (SPEC G5), and an adapter that drives timers marks it so that a hold
/// taken later is renewed by a task of its own.
#[derive(Default)]
pub(crate) struct RequestScope {
    ended: AtomicBool,
    driven: AtomicBool,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl RequestScope {
    /// The response ended (N4's event, N7's included): renewals stop.
    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::Release);
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for t in tasks {
            t.abort();
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Holds taken from now on are renewed by tasks of their own (the tower layer).
    pub(crate) fn drive(&self) {
        self.driven.store(true, Ordering::Release);
    }

    pub(crate) fn is_driven(&self) -> bool {
        self.driven.load(Ordering::Acquire)
    }

    /// Keeps a renewal task to stop at the end; one started after the end stops now.
    pub(crate) fn adopt(&self, task: tokio::task::AbortHandle) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_ended() {
            task.abort();
        } else {
            tasks.retain(|t| !t.is_finished());
            tasks.push(task);
        }
    }
}

/// One request's lease (SPEC N4, N5, N7): finished exactly once when its response ends.
/// Clones share the lease; when the last clone is dropped unfinished, the release is
/// spawned on the tokio runtime. Without a lease the lease methods do nothing; `finish`
/// still ends the request's hold renewals (G5).
#[derive(Clone, Default)]
pub struct LeaseHandle {
    pub(crate) state: Option<Arc<LeaseState>>,
    pub(crate) scope: Option<Arc<RequestScope>>,
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("lease", &self.state.as_ref().map(|s| &s.lease))
            .finish()
    }
}

impl LeaseHandle {
    /// The lease, `None` when none was taken (SPEC N6).
    pub fn lease(&self) -> Option<&Lease> {
        self.state.as_ref().map(|s| &s.lease)
    }

    /// Whether the lease is held: taken, not finished, not lost.
    pub fn is_active(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| !s.done.load(Ordering::Acquire) && !s.lost.load(Ordering::Acquire))
    }

    /// How often to renew (SPEC N5: every `lease / 2`), `None` without a lease.
    pub fn renew_every(&self) -> Option<Duration> {
        self.state
            .as_ref()
            .map(|s| Duration::from_millis((s.lease_ms / 2).max(1)))
    }

    /// When the renewal timer fires next, from now (SPEC N5, N7): after `lease / 2`, or at
    /// the request's deadline when that comes sooner; `None` without an active lease.
    pub fn next_tick(&self) -> Option<Duration> {
        let s = self.state.as_ref().filter(|_| self.is_active())?;
        let every = Duration::from_millis((s.lease_ms / 2).max(1));
        Some(every.min(s.deadline.saturating_sub(s.store.now())))
    }

    /// Whether the request was ended at its `max_duration` (SPEC N7).
    pub fn timed_out(&self) -> bool {
        self.state.as_ref().is_some_and(|s| s.timed_out.is_fired())
    }

    /// Ready once the request was ended at its `max_duration` (N7); pending for ever
    /// without a lease.
    pub(crate) fn poll_timed_out(&self, cx: &mut Context<'_>) -> Poll<()> {
        match &self.state {
            Some(s) => s.timed_out.poll_fired(cx),
            None => Poll::Pending,
        }
    }

    /// The response ended (SPEC N4: sent, disconnected, raised or cancelled): TB.RELEASE
    /// once, and the renewals of the request's holds stop (G5). A second call, or a lost
    /// lease, sends nothing.
    pub async fn finish(&self) {
        if let Some(scope) = &self.scope {
            scope.end();
        }
        if let Some(release) = self.state.as_ref().and_then(|s| s.end()) {
            release.await;
        }
    }

    /// [`LeaseHandle::finish`] without waiting: the release is spawned on the tokio
    /// runtime (for `Drop` implementations, which must never block).
    pub fn finish_in_background(&self) {
        if let Some(scope) = &self.scope {
            scope.end();
        }
        if let Some(release) = self.state.as_ref().and_then(|s| s.end())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(release);
        }
    }

    /// Marks the request as driven by an adapter: a hold taken on its decision from now on
    /// is renewed every `ttl / 2` by a task of its own until it is settled or the
    /// response ends (SPEC G5).
    pub(crate) fn drive_holds(&self) {
        if let Some(scope) = &self.scope {
            scope.drive();
        }
    }

    /// Whether the request has something for an adapter to hold until its response ends:
    /// a lease, or holds to stop renewing (G5).
    pub(crate) fn has_scope(&self) -> bool {
        self.state.is_some() || self.scope.is_some()
    }

    /// One tick of the renewal timer (SPEC N5, N7). Before the deadline: TB.RENEW, and an
    /// answer 0 marks the lease lost (counted in `leases_expired`, no release will be
    /// sent). At or after it: no TB.RENEW; the lease is released (N4's one release), the
    /// request counted in `leases_timed_out`, and [`Renewal::TimedOut`] tells the adapter
    /// to end the response. A lost or finished lease sends nothing.
    pub async fn tick(&self) -> Renewal {
        let Some(s) = &self.state else {
            return Renewal::NotRenewed;
        };
        if s.done.load(Ordering::Acquire) || s.lost.load(Ordering::Acquire) {
            return Renewal::NotRenewed;
        }
        if s.store.now() >= s.deadline {
            let Some(release) = s.end() else {
                return Renewal::NotRenewed;
            };
            s.store.timed_out(s.policy);
            if let Some(scope) = &self.scope {
                scope.end();
            }
            // The release first, then the response's end: ending it drops the adapter's
            // guard, which aborts the timer's task. On a runtime the release is a task of
            // its own, so that no abort (the client leaving at this moment) loses it.
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    let _ = rt.spawn(release).await;
                }
                Err(_) => release.await,
            }
            s.timed_out.fire();
            return Renewal::TimedOut;
        }
        let r = s
            .store
            .clone()
            .renew(
                s.policy,
                s.lease.key.clone(),
                s.lease.id.clone(),
                s.lease_ms,
            )
            .await;
        match r {
            Renewed::Yes => Renewal::Renewed,
            Renewed::Lost => {
                s.lost.store(true, Ordering::Release);
                Renewal::NotRenewed
            }
            Renewed::Failed => Renewal::NotRenewed,
        }
    }

    /// [`LeaseHandle::tick`], true when the lease was extended.
    pub async fn renew(&self) -> bool {
        self.tick().await == Renewal::Renewed
    }
}

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
