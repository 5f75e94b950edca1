//! The limiter as the store of the handles it gives out: leases (SPEC N4, N5, N7) and
//! holds (G1, G3, G5), each call under the breaker (B1-B3), timed, its failure counted and
//! logged like any store error (B5), and the counters and lines of M2.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::guarded::Guarded;
use super::state::Inner;
use super::stats::bump;
use super::store::Store;
use crate::client::{HoldReply, SettleReply};
use crate::error::Error;
use crate::hold::HoldStore;
use crate::hold::SettleTarget;
use crate::lease::{LeaseStore, OwnedFuture, Renewed};

impl<S: Store> LeaseStore for Inner<S> {
    fn ended(&self, policy: usize) {
        let _ =
            self.stats
                .0
                .leases_in_flight
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if let Some(l) = self
            .runtime
            .get(policy)
            .and_then(|r| r.metrics.leases.as_ref())
        {
            l.in_flight.decrement(1.0);
        }
    }

    fn release(self: Arc<Self>, policy: usize, key: String, id: String) -> OwnedFuture<()> {
        Box::pin(async move {
            // SPEC N4, B2: not while the breaker is open; the lease then expires.
            let released = self
                .guarded("TB.RELEASE", self.store.release(&key, &id))
                .await;
            if let Guarded::Answered((false, _)) = released {
                self.lease_expired(policy);
            }
        })
    }

    fn renew(
        self: Arc<Self>,
        policy: usize,
        key: String,
        id: String,
        lease_ms: u64,
    ) -> OwnedFuture<Renewed> {
        Box::pin(async move {
            let renewed = self.renew_call(&key, &id, lease_ms).await;
            if renewed == Renewed::Lost {
                // SPEC N5: lost (expired, or a failover lost it); renewals stop.
                self.lease_expired(policy);
                if let Some(rt) = self.runtime.get(policy)
                    && let Some(held_back) = rt.lease_log.admit(&*self.clock)
                {
                    let name = self.policies.get(policy).map_or("", |p| p.name());
                    tracing::warn!(
                        target: "redis_tb",
                        "redis-tb: a lease of in-flight policy '{name}' was lost before its request ended (it expired, or a failover lost it); the request goes on ({} since the last line)",
                        held_back + 1
                    );
                }
            }
            renewed
        })
    }

    fn now(&self) -> Duration {
        self.clock.monotonic()
    }

    fn timed_out(&self, policy: usize) {
        bump(&self.stats.0.leases_timed_out);
        let Some(rt) = self.runtime.get(policy) else {
            return;
        };
        if let Some(l) = &rt.metrics.leases {
            l.timed_out.increment(1);
        }
        if let Some(held_back) = rt.timeout_log.admit(&*self.clock) {
            let name = self.policies.get(policy).map_or("", |p| p.name());
            tracing::warn!(
                target: "redis_tb",
                "redis-tb: a request of in-flight policy '{name}' reached its max_duration: its lease is released and its response ended ({} since the last line)",
                held_back + 1
            );
        }
    }
}

impl<S: Store> Inner<S> {
    /// SPEC M2: a lease that ended without a release.
    fn lease_expired(&self, policy: usize) {
        bump(&self.stats.0.leases_expired);
        if let Some(l) = self
            .runtime
            .get(policy)
            .and_then(|r| r.metrics.leases.as_ref())
        {
            l.expired.increment(1);
        }
    }

    /// One TB.RENEW of a lease (N5) or a hold (G5): not sent while the breaker is open (a
    /// renewal may be the probe after the cool-down, B3); a failure is a store error.
    async fn renew_call(&self, key: &str, id: &str, ms: u64) -> Renewed {
        match self
            .guarded("TB.RENEW", self.store.renew(key, id, ms))
            .await
        {
            Guarded::Answered((true, _, _)) => Renewed::Yes,
            Guarded::Answered((false, _, _)) => Renewed::Lost,
            Guarded::Skipped | Guarded::Failed(_) => Renewed::Failed,
        }
    }

    /// One hold or settlement call (SPEC G1, G3): not sent while the breaker is open (B2),
    /// timed, and its failure counted and logged like any store error (B5).
    async fn hold_call<T>(
        &self,
        command: &'static str,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match self.guarded(command, call).await {
            Guarded::Answered(r) => Ok(r),
            Guarded::Failed(e) => Err(e),
            Guarded::Skipped => Err(Error::StoreUnavailable {
                addr: self.store.addr().to_owned(),
            }),
        }
    }

    /// SPEC G5, M2: a hold whose renewal answered 0.
    fn hold_lost(&self, policy: &str) {
        bump(&self.stats.0.holds_lost);
        let Some(i) = self.policies.iter().position(|p| p.name() == policy) else {
            return;
        };
        let rt = &self.runtime[i];
        if let Some(c) = &rt.metrics.holds_lost {
            c.increment(1);
        }
        if let Some(held_back) = rt.hold_log.admit(&*self.clock) {
            tracing::warn!(
                target: "redis_tb",
                "redis-tb: a hold of policy '{policy}' was lost before it was settled (it expired, or a failover lost it); its settle sends nothing ({} since the last line)",
                held_back + 1
            );
        }
    }
}

impl<S: Store> HoldStore for Inner<S> {
    fn hold(
        self: Arc<Self>,
        target: SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> OwnedFuture<Result<HoldReply, Error>> {
        Box::pin(async move {
            // SPEC G6: a full hold table is a refusal reply, never an error.
            let r = self
                .hold_call("TB.HOLD", self.store.hold(&target, estimate, ttl_ms))
                .await?;
            if r.reply.allowed && r.id.is_some() {
                bump(&self.stats.0.holds);
            }
            Ok(r)
        })
    }

    fn renew(
        self: Arc<Self>,
        target: SettleTarget,
        id: String,
        ttl_ms: u64,
    ) -> OwnedFuture<Renewed> {
        Box::pin(async move {
            let renewed = self.renew_call(&target.key, &id, ttl_ms).await;
            if renewed == Renewed::Lost {
                self.hold_lost(&target.policy);
            }
            renewed
        })
    }

    fn settle(
        self: Arc<Self>,
        target: SettleTarget,
        id: String,
        actual: f64,
    ) -> OwnedFuture<Result<SettleReply, Error>> {
        Box::pin(async move {
            // SPEC G3: the debt an excess leaves is at most one bucket.
            let max_wait = target.capacity / target.rate;
            // The hold keeps its estimate when this fails (G3).
            let r = self
                .hold_call(
                    "TB.SETTLE",
                    self.store.settle(&target, &id, actual, max_wait),
                )
                .await?;
            if r.settled {
                bump(&self.stats.0.settlements);
            }
            Ok(r)
        })
    }
}
