//! The seam the limiter reaches Redis through (SPEC "Names": `Store`), at the level of
//! the typed client, and one check's encoded [`Call`] (SPEC L4, W2, N2).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use crate::client::{
    Acquired, Charge, Chosen, HoldReply, MultiReply, Reply, SettleReply, TbClient,
};
use crate::error::Error;
use crate::hold::SettleTarget;

/// The store the limiter calls, at the level of the typed client: TB.TAKE / TB.MTAKE for a
/// check and TB.REFUND for a refund. [`TbClient`] is the real one; tests script a fake.
pub trait Store: Send + Sync + 'static {
    /// The check: TB.TAKE for one bucket, TB.MTAKE for several (SPEC L4), the reply in
    /// TB.MTAKE's shape. One attempt, within the store's timeout (SPEC L5).
    fn take(&self, call: &Call) -> impl Future<Output = Result<MultiReply, Error>> + Send;
    /// One TB.REFUND per charge (SPEC F1), never retried.
    fn refund(&self, charges: &[Charge]) -> impl Future<Output = Result<Vec<Reply>, Error>> + Send;
    /// The check with an in-flight policy: TB.ACQUIRE, with TAKE when the call has
    /// buckets (SPEC N2). The default answers that the store does not implement it.
    fn acquire(&self, call: &Call) -> impl Future<Output = Result<Acquired, Error>> + Send {
        let _ = call;
        async { Err(unsupported("TB.ACQUIRE")) }
    }
    /// `TB.RELEASE key id` (SPEC N4): `(released, in_flight)`.
    fn release(
        &self,
        key: &str,
        id: &str,
    ) -> impl Future<Output = Result<(bool, f64), Error>> + Send {
        let _ = (key, id);
        async { Err(unsupported("TB.RELEASE")) }
    }
    /// `TB.RENEW key id lease_ms` (SPEC N5): `(renewed, in_flight, ms)`.
    fn renew(
        &self,
        key: &str,
        id: &str,
        lease_ms: u64,
    ) -> impl Future<Output = Result<(bool, f64, f64), Error>> + Send {
        let _ = (key, id, lease_ms);
        async { Err(unsupported("TB.RENEW")) }
    }
    /// `TB.HOLD key capacity rate estimate ttl_ms` (SPEC G1).
    fn hold(
        &self,
        target: &SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> impl Future<Output = Result<HoldReply, Error>> + Send {
        let _ = (target, estimate, ttl_ms);
        async { Err(unsupported("TB.HOLD")) }
    }
    /// `TB.SETTLE key capacity rate id actual max_wait` (SPEC G3).
    fn settle(
        &self,
        target: &SettleTarget,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> impl Future<Output = Result<SettleReply, Error>> + Send {
        let _ = (target, id, actual, max_wait);
        async { Err(unsupported("TB.SETTLE")) }
    }
    /// `COMMAND INFO tb.take` (SPEC U1): whether the module's commands are there.
    fn command_info(&self) -> impl Future<Output = Result<bool, Error>> + Send {
        async { Err(unsupported("COMMAND INFO")) }
    }
    /// SPEC E1: chooses the store's backend (once) with the startup's calls. The default,
    /// for a store of the module's commands alone: `COMMAND INFO tb.take`
    /// ([`Store::command_info`]), the module, or [`Error::ModuleNotLoaded`].
    fn choose_backend(&self) -> impl Future<Output = Result<Chosen, Error>> + Send {
        async move {
            if self.command_info().await? {
                Ok(Chosen::module(self.addr(), "tb.take found"))
            } else {
                Err(Error::ModuleNotLoaded {
                    addr: self.addr().to_owned(),
                })
            }
        }
    }
    /// SPEC E6: the backend in use, `None` until it is chosen.
    fn backend(&self) -> Option<Chosen> {
        None
    }
    /// `HELLO` with no argument (SPEC U3): the server's `mode`, `None` when the reply has
    /// none.
    fn hello(&self) -> impl Future<Output = Result<Option<String>, Error>> + Send {
        async { Err(unsupported("HELLO")) }
    }
    /// Whether the store was started degraded (SPEC U2): a limiter's startup then does not
    /// fail on an unreachable store.
    fn started_degraded(&self) -> bool {
        false
    }
    /// `host:port`, for log lines.
    fn addr(&self) -> &str;
    /// The call timeout (a deny-cache probe out for twice as long is lost, SPEC R4).
    fn timeout(&self) -> Duration;
}

fn unsupported(command: &'static str) -> Error {
    Error::UnexpectedReply {
        addr: String::new(),
        command,
        detail: "this store does not implement the command".to_owned(),
    }
}

impl Store for TbClient {
    async fn take(&self, call: &Call) -> Result<MultiReply, Error> {
        if call.kind == CallKind::Window {
            return self.window_encoded(&call.cmd).await;
        }
        let v = self.call(&call.cmd).await?;
        self.mtake_reply(&v, call.charges.len())
    }

    async fn refund(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        self.refund_many(charges).await
    }

    async fn acquire(&self, call: &Call) -> Result<Acquired, Error> {
        self.acquire_encoded(&call.cmd, call.charges.len()).await
    }

    async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        TbClient::release(self, key, id).await
    }

    async fn renew(&self, key: &str, id: &str, lease_ms: u64) -> Result<(bool, f64, f64), Error> {
        TbClient::renew(self, key, id, lease_ms).await
    }

    async fn hold(
        &self,
        target: &SettleTarget,
        estimate: f64,
        ttl_ms: u64,
    ) -> Result<HoldReply, Error> {
        TbClient::hold(
            self,
            &target.key,
            target.capacity,
            target.rate,
            estimate,
            ttl_ms,
        )
        .await
    }

    async fn settle(
        &self,
        target: &SettleTarget,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> Result<SettleReply, Error> {
        TbClient::settle(
            self,
            &target.key,
            target.capacity,
            target.rate,
            id,
            actual,
            max_wait,
        )
        .await
    }

    async fn command_info(&self) -> Result<bool, Error> {
        self.startup_command_info().await
    }

    async fn hello(&self) -> Result<Option<String>, Error> {
        self.hello_mode().await
    }

    async fn choose_backend(&self) -> Result<Chosen, Error> {
        self.choose(self.config().startup_timeout).await
    }

    fn backend(&self) -> Option<Chosen> {
        TbClient::backend(self).cloned()
    }

    fn started_degraded(&self) -> bool {
        TbClient::started_degraded(self)
    }

    fn addr(&self) -> &str {
        TbClient::addr(self)
    }

    fn timeout(&self) -> Duration {
        self.config().call_timeout
    }
}

/// One check's call: its buckets and the encoded command (`TB.TAKE key capacity rate cost`
/// or `TB.MTAKE n key.. (capacity rate cost)..`, the fixed numbers formatted once).
pub struct Call {
    pub(super) charges: Vec<Charge>,
    pub(super) cmd: redis::Cmd,
    pub(super) kind: CallKind,
}

/// Which command a [`Call`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// TB.TAKE (one bucket) or TB.MTAKE.
    Take,
    /// TB.WINDOW (SPEC W2): one charge.
    Window,
    /// TB.ACQUIRE, with TAKE when there are charges (SPEC N2).
    Acquire,
}

impl Call {
    /// The buckets, in policy order (the window for TB.WINDOW; those after TAKE for
    /// TB.ACQUIRE).
    pub fn charges(&self) -> &[Charge] {
        &self.charges
    }

    /// The command.
    pub fn kind(&self) -> CallKind {
        self.kind
    }

    /// The command's arguments as sent (name first).
    pub fn args(&self) -> Vec<Vec<u8>> {
        self.cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => b"CURSOR".to_vec(),
            })
            .collect()
    }
}

impl fmt::Debug for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Call")
            .field("charges", &self.charges)
            .finish()
    }
}
