//! SPEC K6 (the keys of one call on a Redis Cluster) at startup: a limiter that can send
//! several keys without a tag function is refused on a cluster (U3). A `CROSSSLOT` answer
//! on the request path is the check's (`check.rs`, L5).

use super::state::{Inner, RateLimiter};
use super::store::Store;
use crate::error::Error;

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
}
