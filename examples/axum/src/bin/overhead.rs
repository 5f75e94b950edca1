//! The limiter's overhead: requests/s of the example app with the rate-limit layer against
//! the same app without it, served side by side in this process, measured in interleaved
//! rounds (ABBA order) by a closed-loop load of keep-alive HTTP/1.1 connections; reported
//! as the median of the per-round ratios. Writes bench/results/integrations-rust.md.
//!
//! `cargo run --release -p redis-tb-axum-example --bin overhead`
//! Environment: `OVERHEAD_SECONDS` per phase (3), `OVERHEAD_ROUNDS` (5),
//! `OVERHEAD_CONNECTIONS` (32), `OVERHEAD_OUT` (the report path), plus `REDIS_SERVER` and
//! `REDIS_TB_MODULE` as for the tests.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis_tb_axum_example::support::{HttpConn, RedisServer, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::{Limit, TbClient};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counts of one phase.
#[derive(Clone, Copy, Debug, Default)]
struct Phase {
    ok: u64,
    other: u64,
    seconds: f64,
}

impl Phase {
    fn rps(&self) -> f64 {
        self.ok as f64 / self.seconds
    }
}

/// `connections` keep-alive connections each sending `GET path` back to back for `secs`.
async fn load(
    addr: SocketAddr,
    path: &'static str,
    connections: usize,
    secs: f64,
) -> Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let other = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (stop, ok, other) = (stop.clone(), ok.clone(), other.clone());
        let mut conn = HttpConn::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match conn
                    .request("GET", path, &[("authorization", "Bearer alice-token")])
                    .await
                {
                    Ok(r) if r.status == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(_) => other.fetch_add(1, Ordering::Relaxed),
                    Err(_) => break,
                };
            }
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let (ok_at_stop, other_at_stop) = (ok.load(Ordering::Relaxed), other.load(Ordering::Relaxed));
    let seconds = start.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    Ok(Phase {
        ok: ok_at_stop,
        other: other_at_stop,
        seconds,
    })
}

fn first_three(loadavg: &str) -> String {
    loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let secs: f64 = env_or("OVERHEAD_SECONDS", 3.0);
    let rounds: usize = env_or("OVERHEAD_ROUNDS", 5);
    let connections: usize = env_or("OVERHEAD_CONNECTIONS", 32);
    let out = std::env::var("OVERHEAD_OUT").unwrap_or_else(|_| {
        format!(
            "{}/../../bench/results/integrations-rust.md",
            env!("CARGO_MANIFEST_DIR")
        )
    });

    // Other work on the machine skews both apps alike (the rounds interleave), but say so.
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let redis = RedisServer::start()?;
    let version = redis.command(&["INFO", "server"])?;
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    // Limits no request reaches: every request is admitted, so both apps do the same work
    // apart from the limiter (a refused request would be cheaper, not dearer).
    let config = Config {
        ip: Limit::per_second(1e9),
        user_free: Limit::per_second(1e9),
        user_pro: Limit::per_second(1e9),
        ..Config::default()
    };
    let client = TbClient::connect(&redis.url()).await?;
    let client_config = client.config().clone();
    let layer = limiter(client, &config)?;
    let metrics = layer.metrics();
    let with = serve(app(Some(layer))).await?;
    let without = serve(app(None)).await?;

    // Warm-up: connections, allocator, Redis keys.
    load(with.addr, "/", connections, 1.0).await?;
    load(without.addr, "/", connections, 1.0).await?;

    // `/` answers a constant, so only the limiter differs; `/items/7` also serializes the
    // decision into its body (the example's handler reads it), a cost of using the limiter.
    let scenarios = [
        ("/", "`GET /`: a constant answer (the limiter's own cost)"),
        (
            "/items/7",
            "`GET /items/7`: the handler reads the decision and echoes it as JSON",
        ),
    ];
    let mut results = Vec::new();
    for (path, label) in scenarios {
        let mut rows = Vec::new();
        for round in 0..rounds {
            // ABBA: alternate which app goes first, so drift does not favour one.
            let (w, wo) = if round % 2 == 0 {
                let w = load(with.addr, path, connections, secs).await?;
                (w, load(without.addr, path, connections, secs).await?)
            } else {
                let wo = load(without.addr, path, connections, secs).await?;
                (load(with.addr, path, connections, secs).await?, wo)
            };
            let ratio = w.rps() / wo.rps();
            eprintln!(
                "GET {path} round {}: with limiter {:.0} req/s, without {:.0} req/s, ratio {:.3}",
                round + 1,
                w.rps(),
                wo.rps(),
                ratio
            );
            rows.push((round + 1, w, wo, ratio));
        }
        results.push((path, label, rows));
    }

    let profile = if cfg!(debug_assertions) {
        "dev (unoptimized)"
    } else {
        "release"
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut md = String::new();
    md.push_str("# Rust integration: the limiter's overhead per request\n\n");
    md.push_str(
        "Requests/s of the example app (`examples/axum`) with the `redis-tb-client` rate-limit \
         layer against the same app without it. Written by \
         `cargo run --release -p redis-tb-axum-example --bin overhead`.\n\n",
    );
    md.push_str("| route | median ratio (with / without) | median req/s with | median req/s without | added per request |\n|---|---:|---:|---:|---:|\n");
    for (_, label, rows) in &results {
        let med = median(rows.iter().map(|r| r.3).collect());
        let med_with = median(rows.iter().map(|r| r.1.rps()).collect());
        let med_without = median(rows.iter().map(|r| r.2.rps()).collect());
        let per_request_us = (1.0 / med_with - 1.0 / med_without) * 1e6;
        md.push_str(&format!(
            "| {label} | **{med:.3}** | {med_with:.0} | {med_without:.0} | {per_request_us:.0} µs |\n"
        ));
    }
    for (path, _, rows) in &results {
        md.push_str(&format!(
            "\nRounds of `GET {path}`:\n\n| round | with limiter (req/s) | without (req/s) | ratio |\n|---:|---:|---:|---:|\n"
        ));
        for (round, w, wo, ratio) in rows {
            md.push_str(&format!(
                "| {round} | {:.0} | {:.0} | {ratio:.3} |\n",
                w.rps(),
                wo.rps()
            ));
        }
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let non_200: u64 = results
        .iter()
        .flat_map(|(_, _, rows)| rows.iter().map(|r| r.1.other + r.2.other))
        .sum();
    md.push_str(&format!(
        "\nSetup: one process serves both apps (axum 0.8, tokio with 2 worker threads) and \
         runs the load: {connections} keep-alive HTTP/1.1 connections sending requests with \
         `Authorization: Bearer alice-token` back to back, {secs} s per phase, {rounds} rounds \
         per route in ABBA order, after a 1 s warm-up of each app. Each limited request checks \
         two policies (`ip` and `user`) in one TB.MTAKE over one multiplexed connection to \
         redis-server {version} (module loaded, persistence off) on loopback; the limits are \
         set so high that every request is admitted, so both apps answer 200. Client \
         timeouts: call {:?}, connect {:?}. Build profile: {profile}. Machine: {cores} cores, \
         shared by the load generator, both apps and redis-server: the app without the limiter \
         does almost nothing per request, so the ratio mostly prices the extra loopback \
         round trip to Redis on the same two cores.\n\n\
         During the run: {} Redis calls failed (a timeout or connection error), {} \
         requests were decided by the failure mode (fail-open: passed unlimited, without a \
         Redis call, counted in the \"with\" rate); non-200 answers: {non_200}. Load average (1, 5, 15 min) before the run: \
         {}, after: {}.\n",
        client_config.call_timeout,
        client_config.connect_timeout,
        metrics.store_errors(),
        metrics.degraded(),
        first_three(&load_before),
        first_three(&load_after),
    ));
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, &md)?;
    println!("{md}");
    eprintln!("wrote {out}");
    Ok(())
}
