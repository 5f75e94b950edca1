//! Giving the tokens back (SPEC F): the handle an admitted request carries, automatic
//! refunds on the handler's status (F2), and the TB.REFUND calls.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use http::StatusCode;

use crate::client::Charge;

use super::guarded::Guarded;
use super::plan::Plan;
use super::state::Inner;
use super::stats::bump;
use super::store::Store;

type RefundFuture<'a> = Pin<Box<dyn Future<Output = bool> + Send + 'a>>;

trait Refunder: Send + Sync {
    fn refund<'a>(&'a self, plan: &'a Plan) -> RefundFuture<'a>;
    /// SPEC F2: whether the handler's status asks for the refund.
    fn refund_on(&self, status: StatusCode) -> bool;
}

impl<S: Store> Refunder for Inner<S> {
    fn refund<'a>(&'a self, plan: &'a Plan) -> RefundFuture<'a> {
        Box::pin(Inner::refund(self, plan))
    }

    fn refund_on(&self, status: StatusCode) -> bool {
        self.refund_on.as_ref().is_some_and(|f| f(status))
    }
}

struct RefundState {
    limiter: Arc<dyn Refunder>,
    plan: Plan,
    done: AtomicBool,
}

/// Gives an admitted request's tokens back (SPEC F1): in the request extensions of every
/// request the limiter lets through. Clones share the state.
#[derive(Clone, Default)]
pub struct RefundHandle {
    state: Option<Arc<RefundState>>,
}

impl fmt::Debug for RefundHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RefundHandle")
            .field("charged", &self.state.is_some())
            .finish()
    }
}

impl RefundHandle {
    pub(super) fn new<S: Store>(limiter: Arc<Inner<S>>, plan: Plan) -> RefundHandle {
        RefundHandle {
            state: Some(Arc::new(RefundState {
                limiter,
                plan,
                done: AtomicBool::new(false),
            })),
        }
    }

    /// Sends TB.REFUND for every policy that charged the request, now, and returns true
    /// when every refund succeeded. Returns false and sends nothing when nothing was
    /// charged (limited, shadow-only refusal, from the cache, store error, not limited) or
    /// it was already refunded; a failed refund returns false and counts `refund_errors`.
    pub async fn refund(&self) -> bool {
        let Some(state) = &self.state else {
            return false;
        };
        if state.done.swap(true, Ordering::AcqRel) {
            return false;
        }
        state.limiter.refund(&state.plan).await
    }

    /// SPEC F2: the handler answered `status`; when the limiter's `refund_on` lists it, the
    /// tokens go back as with [`RefundHandle::refund`]. Returns whether a refund was made
    /// and succeeded; sends nothing for another status or when nothing was charged.
    pub async fn answered(&self, status: StatusCode) -> bool {
        match &self.state {
            Some(state) if state.limiter.refund_on(status) => self.refund().await,
            _ => false,
        }
    }

    /// Whether the request was charged (so a refund has something to give back).
    pub fn is_charged(&self) -> bool {
        self.state.is_some()
    }

    /// Whether a refund was already made or attempted.
    pub fn is_refunded(&self) -> bool {
        self.state
            .as_ref()
            .is_some_and(|s| s.done.load(Ordering::Acquire))
    }
}

impl<S: Store> Inner<S> {
    /// SPEC F1, B2, B3, R8: one TB.REFUND per charged policy, now.
    pub(super) async fn refund(&self, plan: &Plan) -> bool {
        let given: Vec<Charge> = plan.charges.iter().filter(|c| c.n > 0.0).cloned().collect();
        if given.is_empty() {
            return false;
        }
        // B2: not while Redis is known to be failing; a refund after the cool-down may be
        // the probe (B3).
        match self.guarded("TB.REFUND", self.store.refund(&given)).await {
            Guarded::Answered(_) => {
                bump(&self.stats.0.refunds);
                for (c, &i) in plan.charges.iter().zip(&plan.policy) {
                    if c.n > 0.0 {
                        self.runtime[i].metrics.refunded.increment(1);
                    }
                    if let Some(cache) = &self.deny_cache {
                        cache.remove(&c.key);
                    }
                }
                true
            }
            Guarded::Skipped | Guarded::Failed(_) => {
                bump(&self.stats.0.refund_errors);
                false
            }
        }
    }
}
