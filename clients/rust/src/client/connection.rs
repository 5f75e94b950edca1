//! [`TbClient`]: one `redis::aio::MultiplexedConnection`, a tight timeout on every call, a
//! lazy reconnect after the connection breaks (never a retry of the call itself). The
//! starts that check the server (`connect`, `start`, SPEC U1, U2) are in `crate::startup`.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, ProtocolVersion, RedisError, Value};

use crate::clock::{Clock, SystemClock};
use crate::error::Error;

use super::backend::{BackendSetting, Chosen};
use super::replies::{MultiReply, Reply, parse_multi_reply, parse_reply};

/// Timeouts of a [`TbClient`].
#[derive(Clone, Debug, PartialEq)]
pub struct ClientConfig {
    /// Limit for one command's reply (default 50 ms). On the request path a slow limiter is
    /// worse than none: past this the call counts as a store error.
    pub call_timeout: Duration,
    /// Limit for a reconnect on the request path (default 50 ms).
    pub connect_timeout: Duration,
    /// Limit for the first connect and the module check in [`TbClient::connect`] (default 5 s).
    pub startup_timeout: Duration,
    /// SPEC E1: the store's backend: `auto` (the default: the module where `COMMAND INFO
    /// tb.take` finds it, else the script library of clients/lua), `module` or `scripts`.
    pub backend: BackendSetting,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            call_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(50),
            startup_timeout: Duration::from_secs(5),
            backend: BackendSetting::Auto,
        }
    }
}

/// What a [`Transport`] returns: the reply, or the error ([`Error::Server`] for an error
/// reply, [`Error::Connection`] or [`Error::Timeout`] otherwise).
pub type Sent = Pin<Box<dyn Future<Output = Result<Value, Error>> + Send + 'static>>;

/// A raw command sender in place of the client's own connection (a test's scripted server,
/// or a caller that brings its own): `args` are the command's words, name first. The
/// client's timeouts still bound every call.
pub trait Transport: Send + Sync + 'static {
    /// Sends one command.
    fn send(&self, args: Vec<Vec<u8>>) -> Sent;
}

/// A client of the redis-tb module. Cheap to clone: clones share one multiplexed connection.
#[derive(Clone)]
pub struct TbClient {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) client: redis::Client,
    /// The same client speaking RESP2, when `client` asks for RESP3 only because the URL
    /// named no protocol: used from the first time a server refuses `HELLO 3` (Redis 5 and
    /// older) on.
    pub(super) resp2_fallback: Option<redis::Client>,
    /// Set once the server refused `HELLO 3`: connect with `resp2_fallback` from then on.
    pub(super) use_fallback: AtomicBool,
    pub(super) addr: String,
    pub(super) config: ClientConfig,
    pub(super) conn: RwLock<Option<MultiplexedConnection>>,
    pub(super) connecting: tokio::sync::Mutex<()>,
    /// Started degraded (SPEC U2): a limiter's startup does not fail on an unreachable
    /// Redis.
    pub(super) degraded: AtomicBool,
    /// Sends in place of `conn` when set ([`TbClient::over`]).
    pub(super) transport: Option<Arc<dyn Transport>>,
    /// SPEC E1: the backend, once chosen (at startup, or before a degraded or lazy start's
    /// first call).
    pub(super) chosen: OnceLock<Chosen>,
    /// One choice at a time; the others wait for it.
    pub(super) choosing: tokio::sync::Mutex<()>,
    /// SPEC E5, T1: the clock sent as `now` / `NOW` where the server refuses TIME in
    /// scripts.
    pub(super) clock: RwLock<Arc<dyn Clock>>,
}

impl std::fmt::Debug for TbClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TbClient")
            .field("addr", &self.inner.addr)
            .field("config", &self.inner.config)
            .finish()
    }
}

impl TbClient {
    /// A degraded start (SPEC U2): no connection, and [`TbClient::started_degraded`].
    pub(crate) fn degrade(&self) {
        self.store(None);
        self.inner.degraded.store(true, Ordering::Relaxed);
    }

    /// Whether [`TbClient::start_degraded`] found Redis unreachable (SPEC U2).
    pub fn started_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Relaxed)
    }

    /// A client that connects on first use; no I/O here, no module check: the backend
    /// (SPEC E1, `config.backend`) is chosen before its first call. The protocol is the one
    /// `client` was configured with.
    pub fn lazy(client: redis::Client, config: ClientConfig) -> TbClient {
        TbClient::lazy_with_fallback(client, None, config)
    }

    pub(crate) fn lazy_with_fallback(
        client: redis::Client,
        resp2_fallback: Option<redis::Client>,
        config: ClientConfig,
    ) -> TbClient {
        let addr = client.get_connection_info().addr().to_string();
        TbClient::with_parts(client, resp2_fallback, addr, config, None)
    }

    /// A client whose commands go to `transport` instead of a connection of its own;
    /// `addr` is the `host:port` its lines name. No I/O here: the same starts
    /// ([`crate::startup::check_store`]) and calls apply, within `config`'s timeouts.
    pub fn over(
        transport: Arc<dyn Transport>,
        addr: &str,
        config: ClientConfig,
    ) -> Result<TbClient, Error> {
        // Never connected: the `redis::Client` the client would otherwise open.
        let (client, _) = open_url("redis://127.0.0.1:6379/?protocol=resp3")?;
        Ok(TbClient::with_parts(
            client,
            None,
            addr.to_owned(),
            config,
            Some(transport),
        ))
    }

    fn with_parts(
        client: redis::Client,
        resp2_fallback: Option<redis::Client>,
        addr: String,
        config: ClientConfig,
        transport: Option<Arc<dyn Transport>>,
    ) -> TbClient {
        TbClient {
            inner: Arc::new(Inner {
                client,
                resp2_fallback,
                use_fallback: AtomicBool::new(false),
                addr,
                config,
                conn: RwLock::new(None),
                connecting: tokio::sync::Mutex::new(()),
                degraded: AtomicBool::new(false),
                transport,
                chosen: OnceLock::new(),
                choosing: tokio::sync::Mutex::new(()),
                clock: RwLock::new(Arc::new(SystemClock::new())),
            }),
        }
    }

    /// `host:port` of the server.
    pub fn addr(&self) -> &str {
        &self.inner.addr
    }

    /// The timeouts in use.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The protocol new connections speak: RESP3 unless the URL (or the `redis::Client`)
    /// asked for RESP2, or the server refused `HELLO 3`.
    pub fn protocol(&self) -> ProtocolVersion {
        self.redis_client()
            .get_connection_info()
            .redis_settings()
            .protocol()
    }

    pub(super) fn redis_client(&self) -> &redis::Client {
        match &self.inner.resp2_fallback {
            Some(c) if self.inner.use_fallback.load(Ordering::Relaxed) => c,
            _ => &self.inner.client,
        }
    }

    /// `Ok` when the module's commands are there (`COMMAND INFO tb.take` has an entry).
    pub async fn check_module(&self) -> Result<(), Error> {
        self.check_module_within(self.inner.config.call_timeout)
            .await
    }

    pub(super) async fn check_module_within(&self, limit: Duration) -> Result<(), Error> {
        if self.module_loaded(limit).await? {
            Ok(())
        } else {
            Err(Error::ModuleNotLoaded {
                addr: self.inner.addr.clone(),
            })
        }
    }

    /// `COMMAND INFO tb.take` (SPEC U1) within `limit`: whether the module's commands are
    /// there.
    pub(super) async fn module_loaded(&self, limit: Duration) -> Result<bool, Error> {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("tb.take");
        let reply = self.startup_query(&cmd, limit).await?;
        Ok(match &reply {
            Value::Array(items) => {
                matches!(items.first(), Some(Value::Array(entry)) if !entry.is_empty())
            }
            _ => false,
        })
    }

    /// One startup call: a connection made within `limit` when there is none, then the
    /// call within `limit`.
    pub(super) async fn startup_query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, Error> {
        if self.inner.transport.is_none() && self.current().is_none() {
            let conn = self.open(limit).await?;
            self.store(Some(conn));
        }
        let v = self.query(cmd, limit).await;
        self.after_call(v)
    }

    /// SPEC U1 within the startup timeout (the [`crate::Store`] side of
    /// [`crate::startup::check_store`]).
    pub(crate) async fn startup_command_info(&self) -> Result<bool, Error> {
        self.module_loaded(self.inner.config.startup_timeout).await
    }

    /// `HELLO` with no argument (SPEC U3: the protocol is not switched) within the startup
    /// timeout: the server's `mode` (`standalone`, `cluster`, `sentinel`), `None` when the
    /// reply has none.
    pub(crate) async fn hello_mode(&self) -> Result<Option<String>, Error> {
        let reply = self
            .startup_query(&redis::cmd("HELLO"), self.inner.config.startup_timeout)
            .await?;
        Ok(mode_of(&reply))
    }

    /// One attempt of `cmd` as it is (no backend) within the call timeout.
    pub(super) async fn call_once(&self, cmd: &Cmd) -> Result<Value, Error> {
        let v = self.query(cmd, self.inner.config.call_timeout).await;
        self.after_call(v)
    }

    pub(super) async fn query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, Error> {
        // The connected case without the reconnecting future: the reconnect (2.3 KB of
        // connection setup state) is boxed, so that every call's future, and every future
        // above it up to the layer's request future, stays small (about 340 bytes here
        // instead of 2.5 KB) and is cheaper to move; only a reconnect pays the allocation.
        if let Some(t) = &self.inner.transport {
            return match tokio::time::timeout(limit, t.send(words(cmd))).await {
                Err(_) => Err(self.timeout(limit)),
                Ok(r) => r,
            };
        }
        let mut conn = match self.current() {
            Some(c) => c,
            None => Box::pin(self.connection()).await?,
        };
        match tokio::time::timeout(limit, cmd.query_async::<Value>(&mut conn)).await {
            Err(_) => Err(self.timeout(limit)),
            Ok(r) => r.map_err(|e| self.classify(e)),
        }
    }

    /// A broken connection is dropped so that the next call reconnects (after the layer's
    /// cooldown): a MultiplexedConnection whose socket died never recovers by itself.
    pub(super) fn after_call(&self, v: Result<Value, Error>) -> Result<Value, Error> {
        if let Err(e) = &v
            && e.breaks_connection()
        {
            self.store(None);
        }
        v
    }

    pub(super) async fn connection(&self) -> Result<MultiplexedConnection, Error> {
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let limit = self.inner.config.connect_timeout;
        // One reconnect at a time; the others wait for it (bounded) instead of piling up.
        let _guard = tokio::time::timeout(limit, self.inner.connecting.lock())
            .await
            .map_err(|_| self.timeout(limit))?;
        if let Some(c) = self.current() {
            return Ok(c);
        }
        let c = self.open(limit).await?;
        self.store(Some(c.clone()));
        Ok(c)
    }

    pub(super) async fn open(&self, limit: Duration) -> Result<MultiplexedConnection, Error> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(limit))
            // Calls are bounded by tokio::time::timeout around each one instead.
            .set_response_timeout(None);
        let deadline = tokio::time::Instant::now() + limit;
        let fut = self
            .redis_client()
            .get_multiplexed_async_connection_with_config(&config);
        let mut result = tokio::time::timeout_at(deadline, fut).await;
        if let (Ok(Err(e)), Some(resp2)) = (&result, &self.inner.resp2_fallback)
            && refuses_hello(e)
            && !self.inner.use_fallback.swap(true, Ordering::Relaxed)
        {
            // A server before Redis 6 has no HELLO: RESP2 from now on, within the same limit.
            tracing::info!(
                target: "redis_tb",
                "redis-tb: {} does not support RESP3 (no HELLO); using RESP2",
                self.inner.addr
            );
            let fut = resp2.get_multiplexed_async_connection_with_config(&config);
            result = tokio::time::timeout_at(deadline, fut).await;
        }
        match result {
            Err(_) => Err(self.timeout(limit)),
            Ok(Ok(c)) => Ok(c),
            Ok(Err(source)) => Err(Error::Connection {
                addr: self.inner.addr.clone(),
                source,
            }),
        }
    }

    pub(super) fn current(&self) -> Option<MultiplexedConnection> {
        // A poisoned lock only means another thread panicked while swapping an Option: the
        // value inside is still a valid Option.
        let guard = self.inner.conn.read().unwrap_or_else(|e| e.into_inner());
        guard.clone()
    }

    pub(super) fn store(&self, conn: Option<MultiplexedConnection>) {
        let mut guard = self.inner.conn.write().unwrap_or_else(|e| e.into_inner());
        *guard = conn;
    }

    pub(super) fn timeout(&self, timeout: Duration) -> Error {
        Error::Timeout {
            addr: self.inner.addr.clone(),
            timeout,
        }
    }

    pub(super) fn classify(&self, source: RedisError) -> Error {
        let addr = self.inner.addr.clone();
        match source.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => Error::Server { addr, source },
            _ => Error::Connection { addr, source },
        }
    }

    pub(super) fn unexpected(&self, command: &'static str, detail: String) -> Error {
        Error::UnexpectedReply {
            addr: self.inner.addr.clone(),
            command,
            detail,
        }
    }

    pub(super) fn reply4(&self, v: &Value, command: &'static str) -> Result<Reply, Error> {
        parse_reply(v).map_err(|detail| self.unexpected(command, detail))
    }

    pub(super) fn multi_reply(&self, v: &Value, keys: usize) -> Result<MultiReply, Error> {
        parse_multi_reply(v, keys).map_err(|detail| self.unexpected("TB.MTAKE", detail))
    }
}

/// A command's words, name first (a cursor argument, which no TB.* command has, as `0`).
pub(super) fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => b.to_vec(),
            _ => b"0".to_vec(),
        })
        .collect()
}

/// The `mode` field of a HELLO reply: a RESP3 map, or RESP2's flat list of names and values.
fn mode_of(v: &Value) -> Option<String> {
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        _ => None,
    };
    match v {
        Value::Map(pairs) => pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some("mode"))
            .and_then(|(_, v)| text(v)),
        Value::Array(items) => items
            .chunks(2)
            .find(|kv| kv.first().and_then(text).as_deref() == Some("mode"))
            .and_then(|kv| kv.get(1).and_then(text)),
        _ => None,
    }
}

/// The client for `url`: RESP3 when the URL names no protocol (with a RESP2 twin for a
/// server without `HELLO`), else the protocol it names.
pub(crate) fn open_url(url: &str) -> Result<(redis::Client, Option<redis::Client>), Error> {
    let invalid = |source| Error::InvalidUrl {
        url: url.to_owned(),
        source,
    };
    let client = redis::Client::open(url).map_err(invalid)?;
    if names_protocol(url) {
        return Ok((client, None));
    }
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let resp3 = redis::Client::open(info.set_redis_settings(resp3)).map_err(invalid)?;
    Ok((resp3, Some(client)))
}

/// A server that does not know `HELLO` (Redis 5 and older, or a server where it was
/// renamed away): `redis` classifies Redis 5's wording; Redis 6+ words it differently.
fn refuses_hello(e: &RedisError) -> bool {
    e.kind() == ErrorKind::RESP3NotSupported
        || (matches!(e.kind(), ErrorKind::Server(_))
            && e.detail().is_some_and(|d| {
                let d = d.to_ascii_lowercase();
                d.starts_with("unknown command") && d.contains("hello")
            }))
}

/// Whether the URL's query has a `protocol` parameter (`?protocol=resp2`).
fn names_protocol(url: &str) -> bool {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    query
        .split('&')
        .any(|kv| kv.split_once('=').map_or(kv, |(k, _)| k) == "protocol")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp3_unless_the_url_names_a_protocol() -> Result<(), Error> {
        let protocol = |url: &str| -> Result<_, Error> {
            let (c, fallback) = open_url(url)?;
            let tb = TbClient::lazy_with_fallback(c, fallback, ClientConfig::default());
            Ok((tb.protocol(), tb.inner.resp2_fallback.is_some()))
        };
        assert_eq!(
            protocol("redis://127.0.0.1:1/")?,
            (ProtocolVersion::RESP3, true)
        );
        assert_eq!(
            protocol("redis://127.0.0.1:1/0?x=1")?,
            (ProtocolVersion::RESP3, true)
        );
        for url in [
            "redis://127.0.0.1:1/?protocol=resp2",
            "redis://127.0.0.1:1/?x=1&protocol=2",
        ] {
            assert_eq!(protocol(url)?, (ProtocolVersion::RESP2, false), "{url}");
        }
        assert_eq!(
            protocol("redis://127.0.0.1:1/?protocol=resp3")?,
            (ProtocolVersion::RESP3, false)
        );
        assert!(!names_protocol("redis://127.0.0.1:1/#protocol=2"));
        Ok(())
    }

    #[tokio::test]
    async fn an_unusable_url_is_its_own_error() {
        let err = TbClient::connect("nope://x").await.unwrap_err();
        assert!(matches!(err, Error::InvalidUrl { .. }), "{err:?}");
    }
}
