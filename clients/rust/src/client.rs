//! The five TB.* commands over one `redis::aio::MultiplexedConnection`: typed replies, one
//! round trip per call, a tight timeout on every call, and a lazy reconnect after the
//! connection breaks (never a retry of the call itself).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, ProtocolVersion, RedisError, Value};

use crate::error::Error;

/// Largest capacity, rate and n the module accepts: 2^53.
pub const MAX_NUMBER: f64 = 9_007_199_254_740_992.0;
/// Smallest rate the module accepts (tokens per second).
pub const MIN_RATE: f64 = 1e-9;

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
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            call_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_millis(50),
            startup_timeout: Duration::from_secs(5),
        }
    }
}

/// One bucket's reply: `[allowed, remaining, retry_after, reset_after]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reply {
    /// Whether the tokens were taken (TB.PEEK: whether one token is there).
    pub allowed: bool,
    /// Tokens left, full precision (negative while reservations are outstanding).
    pub remaining: f64,
    /// Seconds until the request would be admitted: 0 when allowed, -1 when never.
    pub retry_after: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

impl Reply {
    /// Refused, and no wait will help (`n > capacity`).
    pub fn never(&self) -> bool {
        !self.allowed && self.retry_after < 0.0
    }
}

/// TB.MTAKE's reply: the aggregate, then one [`Reply`] per bucket in call order.
#[derive(Clone, Debug, PartialEq)]
pub struct MultiReply {
    /// Whether every bucket had its tokens (and all were taken).
    pub allowed: bool,
    /// The smallest per-bucket remaining.
    pub remaining: f64,
    /// 0 when allowed; -1 if any bucket can never admit; else the largest wait.
    pub retry_after: f64,
    /// The largest per-bucket reset_after.
    pub reset_after: f64,
    /// Per bucket: after the deduction when allowed, as it stands when refused (its
    /// `allowed` then says whether this bucket alone had enough).
    pub buckets: Vec<Reply>,
}

/// TB.RESERVE's reply.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reservation {
    /// Whether the tokens were taken (now, or reserved ahead).
    pub allowed: bool,
    /// Tokens left; negative while reservations are outstanding.
    pub remaining: f64,
    /// When allowed: seconds to wait before going ahead (0 = now). When refused: seconds
    /// after which the same reservation would be accepted, -1 when never.
    pub wait: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

/// TB.WINDOW's counting mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WindowMode {
    /// Fixed windows aligned to multiples of the window since the epoch.
    Fixed,
    /// The weighted estimate over the current and the previous window (the default).
    #[default]
    Sliding,
    /// A sorted set of admitted requests: exact in every window-long interval.
    Log,
}

impl WindowMode {
    fn arg(self) -> &'static str {
        match self {
            WindowMode::Fixed => "FIXED",
            WindowMode::Sliding => "SLIDING",
            WindowMode::Log => "LOG",
        }
    }
}

/// TB.ACQUIRE's reply (SPEC N2): `[granted, in_flight, id or nil, ms]`, with TAKE the
/// buckets' aggregate and one reply per bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Acquired {
    /// The lease was granted (and every bucket charged).
    pub granted: bool,
    /// Live leases after the call.
    pub in_flight: f64,
    /// The lease id, `None` when refused.
    pub id: Option<String>,
    /// Granted: ms until the lease expires; refused: ms until a slot frees (an upper
    /// bound), 0 when a bucket refused.
    pub ms: f64,
    /// With TAKE: the buckets, in call order (empty without TAKE).
    pub buckets: Vec<Reply>,
}

/// TB.HOLD's reply (SPEC G1): TB.TAKE's four fields and the hold id (`None` when refused).
#[derive(Clone, Debug, PartialEq)]
pub struct HoldReply {
    /// TB.TAKE's four fields.
    pub reply: Reply,
    /// The hold id, `None` when refused.
    pub id: Option<String>,
}

/// TB.SETTLE's reply (SPEC G3): `[settled, remaining, charged, reset_after]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SettleReply {
    /// Whether the hold was settled (false: settled already or expired; nothing changed).
    pub settled: bool,
    /// Tokens left.
    pub remaining: f64,
    /// Actual minus estimate, as the module bounded it.
    pub charged: f64,
    /// Seconds until the bucket is full.
    pub reset_after: f64,
}

/// TB.THROTTLE's reply (redis-cell's `CL.THROTTLE`): whole numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    /// Whether the request was refused.
    pub limited: bool,
    /// `max_burst + 1`.
    pub limit: i64,
    /// Requests left.
    pub remaining: i64,
    /// Seconds until a retry can succeed; -1 when allowed.
    pub retry_after: i64,
    /// Seconds until the limit is whole again.
    pub reset_after: i64,
}

/// One bucket of a multi-key call: TB.MTAKE, or the refunds of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Charge {
    /// The bucket's key.
    pub key: String,
    /// Bucket size (the burst).
    pub capacity: f64,
    /// Tokens added per second.
    pub rate: f64,
    /// Tokens to take (or give back).
    pub n: f64,
}

/// A client of the redis-tb module. Cheap to clone: clones share one multiplexed connection.
#[derive(Clone)]
pub struct TbClient {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    /// The same client speaking RESP2, when `client` asks for RESP3 only because the URL
    /// named no protocol: used from the first time a server refuses `HELLO 3` (Redis 5 and
    /// older) on.
    resp2_fallback: Option<redis::Client>,
    /// Set once the server refused `HELLO 3`: connect with `resp2_fallback` from then on.
    use_fallback: AtomicBool,
    addr: String,
    config: ClientConfig,
    conn: RwLock<Option<MultiplexedConnection>>,
    connecting: tokio::sync::Mutex<()>,
    /// Started degraded (SPEC U2): a limiter's startup does not fail on an unreachable
    /// Redis.
    degraded: AtomicBool,
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
    /// Connects to `url` (`redis://host:port/db`) with the default timeouts and checks that
    /// the module is loaded. The connection speaks RESP3 (`HELLO 3`, Redis 6+ and Valkey),
    /// whose replies carry the module's numbers as doubles, cheaper to read than RESP2's
    /// bulk strings, unless the URL names a protocol (`?protocol=resp2`); a server without
    /// `HELLO` gets RESP2.
    pub async fn connect(url: &str) -> Result<TbClient, Error> {
        TbClient::connect_with(url, ClientConfig::default()).await
    }

    /// Connects to `url` with `config`; the same start as [`TbClient::start`].
    pub async fn connect_with(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        TbClient::start(url, config).await
    }

    /// Connects with a configured `redis::Client` (TLS, auth, RESP3...) and checks that the
    /// module is loaded ([`Error::ModuleNotLoaded`] if not): a missing module is found at
    /// startup, not on the first request. Strict, as [`TbClient::start`].
    pub async fn connect_client(
        client: redis::Client,
        config: ClientConfig,
    ) -> Result<TbClient, Error> {
        let tb = TbClient::lazy(client, config);
        crate::startup::check_store(&tb, false).await?;
        Ok(tb)
    }

    /// Connects to `url` and checks the server (SPEC U1, U2), failing the start with one
    /// line naming the address and what to do: Redis unreachable ([`Error::Unreachable`]:
    /// `redis-tb: cannot reach Redis at <host:port> (<reason>): start it, or set
    /// start_degraded to start failing open`), the module missing
    /// ([`Error::ModuleNotLoaded`]) or `COMMAND INFO` not permitted
    /// ([`Error::NoPermission`]). Then each limiter's [`crate::RateLimiter::startup`]
    /// (U3: a cluster without a tag function). RESP3 unless the URL names a protocol.
    pub async fn start(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        let (client, fallback) = open_url(url)?;
        let tb = TbClient::lazy_with_fallback(client, fallback, config);
        crate::startup::check_store(&tb, false).await?;
        Ok(tb)
    }

    /// Like [`TbClient::start`], but an unreachable Redis is not an error (SPEC U2's
    /// `start_degraded`, an explicit choice): one line is logged, `redis-tb: Redis at
    /// <host:port> unreachable at startup; starting degraded (the limiter's failure mode
    /// applies until it answers)`, and the client connects on first use (the limiter's
    /// failure mode covers the requests until then), so the app can start before Redis
    /// does. A server that answers without the module is still
    /// [`Error::ModuleNotLoaded`], one without the right to run `COMMAND INFO`
    /// [`Error::NoPermission`]. RESP3 unless the URL names a protocol.
    pub async fn start_degraded(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        let (client, fallback) = open_url(url)?;
        let tb = TbClient::lazy_with_fallback(client, fallback, config);
        let started = crate::startup::check_store(&tb, true).await?;
        if started.degraded {
            tb.store(None);
            tb.inner.degraded.store(true, Ordering::Relaxed);
        }
        Ok(tb)
    }

    /// Whether [`TbClient::start_degraded`] found Redis unreachable (SPEC U2).
    pub fn started_degraded(&self) -> bool {
        self.inner.degraded.load(Ordering::Relaxed)
    }

    /// A client that connects on first use; no I/O here, no module check. The protocol is
    /// the one `client` was configured with.
    pub fn lazy(client: redis::Client, config: ClientConfig) -> TbClient {
        TbClient::lazy_with_fallback(client, None, config)
    }

    fn lazy_with_fallback(
        client: redis::Client,
        resp2_fallback: Option<redis::Client>,
        config: ClientConfig,
    ) -> TbClient {
        let addr = client.get_connection_info().addr().to_string();
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

    fn redis_client(&self) -> &redis::Client {
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

    async fn check_module_within(&self, limit: Duration) -> Result<(), Error> {
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
    async fn module_loaded(&self, limit: Duration) -> Result<bool, Error> {
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
    async fn startup_query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, Error> {
        if self.current().is_none() {
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

    /// `TB.TAKE key capacity rate n` on the server's clock.
    pub async fn take(&self, key: &str, capacity: f64, rate: f64, n: f64) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.TAKE");
        cmd.arg(key).arg(num(capacity)).arg(num(rate)).arg(num(n));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.TAKE")
    }

    /// `TB.MTAKE`: every bucket's tokens or none, in one round trip.
    pub async fn mtake(&self, charges: &[Charge]) -> Result<MultiReply, Error> {
        if charges.is_empty() {
            return Err(Error::NoBuckets {
                command: "TB.MTAKE",
            });
        }
        let mut cmd = redis::cmd("TB.MTAKE");
        cmd.arg(charges.len());
        for c in charges {
            check_shape(c.capacity, c.rate)?;
            check_n(c.n)?;
            cmd.arg(c.key.as_str());
        }
        for c in charges {
            cmd.arg(num(c.capacity)).arg(num(c.rate)).arg(num(c.n));
        }
        let v = self.call(&cmd).await?;
        self.multi_reply(&v, charges.len())
    }

    /// The reply of TB.MTAKE sent from a command the caller encoded (the limiter, with its
    /// policies' numbers formatted once, awaits [`TbClient::call`] itself: one async level
    /// less on the request path): `keys` buckets. With one bucket the command is TB.TAKE
    /// (the same decision; a reply half the size to parse), and its reply is given in
    /// TB.MTAKE's shape.
    pub(crate) fn mtake_reply(&self, v: &Value, keys: usize) -> Result<MultiReply, Error> {
        if keys == 1 {
            let r = self.reply4(v, "TB.TAKE")?;
            return Ok(MultiReply {
                allowed: r.allowed,
                remaining: r.remaining,
                retry_after: r.retry_after,
                reset_after: r.reset_after,
                buckets: vec![r],
            });
        }
        self.multi_reply(v, keys)
    }

    /// `TB.PEEK key capacity rate`: the bucket as it stands; writes nothing.
    pub async fn peek(&self, key: &str, capacity: f64, rate: f64) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        let mut cmd = redis::cmd("TB.PEEK");
        cmd.arg(key).arg(num(capacity)).arg(num(rate));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.PEEK")
    }

    /// `TB.REFUND key capacity rate n`: gives `n` tokens back, never above capacity.
    pub async fn refund(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        n: f64,
    ) -> Result<Reply, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.REFUND");
        cmd.arg(key).arg(num(capacity)).arg(num(rate)).arg(num(n));
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.REFUND")
    }

    /// One TB.REFUND per charge, pipelined in one round trip.
    pub async fn refund_many(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        if charges.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for c in charges {
            check_shape(c.capacity, c.rate)?;
            check_n(c.n)?;
            pipe.cmd("TB.REFUND")
                .arg(c.key.as_str())
                .arg(num(c.capacity))
                .arg(num(c.rate))
                .arg(num(c.n));
        }
        let mut conn = self.connection().await?;
        let limit = self.inner.config.call_timeout;
        let v = match tokio::time::timeout(limit, pipe.query_async::<Value>(&mut conn)).await {
            Err(_) => Err(self.timeout(limit)),
            Ok(r) => r.map_err(|e| self.classify(e)),
        };
        let v = self.after_call(v)?;
        match v {
            Value::Array(items) if items.len() == charges.len() => items
                .iter()
                .map(|item| self.reply4(item, "TB.REFUND"))
                .collect(),
            other => Err(self.unexpected("TB.REFUND", format!("pipeline reply {other:?}"))),
        }
    }

    /// `TB.WINDOW key limit window n [now] MODE`: at most `limit` per `window` seconds
    /// (`n` the cost, 0 reports), `now` in Unix seconds or the server's clock. The reply
    /// has TB.TAKE's shape.
    pub async fn window(
        &self,
        key: &str,
        limit: f64,
        window: f64,
        n: f64,
        now: Option<f64>,
        mode: WindowMode,
    ) -> Result<Reply, Error> {
        let positive = |name, value: f64| {
            if value > 0.0 && value <= MAX_NUMBER {
                Ok(())
            } else {
                Err(Error::InvalidArgument {
                    name,
                    value,
                    rule: "> 0 and <= 2^53",
                })
            }
        };
        positive("limit", limit)?;
        positive("window", window)?;
        check_n(n)?;
        let mut cmd = redis::cmd("TB.WINDOW");
        cmd.arg(key).arg(num(limit)).arg(num(window)).arg(num(n));
        if let Some(now) = now {
            if !(now.is_finite() && now >= 0.0) {
                return Err(Error::InvalidArgument {
                    name: "now",
                    value: now,
                    rule: ">= 0 Unix seconds and finite",
                });
            }
            cmd.arg(num(now));
        }
        cmd.arg(mode.arg());
        let v = self.call(&cmd).await?;
        self.reply4(&v, "TB.WINDOW")
    }

    /// TB.ACQUIRE from a command the caller encoded (SPEC N2): `keys` buckets after TAKE
    /// (0: the form without TAKE).
    pub(crate) async fn acquire_encoded(&self, cmd: &Cmd, keys: usize) -> Result<Acquired, Error> {
        let v = self.call(cmd).await?;
        parse_acquire(&v, keys).map_err(|detail| self.unexpected("TB.ACQUIRE", detail))
    }

    /// TB.WINDOW from a command the caller encoded (SPEC W2), in TB.MTAKE's shape.
    pub(crate) async fn window_encoded(&self, cmd: &Cmd) -> Result<MultiReply, Error> {
        let v = self.call(cmd).await?;
        let r = self.reply4(&v, "TB.WINDOW")?;
        Ok(MultiReply {
            allowed: r.allowed,
            remaining: r.remaining,
            retry_after: r.retry_after,
            reset_after: r.reset_after,
            buckets: vec![r],
        })
    }

    /// `TB.RELEASE key lease_id`: `(released, in_flight)` (SPEC N4).
    pub async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        let mut cmd = redis::cmd("TB.RELEASE");
        cmd.arg(key).arg(id);
        let v = self.call(&cmd).await?;
        match &v {
            Value::Array(items) if items.len() == 2 => Ok((
                flag(&items[0]).map_err(|d| self.unexpected("TB.RELEASE", d))?,
                number(&items[1]).map_err(|d| self.unexpected("TB.RELEASE", d))?,
            )),
            other => Err(self.unexpected("TB.RELEASE", format!("{other:?}"))),
        }
    }

    /// `TB.RENEW key lease_id lease_ms`: `(renewed, in_flight, ms)` (SPEC N5).
    pub async fn renew(
        &self,
        key: &str,
        id: &str,
        lease_ms: u64,
    ) -> Result<(bool, f64, f64), Error> {
        let mut cmd = redis::cmd("TB.RENEW");
        cmd.arg(key).arg(id).arg(lease_ms);
        let v = self.call(&cmd).await?;
        match &v {
            Value::Array(items) if items.len() == 3 => {
                let bad = |d| self.unexpected("TB.RENEW", d);
                Ok((
                    flag(&items[0]).map_err(bad)?,
                    number(&items[1]).map_err(bad)?,
                    number(&items[2]).map_err(bad)?,
                ))
            }
            other => Err(self.unexpected("TB.RENEW", format!("{other:?}"))),
        }
    }

    /// `TB.HOLD key capacity rate estimate ttl_ms` (SPEC G1).
    pub async fn hold(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        estimate: f64,
        ttl_ms: u64,
    ) -> Result<HoldReply, Error> {
        check_shape(capacity, rate)?;
        check_n(estimate)?;
        let mut cmd = redis::cmd("TB.HOLD");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(num(estimate))
            .arg(ttl_ms);
        let v = self.call(&cmd).await?;
        parse_hold(&v).map_err(|d| self.unexpected("TB.HOLD", d))
    }

    /// `TB.SETTLE key capacity rate hold_id actual max_wait` (SPEC G3): an excess over the
    /// estimate leaves a debt of at most `max_wait x rate` (the limiter sends `capacity /
    /// rate`: at most one bucket).
    pub async fn settle(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        id: &str,
        actual: f64,
        max_wait: f64,
    ) -> Result<SettleReply, Error> {
        check_shape(capacity, rate)?;
        check_n(actual)?;
        if !(max_wait.is_finite() && max_wait >= 0.0) {
            return Err(Error::InvalidArgument {
                name: "max_wait",
                value: max_wait,
                rule: ">= 0 seconds and finite",
            });
        }
        let mut cmd = redis::cmd("TB.SETTLE");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(id)
            .arg(num(actual))
            .arg(num(max_wait));
        let v = self.call(&cmd).await?;
        parse_settle(&v).map_err(|d| self.unexpected("TB.SETTLE", d))
    }

    /// `TB.THROTTLE key max_burst count_per_period period quantity` (redis-cell's
    /// `CL.THROTTLE`), on TB.TAKE's engine.
    pub async fn throttle(
        &self,
        key: &str,
        max_burst: u64,
        count_per_period: f64,
        period: f64,
        quantity: i64,
    ) -> Result<Throttle, Error> {
        let invalid = |name, value: f64, rule| Error::InvalidArgument { name, value, rule };
        if max_burst as f64 >= MAX_NUMBER {
            return Err(invalid("max_burst", max_burst as f64, "< 2^53"));
        }
        if !(count_per_period > 0.0 && count_per_period.is_finite()) {
            return Err(invalid(
                "count_per_period",
                count_per_period,
                "> 0 and finite",
            ));
        }
        if !(period > 0.0 && period.is_finite()) {
            return Err(invalid("period", period, "> 0 seconds and finite"));
        }
        if quantity.unsigned_abs() > 1u64 << 53 {
            return Err(invalid("quantity", quantity as f64, "within +-2^53"));
        }
        let mut cmd = redis::cmd("TB.THROTTLE");
        cmd.arg(key)
            .arg(max_burst)
            .arg(num(count_per_period))
            .arg(num(period))
            .arg(quantity);
        let v = self.call(&cmd).await?;
        parse_throttle(&v).map_err(|detail| self.unexpected("TB.THROTTLE", detail))
    }

    /// `TB.RESERVE key capacity rate n max_wait`: take now, or reserve and wait up to
    /// `max_wait` seconds.
    pub async fn reserve(
        &self,
        key: &str,
        capacity: f64,
        rate: f64,
        n: f64,
        max_wait: f64,
    ) -> Result<Reservation, Error> {
        check_shape(capacity, rate)?;
        check_n(n)?;
        if !(max_wait.is_finite() && max_wait >= 0.0) {
            return Err(Error::InvalidArgument {
                name: "max_wait",
                value: max_wait,
                rule: ">= 0 seconds and finite",
            });
        }
        let mut cmd = redis::cmd("TB.RESERVE");
        cmd.arg(key)
            .arg(num(capacity))
            .arg(num(rate))
            .arg(num(n))
            .arg(num(max_wait));
        let v = self.call(&cmd).await?;
        let r = self.reply4(&v, "TB.RESERVE")?;
        Ok(Reservation {
            allowed: r.allowed,
            remaining: r.remaining,
            wait: r.retry_after,
            reset_after: r.reset_after,
        })
    }

    /// One attempt of `cmd` within the call timeout.
    pub(crate) async fn call(&self, cmd: &Cmd) -> Result<Value, Error> {
        let v = self.query(cmd, self.inner.config.call_timeout).await;
        self.after_call(v)
    }

    async fn query(&self, cmd: &Cmd, limit: Duration) -> Result<Value, Error> {
        // The connected case without the reconnecting future: the reconnect (2.3 KB of
        // connection setup state) is boxed, so that every call's future, and every future
        // above it up to the layer's request future, stays small (about 340 bytes here
        // instead of 2.5 KB) and is cheaper to move; only a reconnect pays the allocation.
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
    fn after_call(&self, v: Result<Value, Error>) -> Result<Value, Error> {
        if let Err(e) = &v
            && e.breaks_connection()
        {
            self.store(None);
        }
        v
    }

    async fn connection(&self) -> Result<MultiplexedConnection, Error> {
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

    async fn open(&self, limit: Duration) -> Result<MultiplexedConnection, Error> {
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

    fn current(&self) -> Option<MultiplexedConnection> {
        // A poisoned lock only means another thread panicked while swapping an Option: the
        // value inside is still a valid Option.
        let guard = self.inner.conn.read().unwrap_or_else(|e| e.into_inner());
        guard.clone()
    }

    fn store(&self, conn: Option<MultiplexedConnection>) {
        let mut guard = self.inner.conn.write().unwrap_or_else(|e| e.into_inner());
        *guard = conn;
    }

    fn timeout(&self, timeout: Duration) -> Error {
        Error::Timeout {
            addr: self.inner.addr.clone(),
            timeout,
        }
    }

    fn classify(&self, source: RedisError) -> Error {
        let addr = self.inner.addr.clone();
        match source.kind() {
            ErrorKind::Server(_) | ErrorKind::Extension => Error::Server { addr, source },
            _ => Error::Connection { addr, source },
        }
    }

    fn unexpected(&self, command: &'static str, detail: String) -> Error {
        Error::UnexpectedReply {
            addr: self.inner.addr.clone(),
            command,
            detail,
        }
    }

    fn reply4(&self, v: &Value, command: &'static str) -> Result<Reply, Error> {
        parse_reply(v).map_err(|detail| self.unexpected(command, detail))
    }

    fn multi_reply(&self, v: &Value, keys: usize) -> Result<MultiReply, Error> {
        parse_multi_reply(v, keys).map_err(|detail| self.unexpected("TB.MTAKE", detail))
    }
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
fn open_url(url: &str) -> Result<(redis::Client, Option<redis::Client>), Error> {
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

/// Decodes `[allowed, remaining, retry_after, reset_after]` (RESP2 bulk texts or RESP3
/// doubles).
pub(crate) fn parse_reply(v: &Value) -> Result<Reply, String> {
    match v {
        Value::Array(items) if items.len() == 4 => Ok(Reply {
            allowed: flag(&items[0])?,
            remaining: number(&items[1])?,
            retry_after: number(&items[2])?,
            reset_after: number(&items[3])?,
        }),
        other => Err(format!("expected a 4-element array, got {other:?}")),
    }
}

/// Decodes TB.MTAKE's `[allowed, remaining, retry_after, reset_after, [per key ...]]`.
pub(crate) fn parse_multi_reply(v: &Value, keys: usize) -> Result<MultiReply, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let [allowed, remaining, retry_after, reset_after, per_key] = items.as_slice() else {
        return Err(format!("expected 5 elements, got {}", items.len()));
    };
    let Value::Array(per_key) = per_key else {
        return Err(format!("expected the per-key array, got {per_key:?}"));
    };
    if per_key.len() != keys {
        return Err(format!(
            "expected {keys} per-key replies, got {}",
            per_key.len()
        ));
    }
    Ok(MultiReply {
        allowed: flag(allowed)?,
        remaining: number(remaining)?,
        retry_after: number(retry_after)?,
        reset_after: number(reset_after)?,
        buckets: per_key.iter().map(parse_reply).collect::<Result<_, _>>()?,
    })
}

fn id_of(v: &Value) -> Result<Option<String>, String> {
    match v {
        Value::Nil => Ok(None),
        Value::BulkString(b) => std::str::from_utf8(b)
            .map(|s| Some(s.to_owned()))
            .map_err(|_| format!("non-UTF-8 id {b:?}")),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        other => Err(format!("expected an id or nil, got {other:?}")),
    }
}

/// Decodes TB.ACQUIRE's reply (SPEC N2), with `keys` buckets after TAKE.
pub(crate) fn parse_acquire(v: &Value, keys: usize) -> Result<Acquired, String> {
    let Value::Array(items) = v else {
        return Err(format!("expected an array, got {v:?}"));
    };
    let (head, buckets) = match (items.as_slice(), keys) {
        ([g, n, id, ms], 0) => ([g, n, id, ms], Vec::new()),
        ([g, n, id, ms, _, Value::Array(per_key)], k) if per_key.len() == k => (
            [g, n, id, ms],
            per_key.iter().map(parse_reply).collect::<Result<_, _>>()?,
        ),
        _ => return Err(format!("unexpected TB.ACQUIRE reply {v:?}")),
    };
    let [g, n, id, ms] = head;
    Ok(Acquired {
        granted: flag(g)?,
        in_flight: number(n)?,
        id: id_of(id)?,
        ms: number(ms)?,
        buckets,
    })
}

/// Decodes TB.HOLD's five fields.
pub(crate) fn parse_hold(v: &Value) -> Result<HoldReply, String> {
    match v {
        Value::Array(items) if items.len() == 5 => Ok(HoldReply {
            reply: Reply {
                allowed: flag(&items[0])?,
                remaining: number(&items[1])?,
                retry_after: number(&items[2])?,
                reset_after: number(&items[3])?,
            },
            id: id_of(&items[4])?,
        }),
        other => Err(format!("expected a 5-element array, got {other:?}")),
    }
}

/// Decodes TB.SETTLE's four fields.
pub(crate) fn parse_settle(v: &Value) -> Result<SettleReply, String> {
    match v {
        Value::Array(items) if items.len() == 4 => Ok(SettleReply {
            settled: flag(&items[0])?,
            remaining: number(&items[1])?,
            charged: number(&items[2])?,
            reset_after: number(&items[3])?,
        }),
        other => Err(format!("expected a 4-element array, got {other:?}")),
    }
}

/// Decodes TB.THROTTLE's five integers.
pub(crate) fn parse_throttle(v: &Value) -> Result<Throttle, String> {
    let int = |v: &Value| match v {
        Value::Int(i) => Ok(*i),
        other => Err(format!("expected an integer, got {other:?}")),
    };
    match v {
        Value::Array(items) if items.len() == 5 => Ok(Throttle {
            limited: flag(&items[0])?,
            limit: int(&items[1])?,
            remaining: int(&items[2])?,
            retry_after: int(&items[3])?,
            reset_after: int(&items[4])?,
        }),
        other => Err(format!("expected a 5-element array, got {other:?}")),
    }
}

fn flag(v: &Value) -> Result<bool, String> {
    match v {
        Value::Int(0) | Value::Boolean(false) => Ok(false),
        Value::Int(1) | Value::Boolean(true) => Ok(true),
        other => Err(format!("expected 0 or 1, got {other:?}")),
    }
}

fn number(v: &Value) -> Result<f64, String> {
    let text = match v {
        Value::Double(d) => return finite(*d),
        Value::Int(i) => return Ok(*i as f64),
        Value::BulkString(b) => {
            std::str::from_utf8(b).map_err(|_| format!("non-UTF-8 number {b:?}"))?
        }
        Value::SimpleString(s) => s.as_str(),
        other => return Err(format!("expected a number, got {other:?}")),
    };
    let d = text
        .parse::<f64>()
        .map_err(|_| format!("not a number: {text:?}"))?;
    finite(d)
}

fn finite(d: f64) -> Result<f64, String> {
    if d.is_finite() {
        Ok(d)
    } else {
        Err(format!("non-finite number {d}"))
    }
}

/// The module's number syntax: plain decimal (Rust's shortest round-trip `Display`, which
/// never uses an exponent), and `0` rather than `-0`.
pub(crate) fn num(x: f64) -> String {
    if x == 0.0 {
        "0".to_owned()
    } else {
        format!("{x}")
    }
}

pub(crate) fn check_shape(capacity: f64, rate: f64) -> Result<(), Error> {
    if !(capacity > 0.0 && capacity <= MAX_NUMBER) {
        return Err(Error::InvalidArgument {
            name: "capacity",
            value: capacity,
            rule: "> 0 and <= 2^53",
        });
    }
    if !((MIN_RATE..=MAX_NUMBER).contains(&rate)) {
        return Err(Error::InvalidArgument {
            name: "rate",
            value: rate,
            rule: ">= 1e-9 and <= 2^53 tokens per second",
        });
    }
    Ok(())
}

pub(crate) fn check_n(n: f64) -> Result<(), Error> {
    if (0.0..=MAX_NUMBER).contains(&n) {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            name: "n",
            value: n,
            rule: ">= 0 and <= 2^53",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn resp2_reply_with_bulk_numbers_decodes() {
        let v = Value::Array(vec![Value::Int(0), bulk("0.5"), bulk("1.5"), bulk("4.75")]);
        let r = parse_reply(&v).unwrap();
        assert_eq!(
            r,
            Reply {
                allowed: false,
                remaining: 0.5,
                retry_after: 1.5,
                reset_after: 4.75
            }
        );
        assert!(!r.never());
    }

    #[test]
    fn resp3_reply_with_doubles_decodes() {
        let v = Value::Array(vec![
            Value::Int(0),
            Value::Double(9.0),
            Value::Double(-1.0),
            Value::Double(0.0),
        ]);
        assert!(parse_reply(&v).unwrap().never());
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for v in [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(2), bulk("1"), bulk("0"), bulk("0")]),
            Value::Array(vec![Value::Int(1), bulk("x"), bulk("0"), bulk("0")]),
            Value::Array(vec![Value::Int(1), bulk("inf"), bulk("0"), bulk("0")]),
            Value::Array(vec![
                Value::Int(1),
                Value::BulkString(vec![0xff]),
                bulk("0"),
                bulk("0"),
            ]),
            Value::Array(vec![Value::Int(1), Value::Nil, bulk("0"), bulk("0")]),
        ] {
            assert!(parse_reply(&v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn mtake_reply_decodes_and_checks_the_key_count() {
        let one = Value::Array(vec![Value::Int(1), bulk("2"), bulk("0"), bulk("3")]);
        let v = Value::Array(vec![
            Value::Int(1),
            bulk("2"),
            bulk("0"),
            bulk("3"),
            Value::Array(vec![one.clone(), one]),
        ]);
        let r = parse_multi_reply(&v, 2).unwrap();
        assert!(r.allowed);
        assert_eq!(r.buckets.len(), 2);
        assert!(parse_multi_reply(&v, 3).is_err());
        assert!(parse_multi_reply(&Value::Array(vec![Value::Int(1)]), 1).is_err());
    }

    #[test]
    fn numbers_are_sent_as_plain_decimals() {
        assert_eq!(num(1e-9), "0.000000001");
        assert_eq!(num(1000.0 / 3600.0), "0.2777777777777778");
        assert_eq!(num(10.0), "10");
        assert_eq!(num(-0.0), "0");
        assert_eq!(num(MAX_NUMBER), "9007199254740992");
    }

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

    #[test]
    fn out_of_range_arguments_are_refused_before_sending() {
        assert!(check_shape(0.0, 1.0).is_err());
        assert!(check_shape(f64::NAN, 1.0).is_err());
        assert!(check_shape(1.0, 1e-10).is_err());
        assert!(check_shape(1.0, f64::INFINITY).is_err());
        assert!(check_shape(MAX_NUMBER, MIN_RATE).is_ok());
        assert!(check_n(-1.0).is_err());
        assert!(check_n(f64::NAN).is_err());
        assert!(check_n(0.0).is_ok());
    }
}
