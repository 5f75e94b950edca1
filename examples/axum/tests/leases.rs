//! The tower layer's leases and holds end to end (SPEC N4, N5, G1-G3): a real redis-server
//! with the module on a free loopback port, an axum app served on another, raw HTTP/1.1
//! over TCP (so a test can stop reading, or hang up, mid-body), and the server's own view
//! of the lease key (`TB.PEEK key LEASES`) and the bucket (`TB.PEEK key capacity rate`).
//! Waits are bounded polls of the server's state, never a timing threshold on the client.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Extension;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use redis_tb_axum_example::support::{RedisServer, Served, serve};
use redis_tb_client::{ClientConfig, Decision, Limit, Policy, RateLimitLayer, TbClient};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const LEASE_KEY: &str = "rl:conc:127.0.0.1";

fn timeouts() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

/// `GET /stream` sends `first`, waits for a permit of `gate`, then sends `last` and ends;
/// `GET /hold` holds 100 on `tokens` and settles 30. `conc` is an in-flight limit of 1.
async fn start(
    redis: &RedisServer,
    lease: f64,
    name: &str,
) -> Result<(Served, Arc<Semaphore>), Box<dyn std::error::Error>> {
    let client = TbClient::connect_with(&redis.url(), timeouts()).await?;
    // The recorder before the layer (it registers its metrics when built).
    let _ = redis_tb_axum_example::prometheus();
    let layer = RateLimitLayer::builder(client)
        .name(name)
        .policy(
            Policy::new("conc", Limit::in_flight(1.0, lease))
                .route(axum::http::Method::GET, "/stream"),
        )
        .policy(
            Policy::new("tokens", Limit::new(1000.0, 1e-9))
                .route(axum::http::Method::GET, "/hold")
                .settle_later(true),
        )
        .build()?;
    let gate = Arc::new(Semaphore::new(0));
    let g = gate.clone();
    let app = Router::new()
        .route(
            "/stream",
            get(move || {
                let gate = g.clone();
                async move {
                    let chunks = futures_util::stream::unfold(0u8, move |step| {
                        let gate = gate.clone();
                        async move {
                            match step {
                                0 => Some((
                                    Ok::<_, std::convert::Infallible>(Bytes::from_static(
                                        b"first\n",
                                    )),
                                    1,
                                )),
                                1 => {
                                    let _ = gate.acquire().await.map(|p| p.forget());
                                    Some((Ok(Bytes::from_static(b"last\n")), 2))
                                }
                                _ => None,
                            }
                        }
                    });
                    Body::from_stream(chunks)
                }
            }),
        )
        .route("/hold", get(hold))
        .layer(layer);
    Ok((serve(app).await?, gate))
}

async fn hold(Extension(d): Extension<Decision>) -> Response {
    let h = match d.hold("tokens", 100.0, 60.0).await {
        Ok(h) => h,
        Err(e) => {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
        }
    };
    let held = h.remaining;
    match h.settle(30.0).await {
        Ok(s) => Json(json!({
            "held": h.allowed,
            "remaining_after_hold": held,
            "settled": s.settled,
            "charged": s.charged,
            "remaining": s.remaining,
        }))
        .into_response(),
        Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A request on a raw connection, read until `marker` arrived; the connection is returned
/// with what was read.
async fn open(
    served: &Served,
    path: &str,
    marker: &str,
) -> Result<(TcpStream, String), Box<dyn std::error::Error>> {
    let mut s = TcpStream::connect(served.addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n").as_bytes())
        .await?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(marker) {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await??;
        if n == 0 {
            return Err(format!(
                "closed before {marker:?}: {}",
                String::from_utf8_lossy(&seen)
            )
            .into());
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok((s, String::from_utf8_lossy(&seen).into_owned()))
}

/// `redis_tb_leases_in_flight{limiter=<name>,policy="conc"}` from the exporter (SPEC M2).
fn gauge(limiter: &str) -> Option<f64> {
    let text = redis_tb_axum_example::prometheus()?.render();
    let want = format!("redis_tb_leases_in_flight{{limiter=\"{limiter}\",policy=\"conc\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(want.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// The live leases of the key, as the server counts them (`TB.PEEK key LEASES`).
fn leases(redis: &RedisServer) -> Result<i64, Box<dyn std::error::Error>> {
    let reply = redis.command(&["TB.PEEK", LEASE_KEY, "LEASES"])?;
    // RESP2: *2\r\n:<in_flight>\r\n:<ms>\r\n
    let n = reply
        .split("\r\n")
        .nth(1)
        .and_then(|l| l.strip_prefix(':'))
        .ok_or_else(|| format!("unexpected TB.PEEK reply {reply:?}"))?;
    Ok(n.parse()?)
}

/// Polls until the server counts `want` leases (bounded: 5 s).
async fn until_leases(redis: &RedisServer, want: i64) -> TestResult {
    for _ in 0..100 {
        if leases(redis)? == want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "the server still counts {} leases, not {want}",
        leases(redis)?
    )
    .into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_holds_its_lease_until_its_end() -> TestResult {
    let redis = RedisServer::start()?;
    let (served, gate) = start(&redis, 30.0, "leases-stream").await?;
    let (mut conn, head) = open(&served, "/stream", "first").await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("ratelimit-policy: \"conc\";q=1\r\n"),
        "{head}"
    );
    // The handler has returned; its body has not ended: the slot is still taken (SPEC N4).
    assert_eq!(leases(&redis)?, 1);
    assert_eq!(gauge("leases-stream"), Some(1.0), "SPEC M2: one lease held");
    let (_, refused) = open(&served, "/stream", "\r\n\r\n").await?;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    gate.add_permits(1);
    let mut rest = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&rest).contains("\r\n0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await??;
        assert!(n > 0, "closed before the end of the body");
        rest.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&rest).contains("last"));
    // The body ended: the lease is released (well before its 30 s would run out).
    until_leases(&redis, 0).await?;
    assert_eq!(gauge("leases-stream"), Some(0.0), "SPEC M2: none held");
    drop(conn);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_frees_the_slot() -> TestResult {
    let redis = RedisServer::start()?;
    let (served, _gate) = start(&redis, 30.0, "leases-hangup").await?;
    let (conn, _) = open(&served, "/stream", "first").await?;
    assert_eq!(leases(&redis)?, 1);
    drop(conn); // the client hangs up; the body never ends
    until_leases(&redis, 0).await?;
    let (_, again) = open(&served, "/stream", "first").await?;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_lease_alive_past_its_lease_time() -> TestResult {
    let redis = RedisServer::start()?;
    let (served, gate) = start(&redis, 0.4, "leases-renewal").await?;
    let (conn, _) = open(&served, "/stream", "first").await?;
    // Three lease times: without the renewals every 0.2 s (SPEC N5) the server would have
    // dropped the lease (TB.PEEK does not count expired leases).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(leases(&redis)?, 1, "the lease was not renewed");
    gate.add_permits(1);
    drop(conn);
    until_leases(&redis, 0).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settled_hold_changes_the_bucket_by_actual_minus_estimate() -> TestResult {
    let redis = RedisServer::start()?;
    let (served, _gate) = start(&redis, 30.0, "leases-hold").await?;
    let (_, resp) = open(&served, "/hold", "}").await?;
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    let json_start = body.find('{').unwrap_or(0);
    let v: Value = serde_json::from_str(body[json_start..].trim())?;
    assert_eq!(v["held"], true, "{v}");
    assert_eq!(v["settled"], true, "{v}");
    assert_eq!(v["charged"].as_f64(), Some(-70.0), "{v}");
    let after_hold = v["remaining_after_hold"].as_f64().unwrap_or(f64::NAN);
    assert!((after_hold - 900.0).abs() < 1e-6, "{v}");
    // The server's bucket: the estimate's surplus came back, exactly 70 (rate 1e-9: no refill).
    let peek = redis.command(&["TB.PEEK", "rl:tokens:127.0.0.1", "1000", "0.000000001"])?;
    // RESP2: *4, then `allowed` (:n), then `remaining` (a bulk string, or :n).
    let lines: Vec<&str> = peek.split("\r\n").collect();
    let second = match lines.get(2) {
        Some(l) if l.starts_with('$') => lines.get(3).copied(),
        Some(l) => l.strip_prefix(':'),
        None => None,
    };
    let remaining: f64 = second
        .ok_or_else(|| format!("unexpected TB.PEEK reply {peek:?}"))?
        .parse()?;
    assert!((remaining - after_hold - 70.0).abs() < 1e-6, "{peek}");
    Ok(())
}
