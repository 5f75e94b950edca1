//! The limiter's cost per request, against two floors. Five variants of the example
//! app are served side by side in this process and loaded in turn, in rounds whose order
//! alternates, by a closed-loop load of keep-alive HTTP/1.1 connections on `GET /`:
//!
//! - `none`: no limiter;
//! - `ping`: one bare Redis `PING` per request on a multiplexed connection of the same
//!   `redis` crate (the client library's floor: one round trip to Redis, nothing else);
//! - `rawping`: one pre-encoded `*1\r\n$4\r\nPING\r\n` per request written on a raw
//!   `TcpStream`, `+PONG\r\n` read back (persistent connections, one per request in
//!   flight, no client library: the round trip's own floor);
//! - `one`: the rate-limit layer with one policy (`ip`);
//! - `three`: the layer with three policies (`ip`, `user`, `all`) in one TB.MTAKE.
//!
//! Reported per round as ratios (`one / ping` and `one / rawping`: the layer against each
//! floor), then the
//! median over rounds. The apps run on a tokio runtime of their own (one worker thread,
//! pinned to CPU 0), whose CPU time per request is the primary measure; the load generator
//! runs on a second runtime (one worker, CPU 1) and redis-server is pinned to CPU 1 with
//! `taskset`. Writes bench/results/integrations-rust.md.
//!
//! `cargo run --release -p redis-tb-bench-integrations --bin overhead`
//! Environment: `OVERHEAD_SECONDS` per phase (2), `OVERHEAD_ROUNDS` (6),
//! `OVERHEAD_CONNECTIONS` (16), `OVERHEAD_OUT` (the report path), `OVERHEAD_PIN=0` to not
//! pin, `OVERHEAD_PROTOCOL=resp2` for a layer URL that asks for RESP2 (default: no protocol
//! in the URL, so RESP3; the PING floor speaks the same), `OVERHEAD_ONLY=<variant>` to
//! serve and load one variant for a profiler
//! (`OVERHEAD_SECONDS` long, no report), plus `REDIS_SERVER` and `REDIS_TB_MODULE` as for
//! the tests.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use axum::middleware;
use redis_tb_axum_example::support::{Served, serve};
use redis_tb_axum_example::{app, app_with};
use redis_tb_bench_integrations::{
    Phase, Result, Runtimes, env_or, load, load_average, median_of, median_ratio, report_path,
    round_order,
};
use redis_tb_bench_serve::{RawPool, layer, ping, raw_ping};
use redis_tb_client::RateLimitLayer;

const AUTH: &[(&str, &str)] = &[("authorization", "Bearer alice-token")];

const VARIANTS: [&str; 5] = ["none", "ping", "rawping", "one", "three"];

async fn serve_variant(
    name: &str,
    url: &str,
    ping_url: &str,
    raw_addr: &str,
) -> Result<(Served, Option<RateLimitLayer>)> {
    Ok(match name {
        "none" => (serve(app(None)).await?, None),
        "ping" => {
            let conn = redis_tb_client::redis::Client::open(ping_url)?
                .get_multiplexed_async_connection()
                .await?;
            let router = app_with(move |r| {
                r.layer(middleware::from_fn(move |req, next| {
                    ping(conn.clone(), req, next)
                }))
            });
            (serve(router).await?, None)
        }
        "rawping" => {
            let pool = RawPool::new(raw_addr);
            let router = app_with(move |r| {
                r.layer(middleware::from_fn(move |req, next| {
                    raw_ping(pool.clone(), req, next)
                }))
            });
            (serve(router).await?, None)
        }
        "one" => {
            let l = layer(url, false).await?;
            (serve(app(Some(l.clone()))).await?, Some(l))
        }
        _ => {
            let l = layer(url, true).await?;
            (serve(app(Some(l.clone()))).await?, Some(l))
        }
    })
}

fn main() -> Result<()> {
    let rt = Runtimes::new("OVERHEAD_PIN")?;
    rt.loader.block_on(run(&rt))
}

/// Serves a variant on the apps' runtime.
async fn serve_on(
    apps: &tokio::runtime::Handle,
    name: &'static str,
    url: &str,
    ping_url: &str,
    raw_addr: &str,
) -> Result<(Served, Option<RateLimitLayer>)> {
    let (url, ping_url, raw_addr) = (url.to_owned(), ping_url.to_owned(), raw_addr.to_owned());
    apps.spawn(async move {
        serve_variant(name, &url, &ping_url, &raw_addr)
            .await
            .map_err(|e| e.to_string())
    })
    .await?
    .map_err(Into::into)
}

async fn run(rt: &Runtimes) -> Result<()> {
    let apps = rt.apps.handle().clone();
    let secs: f64 = env_or("OVERHEAD_SECONDS", 2.0);
    let rounds: usize = env_or("OVERHEAD_ROUNDS", 6);
    let connections: usize = env_or("OVERHEAD_CONNECTIONS", 16);
    let out = report_path();

    let load_before = load_average();
    let redis = rt.redis()?;
    let version = redis.command(&["INFO", "server"])?;
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    // OVERHEAD_PROTOCOL=resp2: the layer's URL asks for RESP2 (`?protocol=resp2`); by
    // default it names no protocol, and the client speaks RESP3. The PING floor's
    // connection always speaks the layer's protocol.
    let resp2 = std::env::var("OVERHEAD_PROTOCOL").is_ok_and(|v| v == "resp2");
    let (url, ping_url) = if resp2 {
        let url = format!("{}?protocol=resp2", redis.url());
        (url.clone(), url)
    } else {
        (redis.url(), format!("{}?protocol=resp3", redis.url()))
    };
    let raw_addr = format!("127.0.0.1:{}", redis.port());
    if let Ok(only) = std::env::var("OVERHEAD_ONLY") {
        let only = VARIANTS
            .into_iter()
            .find(|v| *v == only)
            .ok_or(format!("OVERHEAD_ONLY: one of {VARIANTS:?}"))?;
        let (served, _) = serve_on(&apps, only, &url, &ping_url, &raw_addr).await?;
        let p = load(served.addr, "/", AUTH, connections, secs).await?;
        eprintln!(
            "{only}: {:.0} req/s ({} non-200)",
            p.rps(),
            p.other + p.limited
        );
        return Ok(());
    }

    let mut served = Vec::new();
    for v in VARIANTS {
        served.push(serve_on(&apps, v, &url, &ping_url, &raw_addr).await?);
    }
    // Warm-up: connections, allocator, Redis keys.
    for (s, _) in &served {
        load(s.addr, "/", AUTH, connections, 1.0).await?;
    }

    // rows[round][variant]
    let mut rows: Vec<Vec<Phase>> = Vec::new();
    for round in 0..rounds {
        let order = round_order(round, VARIANTS.len());
        let mut phases = vec![Phase::default(); VARIANTS.len()];
        for &i in &order {
            phases[i] = load(served[i].0.addr, "/", AUTH, connections, secs).await?;
        }
        eprintln!(
            "round {}: {}",
            round + 1,
            VARIANTS
                .iter()
                .zip(&phases)
                .map(|(v, p)| format!("{v} {:.0} req/s {:.1} cpu-us/req", p.rps(), p.cpu_us()))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rows.push(phases);
    }

    let idx = |name: &str| VARIANTS.iter().position(|v| *v == name).unwrap_or(0);
    let ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::capacity);
    let wall_ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::rps);
    let med = |a: &str| median_of(&rows, idx(a), Phase::rps);
    let med_cpu = |a: &str| median_of(&rows, idx(a), Phase::cpu_us);
    let us = |a: &str, b: &str| med_cpu(a) - med_cpu(b);

    let profile = if cfg!(debug_assertions) {
        "dev (unoptimized)"
    } else {
        "release"
    };
    let load_after = load_average();
    let non_200: u64 = rows.iter().flatten().map(|p| p.other + p.limited).sum();
    let (store_errors, degraded) = served
        .iter()
        .filter_map(|(_, l)| l.as_ref().map(RateLimitLayer::stats))
        .fold((0, 0), |(e, d), m| (e + m.store_errors(), d + m.degraded()));

    let mut md = String::new();
    md.push_str("# Rust integration: the limiter's cost per request\n\n");
    md.push_str(
        "Requests/s of the example app (`examples/axum`, `GET /`, a constant answer) in five \
         variants served side by side: no limiter; two floors, one bare Redis `PING` per \
         request through the `redis` crate (one round trip to Redis on the same kind of \
         connection, nothing else) and one pre-encoded `PING` per request written on a raw \
         `TcpStream`, `+PONG` read back (the round trip with no client library; persistent \
         connections, one per request in flight); the \
         `redis-tb-client` layer with one policy; the layer with three policies (one \
         TB.MTAKE). Written by `cargo run --release -p redis-tb-bench-integrations --bin overhead`.\n\n",
    );
    md.push_str(
        "The machine is shared with other work, so wall-clock requests/s swing from phase to \
         phase with what else runs on the machine. The primary measure is therefore the CPU \
         time the apps' thread spends per answered request (user and kernel, from \
         `/proc/self/task/<tid>/schedstat`, nanoseconds on a CPU): its inverse, requests per \
         CPU-second, is the throughput the app reaches with its core to itself. The load \
         generator runs on another thread, so its parsing of the extra response headers does \
         not count against the layer. Ratios are taken per round, then the median over \
         rounds; wall-clock ratios are given too.\n\n",
    );
    md.push_str("| comparison | median ratio of requests per CPU-second | median ratio of wall-clock req/s |\n|---|---:|---:|\n");
    for (a, b, label) in [
        (
            "one",
            "ping",
            "**one policy / one PING** (the layer against the client library's floor)",
        ),
        ("three", "ping", "three policies / one PING"),
        (
            "one",
            "rawping",
            "**one policy / one raw PING** (the layer against the raw-socket floor)",
        ),
        ("three", "rawping", "three policies / one raw PING"),
        (
            "ping",
            "rawping",
            "one PING / one raw PING (what the `redis` crate adds to a round trip)",
        ),
        ("three", "one", "three policies / one policy"),
        (
            "ping",
            "none",
            "one PING / no limiter (what a Redis round trip costs)",
        ),
        (
            "rawping",
            "none",
            "one raw PING / no limiter (a round trip alone)",
        ),
        ("one", "none", "one policy / no limiter"),
    ] {
        md.push_str(&format!(
            "| {label} | {:.3} | {:.3} |\n",
            ratio(a, b),
            wall_ratio(a, b)
        ));
    }
    md.push_str(&format!(
        "\nMedian CPU µs of the app per request: none {:.1}, ping {:.1}, rawping {:.1}, \
         one {:.1}, three {:.1}. Added per request over the PING floor: one policy {:.1} µs, \
         three policies {:.1} µs; over the raw PING floor: one policy {:.1} µs, three \
         policies {:.1} µs; the PING itself adds {:.1} µs over no limiter, the raw PING {:.1} \
         µs. Median wall-clock req/s: none {:.0}, ping {:.0}, rawping {:.0}, one {:.0}, three \
         {:.0}.\n",
        med_cpu("none"),
        med_cpu("ping"),
        med_cpu("rawping"),
        med_cpu("one"),
        med_cpu("three"),
        us("one", "ping"),
        us("three", "ping"),
        us("one", "rawping"),
        us("three", "rawping"),
        us("ping", "none"),
        us("rawping", "none"),
        med("none"),
        med("ping"),
        med("rawping"),
        med("one"),
        med("three"),
    ));
    md.push_str("\nPer round, CPU µs per request (wall-clock req/s):\n\n| round | order | none | ping | rawping | one | three | one / ping (per CPU-second) | one / rawping (per CPU-second) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (round, phases) in rows.iter().enumerate() {
        let order = round_order(round, VARIANTS.len())
            .iter()
            .map(|&i| VARIANTS[i])
            .collect::<Vec<_>>()
            .join(" ");
        let cell = |p: &Phase| format!("{:.1} ({:.0})", p.cpu_us(), p.rps());
        md.push_str(&format!(
            "| {} | {order} | {} | {} | {} | {} | {} | {:.3} | {:.3} |\n",
            round + 1,
            cell(&phases[idx("none")]),
            cell(&phases[idx("ping")]),
            cell(&phases[idx("rawping")]),
            cell(&phases[idx("one")]),
            cell(&phases[idx("three")]),
            phases[idx("one")].capacity() / phases[idx("ping")].capacity(),
            phases[idx("one")].capacity() / phases[idx("rawping")].capacity()
        ));
    }
    let pinning = rt.describe();
    md.push_str(&format!(
        "\nSetup: {connections} keep-alive HTTP/1.1 connections sending `GET /` with \
         `Authorization: Bearer alice-token` back to back, {secs} s per phase, {rounds} rounds \
         in an order that rotates and reverses from round to round, after a 1 s warm-up of \
         each variant (one app thread serving all five). CPUs: {pinning}. redis-server {version} \
         (module loaded, persistence off) on loopback, protocol {}. Limits so high that every request is \
         admitted, so every variant answers 200 (non-200 answers: {non_200}; failed Redis \
         calls: {store_errors}; requests decided by the failure mode: {degraded}). Build \
         profile: {profile}. Load average (1, 5, 15 min) before the run: {}, after: {} \
         (the machine is shared: the ratios compare variants measured in the same rounds).\n",
        if resp2 {
            "RESP2 (`OVERHEAD_PROTOCOL=resp2`: the layer's URL ends in `?protocol=resp2`)"
        } else {
            "RESP3 (the client's default: the URL names no protocol)"
        },
        load_before,
        load_after,
    ));
    // A profile written by hand below the measurement ("## Profile" and what follows) is
    // kept when the measurement is rewritten.
    if let Ok(old) = std::fs::read_to_string(&out)
        && let Some(at) = old.find("\n## Profile")
    {
        md.push_str(&old[at..]);
    }
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, &md)?;
    println!("{md}");
    eprintln!("wrote {out}");
    Ok(())
}
