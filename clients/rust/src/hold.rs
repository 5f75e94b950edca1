//! Holds settled later (SPEC G1-G6): TB.HOLD of an estimate, its renewal while the request
//! runs (G5), and TB.SETTLE of the actual cost with a bounded debt (G3).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::client::{HoldReply, SettleReply};
use crate::error::Error;
use crate::lease::{OwnedFuture, Renewed, RequestScope};
use crate::policy::ceil_ms;
use crate::policy::limit::valid_cost;

/// A `settle_later` policy of this check (SPEC G1): its key and bucket limit, resolved at
/// check time.
#[derive(Clone, Debug, PartialEq)]
pub struct SettleTarget {
    /// The policy's name.
    pub policy: Arc<str>,
    /// Its key for this request (SPEC K1-K4).
    pub key: String,
    /// Bucket size.
    pub capacity: f64,
    /// Tokens per second.
    pub rate: f64,
}

/// The limiter side of holds: TB.HOLD, TB.RENEW and TB.SETTLE through its store, under
/// its breaker, and the counters.
pub(crate) trait HoldStore: Send + Sync {
    fn hold(
        self: Arc<Self>,
        target: SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> OwnedFuture<Result<HoldReply, Error>>;
    /// `TB.RENEW key id ttl_ms` (G5); a lost hold is counted in `holds_lost` and logged.
    fn renew(
        self: Arc<Self>,
        target: SettleTarget,
        id: String,
        ttl_ms: u64,
    ) -> OwnedFuture<Renewed>;
    /// `TB.SETTLE key capacity rate id actual max_wait`, `max_wait = capacity / rate` (G3).
    fn settle(
        self: Arc<Self>,
        target: SettleTarget,
        id: String,
        actual: f64,
    ) -> OwnedFuture<Result<SettleReply, Error>>;
}

/// What the decision keeps for [`Decision::hold`]: the limiter, and the request's scope.
#[derive(Clone)]
pub(crate) struct Holds {
    pub(crate) store: Arc<dyn HoldStore>,
    pub(crate) scope: Arc<RequestScope>,
}

impl fmt::Debug for Holds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Holds")
    }
}

impl PartialEq for Holds {
    fn eq(&self, _: &Holds) -> bool {
        true
    }
}

/// SPEC G1: checks the estimate and ttl, then TB.HOLD. A hold taken on a request driven by
/// an adapter is renewed by a task of its own (G5).
pub(crate) async fn take_hold(
    holds: &Holds,
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
    let reply = holds
        .store
        .clone()
        .hold(target.clone(), estimate, ttl_ms)
        .await?;
    let hold = Hold {
        allowed: reply.reply.allowed && reply.id.is_some(),
        remaining: reply.reply.remaining,
        retry_after: reply.reply.retry_after,
        reset_after: reply.reply.reset_after,
        id: reply.id,
        key: target.key.clone(),
        policy: target.policy.clone(),
        estimate,
        ttl_ms,
        target,
        store: holds.store.clone(),
        scope: holds.scope.clone(),
        state: Arc::new(HoldState::default()),
    };
    if hold.allowed && holds.scope.is_driven() {
        spawn_hold_renewal(hold.clone());
    }
    Ok(hold)
}

#[derive(Default)]
struct HoldState {
    settled: AtomicBool,
    lost: AtomicBool,
}

/// An estimate taken now, settled later (SPEC G2), renewed while its request runs (G5).
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
    ttl_ms: u64,
    pub(crate) target: SettleTarget,
    store: Arc<dyn HoldStore>,
    scope: Arc<RequestScope>,
    state: Arc<HoldState>,
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
    /// False for a hold refused, settled already, lost or expired: nothing changed.
    pub settled: bool,
    /// Tokens left (0 when nothing was sent).
    pub remaining: f64,
    /// Actual minus estimate, as the module bounded it (0 when nothing changed).
    pub charged: f64,
    /// Seconds until the bucket is full (0 when nothing was sent).
    pub reset_after: f64,
}

impl Hold {
    /// How often the hold is renewed (SPEC G5: every `ttl / 2`), `None` when refused.
    pub fn renew_every(&self) -> Option<Duration> {
        self.allowed
            .then(|| Duration::from_millis((self.ttl_ms / 2).max(1)))
    }

    /// Whether renewals go on: taken, not settled, not lost, its response not ended.
    pub fn is_renewing(&self) -> bool {
        self.allowed
            && !self.state.settled.load(Ordering::Acquire)
            && !self.state.lost.load(Ordering::Acquire)
            && !self.scope.is_ended()
    }

    pub(crate) fn scope(&self) -> &Arc<RequestScope> {
        &self.scope
    }

    /// Whether a renewal answered 0 (SPEC G5): the hold expired while renewals failed, or a
    /// failover lost it; its settle sends nothing.
    pub fn is_lost(&self) -> bool {
        self.state.lost.load(Ordering::Acquire)
    }

    /// One renewal (SPEC G5): `TB.RENEW key id ttl_ms`; true when the hold was extended.
    /// False also when nothing was sent (refused, settled, lost, or its response ended).
    /// An answer 0 marks the hold lost (counted in `holds_lost`); a failed call is a store
    /// error under the breaker (B1-B3), and the next tick tries again.
    pub async fn renew(&self) -> bool {
        let Some(id) = self.id.as_ref().filter(|_| self.is_renewing()) else {
            return false;
        };
        let r = self
            .store
            .clone()
            .renew(self.target.clone(), id.clone(), self.ttl_ms)
            .await;
        match r {
            Renewed::Yes => true,
            Renewed::Lost => {
                self.state.lost.store(true, Ordering::Release);
                false
            }
            Renewed::Failed => false,
        }
    }

    /// TB.SETTLE with the actual cost and `max_wait = capacity / rate` (SPEC G3: the debt
    /// an excess leaves is at most one bucket). A second settle of the same hold, or of a
    /// refused or lost one, sends nothing and returns `settled` false; renewals stop. An
    /// invalid `actual` (C3) is an [`Error::InvalidArgument`]; a failed call is a store
    /// error (the estimate then stays charged until the hold expires, G4).
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
        if self.state.settled.swap(true, Ordering::AcqRel) || self.is_lost() {
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
