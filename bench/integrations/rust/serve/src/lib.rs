//! The two floors of the Rust overhead benchmark, and the app it serves in a separate
//! process for a before/after run (`src/main.rs`): what a request costs with one round
//! trip to Redis and nothing else.
//!
//! - [`ping`]: one bare `PING` per request on a multiplexed connection of the `redis`
//!   crate (the client library's floor);
//! - [`raw_ping`]: one pre-encoded `*1\r\n$4\r\nPING\r\n` per request written on a raw
//!   `TcpStream`, `+PONG\r\n` read back (persistent connections, one per request in
//!   flight, no client library: the round trip's own floor).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use redis_tb_client::redis::aio::MultiplexedConnection;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
