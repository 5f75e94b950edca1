//! SPEC E against real servers: a plain redis-server without the module (the script library
//! of clients/lua, chosen by the default backend, auto) beside one with it. The same calls
//! answer the same on both; leases and holds work on the scripts; a `SCRIPT FLUSH` or
//! `FUNCTION FLUSH` mid-run costs one reload and no store error (E3); a server that refuses
//! TIME in scripts gets the client's clock (E5); forced to the module, a plain server fails
//! the start with U1's line.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use redis_tb_axum_example::support::RedisServer;
use redis_tb_client::startup::check_store;
use redis_tb_client::{
    Backend, BackendSetting, Charge, ClientConfig, Error, Limit, Outcome, Policy, RateLimiter,
    ScriptsVia, TbClient, WindowMode,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn timeouts() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

const PEER: Option<IpAddr> = Some(IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9)));

fn parts() -> axum::http::request::Parts {
    axum::http::Request::builder()
        .uri("/x")
        .body(())
        .map(|r| r.into_parts().0)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `name` of the server's `INFO commandstats` line for `command` (`script|load`): its calls.
fn calls(redis: &RedisServer, command: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let info = redis.command(&["INFO", "commandstats"])?;
    let head = format!("cmdstat_{command}:calls=");
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next())
        .map_or(Ok(0), str::parse)?)
}

/// What a reply of TB.TAKE's shape says, the numbers rounded so that two servers' clocks a
/// few microseconds apart give the same.
fn seen(allowed: bool, remaining: f64) -> (bool, i64) {
    (allowed, (remaining * 1000.0).round() as i64)
}

/// The same calls on the module and on the scripts: the same answers (E7: the scripts'
/// bulk strings read as the module's doubles).
async fn sequence(tb: &TbClient) -> Result<Vec<(bool, i64)>, Error> {
    let mut out = Vec::new();
    for _ in 0..6 {
        let r = tb.take("b", 5.0, 1e-9, 1.0).await?;
        out.push(seen(r.allowed, r.remaining));
    }
    let r = tb.refund("b", 5.0, 1e-9, 2.0).await?;
    out.push(seen(r.allowed, r.remaining));
    let r = tb.peek("b", 5.0, 1e-9).await?;
    out.push(seen(r.allowed, r.remaining));
    let charges = [
        Charge {
            key: "m1".into(),
            capacity: 3.0,
            rate: 1e-9,
            n: 2.0,
        },
        Charge {
            key: "m2".into(),
            capacity: 1.0,
            rate: 1e-9,
            n: 1.0,
        },
    ];
    for _ in 0..2 {
        let r = tb.mtake(&charges).await?;
        out.push(seen(r.allowed, r.remaining));
    }
    for r in tb.refund_many(&charges).await? {
        out.push(seen(r.allowed, r.remaining));
    }
    for _ in 0..4 {
        let r = tb
            .window("w", 3.0, 86_400.0, 1.0, None, WindowMode::Fixed)
            .await?;
        out.push(seen(r.allowed, r.remaining));
    }
    let r = tb.reserve("r", 2.0, 1e-9, 3.0, 0.0).await?;
    out.push(seen(r.allowed, r.remaining));
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripts_answer_as_the_module_does() -> TestResult {
    let module = RedisServer::start()?;
    let plain = RedisServer::start_without_module()?;
    let on_module = TbClient::connect_with(&module.url(), timeouts()).await?;
    let on_scripts = TbClient::connect_with(&plain.url(), timeouts()).await?;
    let chosen = on_module.backend().ok_or("no choice")?;
    assert_eq!(chosen.backend, Backend::Module);
    assert_eq!(
        chosen.line,
        format!(
            "redis-tb: backend module on 127.0.0.1:{} (tb.take found)",
            module.port()
        )
    );
    let chosen = on_scripts.backend().ok_or("no choice")?;
    assert_eq!(
        (chosen.backend, chosen.via, chosen.client_clock),
        (Backend::Scripts, Some(ScriptsVia::Functions), false)
    );
    assert_eq!(
        chosen.line,
        format!(
            "redis-tb: backend scripts on 127.0.0.1:{} (tb.take not found, Functions)",
            plain.port()
        )
    );
    let want = sequence(&on_module).await?;
    assert_eq!(sequence(&on_scripts).await?, want);
    assert_eq!(want[..6].iter().filter(|(a, _)| *a).count(), 5, "{want:?}");

    // EVALSHA where FUNCTION is refused: the same answers again.
    let evalsha =
        RedisServer::start_without_module_with_args(&["--rename-command", "FUNCTION", ""])?;
    let tb = TbClient::connect_with(&evalsha.url(), timeouts()).await?;
    assert_eq!(tb.backend().and_then(|c| c.via), Some(ScriptsVia::Evalsha));
    assert_eq!(sequence(&tb).await?, want);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_and_holds_work_on_the_scripts() -> TestResult {
    let plain = RedisServer::start_without_module()?;
    let tb = TbClient::connect_with(&plain.url(), timeouts()).await?;
    let conc = RateLimiter::builder(tb.clone())
        .name("conc")
        .policy(Policy::new("conc", Limit::in_flight(1.0, 30.0)))
        .build()?;
    conc.startup().await?;
    assert_eq!(conc.stats().backend(), Some(Backend::Scripts));
    let first = conc.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(first.decision.outcome, Outcome::Allowed);
    let id = first.decision.lease.as_ref().ok_or("no lease")?.id.clone();
    assert_eq!(id.len(), 16, "{id}");
    let (in_flight, _) = tb.peek_leases("rl:conc:203.0.113.9").await?;
    assert_eq!(in_flight, 1.0);
    let second = conc.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(second.decision.outcome, Outcome::Limited);
    first.lease.finish().await;
    let third = conc.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(third.decision.outcome, Outcome::Allowed);
    let other = third.decision.lease.as_ref().ok_or("no lease")?.id.clone();
    assert_ne!(other, id, "E4: a fresh id for every grant");
    third.lease.finish().await;

    let tokens = RateLimiter::builder(tb.clone())
        .name("tokens")
        .policy(Policy::new("tokens", Limit::new(1000.0, 1e-9)).settle_later(true))
        .build()?;
    let check = tokens.check(&mut parts(), PEER, Some("/x")).await;
    let hold = check.decision.hold("tokens", 100.0, 60.0).await?;
    let key = "rl:tokens:203.0.113.9";
    assert!((tb.peek(key, 1000.0, 1e-9).await?.remaining - 900.0).abs() < 1e-3);
    let (holds, amount, _) = tb.peek_holds(key).await?;
    assert_eq!((holds, amount), (1.0, 100.0));
    let settled = hold.settle(30.0).await?;
    assert!(settled.settled);
    // What the settle charged beyond the hold: 30 - 100.
    assert!((settled.charged + 70.0).abs() < 1e-9, "{settled:?}");
    assert!((tb.peek(key, 1000.0, 1e-9).await?.remaining - 970.0).abs() < 1e-3);
    assert_eq!(
        tokens.stats().store_errors() + conc.stats().store_errors(),
        0
    );
    Ok(())
}

/// E3: the library flushed mid-run: the next call loads it once and succeeds; no store
/// error. `via`: how the server is called (FUNCTION refused: EVALSHA).
async fn flushed(args: &[&str], flush: &[&str], load: &str) -> TestResult {
    let plain = RedisServer::start_without_module_with_args(args)?;
    let tb = TbClient::connect_with(&plain.url(), timeouts()).await?;
    let limiter = RateLimiter::builder(tb)
        .policy(Policy::new("ip", Limit::new(10.0, 1e-9)))
        .build()?;
    limiter.startup().await?;
    let c = limiter.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(c.decision.remaining.map(f64::round), Some(9.0));
    assert_eq!(calls(&plain, load)?, 1);
    plain.command(flush)?;
    for left in [8.0, 7.0] {
        let c = limiter.check(&mut parts(), PEER, Some("/x")).await;
        assert_eq!(c.decision.outcome, Outcome::Allowed);
        assert_eq!(c.decision.remaining.map(f64::round), Some(left));
    }
    assert_eq!(calls(&plain, load)?, 2, "one reload");
    assert_eq!(limiter.stats().store_errors(), 0);
    assert_eq!(limiter.stats().degraded(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_mid_run_is_one_reload_and_no_store_error() -> TestResult {
    flushed(
        &["--rename-command", "FUNCTION", ""],
        &["SCRIPT", "FLUSH"],
        "script|load",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_flush_mid_run_is_one_reload_and_no_store_error() -> TestResult {
    flushed(&[], &["FUNCTION", "FLUSH"], "function|load").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_time_gets_the_clients_clock() -> TestResult {
    let plain = RedisServer::start_without_module_with_args(&["--rename-command", "TIME", ""])?;
    let tb = TbClient::connect_with(&plain.url(), timeouts()).await?;
    let chosen = tb.backend().ok_or("no choice")?;
    assert!(chosen.client_clock);
    assert_eq!(
        chosen.line,
        format!(
            "redis-tb: backend scripts on 127.0.0.1:{} (tb.take not found, Functions, client clock)",
            plain.port()
        )
    );
    // Buckets, windows and leases: each call carries `now` / `NOW`.
    let bucket = RateLimiter::builder(tb.clone())
        .policy(Policy::new("ip", Limit::new(2.0, 1e-9)))
        .build()?;
    let outcomes: Vec<Outcome> = outcomes_of(&bucket, 3).await;
    assert_eq!(
        outcomes,
        [Outcome::Allowed, Outcome::Allowed, Outcome::Limited]
    );
    let w = tb
        .window("w", 1.0, 60.0, 1.0, None, WindowMode::Sliding)
        .await?;
    assert!(w.allowed);
    let conc = RateLimiter::builder(tb.clone())
        .name("conc")
        .policy(Policy::new("conc", Limit::in_flight(1.0, 30.0)))
        .build()?;
    let c = conc.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(c.decision.outcome, Outcome::Allowed);
    assert_eq!(tb.peek_leases("rl:conc:203.0.113.9").await?.0, 1.0);
    c.lease.finish().await;
    assert_eq!(conc.stats().leases_expired(), 0);
    assert_eq!(
        bucket.stats().store_errors() + conc.stats().store_errors(),
        0
    );
    Ok(())
}

async fn outcomes_of(limiter: &RateLimiter, n: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            limiter
                .check(&mut parts(), PEER, Some("/x"))
                .await
                .decision
                .outcome,
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_to_the_module_a_plain_server_fails_the_start_with_u1s_line() -> TestResult {
    let plain = RedisServer::start_without_module()?;
    let forced = ClientConfig {
        backend: BackendSetting::Module,
        ..timeouts()
    };
    let err = TbClient::start(&plain.url(), forced.clone())
        .await
        .err()
        .ok_or("started")?;
    assert_eq!(
        err.to_string(),
        format!(
            "redis-tb module not loaded on 127.0.0.1:{}: load libredis_tb.so with loadmodule",
            plain.port()
        )
    );
    // Forced to the scripts on a server with the module: the module is not asked for.
    let module = RedisServer::start()?;
    let scripts = ClientConfig {
        backend: BackendSetting::Scripts,
        ..timeouts()
    };
    let tb = TbClient::lazy(redis_tb_client::redis::Client::open(module.url())?, scripts);
    let started = check_store(&tb, false).await?;
    assert_eq!(started.backend, Some(Backend::Scripts));
    assert_eq!(
        started.backend_log.as_deref(),
        Some(
            format!(
                "redis-tb: backend scripts on 127.0.0.1:{} (forced by backend=scripts, Functions)",
                module.port()
            )
            .as_str()
        )
    );
    assert_eq!(calls(&module, "command|info")?, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_start_chooses_at_its_first_call_that_reaches_redis() -> TestResult {
    let mut plain = RedisServer::start_without_module()?;
    plain.stop();
    let tb = TbClient::start_degraded(&plain.url(), timeouts()).await?;
    assert!(tb.started_degraded());
    let limiter = RateLimiter::builder(tb.clone())
        .policy(Policy::new("ip", Limit::new(10.0, 1e-9)))
        .build()?;
    limiter.startup().await?;
    assert_eq!(limiter.stats().backend(), None);
    plain.restart()?;
    let c = limiter.check(&mut parts(), PEER, Some("/x")).await;
    assert_eq!(c.decision.outcome, Outcome::Allowed);
    assert_eq!(limiter.stats().backend(), Some(Backend::Scripts));
    assert_eq!(tb.backend().map(|c| c.backend), Some(Backend::Scripts));
    Ok(())
}
