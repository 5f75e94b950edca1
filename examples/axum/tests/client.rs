//! The client API against a real redis-server with the module: typed replies of the five
//! commands, errors as types.

use std::time::Duration;

use redis_tb_axum_example::support::RedisServer;
use redis_tb_client::redis::ProtocolVersion;
use redis_tb_client::{Backend, BackendSetting, Charge, ClientConfig, Error, TbClient};

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn client(redis: &RedisServer) -> Result<TbClient, Error> {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    TbClient::connect_with(&redis.url(), config).await
}

const HOURLY: f64 = 1.0 / 3600.0;

#[tokio::test]
async fn take_returns_typed_replies_and_never_for_cost_above_capacity() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    let r = tb.take("k", 2.0, HOURLY, 1.0).await?;
    assert!(r.allowed);
    assert_eq!(r.remaining, 1.0);
    assert_eq!(r.retry_after, 0.0);
    assert!(r.reset_after > 3590.0 && r.reset_after <= 3600.0, "{r:?}");
    let r = tb.take("k", 2.0, HOURLY, 2.0).await?;
    assert!(!r.allowed && !r.never());
    assert!(r.retry_after > 3500.0, "{r:?}");
    let r = tb.take("k", 2.0, HOURLY, 3.0).await?;
    assert!(r.never(), "{r:?}");
    Ok(())
}

#[tokio::test]
async fn mtake_is_all_or_nothing() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    let charge = |key: &str, capacity: f64| Charge {
        key: key.to_owned(),
        capacity,
        rate: capacity * HOURLY,
        n: 1.0,
    };
    let both = [charge("a", 5.0), charge("b", 1.0)];
    let r = tb.mtake(&both).await?;
    assert!(r.allowed);
    assert_eq!(r.buckets.len(), 2);
    assert_eq!(r.buckets[0].remaining, 4.0);
    assert_eq!(r.buckets[1].remaining, 0.0);
    let r = tb.mtake(&both).await?;
    assert!(!r.allowed);
    assert!(r.buckets[0].allowed && !r.buckets[1].allowed);
    let a = tb.peek("a", 5.0, 5.0 * HOURLY).await?;
    assert!(
        a.remaining >= 4.0 && a.remaining < 4.01,
        "nothing taken from a: {a:?}"
    );
    assert!(matches!(tb.mtake(&[]).await, Err(Error::NoBuckets { .. })));
    Ok(())
}

#[tokio::test]
async fn peek_refund_and_reserve() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    let p = tb.peek("missing", 10.0, 1.0).await?;
    assert_eq!(
        (p.allowed, p.remaining, p.retry_after, p.reset_after),
        (true, 10.0, 0.0, 0.0)
    );
    assert_eq!(redis.command(&["EXISTS", "missing"])?, ":0\r\n");

    tb.take("r", 10.0, HOURLY, 4.0).await?;
    let r = tb.refund("r", 10.0, HOURLY, 3.0).await?;
    assert!(r.allowed);
    assert!(r.remaining >= 9.0 && r.remaining < 9.01, "{r:?}");
    let rs = tb
        .refund_many(&[Charge {
            key: "r".into(),
            capacity: 10.0,
            rate: HOURLY,
            n: 5.0,
        }])
        .await?;
    assert_eq!(rs[0].remaining, 10.0, "never above capacity");

    // One token per second, burst 1: the second reservation waits about a second.
    let first = tb.reserve("q", 1.0, 1.0, 1.0, 5.0).await?;
    assert!(first.allowed && first.wait == 0.0, "{first:?}");
    let second = tb.reserve("q", 1.0, 1.0, 1.0, 5.0).await?;
    assert!(
        second.allowed && second.wait > 0.0 && second.wait <= 1.0,
        "{second:?}"
    );
    assert!(second.remaining < 0.0);
    let refused = tb.reserve("q", 1.0, 1.0, 1.0, 0.0).await?;
    assert!(!refused.allowed && refused.wait > 0.0, "{refused:?}");
    Ok(())
}

#[tokio::test]
async fn errors_are_types() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    assert!(matches!(
        tb.take("k", 0.0, 1.0, 1.0).await,
        Err(Error::InvalidArgument {
            name: "capacity",
            ..
        })
    ));
    assert!(matches!(
        tb.take("k", 1.0, 1.0, f64::NAN).await,
        Err(Error::InvalidArgument { name: "n", .. })
    ));
    assert!(matches!(
        tb.reserve("k", 1.0, 1.0, 1.0, -1.0).await,
        Err(Error::InvalidArgument {
            name: "max_wait",
            ..
        })
    ));
    redis.command(&["SET", "s", "x"])?;
    let err = tb
        .take("s", 1.0, 1.0, 1.0)
        .await
        .err()
        .ok_or("no WRONGTYPE")?;
    assert!(matches!(err, Error::Server { .. }), "{err:?}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert!(tb.check_module().await.is_ok());
    Ok(())
}

#[tokio::test]
async fn a_dead_server_is_a_connection_error_and_a_restart_reconnects() -> TestResult {
    let mut redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    tb.take("k", 5.0, 1.0, 1.0).await?;
    redis.stop();
    let err = tb
        .take("k", 5.0, 1.0, 1.0)
        .await
        .err()
        .ok_or("answered while down")?;
    assert!(
        matches!(err, Error::Connection { .. } | Error::Timeout { .. }),
        "{err:?}"
    );
    redis.restart()?;
    // The broken connection was dropped; the next call connects again.
    let r = tb.take("k", 5.0, 1.0, 1.0).await?;
    assert_eq!(r.remaining, 4.0, "a fresh server: a full bucket");
    Ok(())
}

/// SPEC U2, L11: `TbClient::start` is strict (it was the old name of `start_degraded`);
/// `start_degraded` is the explicit opt-in.
#[tokio::test]
async fn start_is_strict_and_only_start_degraded_tolerates_an_unreachable_redis() -> TestResult {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    // Nothing listens on the port of a server that was stopped.
    let mut redis = RedisServer::start()?;
    let addr = format!("127.0.0.1:{}", redis.port());
    redis.stop();
    let err = TbClient::start(&redis.url(), config.clone())
        .await
        .err()
        .ok_or("TbClient::start started with Redis unreachable")?;
    let line = err.to_string();
    assert!(
        line.starts_with(&format!("redis-tb: cannot reach Redis at {addr} ("))
            && line.ends_with("): start it, or set start_degraded to start failing open"),
        "{line}"
    );
    let tb = TbClient::start_degraded(&redis.url(), config.clone()).await?;
    assert!(tb.started_degraded());
    assert!(matches!(
        tb.take("k", 1.0, 1.0, 1.0).await,
        Err(Error::Connection { .. } | Error::Timeout { .. })
    ));
    // Redis comes up later: the client connects on the next call.
    redis.restart()?;
    assert!(tb.take("k", 1.0, 1.0, 1.0).await?.allowed);

    // SPEC E1: forced to the module, a server without it fails either start (U1); by
    // default (auto) the same server starts on the script library.
    let bare = RedisServer::start_without_module()?;
    let forced = ClientConfig {
        backend: BackendSetting::Module,
        ..config.clone()
    };
    for degraded in [false, true] {
        let started = match degraded {
            false => TbClient::start(&bare.url(), forced.clone()).await,
            true => TbClient::start_degraded(&bare.url(), forced.clone()).await,
        };
        let err = started.err().ok_or("started without the module")?;
        assert!(matches!(err, Error::ModuleNotLoaded { .. }), "{err:?}");
    }
    let tb = TbClient::start(&bare.url(), config.clone()).await?;
    assert_eq!(tb.backend().map(|c| c.backend), Some(Backend::Scripts));
    assert!(tb.take("k", 1.0, 1.0, 1.0).await?.allowed);
    Ok(())
}

/// The `resp=` field of this server's client connections other than the asker's own
/// (`CLIENT LIST`): which protocol the client really speaks.
fn protocols_on_the_wire(redis: &RedisServer) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let list = redis.command(&["CLIENT", "LIST"])?;
    Ok(list
        .lines()
        .filter(|l| !l.contains("cmd=client|list"))
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("resp=")))
        .map(str::to_owned)
        .collect())
}

/// The same calls over `url`: replies whose numbers must not depend on the protocol.
async fn same_calls(url: &str) -> Result<(TbClient, Vec<(bool, f64, f64)>), Error> {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let tb = TbClient::connect_with(url, config).await?;
    let tag = if tb.protocol() == ProtocolVersion::RESP2 {
        "2"
    } else {
        "3"
    };
    let key = |k: &str| format!("{k}-{tag}");
    let mut out = Vec::new();
    // Fractional numbers (1/3 of a token, a rate of 1e-9) and -1 (never).
    let r = tb.take(&key("t"), 10.0, 1e-9, 1.0 / 3.0).await?;
    out.push((r.allowed, r.remaining, r.retry_after));
    let r = tb.take(&key("t"), 10.0, 1e-9, 11.0).await?;
    out.push((r.allowed, r.remaining, r.retry_after));
    let charges = [
        Charge {
            key: key("a"),
            capacity: 2.5,
            rate: 1e-9,
            n: 2.0,
        },
        Charge {
            key: key("b"),
            capacity: 1.0,
            rate: 1e-9,
            n: 2.0,
        },
    ];
    let m = tb.mtake(&charges).await?;
    out.push((m.allowed, m.remaining, m.retry_after));
    for b in &m.buckets {
        out.push((b.allowed, b.remaining, b.retry_after));
    }
    let p = tb.peek(&key("t"), 10.0, 1e-9).await?;
    out.push((p.allowed, p.remaining, p.retry_after));
    Ok((tb, out))
}

#[tokio::test]
async fn resp3_by_default_resp2_when_the_url_asks_and_the_same_replies() -> TestResult {
    let redis = RedisServer::start()?;
    let (tb3, replies3) = same_calls(&redis.url()).await?;
    assert_eq!(tb3.protocol(), ProtocolVersion::RESP3);
    assert_eq!(protocols_on_the_wire(&redis)?, ["3"]);
    drop(tb3);

    let redis2 = RedisServer::start()?;
    let (tb2, replies2) = same_calls(&format!("{}?protocol=resp2", redis2.url())).await?;
    assert_eq!(tb2.protocol(), ProtocolVersion::RESP2);
    assert_eq!(protocols_on_the_wire(&redis2)?, ["2"]);

    // The buckets refill (1e-9 token/s) between calls: the same numbers up to that.
    assert_eq!(replies3.len(), replies2.len());
    for (a, b) in replies3.iter().zip(&replies2) {
        assert_eq!((a.0, a.2), (b.0, b.2), "{replies3:?} vs {replies2:?}");
        assert!((a.1 - b.1).abs() < 1e-9, "{replies3:?} vs {replies2:?}");
    }
    assert_eq!(replies3[0], (true, 10.0 - 1.0 / 3.0, 0.0));
    assert_eq!((replies3[1].0, replies3[1].2), (false, -1.0));
    assert!(!replies3[2].0, "b cannot give 2 of 1");
    Ok(())
}

#[tokio::test]
async fn a_server_without_hello_gets_resp2() -> TestResult {
    // HELLO renamed away: the server answers like one from before RESP3 (Redis 5).
    let redis = RedisServer::start_with_args(&["--rename-command", "HELLO", ""])?;
    let (tb, replies) = same_calls(&redis.url()).await?;
    assert_eq!(tb.protocol(), ProtocolVersion::RESP2);
    assert_eq!(protocols_on_the_wire(&redis)?, ["2"]);
    assert_eq!(replies[0], (true, 10.0 - 1.0 / 3.0, 0.0));
    // And a URL that insists on RESP3 is refused rather than silently downgraded.
    let err = TbClient::connect_with(
        &format!("{}?protocol=resp3", redis.url()),
        ClientConfig::default(),
    )
    .await
    .err()
    .ok_or("connected with RESP3 to a server without HELLO")?;
    assert!(matches!(err, Error::Connection { .. }), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn the_layer_decides_the_same_over_resp2_and_resp3() -> TestResult {
    use redis_tb_axum_example::support::{HttpConn, serve};
    use redis_tb_axum_example::{Config, app, limiter};
    use redis_tb_client::Limit;
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let redis = RedisServer::start()?;
    let mut seen = Vec::new();
    for (url, protocol) in [
        (format!("{}?protocol=resp2", redis.url()), "2"),
        (redis.url(), "3"),
    ] {
        redis.command(&["FLUSHALL"])?;
        let tb = TbClient::connect_with(&url, config.clone()).await?;
        let app_config = Config {
            ip: Limit::per_hour(2.0),
            ..Config::default()
        };
        let served = serve(app(Some(limiter(tb, &app_config)?))).await?;
        let mut conn = HttpConn::connect(served.addr).await?;
        let mut answers = Vec::new();
        for _ in 0..3 {
            let r = conn.request("GET", "/", &[]).await?;
            answers.push((
                r.status,
                r.header("ratelimit").map(str::to_owned),
                r.header("retry-after").map(str::to_owned),
            ));
        }
        assert!(protocols_on_the_wire(&redis)?.iter().any(|p| p == protocol));
        seen.push(answers);
    }
    assert_eq!(seen[0], seen[1]);
    let statuses: Vec<u16> = seen[0].iter().map(|a| a.0).collect();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(seen[0][0].1.as_deref(), Some("\"ip\";r=1;t=1800"));
    assert_eq!(seen[0][2].2.as_deref(), Some("1800"));
    Ok(())
}

#[tokio::test]
async fn startup_failures_are_one_line_naming_the_address_and_what_to_do() -> TestResult {
    let config = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    // SPEC U2: unreachable fails the start by default.
    let mut redis = RedisServer::start()?;
    let addr = format!("127.0.0.1:{}", redis.port());
    redis.stop();
    let err = TbClient::connect_with(&redis.url(), config.clone())
        .await
        .err()
        .ok_or("connected to a stopped server")?;
    assert!(matches!(err, Error::Unreachable { .. }), "{err:?}");
    let line = err.to_string();
    assert!(
        line.starts_with(&format!("redis-tb: cannot reach Redis at {addr} ("))
            && line.ends_with("): start it, or set start_degraded to start failing open")
            && !line.contains('\n'),
        "{line}"
    );
    // ...and start_degraded starts.
    assert!(
        TbClient::start_degraded(&redis.url(), config.clone())
            .await
            .is_ok()
    );

    // SPEC U1: a user without +command|info.
    redis.restart()?;
    redis.command(&[
        "ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all", "-command",
    ])?;
    let url = format!("redis://app:pw@{addr}/");
    let err = TbClient::connect_with(&url, config)
        .await
        .err()
        .ok_or("connected without COMMAND INFO")?;
    assert_eq!(
        err.to_string(),
        format!(
            "redis-tb: user cannot run COMMAND INFO on {addr}: grant +command|info (see docs/operations.md)"
        )
    );
    Ok(())
}

#[tokio::test]
async fn window_and_throttle_have_typed_replies() -> TestResult {
    use redis_tb_client::{Reply, Throttle, WindowMode};
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    // docs/commands.md's FIXED session: two in the last second of a window, one more
    // refused, the next window's first admitted.
    let now = 1_764_456_299.0;
    let w = |n: f64, at: f64| tb.window("w", 2.0, 60.0, n, Some(at), WindowMode::Fixed);
    assert_eq!(
        w(1.0, now).await?,
        Reply {
            allowed: true,
            remaining: 1.0,
            retry_after: 0.0,
            reset_after: 1.0
        }
    );
    assert_eq!(w(1.0, now).await?.remaining, 0.0);
    let refused = w(1.0, now).await?;
    assert_eq!((refused.allowed, refused.retry_after), (false, 1.0));
    assert_eq!(
        w(1.0, now + 1.0).await?,
        Reply {
            allowed: true,
            remaining: 1.0,
            retry_after: 0.0,
            reset_after: 60.0
        }
    );
    assert!(w(3.0, now + 1.0).await?.never(), "n > limit: never");
    // SLIDING by default, on the server's clock.
    assert!(
        tb.window("s", 100.0, 60.0, 1.0, None, WindowMode::default())
            .await?
            .allowed
    );
    // docs/commands.md's CL.THROTTLE session.
    assert_eq!(
        tb.throttle("user123", 15, 30.0, 60.0, 1).await?,
        Throttle {
            limited: false,
            limit: 16,
            remaining: 15,
            retry_after: -1,
            reset_after: 2
        }
    );
    assert_eq!(
        tb.throttle("user123", 15, 30.0, 60.0, 16).await?,
        Throttle {
            limited: true,
            limit: 16,
            remaining: 15,
            retry_after: 2,
            reset_after: 2
        }
    );
    assert!(matches!(
        tb.throttle("x", 1, 0.0, 60.0, 1).await,
        Err(Error::InvalidArgument {
            name: "count_per_period",
            ..
        })
    ));
    Ok(())
}
