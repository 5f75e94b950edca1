//! Leases of in-flight policies (SPEC N4, N5) and holds settled later (SPEC G1-G4): the
//! handles an adapter (or a handler) keeps for one request.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::client::{HoldReply, SettleReply};
use crate::decision::{Decision, Lease, PolicyResult, SettleTarget};
use crate::error::Error;
use crate::headers::rate_limit_headers_at;
use crate::limiter::valid_cost;
use crate::policy::{LimitKind, ceil_ms};
use crate::problem;

/// A boxed, sendable future that owns what it needs.
pub(crate) type OwnedFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a renewal did (SPEC N5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The lease was extended.
    Yes,
    /// The lease was lost (answered 0): renewals stop, no release is sent.
    Lost,
    /// The call failed (or the breaker is open): the next tick tries again.
    Failed,
}

/// The limiter side of a lease: TB.RELEASE and TB.RENEW through its store.
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
}

pub(crate) struct LeaseState {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) lease: Lease,
    pub(crate) policy: usize,
    pub(crate) lease_ms: u64,
    pub(crate) done: AtomicBool,
    pub(crate) lost: AtomicBool,
}

impl LeaseState {
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

/// One request's lease (SPEC N4, N5): finished exactly once when its response ends. Clones
/// share the lease; when the last clone is dropped unfinished, the release is spawned on
/// the tokio runtime. Without a lease every method does nothing.
#[derive(Clone, Default)]
pub struct LeaseHandle {
    pub(crate) state: Option<Arc<LeaseState>>,
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

    /// The response ended (SPEC N4: sent, disconnected, raised or cancelled): TB.RELEASE
    /// once. A second call, or a lost lease, sends nothing.
    pub async fn finish(&self) {
        if let Some(release) = self.state.as_ref().and_then(|s| s.end()) {
            release.await;
        }
    }

    /// [`LeaseHandle::finish`] without waiting: the release is spawned on the tokio
    /// runtime (for `Drop` implementations, which must never block).
    pub fn finish_in_background(&self) {
        if let Some(release) = self.state.as_ref().and_then(|s| s.end())
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            rt.spawn(release);
        }
    }

    /// One renewal (SPEC N5): TB.RENEW; true when the lease was extended. False also when
    /// nothing was sent (no lease, finished, or lost); an answer 0 marks the lease lost
    /// (counted in `leases_expired`, no release will be sent).
    pub async fn renew(&self) -> bool {
        let Some(s) = &self.state else {
            return false;
        };
        if s.done.load(Ordering::Acquire) || s.lost.load(Ordering::Acquire) {
            return false;
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
            Renewed::Yes => true,
            Renewed::Lost => {
                s.lost.store(true, Ordering::Release);
                false
            }
            Renewed::Failed => false,
        }
    }
}

/// The limiter side of holds: TB.HOLD and TB.SETTLE through its store, and the counters.
pub(crate) trait HoldStore: Send + Sync {
    fn hold(
        self: Arc<Self>,
        target: SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> OwnedFuture<Result<HoldReply, Error>>;
    fn settle(
        self: Arc<Self>,
        target: SettleTarget,
        id: String,
        actual: f64,
    ) -> OwnedFuture<Result<SettleReply, Error>>;
}

/// SPEC G1: checks the estimate and ttl, then TB.HOLD.
pub(crate) async fn take_hold(
    store: Arc<dyn HoldStore>,
    target: SettleTarget,
    estimate: f64,
    ttl: f64,
) -> Result<Hold, Error> {
    if !(valid_cost(estimate) && estimate > 0.0) {
        return Err(Error::InvalidArgument {
            name: "estimate",
            value: estimate,
            rule: "finite, > 0 and <= 2^53",
        });
    }
    if !(ttl.is_finite() && ttl > 0.0 && ttl <= 31_536_000.0) {
        return Err(Error::InvalidArgument {
            name: "ttl",
            value: ttl,
            rule: "finite, > 0 and <= 31536000 seconds",
        });
    }
    let ttl_ms = ceil_ms(ttl).max(1);
    let reply = store.clone().hold(target.clone(), estimate, ttl_ms).await?;
    Ok(Hold {
        allowed: reply.reply.allowed && reply.id.is_some(),
        remaining: reply.reply.remaining,
        retry_after: reply.reply.retry_after,
        reset_after: reply.reply.reset_after,
        id: reply.id,
        key: target.key.clone(),
        policy: target.policy.clone(),
        estimate,
        target,
        store,
        settled: Arc::new(AtomicBool::new(false)),
    })
}

/// An estimate taken now, settled later (SPEC G2).
#[derive(Clone)]
pub struct Hold {
    /// Whether the estimate was taken.
    pub allowed: bool,
    /// Tokens left.
    pub remaining: f64,
    /// Seconds until the estimate would be admitted: 0 when allowed, -1 when never.
    pub retry_after: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
    /// The hold id, `None` when refused (nothing was charged).
    pub id: Option<String>,
    /// The bucket's key.
    pub key: String,
    /// The `settle_later` policy.
    pub policy: Arc<str>,
    /// The estimate held.
    pub estimate: f64,
    target: SettleTarget,
    store: Arc<dyn HoldStore>,
    settled: Arc<AtomicBool>,
}

impl fmt::Debug for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold")
            .field("allowed", &self.allowed)
            .field("remaining", &self.remaining)
            .field("retry_after", &self.retry_after)
            .field("reset_after", &self.reset_after)
            .field("id", &self.id)
            .field("key", &self.key)
            .field("policy", &self.policy)
            .finish()
    }
}

/// What a settlement did (SPEC G3).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Settlement {
    /// False for a hold refused, settled already or expired: nothing changed.
    pub settled: bool,
    /// Tokens left (0 when nothing was sent).
    pub remaining: f64,
    /// Actual minus estimate, as the module bounded it (0 when nothing changed).
    pub charged: f64,
    /// Seconds until the bucket is full (0 when nothing was sent).
    pub reset_after: f64,
}

impl Hold {
    /// TB.SETTLE with the actual cost (SPEC G3). A second settle of the same hold, or of
    /// a refused one, sends nothing and returns `settled` false. An invalid `actual` (C3)
    /// is an [`Error::InvalidArgument`]; a failed call is a store error (the estimate then
    /// stays charged until the hold expires, G4).
    pub async fn settle(&self, actual: f64) -> Result<Settlement, Error> {
        if !valid_cost(actual) {
            return Err(Error::InvalidArgument {
                name: "actual",
                value: actual,
                rule: "finite, >= 0 and <= 2^53",
            });
        }
        let nothing = Settlement {
            settled: false,
            remaining: 0.0,
            charged: 0.0,
            reset_after: 0.0,
        };
        let Some(id) = &self.id else {
            return Ok(nothing);
        };
        if self.settled.swap(true, Ordering::AcqRel) {
            return Ok(nothing);
        }
        let r = self
            .store
            .clone()
            .settle(self.target.clone(), id.clone(), actual)
            .await?;
        Ok(Settlement {
            settled: r.settled,
            remaining: r.remaining,
            charged: r.charged,
            reset_after: r.reset_after,
        })
    }

    /// The refusal as a decision of this one policy (SPEC G2).
    fn refused_decision(&self) -> Option<Decision> {
        if self.allowed {
            return None;
        }
        Some(Decision::from_results(vec![PolicyResult {
            name: self.policy.clone(),
            key: self.key.clone(),
            capacity: self.target.capacity,
            rate: self.target.rate,
            cost: self.estimate,
            allowed: false,
            remaining: self.remaining,
            retry_after: self.retry_after,
            reset_after: self.reset_after,
            shadow: false,
            kind: LimitKind::Bucket,
        }]))
    }

    /// A refused hold's answer (SPEC G2): 429, H1-H3's headers for the policy, P1's body;
    /// `None` when the hold was taken.
    pub fn refusal(&self) -> Option<(StatusCode, HeaderMap, String)> {
        let d = self.refused_decision()?;
        let mut map = HeaderMap::new();
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(problem::CONTENT_TYPE),
        );
        if let Some(h) = rate_limit_headers_at(&d, None, 0.0) {
            h.apply(&mut map);
        }
        Some((
            StatusCode::TOO_MANY_REQUESTS,
            map,
            problem::too_many_requests(&d),
        ))
    }

    /// [`Hold::refusal`] as an `http` response, ready to return from a handler (axum:
    /// `Response<String>` is `IntoResponse`); `None` when the hold was taken.
    pub fn too_many_requests(&self) -> Option<Response<String>> {
        let (status, headers, body) = self.refusal()?;
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        Some(resp)
    }
}

/// A refused hold as an error a handler can return with `?` (SPEC G2): its response is the
/// 429 of [`Hold::refusal`].
#[derive(Debug)]
pub struct HoldRefused(pub Box<Hold>);

impl fmt::Display for HoldRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "hold refused for policy '{}'", self.0.policy)
    }
}

impl std::error::Error for HoldRefused {}

impl Hold {
    /// `Ok(self)` when taken, else [`HoldRefused`] (an axum `IntoResponse` with the
    /// `axum` feature).
    pub fn or_refused(self) -> Result<Hold, HoldRefused> {
        if self.allowed {
            Ok(self)
        } else {
            Err(HoldRefused(Box::new(self)))
        }
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for HoldRefused {
    fn into_response(self) -> axum::response::Response {
        match self.0.too_many_requests() {
            Some(r) => r.into_response(),
            None => StatusCode::TOO_MANY_REQUESTS.into_response(),
        }
    }
}
