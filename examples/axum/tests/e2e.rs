//! End to end: a real redis-server with the module on a free loopback port, the example app
//! served by axum on another, requests over real HTTP/1.1 connections. No timing
//! thresholds: exactness comes from hourly buckets (a test run refills a negligible
//! fraction of a token), and recovery sleeps exactly the Retry-After it was given.

use std::time::Duration;

use redis_tb_axum_example::support::{HttpConn, HttpResponse, RedisServer, Served, request, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::headers::unix_now;
use redis_tb_client::{
    BackendSetting, ClientConfig, Error, FailureMode, LegacyReset, Limit, Stats, TbClient,
};
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Generous timeouts: a loaded CI machine must not turn a slow reply into a store error.
fn test_timeouts() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

async fn client(redis: &RedisServer) -> Result<TbClient, Error> {
    TbClient::connect_with(&redis.url(), test_timeouts()).await
}

async fn start(
    redis: &RedisServer,
    config: Config,
) -> Result<(Served, Stats), Box<dyn std::error::Error>> {
    let layer = limiter(client(redis).await?, &config)?;
    let metrics = layer.stats();
    Ok((serve(app(Some(layer))).await?, metrics))
}

fn hourly(ip: f64) -> Config {
    Config {
        ip: Limit::per_hour(ip),
        ..Config::default()
    }
}

fn json(r: &HttpResponse) -> Value {
    serde_json::from_str(&r.body).unwrap_or(Value::Null)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_to_the_limit_then_429_with_every_header_value() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        legacy_headers: Some(LegacyReset::UnixTime),
        ..hourly(3.0)
    };
    let (app, _) = start(&redis, config).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    // X-RateLimit-Reset is a Unix time: ceil(now + reset_after) on the server's clock,
    // somewhere between the clock before and after the request.
    let unix_reset_within = |r: &HttpResponse, reset_after: f64, before: f64, after: f64| {
        let v: f64 = r
            .header("x-ratelimit-reset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN);
        assert!(
            v >= (before + reset_after).ceil() && v <= (after + reset_after).ceil(),
            "X-RateLimit-Reset {v} not ceil(now + {reset_after}) for now in [{before}, {after}]"
        );
    };
    for k in 1..=3i64 {
        let before = unix_now();
        let r = conn.request("GET", "/items/7", &[]).await?;
        let after = unix_now();
        assert_eq!(r.status, 200, "{r:?}");
        let body = json(&r);
        let p = &body["rate_limit"]["results"][0];
        assert_eq!(p["name"], "ip");
        assert_eq!(p["key"], "rl:ip:127.0.0.1");
        let (remaining, reset) = (num(&p["remaining"]), num(&p["reset_after"]));
        // One token every 1200 s: after k takes the bucket is k tokens (k * 1200 s) short,
        // minus the refill of the milliseconds since the first take.
        assert_eq!(remaining.floor() as i64, 3 - k, "{body}");
        assert!(
            reset <= 1200.0 * k as f64 && reset > 1200.0 * k as f64 - 60.0,
            "{reset}"
        );
        let t = reset.ceil() as i64;
        assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=3;w=3600"#));
        assert_eq!(
            r.header("ratelimit"),
            Some(format!(r#""ip";r={};t={t}"#, 3 - k).as_str())
        );
        assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(
            r.header("x-ratelimit-remaining"),
            Some((3 - k).to_string().as_str())
        );
        unix_reset_within(&r, reset, before, after);
        assert_eq!(r.header("retry-after"), None);
        assert_eq!(
            body["last_request_in_quota"],
            k == 3,
            "the handler reads the decision"
        );
    }

    let before = unix_now();
    let r = conn.request("GET", "/items/7", &[]).await?;
    let after = unix_now();
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let problem = json(&r);
    assert_eq!(problem["type"], "about:blank");
    assert_eq!(problem["title"], "Too Many Requests");
    assert_eq!(problem["status"], 429);
    assert_eq!(problem["violated_policies"], serde_json::json!(["ip"]));
    let retry = num(&problem["retry_after"]);
    assert!(retry > 1140.0 && retry <= 1200.0, "{retry}");
    let retry_header = (retry.ceil() as i64).max(1).to_string();
    assert_eq!(r.header("retry-after"), Some(retry_header.as_str()));
    assert_eq!(
        problem["detail"],
        format!("rate limit exceeded for 'ip': retry after {retry_header} s")
    );
    assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=3;w=3600"#));
    let rl = r.header("ratelimit").unwrap_or_default().to_owned();
    let t: i64 = rl
        .strip_prefix(r#""ip";r=0;t="#)
        .and_then(|t| t.parse().ok())
        .unwrap_or(-1);
    assert!(t > 3540 && t <= 3600, "{rl}");
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    // t was rounded up from reset_after: the Unix reset is within a second of now + t.
    unix_reset_within(&r, t as f64 - 1.0, before, after + 1.0);

    // The refusal took nothing.
    let peek = client(&redis)
        .await?
        .peek("rl:ip:127.0.0.1", 3.0, 3.0 / 3600.0)
        .await?;
    assert!(peek.remaining >= 0.0 && peek.remaining < 0.05, "{peek:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_reset_in_delta_seconds_is_t_and_legacy_headers_are_off_by_default() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        legacy_headers: Some(LegacyReset::DeltaSeconds),
        ..hourly(3.0)
    };
    let (app, _) = start(&redis, config).await?;
    let r = request(app.addr, "GET", "/items/7", &[]).await?;
    let rl = r.header("ratelimit").unwrap_or_default().to_owned();
    let t = rl.strip_prefix(r#""ip";r=2;t="#).ok_or(rl.clone())?;
    assert_eq!(r.header("x-ratelimit-reset"), Some(t));
    assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
    let (app, _) = start(&redis, hourly(3.0)).await?;
    let r = request(app.addr, "GET", "/items/7", &[]).await?;
    assert!(r.header("ratelimit").is_some());
    assert_eq!(r.header("x-ratelimit-reset"), None);
    assert_eq!(r.header("x-ratelimit-limit"), None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_after_sleeping_retry_after() -> TestResult {
    let redis = RedisServer::start()?;
    // A burst of 2, then one token every 2 s.
    let config = Config {
        ip: Limit::new(2.0, 0.5),
        ..Config::default()
    };
    let (app, _) = start(&redis, config).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    let mut refused = None;
    for _ in 0..20 {
        let r = conn.request("GET", "/items/1", &[]).await?;
        if r.status == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status, 200);
    }
    let refused = refused.ok_or("never refused")?;
    let wait: u64 = refused
        .header("retry-after")
        .ok_or("no Retry-After")?
        .parse()?;
    assert!((1..=2).contains(&wait), "{wait}");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let r = conn.request("GET", "/items/1", &[]).await?;
    assert_eq!(r.status, 200, "admitted after waiting Retry-After: {r:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_app_workers_share_one_limit_exactly() -> TestResult {
    let redis = RedisServer::start()?;
    let (a, _) = start(&redis, hourly(10.0)).await?;
    let (b, _) = start(&redis, hourly(10.0)).await?;
    let mut tasks = Vec::new();
    for i in 0..40 {
        let addr = if i % 2 == 0 { a.addr } else { b.addr };
        tasks.push(tokio::spawn(async move {
            request(addr, "GET", "/items/3", &[])
                .await
                .map(|r| r.status)
        }));
    }
    let (mut ok, mut limited) = (0, 0);
    for t in tasks {
        match t.await?? {
            200 => ok += 1,
            429 => limited += 1,
            other => return Err(format!("unexpected status {other}").into()),
        }
    }
    assert_eq!((ok, limited), (10, 30));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layered_policies_burn_nothing_on_refusal_and_tiers_pick_the_limit() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        user_free: Limit::per_hour(2.0),
        user_pro: Limit::per_hour(4.0),
        ..hourly(5.0)
    };
    let (app, _) = start(&redis, config).await?;
    let tb = client(&redis).await?;
    let ip_bucket = || tb.peek("rl:ip:127.0.0.1", 5.0, 5.0 / 3600.0);
    // bob (key-bob) is on the free plan (2 per hour here).
    let bob = [("x-api-key", "key-bob")];
    let mut conn = HttpConn::connect(app.addr).await?;
    for _ in 0..2 {
        let r = conn.request("GET", "/items/1", &bob).await?;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""ip";q=5;w=3600, "user";q=2;w=3600"#)
        );
    }
    for _ in 0..3 {
        let r = conn.request("GET", "/items/1", &bob).await?;
        assert_eq!(r.status, 429);
        assert_eq!(json(&r)["violated_policies"], serde_json::json!(["user"]));
        // The ip bucket had room, but the refusal took nothing from it.
        let ip = ip_bucket().await?;
        assert!(ip.remaining >= 3.0 && ip.remaining < 3.05, "{ip:?}");
    }
    // alice (key-alice) is on the pro plan (4 per hour here): the ip policy (3 left)
    // refuses her first.
    let alice = [("x-api-key", "key-alice")];
    for _ in 0..3 {
        let r = conn.request("GET", "/items/1", &alice).await?;
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""ip";q=5;w=3600, "user";q=4;w=3600"#)
        );
    }
    let r = conn.request("GET", "/items/1", &alice).await?;
    assert_eq!(r.status, 429);
    assert_eq!(json(&r)["violated_policies"], serde_json::json!(["ip"]));
    let alice_bucket = tb.peek("rl:user:alice", 4.0, 4.0 / 3600.0).await?;
    assert!(
        alice_bucket.remaining >= 1.0 && alice_bucket.remaining < 1.05,
        "{alice_bucket:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored() -> TestResult {
    let redis = RedisServer::start()?;
    let (app, _) = start(&redis, hourly(100.0)).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    for i in 1..=3 {
        let spoof = format!("203.0.113.{i}");
        let r = conn
            .request("GET", "/items/1", &[("x-forwarded-for", spoof.as_str())])
            .await?;
        assert_eq!(r.status, 200);
        assert_eq!(
            json(&r)["rate_limit"]["results"][0]["key"],
            "rl:ip:127.0.0.1"
        );
    }
    let tb = client(&redis).await?;
    let peer = tb.peek("rl:ip:127.0.0.1", 100.0, 100.0 / 3600.0).await?;
    assert!(peer.remaining >= 97.0 && peer.remaining < 97.05, "{peer:?}");
    assert_eq!(redis.command(&["EXISTS", "rl:ip:203.0.113.1"])?, ":0\r\n");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_from_a_trusted_proxy_is_walked_right_to_left() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        trusted_proxies: vec!["127.0.0.1/32".into()],
        ..hourly(100.0)
    };
    let (app, _) = start(&redis, config).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    // The client forged 6.6.6.6; our proxy (the peer) appended the address it saw.
    let r = conn
        .request(
            "GET",
            "/items/1",
            &[("x-forwarded-for", "6.6.6.6, 203.0.113.9")],
        )
        .await?;
    assert_eq!(
        json(&r)["rate_limit"]["results"][0]["key"],
        "rl:ip:203.0.113.9"
    );
    assert_eq!(redis.command(&["EXISTS", "rl:ip:6.6.6.6"])?, ":0\r\n");
    assert_eq!(redis.command(&["EXISTS", "rl:ip:127.0.0.1"])?, ":0\r\n");
    // IPv6 clients are grouped by /64.
    for (i, addr) in ["2001:db8::1", "2001:db8::2"].into_iter().enumerate() {
        let r = conn
            .request("GET", "/items/1", &[("x-forwarded-for", addr)])
            .await?;
        let p = &json(&r)["rate_limit"]["results"][0];
        assert_eq!(p["key"], "rl:ip:2001:db8::/64");
        assert_eq!(num(&p["remaining"]).floor(), 99.0 - i as f64);
    }
    // A malformed entry stops the walk at the last good address: the peer.
    let r = conn
        .request(
            "GET",
            "/items/1",
            &[("x-forwarded-for", "203.0.113.9, garbage")],
        )
        .await?;
    assert_eq!(
        json(&r)["rate_limit"]["results"][0]["key"],
        "rl:ip:127.0.0.1"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_fails_open_with_a_counter_then_recovers() -> TestResult {
    let mut redis = RedisServer::start()?;
    let config = Config {
        cooldown: Duration::from_millis(200),
        name: "e2e-fail-open".to_owned(),
        ..hourly(100.0)
    };
    let (app, metrics) = start(&redis, config).await?;
    let r = request(app.addr, "GET", "/items/1", &[]).await?;
    assert_eq!(r.status, 200);
    assert!(r.header("ratelimit").is_some());
    assert_eq!((metrics.store_errors(), metrics.degraded()), (0, 0));

    redis.stop();
    for _ in 0..5 {
        let r = request(app.addr, "GET", "/items/1", &[]).await?;
        assert_eq!(r.status, 200, "fail-open lets requests through: {r:?}");
        assert_eq!(r.header("ratelimit"), None);
        assert_eq!(r.header("ratelimit-policy"), None);
        assert_eq!(json(&r)["rate_limit"]["outcome"], "store_error");
    }
    assert_eq!(
        metrics.degraded(),
        5,
        "every request was decided by the failure mode"
    );
    // The first failure opened the breaker: Redis was skipped during the cooldown.
    assert!(
        (1..=5).contains(&metrics.store_errors()),
        "{}",
        metrics.store_errors()
    );
    assert_eq!(metrics.limited(), 0);
    let m = request(app.addr, "GET", "/metrics", &[]).await?;
    assert!(
        m.body
            .contains("redis_tb_degraded_total{limiter=\"e2e-fail-open\"} 5\n"),
        "{}",
        m.body
    );

    // Back up (empty): after the cooldown one request probes and reconnects.
    redis.restart()?;
    let mut recovered = false;
    for _ in 0..100 {
        let r = request(app.addr, "GET", "/items/1", &[]).await?;
        if r.header("ratelimit").is_some() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "limiting resumes once Redis is back");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_mid_run_fails_closed_with_503() -> TestResult {
    let mut redis = RedisServer::start()?;
    let config = Config {
        failure_mode: FailureMode::FailClosed,
        ..hourly(100.0)
    };
    let (app, metrics) = start(&redis, config).await?;
    assert_eq!(request(app.addr, "GET", "/items/1", &[]).await?.status, 200);
    redis.stop();
    for _ in 0..3 {
        let r = request(app.addr, "GET", "/items/1", &[]).await?;
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        assert_eq!(r.header("ratelimit"), None);
        let problem = json(&r);
        assert_eq!(problem["status"], 503);
        assert_eq!(problem["title"], "Service Unavailable");
        assert_eq!(
            problem["detail"],
            "the rate limiter's store is unavailable; retry shortly"
        );
    }
    assert_eq!(metrics.degraded(), 3);
    assert!(metrics.store_errors() >= 1);
    assert_eq!(
        metrics.limited(),
        0,
        "a store error is never counted as limited"
    );
    // Unlimited routes do not depend on Redis.
    assert_eq!(request(app.addr, "GET", "/health", &[]).await?.status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_module_at_startup_is_a_clear_error() -> TestResult {
    // SPEC E1, U1: forced to the module (auto would choose the scripts).
    let redis = RedisServer::start_without_module()?;
    let forced = ClientConfig {
        backend: BackendSetting::Module,
        ..test_timeouts()
    };
    let err = TbClient::connect_with(&redis.url(), forced)
        .await
        .err()
        .ok_or("connected without the module")?;
    assert!(matches!(err, Error::ModuleNotLoaded { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "redis-tb module not loaded on 127.0.0.1:{}: load libredis_tb.so with loadmodule",
            redis.port()
        )
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handler_refund_gives_the_tokens_back() -> TestResult {
    let redis = RedisServer::start()?;
    let (app, metrics) = start(&redis, hourly(10.0)).await?;
    let r = request(app.addr, "GET", "/items/5000", &[]).await?;
    assert_eq!(r.status, 404);
    assert!(r.header("ratelimit").is_some());
    let tb = client(&redis).await?;
    let ip = tb.peek("rl:ip:127.0.0.1", 10.0, 10.0 / 3600.0).await?;
    assert_eq!(ip.remaining, 10.0, "refunded to full");
    assert_eq!(metrics.refunds(), 1);
    let r = request(app.addr, "GET", "/items/5", &[]).await?;
    assert_eq!(r.status, 200);
    let ip = tb.peek("rl:ip:127.0.0.1", 10.0, 10.0 / 3600.0).await?;
    assert!(ip.remaining >= 9.0 && ip.remaining < 9.05, "{ip:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_per_request_and_a_cost_that_can_never_fit() -> TestResult {
    let redis = RedisServer::start()?;
    let (app, _) = start(&redis, hourly(100.0)).await?;
    // 250 rows at 100 rows per token: 3 tokens.
    let r = request(app.addr, "GET", "/export?rows=250", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(json(&r)["rate_limit"]["results"][0]["cost"], 3.0);
    assert!(
        r.header("ratelimit")
            .is_some_and(|v| v.starts_with(r#""ip";r=97;"#)),
        "{r:?}"
    );
    // 100,000 rows: 1000 tokens from a bucket of 100. No wait helps: no Retry-After.
    let r = request(app.addr, "GET", "/export?rows=100000", &[]).await?;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), None);
    let problem = json(&r);
    assert_eq!(problem["retry_after"], Value::Null);
    assert_eq!(problem["violated_policies"], serde_json::json!(["ip"]));
    assert_eq!(
        problem["detail"],
        "this request costs 1000 but policy 'ip' allows at most 100 at once: it can never succeed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_policy_is_scoped_to_its_route_template_and_method() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        orders: Limit::per_hour(2.0),
        ..hourly(100.0)
    };
    let (app, _) = start(&redis, config).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    let r = conn.request("GET", "/items/1", &[]).await?;
    assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=100;w=3600"#));
    // Anonymous orders skip 'orders' (keyed by the user only, SPEC I1).
    let r = conn.request("POST", "/orders", &[]).await?;
    assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=100;w=3600"#));
    let bob = [("x-api-key", "key-bob")];
    for _ in 0..2 {
        let r = conn.request("POST", "/orders", &bob).await?;
        assert_eq!(r.status, 201);
        assert_eq!(
            r.header("ratelimit-policy"),
            Some(r#""ip";q=100;w=3600, "user";q=100;w=3600, "orders";q=2;w=3600"#)
        );
    }
    let r = conn.request("POST", "/orders", &bob).await?;
    assert_eq!(r.status, 429);
    assert_eq!(json(&r)["violated_policies"], serde_json::json!(["orders"]));
    // Other routes are not affected, whatever their raw path.
    assert_eq!(conn.request("GET", "/items/2", &[]).await?.status, 200);
    // No route matched: not limited, no headers.
    let r = conn.request("GET", "/nothing-here", &[]).await?;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("ratelimit"), None);
    let r = conn.request("GET", "/health", &[]).await?;
    assert_eq!(r.header("ratelimit"), None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_route_buckets_and_requests_no_policy_applies_to() -> TestResult {
    use axum::Router;
    use axum::extract::Extension;
    use axum::routing::get;
    use redis_tb_client::{Decision, Outcome, Policy, RateLimitLayer};

    async fn echo(Extension(d): Extension<Decision>) -> String {
        match d.outcome {
            Outcome::NotLimited => "not_limited".to_owned(),
            _ => d
                .results
                .iter()
                .map(|p| p.key.clone())
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
    let redis = RedisServer::start()?;
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(Policy::per_hour("route", 10.0).per_route())
        .policy(Policy::per_hour("only-b", 10.0).route(axum::http::Method::GET, "/b/{id}"))
        .build()?;
    let router = Router::new()
        .route("/a/{id}", get(echo))
        .route("/b/{id}", get(echo))
        .route("/c", get(echo))
        .layer(layer);
    let app = serve(router).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    // One bucket per route template (SPEC K1, K2: `@<escaped route>`, braces escaped),
    // not per raw path.
    for id in ["1", "2"] {
        let r = conn.request("GET", &format!("/a/{id}"), &[]).await?;
        assert_eq!(r.body, "rl:route@GET%20/a/%7Bid%7D:127.0.0.1");
    }
    let r = conn.request("GET", "/b/9", &[]).await?;
    assert_eq!(
        r.body,
        "rl:route@GET%20/b/%7Bid%7D:127.0.0.1 rl:only-b:127.0.0.1"
    );
    let tb = client(&redis).await?;
    let a = tb
        .peek("rl:route@GET%20/a/%7Bid%7D:127.0.0.1", 10.0, 10.0 / 3600.0)
        .await?;
    assert!(a.remaining >= 8.0 && a.remaining < 8.05, "{a:?}");
    drop(tb);

    // Key functions that give no identity: nothing is checked, the handler is told so.
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(Policy::per_hour("anon", 1.0).key(redis_tb_client::Key::from_fn(|_| None)))
        .build()?;
    let app = serve(Router::new().route("/c", get(echo)).layer(layer)).await?;
    for _ in 0..3 {
        let r = request(app.addr, "GET", "/c", &[]).await?;
        assert_eq!((r.status, r.body.as_str()), (200, "not_limited"));
        assert_eq!(r.header("ratelimit"), None);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_tags_unmatched_requests_and_automatic_refunds() -> TestResult {
    use axum::Router;
    use axum::extract::Extension;
    use axum::http::StatusCode;
    use axum::routing::get;
    use redis_tb_client::{ClientIp, Decision, Policy, RateLimitLayer};

    async fn keys(Extension(d): Extension<Decision>) -> String {
        d.results
            .iter()
            .map(|p| p.key.clone())
            .collect::<Vec<_>>()
            .join(" ")
    }
    let redis = RedisServer::start()?;
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(Policy::per_hour("ip", 10.0))
        .policy(Policy::per_hour("all", 100.0).key(redis_tb_client::Key::fixed("everyone")))
        // Redis Cluster: one hash tag per request, so TB.MTAKE's keys share a slot.
        .hash_tag(|parts| {
            parts
                .extensions
                .get::<ClientIp>()
                .map(|c| c.identity.clone())
        })
        .limit_unmatched(true)
        .refund_on(|status| status.is_server_error())
        .build()?;
    let router = Router::new()
        .route("/k", get(keys))
        .route("/boom", get(|| async { StatusCode::INTERNAL_SERVER_ERROR }))
        .fallback(|| async { (StatusCode::NOT_FOUND, "nothing here") })
        .layer(layer);
    let app = serve(router).await?;
    let r = request(app.addr, "GET", "/k", &[]).await?;
    assert_eq!(
        r.body,
        "rl:{127.0.0.1}:ip:127.0.0.1 rl:{127.0.0.1}:all:everyone"
    );

    // limit_unmatched: the fallback is limited too.
    let r = request(app.addr, "GET", "/no-such-route", &[]).await?;
    assert_eq!(r.status, 404);
    assert!(
        r.header("ratelimit")
            .is_some_and(|v| v.starts_with(r#""ip";r=8;"#)),
        "{r:?}"
    );

    // A 5xx is refunded on every policy it was charged on.
    let r = request(app.addr, "GET", "/boom", &[]).await?;
    assert_eq!(r.status, 500);
    let tb = client(&redis).await?;
    let ip = tb
        .peek("rl:{127.0.0.1}:ip:127.0.0.1", 10.0, 10.0 / 3600.0)
        .await?;
    assert!(
        ip.remaining >= 8.0 && ip.remaining < 8.05,
        "the 500 was refunded: {ip:?}"
    );
    let all = tb
        .peek("rl:{127.0.0.1}:all:everyone", 100.0, 100.0 / 3600.0)
        .await?;
    assert!(all.remaining >= 98.0 && all.remaining < 98.05, "{all:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_request_limit_out_of_range_is_the_applications_error() -> TestResult {
    use axum::Router;
    use axum::extract::Extension;
    use axum::routing::get;
    use redis_tb_client::{Decision, Policy, RateLimitLayer};

    let redis = RedisServer::start()?;
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(Policy::per_hour("ok", 10.0))
        // A limit function that returns nonsense for one request: capacity 0.
        .policy(
            Policy::per_hour("tier", 10.0)
                .limit_fn(|parts| (parts.uri.path() == "/bad").then_some(Limit::new(0.0, 1.0))),
        )
        .build()?;
    let stats = layer.stats();
    async fn status(Extension(d): Extension<Decision>) -> String {
        format!("{:?} {}", d.outcome, d.results.len())
    }
    let app = serve(
        Router::new()
            .route("/bad", get(status))
            .route("/good", get(status))
            .layer(layer),
    )
    .await?;
    // SPEC L3: a 500 naming the policy, never the value; never the failure mode.
    let r = request(app.addr, "GET", "/bad", &[]).await?;
    assert_eq!(r.status, 500, "{r:?}");
    assert_eq!(
        r.body,
        r#"{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit policy 'tier' got an invalid cost or limit from the application"}"#
    );
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    assert_eq!(
        (
            stats.invalid_inputs(),
            stats.store_errors(),
            stats.degraded()
        ),
        (1, 0, 0)
    );
    // Nothing was sent to Redis, and the breaker stays closed for the others.
    assert_eq!(redis.command(&["EXISTS", "rl:ok:127.0.0.1"])?, ":0\r\n");
    let r = request(app.addr, "GET", "/good", &[]).await?;
    assert_eq!((r.status, r.body.as_str()), (200, "Allowed 1"));
    Ok(())
}
