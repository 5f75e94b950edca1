//! The two floors of the Rust overhead benchmark, the layer's policies and client, and the
//! app it serves in a separate process for a before/after run (`src/main.rs`): what a
//! request costs with one round trip to Redis and nothing else.
//!
//! - [`ping`]: one bare `PING` per request on a multiplexed connection of the `redis`
//!   crate (the client library's floor);
//! - [`raw_ping`]: one pre-encoded `*1\r\n$4\r\nPING\r\n` per request written on a raw
//!   `TcpStream`, `+PONG\r\n` read back (persistent connections, one per request in
//!   flight, no client library: the round trip's own floor).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use redis_tb_client::redis::aio::MultiplexedConnection;
use redis_tb_client::{ClientConfig, Key, Policy, RateLimitLayer, TbClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Limits no request reaches: every request is admitted, so every variant answers 200.
pub const HUGE: f64 = 1e9;

/// The layer's policies: `ip`; with `three`, also `user` (by the `Authorization` header)
/// and `all` (one fixed key), in one TB.MTAKE.
pub fn policies(three: bool) -> Vec<Policy> {
    let mut out = vec![Policy::per_second("ip", HUGE)];
    if three {
        out.push(
            Policy::per_second("user", HUGE).key(Key::header(axum::http::header::AUTHORIZATION)),
        );
        out.push(Policy::per_second("all", HUGE).key(Key::fixed("everyone")));
    }
    out
}

/// The layer's client, with a generous call timeout: on a shared machine a slow reply must
/// not turn into a store error (a fail-open request skips Redis and would flatter the
/// layer).
pub async fn connect(url: &str) -> Result<TbClient, redis_tb_client::Error> {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(2),
        ..ClientConfig::default()
    };
    TbClient::connect_with(url, config).await
}

/// The layer of the `one` (`three: false`) and `three` variants: [`policies`] on a client
/// of its own ([`connect`]).
pub async fn layer(url: &str, three: bool) -> Result<RateLimitLayer, Box<dyn std::error::Error>> {
    let mut b = RateLimitLayer::builder(connect(url).await?);
    for p in policies(three) {
        b = b.policy(p);
    }
    Ok(b.build()?)
}

/// One bare `PING` per request on a shared multiplexed connection, then the handler.
pub async fn ping(conn: MultiplexedConnection, req: Request, next: Next) -> Response {
    let mut conn = conn;
    let pong: Result<String, _> = redis_tb_client::redis::cmd("PING")
        .query_async(&mut conn)
        .await;
    match pong {
        Ok(_) => next.run(req).await,
        Err(e) => unavailable(&e.to_string()),
    }
}

fn unavailable(why: &str) -> Response {
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        format!("PING failed: {why}"),
    )
        .into_response()
}

/// The raw floor's request and the one answer it accepts.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const PONG: &[u8] = b"+PONG\r\n";

/// Idle raw connections to Redis: a request takes one (or opens one) and puts it back, so
/// there are as many as requests in flight.
#[derive(Clone)]
pub struct RawPool {
    addr: String,
    idle: Arc<Mutex<Vec<TcpStream>>>,
}

impl RawPool {
    /// A pool of connections to `addr` (`host:port`), opened as requests need them.
    pub fn new(addr: &str) -> RawPool {
        RawPool {
            addr: addr.to_owned(),
            idle: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn take(&self) -> Option<TcpStream> {
        self.idle.lock().ok().and_then(|mut v| v.pop())
    }

    fn put(&self, conn: TcpStream) {
        if let Ok(mut v) = self.idle.lock() {
            v.push(conn);
        }
    }

    /// One `PING`, `+PONG` read back.
    pub async fn ping(&self) -> std::io::Result<()> {
        let mut conn = match self.take() {
            Some(c) => c,
            None => {
                let c = TcpStream::connect(&self.addr).await?;
                c.set_nodelay(true)?;
                c
            }
        };
        conn.write_all(PING).await?;
        let mut reply = [0u8; 7];
        conn.read_exact(&mut reply).await?;
        if reply != PONG {
            return Err(std::io::Error::other(format!("PING answered {reply:?}")));
        }
        self.put(conn);
        Ok(())
    }
}

/// One raw `PING` per request, then the handler.
pub async fn raw_ping(pool: RawPool, req: Request, next: Next) -> Response {
    match pool.ping().await {
        Ok(()) => next.run(req).await,
        Err(e) => unavailable(&e.to_string()),
    }
}
