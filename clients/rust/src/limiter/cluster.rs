//! SPEC K6 (the keys of one call on a Redis Cluster) on both of its sides: the startup
//! check of a limiter that can send several keys without a tag function (U3), and a
//! `CROSSSLOT` answer, a configuration error rather than a store error (L5).

use http::StatusCode;

use super::{Check, Inner, Plan, RateLimiter, Store, bump};
use crate::decision::{Decision, Outcome};
use crate::error::Error;
use crate::problem;

impl<S: Store> RateLimiter<S> {
    /// The limiter's startup check (SPEC U3, K6), after the store's own
    /// ([`crate::TbClient::start`]: U1, U2). A limiter that can send several keys in one
    /// call (two or more policies that are not `settle_later`) and has no tag function
    /// sends `HELLO`; on a Redis Cluster its start fails with
    /// [`Error::ClusterNeedsTag`], whose text is U3's line. Any other limiter sends
    /// nothing. After a degraded start (U2) it sends nothing either: Redis did not
    /// answer, the failure mode applies until it does, and U2's line is the start's whole
    /// message (U4). An unreachable Redis fails it ([`Error::Unreachable`]).
    pub async fn startup(&self) -> Result<(), Error> {
        if self.inner.store.started_degraded() {
            return Ok(());
        }
        let Some(policies) = self.inner.keys_in_one_call() else {
            return Ok(());
        };
        crate::startup::check_cluster(&self.inner.store, &self.inner.name, policies).await
    }
}

impl<S: Store> Inner<S> {
    /// SPEC K6: the names of the policies one call can carry when they are several and no
    /// tag function puts them in one slot.
    fn keys_in_one_call(&self) -> Option<Vec<String>> {
        if self.hash_tag.is_some() {
            return None;
        }
        let names: Vec<String> = self
            .policies
            .iter()
            .filter(|p| !p.settle_later)
            .map(|p| p.name().to_owned())
            .collect();
        (names.len() >= 2).then_some(names)
    }

    /// SPEC K6, L5, P4: Redis answered `CROSSSLOT`. Nothing admitted, never the failure
    /// mode: 500 naming the policies of the call, counted in `invalid_inputs` (not
    /// `store_errors`), the breaker untouched, logged at most once a second per limiter.
    pub(super) fn cross_slot(&self, plan: &Plan, what: &str) -> Check {
        bump(&self.stats.0.invalid_inputs);
        let order = plan.result_policies();
        let names: Vec<&str> = order.iter().map(|&i| self.policies[i].name()).collect();
        for &i in order.iter() {
            self.runtime[i].metrics.invalid_inputs.increment(1);
        }
        if let Some(held_back) = self.cross_slot_log.admit(&*self.clock) {
            tracing::error!(
                target: "redis_tb",
                "redis-tb: {what} on {} answered CROSSSLOT: limiter '{}' sends keys of policies {} in one call, which a Redis Cluster refuses unless they share a hash slot; requests get 500 until the limiter has a tag function (SPEC K6) ({} since the last line)",
                self.store.addr(),
                self.name,
                crate::error::quoted(&names),
                held_back + 1
            );
        }
        let mut c = Check::pass(Decision::without_results(Outcome::InvalidInput, false));
        c.problem = Some((
            StatusCode::INTERNAL_SERVER_ERROR,
            problem::cross_slot(&names),
        ));
        c
    }
}
