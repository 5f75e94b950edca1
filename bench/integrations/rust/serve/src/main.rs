//! One variant of the overhead benchmark's app in a process of its own, for
//! `cargo run --release -p redis-tb-bench-integrations --bin before_after`, which builds
//! this file against two versions of the client crate and measures each process's CPU.
//!
//! `redis-tb-bench-serve <none|ping|rawping|one|three> <redis-url>`: serves `GET /`
//! (answering `hello`) on 127.0.0.1:<free port> on a single-threaded tokio runtime, prints
//! `listening <addr>` on stdout, and exits when its stdin closes (so it never outlives the
//! benchmark). `one` is the layer with policy `ip`; `three` adds `user` (by the
//! `Authorization` header) and `all` (one fixed key), one TB.MTAKE; their limits are so
//! high that every request is admitted.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;

use axum::Router;
use axum::middleware;
use axum::routing::get;
use redis_tb_bench_serve::{RawPool, layer, ping, raw_ping};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

async fn app(variant: &str, url: &str) -> Result<Router> {
    let router = Router::new().route("/", get(|| async { "hello" }));
    Ok(match variant {
        "none" => router,
        "ping" => {
            let conn = redis_tb_client::redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await?;
            router.layer(middleware::from_fn(move |req, next| {
                ping(conn.clone(), req, next)
            }))
        }
        "rawping" => {
            let authority = url
                .strip_prefix("redis://")
                .and_then(|rest| rest.split(['/', '?']).next())
                .ok_or("rawping needs a redis://host:port URL")?;
            let pool = RawPool::new(authority);
            router.layer(middleware::from_fn(move |req, next| {
                raw_ping(pool.clone(), req, next)
            }))
        }
        "one" => router.layer(layer(url, false).await?),
        "three" => router.layer(layer(url, true).await?),
        other => return Err(format!("unknown variant {other:?}").into()),
    })
}

async fn run(variant: &str, url: &str) -> Result<()> {
    let router = app(variant, url).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let mut out = tokio::io::stdout();
    out.write_all(format!("listening {addr}\n").as_bytes())
        .await?;
    out.flush().await?;
    let server = axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    );
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    tokio::select! {
        served = server => served?,
        _ = async { while stdin.read(&mut buf).await.is_ok_and(|n| n > 0) {} } => {}
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(variant), Some(url)) = (args.next(), args.next()) else {
        return Err("usage: redis-tb-bench-serve <none|ping|rawping|one|three> <redis-url>".into());
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(&variant, &url))
}
