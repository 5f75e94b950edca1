//! Issue 21's measurement of the local deny cache: one client (one identity, its address)
//! floods one limited route (`GET /`, policy `ip` with a known retry window) as fast as
//! the load generator manages, for `FLOOD_SECONDS`, once through a layer without the deny
//! cache and once through a layer with it. Redis calls (TB.TAKE + TB.MTAKE) are counted
//! with `INFO commandstats` before and after each phase.
//!
//! Target: with the cache, Redis sees at most one refused call per identity per retry
//! window from this instance. So the calls with the cache must stay within
//! `admissions + ceil(seconds / window) + connections`: every admission is a call, each
//! window lets one refusal through once the cached one expires, and each of the
//! `connections` may have one request in flight when an entry expires.
//!
//! `cargo run --release -p redis-tb-bench-integrations --bin flood`
//! Environment: `FLOOD_SECONDS` (10), `FLOOD_CAPACITY` (5), `FLOOD_RATE` (1 token/s),
//! `FLOOD_CONNECTIONS` (1: one client; more: one identity over several keep-alive
//! connections), `FLOOD_PIN=0` to not pin, `OVERHEAD_OUT` (the report path). The section
//! "## Deny cache flood" of the report is replaced (or appended); the rest is kept.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use redis_tb_axum_example::support::{RedisServer, Served, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_bench_integrations::{
    Phase, Result, Runtimes, command_calls, env_or, load, load_average, report_path,
};
use redis_tb_client::{ClientConfig, Limit, Stats, TbClient};

const SECTION: &str = "\n## Deny cache flood";
const TB_COMMANDS: [&str; 2] = ["tb.take", "tb.mtake"];

struct Outcome {
    phase: Phase,
    calls: u64,
    /// Counted by the layer itself (includes the requests in flight at the stop).
    allowed: u64,
    limited: u64,
    hits: u64,
}

fn main() -> Result<()> {
    let rt = Runtimes::new("FLOOD_PIN")?;
    rt.loader.block_on(run(&rt))
}

/// Serves the example app with `deny_cache` entries on the apps' runtime.
async fn serve_app(
    rt: &Runtimes,
    url: &str,
    limit: Limit,
    deny_cache: usize,
) -> Result<(Served, Stats)> {
    let url = url.to_owned();
    rt.apps
        .spawn(async move {
            let timeouts = ClientConfig {
                // A slow reply on a shared machine must not become a store error.
                call_timeout: Duration::from_secs(2),
                ..ClientConfig::default()
            };
            let client = TbClient::connect_with(&url, timeouts)
                .await
                .map_err(|e| e.to_string())?;
            let config = Config {
                ip: limit,
                deny_cache,
                name: format!("flood-cache-{deny_cache}"),
                ..Config::default()
            };
            let layer = limiter(client, &config).map_err(|e| e.to_string())?;
            let metrics = layer.stats();
            let served = serve(app(Some(layer))).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((served, metrics))
        })
        .await?
        .map_err(Into::into)
}

async fn flood(
    redis: &RedisServer,
    served: &Served,
    metrics: &Stats,
    connections: usize,
    secs: f64,
) -> Result<Outcome> {
    redis.command(&["FLUSHALL"])?;
    let calls_before = command_calls(redis, &TB_COMMANDS)?;
    let (a, l, h) = (
        metrics.allowed(),
        metrics.limited(),
        metrics.deny_cache_hits(),
    );
    // No Authorization header: only `ip` applies (the `user` policy skips anonymous).
    let phase = load(served.addr, "/", &[], connections, secs).await?;
    let calls = command_calls(redis, &TB_COMMANDS)? - calls_before;
    Ok(Outcome {
        phase,
        calls,
        allowed: metrics.allowed() - a,
        limited: metrics.limited() - l,
        hits: metrics.deny_cache_hits() - h,
    })
}

async fn run(rt: &Runtimes) -> Result<()> {
    let secs: f64 = env_or("FLOOD_SECONDS", 10.0);
    let capacity: f64 = env_or("FLOOD_CAPACITY", 5.0);
    let rate: f64 = env_or("FLOOD_RATE", 1.0);
    let connections: usize = env_or("FLOOD_CONNECTIONS", 1);
    let limit = Limit::new(capacity, rate);
    // A refused request of cost 1 waits at most one token's refill.
    let window = 1.0 / rate;

    let load_before = load_average();
    let redis = rt.redis()?;
    let url = redis.url();
    let (off_app, off_metrics) = serve_app(rt, &url, limit, 0).await?;
    let (on_app, on_metrics) = serve_app(rt, &url, limit, 10_000).await?;
    let off = flood(&redis, &off_app, &off_metrics, connections, secs).await?;
    let on = flood(&redis, &on_app, &on_metrics, connections, secs).await?;
    let load_after = load_average();

    // Every admission is a Redis call; what is left of the calls are refusals Redis gave.
    let refusals_to_redis = on.calls.saturating_sub(on.allowed);
    let allowed_refusals = (on.phase.seconds / window).ceil() as u64 + connections as u64;
    let bound = on.allowed + allowed_refusals;
    let pass = on.calls <= bound;
    let verdict = if pass { "PASS" } else { "FAIL" };

    let row = |name: &str, o: &Outcome| {
        format!(
            "| {name} | {:.1} | {} | {:.0} | {:.1} | {:.0} | {} | {} | {} |\n",
            o.calls as f64 / o.phase.seconds,
            o.calls,
            o.phase.answers_per_second(),
            o.phase.ok as f64 / o.phase.seconds,
            o.phase.limited as f64 / o.phase.seconds,
            o.allowed,
            o.limited,
            o.hits,
        )
    };
    let mut md = String::new();
    md.push_str(&format!(
        "{SECTION}\n\nIssue 21's measurement of the local deny cache, written by `cargo run \
         --release -p redis-tb-bench-integrations --bin flood`: one client (one identity, its \
         address) floods `GET /` of the example app as fast as the load generator manages, \
         {connections} keep-alive connection(s), {secs} s per phase, through a layer without \
         the deny cache, then one with `.deny_cache(10_000)` (Redis flushed before each \
         phase). Policy `ip`: capacity {capacity}, {rate} token/s, so a refused request waits \
         at most {window} s (the retry window). Redis calls are TB.TAKE + TB.MTAKE from \
         `INFO commandstats` before and after each phase.\n\n\
         | deny cache | Redis calls/s | Redis calls | app answers/s | 200/s | 429/s | admitted (layer) | limited (layer) | cache hits |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    ));
    md.push_str(&row("off", &off));
    md.push_str(&row("on", &on));
    md.push_str(&format!(
        "\nWith the cache Redis got {:.0}x fewer calls ({} vs {}), and the app answered {:.2}x \
         the requests per second. Target: with the cache, at most one refused call per \
         identity per retry window reaches Redis, i.e. calls <= admissions + ceil({:.2} s / \
         {window} s) + {connections} (one request in flight per connection when an entry \
         expires) = {} + {} = {bound}. Measured: {} calls, {} of them refusals Redis gave: \
         **{verdict}**.\n\nSetup: CPUs: {}. redis-server on loopback, protocol RESP3 (the \
         client's default). Build profile: {}. Load average (1, 5, 15 min) before: \
         {load_before}, after: {load_after}.\n",
        off.calls as f64 / on.calls.max(1) as f64,
        on.calls,
        off.calls,
        on.phase.answers_per_second() / off.phase.answers_per_second().max(1e-9),
        on.phase.seconds,
        on.allowed,
        allowed_refusals,
        on.calls,
        refusals_to_redis,
        rt.describe(),
        if cfg!(debug_assertions) {
            "dev (unoptimized)"
        } else {
            "release"
        },
    ));

    let out = report_path();
    let old = std::fs::read_to_string(&out).unwrap_or_default();
    let report = match old.find(SECTION) {
        Some(at) => {
            let rest = &old[at + SECTION.len()..];
            // The section ends where the next top-level section ("\n## ") starts.
            let end = rest
                .find("\n## ")
                .map_or(old.len(), |i| at + SECTION.len() + i);
            format!("{}{}{}", &old[..at], md, &old[end..])
        }
        None => format!("{}\n{}", old.trim_end_matches('\n'), md),
    };
    std::fs::write(&out, report)?;
    println!("{md}");
    eprintln!("wrote {out}");
    if pass {
        Ok(())
    } else {
        Err(format!("deny cache flood: {} calls > {bound}", on.calls).into())
    }
}
