//! The store-error log line: written through `tracing`, naming the server, the error and the
//! failure mode, at most one per second however many requests fail; and the shadow-policy
//! line, at most one per second per policy. (A test binary of its own: it installs the
//! global subscriber, shared by its tests.)

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis_tb_axum_example::support::{RedisServer, request, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::{ClientConfig, Limit, TbClient};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// The process's subscriber, writing into one buffer for every test of this binary.
fn captured() -> Captured {
    static CAPTURED: OnceLock<Captured> = OnceLock::new();
    CAPTURED
        .get_or_init(|| {
            let captured = Captured::default();
            let writer = captured.clone();
            let _ = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .try_init();
            captured
        })
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_errors_log_one_clear_line_per_second() -> Result<(), Box<dyn std::error::Error>> {
    let captured = captured();

    let mut redis = RedisServer::start()?;
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let client = TbClient::connect_with(&redis.url(), config).await?;
    let app_config = Config {
        ip: Limit::per_hour(100.0),
        // No cooldown: every request tries Redis and fails, so only the log limiter
        // keeps the log quiet.
        cooldown: Duration::ZERO,
        ..Config::default()
    };
    let layer = limiter(client, &app_config)?;
    let metrics = layer.stats();
    let served = serve(app(Some(layer))).await?;
    let port = redis.port();
    redis.stop();

    let start = Instant::now();
    for _ in 0..20 {
        assert_eq!(
            request(served.addr, "GET", "/items/1", &[]).await?.status,
            200
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(metrics.degraded(), 20);
    assert_eq!(
        metrics.store_errors(),
        20,
        "no cooldown: every request asked Redis"
    );

    let text = captured.text();
    let lines: Vec<&str> = text
        .lines()
        // One policy applies: the check is a TB.TAKE (TB.MTAKE with several).
        .filter(|l| l.contains("redis-tb: TB.TAKE on"))
        .collect();
    assert!(!lines.is_empty(), "no log line in {text:?}");
    assert!(
        lines.len() as f64 <= 1.0 + elapsed.ceil(),
        "{} lines in {elapsed:.2} s: {text}",
        lines.len()
    );
    let first = lines[0];
    eprintln!("log line: {first}");
    assert!(first.contains(" WARN "), "{first}");
    assert!(
        first.contains(&format!("TB.TAKE on 127.0.0.1:{port} failed (")),
        "names the server: {first}"
    );
    assert!(
        first.contains("; failing open: requests pass unlimited;"),
        "names the mode: {first}"
    );
    assert!(first.contains("store errors so far: 1"), "{first}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_refusals_log_one_line_per_second_per_policy()
-> Result<(), Box<dyn std::error::Error>> {
    let captured = captured();
    let redis = RedisServer::start()?;
    let client = TbClient::connect_with(
        &redis.url(),
        ClientConfig {
            call_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        },
    )
    .await?;
    let config = Config {
        ip: Limit::per_hour(1.0),
        shadow_policies: vec!["ip".to_owned()],
        ..Config::default()
    };
    let layer = limiter(client, &config)?;
    let metrics = layer.stats();
    let served = serve(app(Some(layer))).await?;
    let start = Instant::now();
    // The first takes the only token; the other 20 would have been limited.
    for _ in 0..21 {
        assert_eq!(
            request(served.addr, "GET", "/items/1", &[]).await?.status,
            200
        );
    }
    let elapsed = start.elapsed().as_secs_f64();
    assert_eq!(metrics.shadow_limited(), 20);
    let text = captured.text();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("redis-tb: shadow policy 'ip'"))
        .collect();
    assert!(!lines.is_empty(), "no shadow line in {text:?}");
    assert!(
        lines.len() as f64 <= 1.0 + elapsed.ceil(),
        "{} lines in {elapsed:.2} s: {text}",
        lines.len()
    );
    assert!(lines[0].contains(" WARN "), "{}", lines[0]);
    assert!(
        lines[0].ends_with(
            "redis-tb: shadow policy 'ip' would have limited a request (1 since the last line)"
        ),
        "{}",
        lines[0]
    );
    Ok(())
}

/// SPEC E6: a limiter's start logs the backend its store chose, one line, once (a second
/// `startup()` logs nothing more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_is_logged_once_in_one_line() -> Result<(), Box<dyn std::error::Error>> {
    let captured = captured();
    let plain = RedisServer::start_without_module()?;
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        ..ClientConfig::default()
    };
    let client = TbClient::connect_with(&plain.url(), config).await?;
    let app_config = Config {
        name: "backend-line".to_owned(),
        ..Config::default()
    };
    let layer = limiter(client, &app_config)?;
    layer.startup().await?;
    layer.startup().await?;
    let want = format!(
        "redis-tb: backend scripts on 127.0.0.1:{} (tb.take not found, Functions)",
        plain.port()
    );
    let text = captured.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(&want)).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].ends_with(&want), "{}", lines[0]);
    assert!(lines[0].contains("INFO"), "{}", lines[0]);
    Ok(())
}
