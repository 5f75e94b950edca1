//! Issue 39's rows against real servers: the app's start (SPEC U1-U4: one line, status 3,
//! degraded only by `REDIS_TB_START_DEGRADED=1`), a single-node Redis Cluster (K6, U3),
//! an in-flight request ended at its `max_duration` (N7), and `GET /stream`'s bounds,
//! backpressure and disconnects. Waits are bounded polls of the server's state or of the
//! process, never a timing threshold on the client.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::Extension;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use redis_tb_axum_example::support::{RedisServer, Served, request, serve};
use redis_tb_axum_example::{Config, STREAM_BOUNDS, app, limiter};
use redis_tb_client::{
    ClientConfig, Decision, Error, Key, Limit, Policy, RateLimitLayer, TbClient,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const APP: &str = env!("CARGO_BIN_EXE_redis-tb-axum-example");

fn timeouts() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs the app's binary against `redis_url` until it exits (bounded: 30 s): its status
/// and what it printed on stderr.
fn run_app(
    redis_url: &str,
    env: &[(&str, &str)],
) -> Result<(i32, String), Box<dyn std::error::Error>> {
    let mut child = Command::new(APP)
        .env("REDIS_URL", redis_url)
        .env("LISTEN", format!("127.0.0.1:{}", free_port()?))
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait()? {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err)?;
            }
            return Ok((status.code().unwrap_or(-1), err));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the app did not exit within 30 s (it started?)".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A redis-server with the module as a one-node Redis Cluster owning every slot.
fn cluster() -> Result<RedisServer, Box<dyn std::error::Error>> {
    let nodes = format!(
        "nodes-rust39-{}-{}.conf",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_nanos()
    );
    let redis = RedisServer::start_with_args(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &nodes,
    ])?;
    slots(&redis)?;
    Ok(redis)
}

/// `CLUSTER ADDSLOTSRANGE 0 16383`, then until `cluster_state:ok` (bounded: 10 s).
fn slots(redis: &RedisServer) -> TestResult {
    let added = redis.command(&["CLUSTER", "ADDSLOTSRANGE", "0", "16383"])?;
    assert!(added.starts_with("+OK"), "{added}");
    for _ in 0..200 {
        if redis
            .command(&["CLUSTER", "INFO"])?
            .contains("cluster_state:ok")
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the one-node cluster never reached cluster_state:ok".into())
}

#[tokio::test]
async fn an_unreachable_redis_fails_the_apps_start_with_u2s_line_and_status_3() -> TestResult {
    let mut redis = RedisServer::start()?;
    let addr = format!("127.0.0.1:{}", redis.port());
    redis.stop();
    for env in [&[][..], &[("REDIS_TB_START_DEGRADED", "0")][..]] {
        let (status, stderr) = run_app(&redis.url(), env)?;
        assert_eq!(status, 3, "{env:?}: {stderr}");
        let line = stderr.trim_end();
        assert!(
            line.starts_with(&format!("redis-tb: cannot reach Redis at {addr} ("))
                && line.ends_with("): start it, or set start_degraded to start failing open")
                && !line.contains('\n'),
            "{line}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn only_redis_tb_start_degraded_1_starts_the_app_with_redis_unreachable() -> TestResult {
    let mut redis = RedisServer::start()?;
    let addr = format!("127.0.0.1:{}", redis.port());
    redis.stop();
    let port = free_port()?;
    let mut child = Command::new(APP)
        .env("REDIS_URL", redis.url())
        .env("LISTEN", format!("127.0.0.1:{port}"))
        .env("REDIS_TB_START_DEGRADED", "1")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = child.stdout.take().ok_or("no stdout")?;
    let lines = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(out)) {
            let Ok(line) = line else { break };
            let done = line.contains("listening on");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    });
    // It listens and fails open (no rate-limit header) until Redis answers.
    let mut answered = None;
    for _ in 0..300 {
        if let Ok(r) = request(SocketAddr::from(([127, 0, 0, 1], port)), "GET", "/", &[]).await {
            answered = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    let r = answered.ok_or("the degraded app never answered")?;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("ratelimit"), None);
    let seen = lines.join().map_err(|_| "reader panicked")?;
    let want = format!(
        "redis-tb: Redis at {addr} unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)"
    );
    assert!(
        seen.iter().any(|l| l.ends_with(&want)),
        "the U2 line is logged once: {seen:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_without_the_module_fails_the_apps_start_with_u1s_line_and_status_3() -> TestResult
{
    // SPEC E1: where REDIS_TB_BACKEND=module forces it (auto chooses the scripts).
    let bare = RedisServer::start_without_module()?;
    let (status, stderr) = run_app(
        &bare.url(),
        &[
            ("REDIS_TB_START_DEGRADED", "1"),
            ("REDIS_TB_BACKEND", "module"),
        ],
    )?;
    assert_eq!(status, 3, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        format!(
            "redis-tb module not loaded on 127.0.0.1:{}: load libredis_tb.so with loadmodule",
            bare.port()
        )
    );
    Ok(())
}

#[tokio::test]
async fn a_bad_backend_setting_stops_the_app_with_one_line_and_status_2() -> TestResult {
    let bare = RedisServer::start_without_module()?;
    let (status, stderr) = run_app(&bare.url(), &[("REDIS_TB_BACKEND", "lua")])?;
    assert_eq!(status, 2, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "REDIS_TB_BACKEND: backend must be auto, module or scripts, got \"lua\""
    );
    Ok(())
}

#[tokio::test]
async fn a_cluster_fails_the_apps_start_with_u3s_line_and_status_3() -> TestResult {
    let redis = cluster()?;
    let (status, stderr) = run_app(&redis.url(), &[])?;
    assert_eq!(status, 3, "{stderr}");
    assert_eq!(
        stderr.trim_end(),
        "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'user', 'orders', 'search', 'search-strict', 'streams'), which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)"
    );
    Ok(())
}

#[tokio::test]
async fn on_a_cluster_a_limiter_with_a_tag_function_starts_and_limits_exactly() -> TestResult {
    let redis = cluster()?;
    let client = TbClient::start(&redis.url(), timeouts()).await?;
    let build = |tagged: bool| {
        let b = RateLimitLayer::builder(client.clone())
            .policy(Policy::per_hour("ip", 3.0))
            .policy(Policy::per_hour("user", 100.0).key(Key::from_fn(|p| {
                p.headers.get("x-user")?.to_str().ok().map(str::to_owned)
            })))
            .name("tagged");
        // One slot per user: the tag is the user (K4).
        match tagged {
            true => b.hash_tag(|p| p.headers.get("x-user")?.to_str().ok().map(str::to_owned)),
            false => b,
        }
        .build()
    };
    let untagged = build(false)?;
    let err = untagged
        .startup()
        .await
        .err()
        .ok_or("started on a cluster without a tag")?;
    assert!(matches!(err, Error::ClusterNeedsTag { .. }), "{err:?}");
    let layer = build(true)?;
    layer.startup().await?;
    let served = serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone()),
    )
    .await?;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        statuses.push(
            request(served.addr, "GET", "/", &[("x-user", "alice")])
                .await?
                .status,
        );
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(layer.stats().invalid_inputs(), 0);
    assert_eq!(layer.stats().store_errors(), 0);
    // The keys share alice's slot.
    let keys = redis.command(&["KEYS", "rl:*"])?;
    assert!(
        keys.contains("rl:{alice}:ip:127.0.0.1") && keys.contains("rl:{alice}:user:alice"),
        "{keys}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_start_on_a_cluster_gets_500s_never_unlimited_admissions() -> TestResult {
    let mut redis = RedisServer::start_with_args(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        &format!("nodes-rust39-degraded-{}.conf", std::process::id()),
    ])?;
    redis.stop();
    // Redis unreachable: the start is degraded, and the limiter's HELLO cannot be sent.
    let client = TbClient::start_degraded(&redis.url(), timeouts()).await?;
    let config = Config {
        cooldown: Duration::ZERO,
        ..Config::default()
    };
    let layer = limiter(client, &config)?;
    layer.startup().await?;
    let served = serve(app(Some(layer.clone()))).await?;
    redis.restart()?;
    slots(&redis)?;
    // One key (an anonymous request: `ip` only) is answered by the cluster's one node.
    let mut one_key = None;
    for _ in 0..100 {
        let r = request(served.addr, "GET", "/", &[]).await?;
        if r.header("ratelimit").is_some() {
            one_key = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(one_key.ok_or("Redis never answered")?.status, 200);
    // Two keys in different slots: CROSSSLOT, a 500 every time, never admitted.
    let before = layer.stats();
    let (errors, degraded) = (before.store_errors(), before.degraded());
    for _ in 0..5 {
        let r = request(served.addr, "GET", "/items/1", &[("x-api-key", "key-bob")]).await?;
        assert_eq!(r.status, 500, "{}", r.body);
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert_eq!(
            r.body,
            "{\"type\":\"about:blank\",\"title\":\"Internal Server Error\",\"status\":500,\"detail\":\"rate limit policies 'ip', 'user' have keys in different cluster slots: give the limiter a hash tag\"}"
        );
    }
    let s = layer.stats();
    assert_eq!(s.invalid_inputs(), 5);
    assert_eq!(
        (s.store_errors(), s.degraded()),
        (errors, degraded),
        "not the failure mode"
    );
    Ok(())
}

// ---------------------------------------------------------------- N7, GET /stream

/// The app with `streams` limited to `max_duration` seconds and an exact `tokens` bucket
/// (no refill to speak of).
async fn stream_app(
    redis: &RedisServer,
    name: &str,
    lease: f64,
    max_duration: f64,
) -> Result<(Served, RateLimitLayer), Box<dyn std::error::Error>> {
    let client = TbClient::start(&redis.url(), timeouts()).await?;
    let config = Config {
        name: name.to_owned(),
        ip: Limit::per_second(1000.0),
        streams: Limit::in_flight(2.0, lease).max_duration(max_duration),
        tokens: Limit::new(1000.0, 1e-9),
        ..Config::default()
    };
    let layer = limiter(client, &config)?;
    Ok((serve(app(Some(layer.clone()))).await?, layer))
}

/// A GET on a raw connection, read until `marker`; the connection and what was read.
async fn open(
    addr: SocketAddr,
    path: &str,
    marker: &str,
) -> Result<(TcpStream, String), Box<dyn std::error::Error>> {
    let mut s = TcpStream::connect(addr).await?;
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

/// Everything until the server closes the connection (bounded: 10 s).
async fn rest(s: &mut TcpStream) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await??;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The live leases of `key` as the server counts them (`TB.PEEK key LEASES`).
fn leases(redis: &RedisServer, key: &str) -> Result<i64, Box<dyn std::error::Error>> {
    let reply = redis.command(&["TB.PEEK", key, "LEASES"])?;
    let n = reply
        .split("\r\n")
        .nth(1)
        .and_then(|l| l.strip_prefix(':'))
        .ok_or_else(|| format!("unexpected TB.PEEK reply {reply:?}"))?;
    Ok(n.parse()?)
}

/// Polls `f` until it holds (bounded by `within`).
async fn until(
    within: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<bool, Box<dyn std::error::Error>>,
) -> TestResult {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if f()? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("not within {within:?}: {what}").into())
}

/// The tokens bucket's remaining, as the server has it.
fn tokens_remaining(redis: &RedisServer) -> Result<f64, Box<dyn std::error::Error>> {
    let peek = redis.command(&["TB.PEEK", "rl:tokens:127.0.0.1", "1000", "0.000000001"])?;
    let lines: Vec<&str> = peek.split("\r\n").collect();
    let second = match lines.get(2) {
        Some(l) if l.starts_with('$') => lines.get(3).copied(),
        Some(l) => l.strip_prefix(':'),
        None => None,
    };
    Ok(second
        .ok_or_else(|| format!("unexpected TB.PEEK reply {peek:?}"))?
        .parse()?)
}

fn metric(name: &str, limiter: &str, policy: &str) -> Option<f64> {
    let text = redis_tb_axum_example::prometheus()?.render();
    let want = format!("{name}{{limiter=\"{limiter}\",policy=\"{policy}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(want.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_is_cut_off_at_max_duration_and_its_slot_is_free_again()
-> TestResult {
    let redis = RedisServer::start()?;
    let (served, layer) = stream_app(&redis, "n7-stream", 2.0, 1.0).await?;
    let (mut conn, head) = open(
        served.addr,
        "/stream?tokens=10000&delay_ms=50&max_tokens=100",
        "data: token-1",
    )
    .await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(leases(&redis, "rl:streams:127.0.0.1")?, 1);
    // The client reads nothing more. At the deadline (1 s after the grant, before the 2 s
    // lease would expire) the lease is released: the slot is free while the client still
    // holds its connection.
    until(Duration::from_secs(5), "the slot is free", || {
        Ok(leases(&redis, "rl:streams:127.0.0.1")? == 0)
    })
    .await?;
    until(Duration::from_secs(5), "counted as timed out", || {
        Ok(layer.stats().leases_timed_out() == 1)
    })
    .await?;
    assert_eq!(
        metric("redis_tb_leases_timed_out_total", "n7-stream", "streams"),
        Some(1.0)
    );
    // The response was cut: the connection is closed, without the chunked body's end and
    // without [DONE].
    let tail = rest(&mut conn).await?;
    assert!(!tail.contains("data: [DONE]"), "{tail}");
    assert!(
        !tail.ends_with("0\r\n\r\n"),
        "the body was ended cleanly: {tail:?}"
    );
    // The writer stopped and settled what it sent: the hold's surplus came back.
    until(Duration::from_secs(5), "the hold is settled", || {
        Ok(tokens_remaining(&redis)? > 900.0)
    })
    .await?;
    // A new stream gets the slot.
    let (_, again) = open(served.addr, "/stream?tokens=1", "data: [DONE]").await?;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_not_started_at_max_duration_is_not_sent() -> TestResult {
    let redis = RedisServer::start()?;
    let client = TbClient::start(&redis.url(), timeouts()).await?;
    let layer = RateLimitLayer::builder(client)
        .policy(Policy::new(
            "conc",
            Limit::in_flight(1.0, 2.0).max_duration(0.5),
        ))
        .name("n7-unstarted")
        .build()?;
    let app = Router::new()
        .route("/never", get(std::future::pending::<&'static str>))
        .layer(layer.clone());
    let served = serve(app).await?;
    let mut s = TcpStream::connect(served.addr).await?;
    s.write_all(b"GET /never HTTP/1.1\r\nhost: test\r\n\r\n")
        .await?;
    let got = rest(&mut s).await?;
    assert_eq!(got, "", "nothing is sent, the connection is closed");
    until(Duration::from_secs(5), "counted as timed out", || {
        Ok(layer.stats().leases_timed_out() == 1)
    })
    .await?;
    until(Duration::from_secs(5), "the slot is free", || {
        Ok(leases(&redis, "rl:conc:127.0.0.1")? == 0)
    })
    .await?;
    Ok(())
}

/// SPEC N7 with an endless body whose client reads nothing: the socket's buffers and
/// hyper's fill up, the writer stops (backpressure), and at the deadline the layer's body
/// still ends the response: the server closes its end while the client reads nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_of_an_endless_body_is_cut_off_at_max_duration() -> TestResult {
    let redis = RedisServer::start()?;
    let client = TbClient::start(&redis.url(), timeouts()).await?;
    let layer = RateLimitLayer::builder(client)
        .policy(Policy::new(
            "conc",
            // A lease longer than max_duration: the slot is freed by the release at the
            // deadline, never by an expiry.
            Limit::in_flight(1.0, 2.0).max_duration(1.0),
        ))
        .name("n7-endless")
        .build()?;
    let endless = || async {
        let chunks = futures_util::stream::repeat_with(|| {
            Ok::<_, std::convert::Infallible>(Bytes::from(vec![b'x'; 65536]))
        });
        Body::from_stream(chunks)
    };
    let served = serve(
        Router::new()
            .route("/endless", get(endless))
            .layer(layer.clone()),
    )
    .await?;
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut s = socket.connect(served.addr).await?;
    s.write_all(b"GET /endless HTTP/1.1\r\nhost: test\r\n\r\n")
        .await?;
    // Reads nothing: the slot is released at the deadline...
    until(Duration::from_secs(5), "the slot is free", || {
        Ok(leases(&redis, "rl:conc:127.0.0.1")? == 0)
    })
    .await?;
    until(Duration::from_secs(5), "counted as timed out", || {
        Ok(layer.stats().leases_timed_out() == 1)
    })
    .await?;
    // ...and the server closes its end while the client still reads nothing.
    let (server, peer) = (served.addr.port(), s.local_addr()?.port());
    until(
        Duration::from_secs(5),
        "the server closed the connection",
        || Ok(tcp_state(server, peer)?.is_some_and(|st| st != ESTABLISHED)),
    )
    .await?;
    // The client gets what the kernel had buffered, then the end.
    let mut got = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut got)).await? {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => return Err(e.into()),
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &got[..got.len().min(64)]
    );
    Ok(())
}

const ESTABLISHED: u8 = 1;

/// The state (Linux `/proc/net/tcp`: 1 established, 4 FIN-WAIT-1, ...) of the server's
/// socket of the loopback connection from port `peer` to port `server`.
fn tcp_state(server: u16, peer: u16) -> Result<Option<u8>, Box<dyn std::error::Error>> {
    let table = std::fs::read_to_string("/proc/net/tcp")?;
    let (local, remote) = (format!(":{server:04X}"), format!(":{peer:04X}"));
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [_, l, r, st, ..] = f.as_slice()
            && l.ends_with(&local)
            && r.ends_with(&remote)
        {
            return Ok(Some(u8::from_str_radix(st, 16)?));
        }
    }
    Ok(None)
}

#[tokio::test]
async fn stream_bounds_are_the_manifests() -> TestResult {
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifest.json"
    ))?)?;
    let route = manifest["demo"]["routes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["stream"].is_object()))
        .ok_or("no stream route in the manifest")?;
    let bounds = &route["stream"]["bounds"];
    for (name, min, max) in STREAM_BOUNDS {
        assert_eq!(bounds[name][0].as_u64(), Some(min), "{name}");
        assert_eq!(bounds[name][1].as_u64(), Some(max), "{name}");
    }
    assert_eq!(
        bounds.as_object().map(|o| o.len()),
        Some(STREAM_BOUNDS.len())
    );
    Ok(())
}

#[tokio::test]
async fn a_stream_query_out_of_bounds_is_a_400_with_the_manifests_body() -> TestResult {
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../manifest.json"
    ))?)?;
    let route = manifest["demo"]["routes"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["stream"].is_object()))
        .ok_or("no stream route in the manifest")?;
    let template = route["stream"]["bad_query"]["body"]
        .as_str()
        .ok_or("no bad_query body")?;
    let redis = RedisServer::start()?;
    let (served, _) = stream_app(&redis, "bounds", 2.0, 6.0).await?;
    for (query, name) in [
        ("tokens=1000000", "tokens"),
        ("tokens=10001", "tokens"),
        ("tokens=-1", "tokens"),
        ("tokens=1.5", "tokens"),
        ("tokens=%2B3", "tokens"),
        ("tokens=", "tokens"),
        ("tokens=99999999999999999999999", "tokens"),
        ("delay_ms=10001", "delay_ms"),
        ("max_tokens=0", "max_tokens"),
        ("max_tokens=abc", "max_tokens"),
        ("tokens=abc&max_tokens=0", "tokens"),
    ] {
        let r = request(served.addr, "GET", &format!("/stream?{query}"), &[]).await?;
        let (min, max) = STREAM_BOUNDS
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, a, b)| (*a, *b))
            .ok_or("unknown name")?;
        let want = template
            .replace("{name}", name)
            .replace("{min}", &min.to_string())
            .replace("{max}", &max.to_string());
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        assert_eq!(
            r.header("content-type"),
            Some("application/problem+json"),
            "{query}"
        );
        assert_eq!(r.body, want, "{query}");
    }
    // Nothing was held for them.
    assert_eq!(tokens_remaining(&redis)?, 1000.0);
    let r = request(
        served.addr,
        "GET",
        "/stream?tokens=0&delay_ms=10000&max_tokens=1000",
        &[],
    )
    .await?;
    assert_eq!((r.status, r.body.as_str()), (200, "data: [DONE]\n\n"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_during_a_delay_stops_the_stream_at_once_and_it_settles_what_it_sent()
-> TestResult {
    let redis = RedisServer::start()?;
    let (served, layer) = stream_app(&redis, "gone", 30.0, 300.0).await?;
    let (conn, _) = open(
        served.addr,
        "/stream?tokens=5&delay_ms=10000&max_tokens=100",
        "data: token-1",
    )
    .await?;
    assert!((tokens_remaining(&redis)? - 900.0).abs() < 1e-6, "100 held");
    drop(conn); // gone, 10 s before the next event
    // Well before the delay ends: the writer noticed, stopped, and settled 1.
    until(
        Duration::from_secs(3),
        "settled with the one event sent",
        || Ok((tokens_remaining(&redis)? - 999.0).abs() < 1e-6),
    )
    .await?;
    until(Duration::from_secs(3), "the slot is free", || {
        Ok(leases(&redis, "rl:streams:127.0.0.1")? == 0)
    })
    .await?;
    until(Duration::from_secs(3), "counted as settled", || {
        Ok(layer.stats().settlements() == 1)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_delay_another_streams_renewals() -> TestResult {
    let redis = RedisServer::start()?;
    // Leases of 1 s, renewed every 0.5 s: a renewal more than 0.5 s late loses the lease
    // (N5).
    let (served, layer) = stream_app(&redis, "starve", 1.0, 30.0).await?;
    // The first client asks for a long stream and never reads past its first event.
    let (stalled, _) = open(
        served.addr,
        "/stream?tokens=10000&delay_ms=10&max_tokens=100",
        "data: token-1",
    )
    .await?;
    // The second reads its 3 s stream (3 lease times) to the end.
    let (_reader, body) = open(
        served.addr,
        "/stream?tokens=30&delay_ms=100&max_tokens=30",
        "data: [DONE]",
    )
    .await?;
    assert!(body.contains("data: token-30\n\n"), "{body}");
    assert_eq!(layer.stats().leases_expired(), 0, "no lease was lost");
    // The stalled stream still holds its slot, renewed all along.
    until(Duration::from_secs(5), "the reader's slot is free", || {
        Ok(leases(&redis, "rl:streams:127.0.0.1")? == 1)
    })
    .await?;
    assert_eq!(layer.stats().leases_in_flight(), 1);
    drop(stalled);
    until(Duration::from_secs(5), "both slots are free", || {
        Ok(leases(&redis, "rl:streams:127.0.0.1")? == 0)
    })
    .await?;
    Ok(())
}

// ---------------------------------------------------------------- G5 with the module

/// `GET /slow`: holds 100 on `tokens` for a ttl of 0.4 s, streams until `gate` opens, then
/// settles 30.
async fn slow_hold(
    Extension(d): Extension<Decision>,
    Extension(gate): Extension<Arc<Semaphore>>,
) -> Response {
    let hold = match d.hold("tokens", 100.0, 0.4).await {
        Ok(h) if h.allowed => h,
        Ok(h) => return format!("refused {h:?}").into_response(),
        Err(e) => return e.to_string().into_response(),
    };
    let body = futures_util::stream::unfold(Some((hold, gate)), |state| async move {
        let (hold, gate) = state?;
        let _ = gate.acquire().await.map(|p| p.forget());
        let s = hold.settle(30.0).await;
        let text = format!("settled: {:?}\n", s.map(|s| s.settled));
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(text)), None))
    });
    Body::from_stream(body).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_outlives_its_holds_ttl_still_settles_its_actual_cost() -> TestResult {
    let redis = RedisServer::start()?;
    let client = TbClient::start(&redis.url(), timeouts()).await?;
    let layer = RateLimitLayer::builder(client)
        .policy(Policy::new("tokens", Limit::new(1000.0, 1e-9)).settle_later(true))
        .name("g5")
        .build()?;
    let gate = Arc::new(Semaphore::new(0));
    let app = Router::new()
        .route("/slow", get(slow_hold))
        .layer(layer.clone())
        .layer(axum::Extension(gate.clone()));
    let served = serve(app).await?;
    let (mut conn, _) = open(served.addr, "/slow", "\r\n\r\n").await?;
    // Four ttls: without renewals every 0.2 s the hold would have expired with its
    // estimate charged and its settle would change nothing.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    gate.add_permits(1);
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&seen).contains("settled") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await??;
        assert!(n > 0, "closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(
        String::from_utf8_lossy(&seen).contains("settled: Ok(true)"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    assert!(
        (tokens_remaining(&redis)? - 970.0).abs() < 1e-6,
        "charged its actual 30"
    );
    assert_eq!(layer.stats().holds_lost(), 0);
    Ok(())
}
