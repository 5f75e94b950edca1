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
//! With `OVERHEAD_BACKENDS=1` (issue 42: the integrations end to end on both backends),
//! two more, the same layers with their client forced to the script backend
//! (`ClientConfig::backend = scripts`, SPEC E1) on the same redis-server, which takes
//! `FUNCTION LOAD`, so the calls are `FCALL tb_take` / `FCALL tb_mtake` (clients/lua):
//!
//! - `one-scripts`: `one` on the scripts;
//! - `three-scripts`: `three` on the scripts.
//!
//! The run fails unless each of them chose the scripts by Functions (SPEC E6's line,
//! `redis-tb: backend scripts on <host:port> (forced by backend=scripts, Functions)`,
//! printed and written to the report; no tracing subscriber is installed here, so the
//! line is read from the client, `TbClient::backend`) and its limiter's
//! `stats().backend()` says `scripts` after the run, while `one` and `three` say `module`.
//!
//! Reported per round as ratios (`one / ping` and `one / rawping`: the layer against each
//! floor), then the
//! median over rounds. The apps run on a tokio runtime of their own (one worker thread,
//! pinned to CPU 0), whose CPU time per request is the primary measure; the load generator
//! runs on a second runtime (one worker, CPU 1) and redis-server is pinned to CPU 1 with
//! `taskset`. redis-server's own CPU time (user + system, `/proc/<pid>/stat`) is measured
//! over each phase too, since the script backend's cost lands on the server. Writes
//! bench/results/integrations-rust.md.
//!
//! `cargo run --release -p redis-tb-bench-integrations --bin overhead`, and for both
//! backends `OVERHEAD_BACKENDS=1 cargo run --release -p redis-tb-bench-integrations --bin
//! overhead` (the report gains the table "the two backends end to end").
//! Environment: `OVERHEAD_SECONDS` per phase (2), `OVERHEAD_ROUNDS` (6),
//! `OVERHEAD_CONNECTIONS` (16), `OVERHEAD_OUT` (the report path), `OVERHEAD_PIN=0` to not
//! pin, `OVERHEAD_PROTOCOL=resp2` for a layer URL that asks for RESP2 (default: no protocol
//! in the URL, so RESP3; the PING floor speaks the same), `OVERHEAD_BACKENDS=1` for the two
//! script-backend variants, `OVERHEAD_ONLY=<variant>` to serve and load one variant for a
//! profiler
//! (`OVERHEAD_SECONDS` long, no report), plus `REDIS_SERVER` and `REDIS_TB_MODULE` as for
//! the tests.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::middleware;
use redis_tb_axum_example::support::{Served, serve};
use redis_tb_axum_example::{app, app_with};
use redis_tb_bench_integrations::{
    Phase, Result, Runtimes, command_calls, cpu_ns, env_or, load, load_average, load_measured,
    median_of, median_ratio, process_stat_cpu_ns, ratio_range, report_path, round_order,
    server_pid,
};
use redis_tb_bench_serve::{RawPool, layer, ping, policies, raw_ping};
use redis_tb_client::{Backend, BackendSetting, ClientConfig, RateLimitLayer, TbClient};

const AUTH: &[(&str, &str)] = &[("authorization", "Bearer alice-token")];

/// The variants: the first five always, the last two with `OVERHEAD_BACKENDS=1`.
const VARIANTS: [&str; 7] = [
    "none",
    "ping",
    "rawping",
    "one",
    "three",
    "one-scripts",
    "three-scripts",
];
/// How many of [`VARIANTS`] a run without `OVERHEAD_BACKENDS=1` serves.
const BASE_VARIANTS: usize = 5;

/// A variant served: its app, its layer, and for a layer SPEC E6's line of its client.
struct Variant {
    served: Served,
    layer: Option<RateLimitLayer>,
    backend_line: Option<String>,
}

/// The layer of `one-scripts` (`three: false`) and `three-scripts`: `one`'s or `three`'s
/// policies and call timeout on a client forced to the script backend (SPEC E1), started
/// (E6). An error unless the client chose the scripts by Functions, as E6's line says.
async fn scripts_layer(url: &str, three: bool) -> Result<(RateLimitLayer, String)> {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(2),
        backend: BackendSetting::Scripts,
        ..ClientConfig::default()
    };
    let client = TbClient::connect_with(url, config).await?;
    let line = client
        .backend()
        .map(|c| c.line.clone())
        .unwrap_or_else(|| "no backend chosen".to_owned());
    if !(line.starts_with("redis-tb: backend scripts on ")
        && line.ends_with(" (forced by backend=scripts, Functions)"))
    {
        return Err(
            format!("the scripts variant is not on the scripts by Functions: {line}").into(),
        );
    }
    let mut b = RateLimitLayer::builder(client);
    for p in policies(three) {
        b = b.policy(p);
    }
    let l = b.build()?;
    l.startup().await?;
    if l.stats().backend() != Some(Backend::Scripts) {
        return Err(format!(
            "the scripts variant's limiter reports backend {:?}",
            l.stats().backend()
        )
        .into());
    }
    eprintln!("{line}");
    Ok((l, line))
}

async fn serve_variant(name: &str, url: &str, ping_url: &str, raw_addr: &str) -> Result<Variant> {
    let plain = |served: Served| Variant {
        served,
        layer: None,
        backend_line: None,
    };
    Ok(match name {
        "none" => plain(serve(app(None)).await?),
        "ping" => {
            let conn = redis_tb_client::redis::Client::open(ping_url)?
                .get_multiplexed_async_connection()
                .await?;
            let router = app_with(move |r| {
                r.layer(middleware::from_fn(move |req, next| {
                    ping(conn.clone(), req, next)
                }))
            });
            plain(serve(router).await?)
        }
        "rawping" => {
            let pool = RawPool::new(raw_addr);
            let router = app_with(move |r| {
                r.layer(middleware::from_fn(move |req, next| {
                    raw_ping(pool.clone(), req, next)
                }))
            });
            plain(serve(router).await?)
        }
        "one" | "three" => {
            let l = layer(url, name == "three").await?;
            Variant {
                served: serve(app(Some(l.clone()))).await?,
                layer: Some(l),
                backend_line: None,
            }
        }
        "one-scripts" | "three-scripts" => {
            let (l, line) = scripts_layer(url, name == "three-scripts").await?;
            Variant {
                served: serve(app(Some(l.clone()))).await?,
                layer: Some(l),
                backend_line: Some(line),
            }
        }
        other => return Err(format!("unknown variant {other:?}").into()),
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
) -> Result<Variant> {
    let (url, ping_url, raw_addr) = (url.to_owned(), ping_url.to_owned(), raw_addr.to_owned());
    apps.spawn(async move {
        serve_variant(name, &url, &ping_url, &raw_addr)
            .await
            .map_err(|e| e.to_string())
    })
    .await?
    .map_err(Into::into)
}

/// `median (lowest–highest)` of a ratio over rounds.
fn ranged((median, low, high): (f64, f64, f64)) -> String {
    format!("{median:.3} ({low:.3}–{high:.3})")
}

async fn run(rt: &Runtimes) -> Result<()> {
    let apps = rt.apps.handle().clone();
    let secs: f64 = env_or("OVERHEAD_SECONDS", 2.0);
    let rounds: usize = env_or("OVERHEAD_ROUNDS", 6);
    let connections: usize = env_or("OVERHEAD_CONNECTIONS", 16);
    let backends = std::env::var("OVERHEAD_BACKENDS").is_ok_and(|v| v == "1");
    let variants: &[&'static str] = if backends {
        &VARIANTS
    } else {
        &VARIANTS[..BASE_VARIANTS]
    };
    let out = report_path();

    let load_before = load_average();
    let redis = rt.redis()?;
    let redis_pid = server_pid(&redis)?;
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
        let served = serve_on(&apps, only, &url, &ping_url, &raw_addr).await?;
        let p = load(served.served.addr, "/", AUTH, connections, secs).await?;
        eprintln!(
            "{only}: {:.0} req/s ({} non-200)",
            p.rps(),
            p.other + p.limited
        );
        return Ok(());
    }

    let mut served = Vec::new();
    for &v in variants {
        served.push(serve_on(&apps, v, &url, &ping_url, &raw_addr).await?);
    }
    // Warm-up: connections, allocator, Redis keys.
    for s in &served {
        load(s.served.addr, "/", AUTH, connections, 1.0).await?;
    }

    // rows[round][variant]
    let mut rows: Vec<Vec<Phase>> = Vec::new();
    for round in 0..rounds {
        let order = round_order(round, variants.len());
        let mut phases = vec![Phase::default(); variants.len()];
        for &i in &order {
            phases[i] = load_measured(
                served[i].served.addr,
                "/",
                AUTH,
                connections,
                secs,
                cpu_ns,
                move || process_stat_cpu_ns(redis_pid),
            )
            .await?;
        }
        eprintln!(
            "round {}: {}",
            round + 1,
            variants
                .iter()
                .zip(&phases)
                .map(|(v, p)| format!(
                    "{v} {:.0} req/s {:.1} cpu-us/req {:.1} redis-us/req",
                    p.rps(),
                    p.cpu_us(),
                    p.server_cpu_us()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rows.push(phases);
    }

    // SPEC E6, after the run: each layer on the backend its variant names.
    for (name, v) in variants.iter().zip(&served) {
        let Some(l) = &v.layer else { continue };
        let want = if name.ends_with("-scripts") {
            Backend::Scripts
        } else {
            Backend::Module
        };
        if l.stats().backend() != Some(want) {
            return Err(format!(
                "{name}: the limiter reports backend {:?}, not {}",
                l.stats().backend(),
                want.as_str()
            )
            .into());
        }
    }
    let fcalls = command_calls(&redis, &["fcall", "fcall_ro"])?;
    let module_calls = command_calls(&redis, &["tb.take", "tb.mtake"])?;
    if backends && fcalls == 0 {
        return Err("the scripts variants ran, but redis-server counted no FCALL".into());
    }

    let idx = |name: &str| variants.iter().position(|v| *v == name).unwrap_or(0);
    let ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::capacity);
    let wall_ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::rps);
    let med = |a: &str| median_of(&rows, idx(a), Phase::rps);
    let med_cpu = |a: &str| median_of(&rows, idx(a), Phase::cpu_us);
    let med_server = |a: &str| median_of(&rows, idx(a), Phase::server_cpu_us);
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
        .filter_map(|v| v.layer.as_ref().map(RateLimitLayer::stats))
        .fold((0, 0), |(e, d), m| (e + m.store_errors(), d + m.degraded()));
    let count = if backends { "seven" } else { "five" };

    let mut md = String::new();
    md.push_str("# Rust integration: the limiter's cost per request\n\n");
    md.push_str(&format!(
        "Requests/s of the example app (`examples/axum`, `GET /`, a constant answer) in {count} \
         variants served side by side: no limiter; two floors, one bare Redis `PING` per \
         request through the `redis` crate (one round trip to Redis on the same kind of \
         connection, nothing else) and one pre-encoded `PING` per request written on a raw \
         `TcpStream`, `+PONG` read back (the round trip with no client library; persistent \
         connections, one per request in flight); the \
         `redis-tb-client` layer with one policy; the layer with three policies (one \
         TB.MTAKE){}. Written by `{}cargo run --release -p redis-tb-bench-integrations --bin overhead`.\n\n",
        if backends {
            "; and the same two layers with their client forced to the script backend \
             (`one-scripts`, `three-scripts`: `ClientConfig::backend = scripts`, SPEC E, \
             `FCALL tb_take` / `FCALL tb_mtake` of the Functions library on the same \
             redis-server)"
        } else {
            ""
        },
        if backends { "OVERHEAD_BACKENDS=1 " } else { "" },
    ));
    md.push_str(
        "The machine is shared with other work, so wall-clock requests/s swing from phase to \
         phase with what else runs on the machine. The primary measure is therefore the CPU \
         time the apps' thread spends per answered request (user and kernel, from \
         `/proc/self/task/<tid>/schedstat`, nanoseconds on a CPU): its inverse, requests per \
         CPU-second, is the throughput the app reaches with its core to itself. The load \
         generator runs on another thread, so its parsing of the extra response headers does \
         not count against the layer. redis-server's CPU time (user + system of its process, \
         `utime` + `stime` of `/proc/<pid>/stat`, in clock ticks of 10 ms) is read over each \
         phase too: what a request costs the server. Ratios are taken per round, then the \
         median over rounds; wall-clock ratios are given too.\n\n",
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

    md.push_str(
        "\nMedians per variant:\n\n| variant | wall-clock req/s | app CPU µs per request | \
         redis-server CPU µs per request |\n|---|---:|---:|---:|\n",
    );
    for v in variants {
        md.push_str(&format!(
            "| {v} | {:.0} | {:.1} | {:.1} |\n",
            med(v),
            med_cpu(v),
            med_server(v)
        ));
    }

    md.push_str(&format!(
        "\nPer round, CPU µs per request of the app / of redis-server (wall-clock req/s):\n\n| round | order | {} | one / ping (per CPU-second) | one / rawping (per CPU-second) |\n|---:|---|{}---:|---:|\n",
        variants.join(" | "),
        "---:|".repeat(variants.len()),
    ));
    for (round, phases) in rows.iter().enumerate() {
        let order = round_order(round, variants.len())
            .iter()
            .map(|&i| variants[i])
            .collect::<Vec<_>>()
            .join(" ");
        let cells = phases
            .iter()
            .map(|p| {
                format!(
                    "{:.1} / {:.1} ({:.0})",
                    p.cpu_us(),
                    p.server_cpu_us(),
                    p.rps()
                )
            })
            .collect::<Vec<_>>()
            .join(" | ");
        md.push_str(&format!(
            "| {} | {order} | {cells} | {:.3} | {:.3} |\n",
            round + 1,
            phases[idx("one")].capacity() / phases[idx("ping")].capacity(),
            phases[idx("one")].capacity() / phases[idx("rawping")].capacity()
        ));
    }
    let pinning = rt.describe();
    md.push_str(&format!(
        "\nSetup: {connections} keep-alive HTTP/1.1 connections sending `GET /` with \
         `Authorization: Bearer alice-token` back to back, {secs} s per phase, {rounds} rounds \
         in an order that rotates and reverses from round to round, after a 1 s warm-up of \
         each variant (one app thread serving all {count}). CPUs: {pinning}. redis-server {version} \
         (module loaded{} persistence off) on loopback, protocol {}. Limits so high that every request is \
         admitted, so every variant answers 200 (non-200 answers: {non_200}; failed Redis \
         calls: {store_errors}; requests decided by the failure mode: {degraded}). Build \
         profile: {profile}. Load average (1, 5, 15 min) before the run: {}, after: {} \
         (the machine is shared: the ratios compare variants measured in the same rounds).\n",
        if backends {
            "; the script library loaded by the scripts variants with `FUNCTION LOAD REPLACE`;"
        } else {
            ","
        },
        if resp2 {
            "RESP2 (`OVERHEAD_PROTOCOL=resp2`: the layer's URL ends in `?protocol=resp2`)"
        } else {
            "RESP3 (the client's default: the URL names no protocol)"
        },
        load_before,
        load_after,
    ));
    if backends {
        let rng =
            |a: &str, b: &str, m: fn(&Phase) -> f64| ranged(ratio_range(&rows, idx(a), idx(b), m));
        md.push_str(
            "\n## The two backends end to end\n\nThe same layer on the module (`one`, `three`) \
             and on the script backend (`one-scripts`, `three-scripts`: Functions, on the same \
             redis-server), measured in the same rounds. Scripts / module: the median of the \
             per-round ratios (lowest–highest over rounds); above 1 for req/s is faster, above \
             1 for CPU per request is dearer. Against the floors: requests per CPU-second of \
             the app, the layer over the floor (median of per-round ratios).\n\n\
             | policies | req/s, scripts / module | app CPU per request, scripts / module | \
             redis-server CPU per request, scripts / module | module / PING · / raw PING | \
             scripts / PING · / raw PING |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for (module, scripts, label) in [
            ("one", "one-scripts", "one"),
            ("three", "three-scripts", "three"),
        ] {
            md.push_str(&format!(
                "| {label} | {} | {} | {} | {:.3} · {:.3} | {:.3} · {:.3} |\n",
                rng(scripts, module, Phase::rps),
                rng(scripts, module, Phase::cpu_us),
                rng(scripts, module, Phase::server_cpu_us),
                ratio(module, "ping"),
                ratio(module, "rawping"),
                ratio(scripts, "ping"),
                ratio(scripts, "rawping"),
            ));
        }
        md.push_str(&format!(
            "\nMedian redis-server CPU µs per request: ping {:.1}, rawping {:.1}, one {:.1}, \
             one-scripts {:.1}, three {:.1}, three-scripts {:.1}; app CPU µs per request: one \
             {:.1}, one-scripts {:.1}, three {:.1}, three-scripts {:.1}. Calls counted by \
             redis-server over the whole run (warm-up included): FCALL {fcalls}, TB.TAKE + \
             TB.MTAKE {module_calls}. The backends, checked after the run (each limiter's \
             `stats().backend()`): `one`, `three` module; `one-scripts`, `three-scripts` \
             scripts. SPEC E6's line of each scripts client (the client's `backend().line`; \
             this process installs no tracing subscriber):\n\n",
            med_server("ping"),
            med_server("rawping"),
            med_server("one"),
            med_server("one-scripts"),
            med_server("three"),
            med_server("three-scripts"),
            med_cpu("one"),
            med_cpu("one-scripts"),
            med_cpu("three"),
            med_cpu("three-scripts"),
        ));
        for (name, v) in variants.iter().zip(&served) {
            if let Some(line) = &v.backend_line {
                md.push_str(&format!("- `{name}`: `{line}`\n"));
            }
        }
    }

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
