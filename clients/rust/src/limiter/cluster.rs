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
        if let Some(policies) = self.inner.keys_in_one_call() {
            check_cluster(&self.inner.store, &self.inner.name, policies).await?;
        }
        // SPEC E6: a start that passed logs the backend its store chose (a degraded one,
        // at its first call that reaches Redis).
        self.inner.note_backend();
        Ok(())
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

/// SPEC U3: `HELLO` (no argument: the connection's protocol is not switched) for a
/// limiter whose calls carry several keys and that has no tag function; a `mode` of
/// `cluster` fails the start naming the limiter and `policies`. Any other reply, an error
/// reply included, passes; an unreachable store fails the start. After a degraded start
/// it is not called ([`RateLimiter::startup`] returns first: the calls take the failure
/// mode, and a `CROSSSLOT` later is K6's 500).
async fn check_cluster<S: Store>(
    store: &S,
    limiter: &str,
    policies: Vec<String>,
) -> Result<(), Error> {
    match store.hello().await {
        Ok(Some(mode)) if mode == "cluster" => Err(Error::ClusterNeedsTag {
            limiter: limiter.to_owned(),
            policies,
        }),
        Ok(_) => Ok(()),
        Err(e) => match Error::unreachable(store.addr(), &e) {
            Some(unreachable) => Err(unreachable),
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::client::{Charge, MultiReply, Reply};
    use crate::limiter::Call;
    use crate::policy::Policy;

    /// A store whose `HELLO` answers `hello` (counted), started degraded or not.
    struct Hello {
        hello: fn() -> Result<Option<String>, Error>,
        degraded: bool,
        sent: Arc<AtomicUsize>,
    }

    impl Store for Hello {
        async fn take(&self, _: &Call) -> Result<MultiReply, Error> {
            unreachable!("startup takes nothing")
        }
        async fn refund(&self, _: &[Charge]) -> Result<Vec<Reply>, Error> {
            unreachable!("startup refunds nothing")
        }
        async fn hello(&self) -> Result<Option<String>, Error> {
            self.sent.fetch_add(1, Ordering::SeqCst);
            (self.hello)()
        }
        fn started_degraded(&self) -> bool {
            self.degraded
        }
        fn addr(&self) -> &str {
            "10.0.0.1:6379"
        }
        fn timeout(&self) -> Duration {
            Duration::from_millis(50)
        }
    }

    fn no_answer() -> Result<Option<String>, Error> {
        Err(Error::Timeout {
            addr: "10.0.0.1:6379".into(),
            timeout: Duration::from_millis(50),
        })
    }

    async fn start(
        hello: fn() -> Result<Option<String>, Error>,
        degraded: bool,
    ) -> (Result<(), Error>, usize) {
        let sent = Arc::new(AtomicUsize::new(0));
        let store = Hello {
            hello,
            degraded,
            sent: sent.clone(),
        };
        let limiter = RateLimiter::builder(store)
            .policy(Policy::per_second("a", 10.0))
            .policy(Policy::per_second("b", 10.0))
            .build()
            .unwrap();
        let r = limiter.startup().await;
        (r, sent.load(Ordering::SeqCst))
    }

    // SPEC U2, U4: after a degraded start the limiter sends no HELLO, so an unreachable
    // Redis cannot fail it (the branch of check_cluster that once allowed for it could not
    // be reached, and is gone).
    #[tokio::test]
    async fn a_degraded_start_sends_no_hello() {
        let (r, sent) = start(no_answer, true).await;
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(sent, 0);
    }

    // SPEC U2, U3: a strict start whose HELLO gets no answer fails, naming the address.
    #[tokio::test]
    async fn an_unreachable_redis_fails_a_strict_start() {
        let (r, sent) = start(no_answer, false).await;
        assert_eq!(sent, 1);
        assert!(
            matches!(&r, Err(Error::Unreachable { addr, .. }) if addr == "10.0.0.1:6379"),
            "{r:?}"
        );
    }

    // SPEC U3: a cluster fails the start; a standalone server passes.
    #[tokio::test]
    async fn only_a_cluster_fails_the_start() {
        let (r, _) = start(|| Ok(Some("cluster".into())), false).await;
        assert!(matches!(r, Err(Error::ClusterNeedsTag { .. })), "{r:?}");
        let (r, _) = start(|| Ok(Some("standalone".into())), false).await;
        assert!(r.is_ok(), "{r:?}");
    }
}
