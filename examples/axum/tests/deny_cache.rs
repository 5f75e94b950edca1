//! The local deny cache against a real Redis: a cached refusal is answered without a Redis
//! call (counted with INFO commandstats), counts down, lets smaller costs through to Redis,
//! is cleared by a refund through this layer, and, by design, does not see a refund made
//! by another instance until its deny-until has passed.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use redis_tb_axum_example::support::{HttpConn, HttpResponse, RedisServer, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::{ClientConfig, Key, Limit, Policy, RateLimitLayer, RefundHandle, TbClient};
use serde_json::{Value, json};
use tokio::sync::Notify;

type TestResult = Result<(), Box<dyn std::error::Error>>;

async fn client(redis: &RedisServer) -> Result<TbClient, redis_tb_client::Error> {
    let timeouts = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    TbClient::connect_with(&redis.url(), timeouts).await
}

/// Checks the server has executed (INFO commandstats): TB.MTAKE, and TB.TAKE, which the
/// layer sends when a single policy applies.
fn mtake_calls(redis: &RedisServer) -> Result<u64, Box<dyn std::error::Error>> {
    let info = redis.command(&["INFO", "commandstats"])?;
    let calls = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Ok(calls("tb.mtake") + calls("tb.take"))
}

fn body(r: &HttpResponse) -> Value {
    serde_json::from_str(&r.body).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_refusal_skips_redis_counts_down_and_a_refund_here_clears_it() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        ip: Limit::per_hour(3.0),
        deny_cache: 100,
        ..Config::default()
    };
    let layer = limiter(client(&redis).await?, &config)?;
    let (metrics, handle) = (layer.stats(), layer.clone());
    let served = serve(app(Some(layer))).await?;
    let mut conn = HttpConn::connect(served.addr).await?;

    // /export?rows=N costs ceil(N/100) tokens on `ip`.
    assert_eq!(
        conn.request("GET", "/export?rows=100", &[]).await?.status,
        200
    );
    let before = mtake_calls(&redis)?;
    let from_redis = conn.request("GET", "/export?rows=300", &[]).await?;
    assert_eq!(from_redis.status, 429, "3 tokens wanted, 2 left");
    assert_eq!(mtake_calls(&redis)?, before + 1);
    assert_eq!(handle.deny_cache_len(), 1);

    // The same request again, and a dearer one: refused from the cache, no Redis call,
    // the same kind of answer.
    let mut waits = Vec::new();
    for rows in ["300", "400", "300"] {
        let r = conn
            .request("GET", &format!("/export?rows={rows}"), &[])
            .await?;
        assert_eq!(r.status, 429, "{r:?}");
        assert_eq!(r.header("content-type"), Some("application/problem+json"));
        let p = body(&r);
        assert_eq!(p["violated_policies"], json!(["ip"]));
        assert_eq!(p["title"], "Too Many Requests");
        let wait = p["retry_after"].as_f64().ok_or("retry_after")?;
        let header: u64 = r.header("retry-after").ok_or("Retry-After")?.parse()?;
        assert_eq!(header, (wait.ceil() as u64).max(1));
        assert_eq!(
            p["detail"],
            format!("rate limit exceeded for 'ip': retry after {header} s")
        );
        assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=3;w=3600"#));
        let rl = r.header("ratelimit").unwrap_or_default();
        assert!(rl.starts_with(r#""ip";r=0;t="#), "{rl}");
        waits.push(wait);
    }
    assert_eq!(
        mtake_calls(&redis)?,
        before + 1,
        "no Redis call for cache hits"
    );
    assert_eq!(metrics.deny_cache_hits(), 3);
    assert_eq!(metrics.limited(), 4);
    // Counting down from Redis's retry_after (one token per 1200 s, 1 missing).
    let first = body(&from_redis)["retry_after"]
        .as_f64()
        .ok_or("retry_after")?;
    assert!(
        waits.iter().all(|w| *w <= first && *w > 0.0),
        "{first} {waits:?}"
    );
    assert!(waits.windows(2).all(|w| w[1] <= w[0]), "{waits:?}");

    // A smaller cost goes to Redis, which admits it.
    let r = conn.request("GET", "/items/1", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(mtake_calls(&redis)?, before + 2);
    assert_eq!(handle.deny_cache_len(), 1, "an admission does not clear it");

    // A refund through this layer (a 404 gives its token back) clears the entry: the
    // next dear request asks Redis again (and is refused again: 1 token left).
    let r = conn.request("GET", "/items/5000", &[]).await?;
    assert_eq!(r.status, 404);
    assert_eq!(metrics.refunds(), 1);
    assert_eq!(handle.deny_cache_len(), 0);
    let r = conn.request("GET", "/export?rows=300", &[]).await?;
    assert_eq!(r.status, 429);
    assert_eq!(mtake_calls(&redis)?, before + 4);
    assert_eq!(metrics.deny_cache_hits(), 3);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_refusals_and_other_limits_are_never_answered_from_the_cache() -> TestResult {
    let redis = RedisServer::start()?;
    let shadow = Config {
        ip: Limit::per_hour(1.0),
        deny_cache: 100,
        shadow_policies: vec!["ip".to_owned()],
        ..Config::default()
    };
    let layer = limiter(client(&redis).await?, &shadow)?;
    let handle = layer.clone();
    let served = serve(app(Some(layer))).await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    let before = mtake_calls(&redis)?;
    for _ in 0..4 {
        assert_eq!(conn.request("GET", "/items/1", &[]).await?.status, 200);
    }
    assert_eq!(
        mtake_calls(&redis)?,
        before + 4,
        "shadow policies always reach Redis"
    );
    assert_eq!(handle.deny_cache_len(), 0);

    // Enforced: the refusal is cached for this limit; a plan with another limit for the
    // same key (a plan change) goes to Redis.
    let enforced = Config {
        shadow_policies: Vec::new(),
        ..shadow.clone()
    };
    let served = serve(app(Some(limiter(client(&redis).await?, &enforced)?))).await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    assert_eq!(conn.request("GET", "/items/1", &[]).await?.status, 429);
    let before = mtake_calls(&redis)?;
    assert_eq!(conn.request("GET", "/items/1", &[]).await?.status, 429);
    assert_eq!(mtake_calls(&redis)?, before, "cached");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_on_another_instance_is_not_seen_until_deny_until() -> TestResult {
    let redis = RedisServer::start()?;
    // Two tokens, one back every 5 s.
    let limit = Limit::new(2.0, 0.2);
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let instance = |tb: TbClient| -> Result<Router, Box<dyn std::error::Error>> {
        let layer = RateLimitLayer::builder(tb)
            .policy(Policy::new("p", limit).key(Key::fixed("shared")))
            .deny_cache(100)
            .build()?;
        let (entered, release) = (entered.clone(), release.clone());
        Ok(Router::new()
            .route("/", get(|| async { "ok" }))
            .route(
                "/hold",
                get(
                    move |Extension(refund): Extension<RefundHandle>| async move {
                        entered.notify_one();
                        release.notified().await;
                        // SPEC F1: TB.REFUND now, true when the tokens came back.
                        if refund.refund().await {
                            "refunded"
                        } else {
                            "not refunded"
                        }
                    },
                ),
            )
            .layer(layer))
    };
    let a = serve(instance(client(&redis).await?)?).await?;
    let b = serve(instance(client(&redis).await?)?).await?;
    let mut on_a = HttpConn::connect(a.addr).await?;

    assert_eq!(on_a.request("GET", "/", &[]).await?.status, 200);
    // B takes the last token and holds its request open.
    let mut on_b = HttpConn::connect(b.addr).await?;
    let held = tokio::spawn(async move { on_b.request("GET", "/hold", &[]).await });
    entered.notified().await;
    // A is refused by Redis and remembers it.
    let r = on_a.request("GET", "/", &[]).await?;
    assert_eq!(r.status, 429);
    // B's handler refunds: Redis has a token again.
    release.notify_one();
    let r = held.await??;
    assert_eq!((r.status, r.body.as_str()), (200, "refunded"));
    let tb = client(&redis).await?;
    let bucket = tb.peek("rl:p:shared", 2.0, 0.2).await?;
    assert!(bucket.remaining >= 1.0, "Redis would admit: {bucket:?}");

    // A does not know: it keeps refusing from its cache, without asking Redis...
    let before = mtake_calls(&redis)?;
    let r = on_a.request("GET", "/", &[]).await?;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(mtake_calls(&redis)?, before);
    let wait: u64 = r.header("retry-after").ok_or("Retry-After")?.parse()?;
    assert!((1..=5).contains(&wait), "{wait}");
    // ...until deny-until (at most the retry_after Redis gave), then asks Redis again.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let r = on_a.request("GET", "/", &[]).await?;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(mtake_calls(&redis)?, before + 1);
    Ok(())
}

/// One layer with one policy on a fixed key (two tokens, one back every 2 s) and a cache.
fn single_key(tb: TbClient) -> Result<(Router, RateLimitLayer), Box<dyn std::error::Error>> {
    let layer = RateLimitLayer::builder(tb)
        .policy(Policy::new("p", Limit::new(2.0, 0.5)).key(Key::fixed("one")))
        .deny_cache(100)
        .build()?;
    let router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer.clone());
    Ok((router, layer))
}

/// Takes the tokens, gets a Redis refusal cached, and waits until its deny-until has
/// passed and then some (Redis would admit twice: an admitted probe leaves a token, so
/// the entry is removed rather than renewed).
async fn cached_then_expired(
    addr: std::net::SocketAddr,
    layer: &RateLimitLayer,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut conn = HttpConn::connect(addr).await?;
    assert_eq!(conn.request("GET", "/", &[]).await?.status, 200);
    assert_eq!(conn.request("GET", "/", &[]).await?.status, 200);
    let r = conn.request("GET", "/", &[]).await?;
    assert_eq!(r.status, 429);
    assert_eq!(layer.deny_cache_len(), 1);
    let wait: u64 = r.header("retry-after").ok_or("Retry-After")?.parse()?;
    tokio::time::sleep(Duration::from_secs(wait + 2)).await;
    Ok(())
}

/// Waits (up to 30 s) for `done`; false if it never happened.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..3000 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_expiry_one_request_probes_redis_and_the_others_are_refused_locally() -> TestResult {
    let redis = RedisServer::start()?;
    let (router, layer) = single_key(client(&redis).await?)?;
    let metrics = layer.stats();
    let served = serve(router).await?;
    cached_then_expired(served.addr, &layer).await?;

    // Redis holds write commands back: the probe's call stays out while the others come.
    const N: usize = 8;
    let mut conns = Vec::new();
    for _ in 0..N {
        conns.push(HttpConn::connect(served.addr).await?);
    }
    let (calls, hits) = (mtake_calls(&redis)?, metrics.deny_cache_hits());
    redis.command(&["CLIENT", "PAUSE", "60000", "WRITE"])?;
    let tasks: Vec<_> = conns
        .into_iter()
        .map(|mut c| tokio::spawn(async move { c.request("GET", "/", &[]).await }))
        .collect();
    let refused_locally = eventually(|| metrics.deny_cache_hits() == hits + N as u64 - 1).await;
    redis.command(&["CLIENT", "UNPAUSE"])?;
    assert!(
        refused_locally,
        "hits: {}",
        metrics.deny_cache_hits() - hits
    );

    let mut statuses = Vec::new();
    for t in tasks {
        let r = t.await??;
        if r.status == 429 {
            // A cache hit like any other, with Retry-After max(1, ceil(0)).
            assert_eq!(r.header("retry-after"), Some("1"), "{r:?}");
            assert_eq!(r.header("content-type"), Some("application/problem+json"));
            let p = body(&r);
            assert_eq!(p["violated_policies"], json!(["p"]));
            assert_eq!(p["retry_after"], json!(0), "P5: written 0");
            assert_eq!(p["detail"], "rate limit exceeded for 'p': retry after 1 s");
            assert_eq!(r.header("ratelimit-policy"), Some(r#""p";q=2;w=4"#));
        }
        statuses.push(r.status);
    }
    statuses.sort_unstable();
    let mut expected = vec![429; N - 1];
    expected.insert(0, 200);
    assert_eq!(
        statuses, expected,
        "the probe was admitted, the rest refused"
    );
    assert_eq!(
        mtake_calls(&redis)?,
        calls + 1,
        "one Redis call: the probe's"
    );
    assert_eq!(metrics.deny_cache_hits(), hits + N as u64 - 1);
    assert_eq!(
        layer.deny_cache_len(),
        0,
        "an admitted probe removes the entry"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_probe_leaves_nothing_probing() -> TestResult {
    let redis = RedisServer::start()?;
    let (router, layer) = single_key(client(&redis).await?)?;
    let metrics = layer.stats();
    let served = serve(router).await?;
    cached_then_expired(served.addr, &layer).await?;

    // The probe's call is held back by Redis; its client goes away, and the server drops
    // the request (and the probe with it).
    redis.command(&["CLIENT", "PAUSE", "60000", "WRITE"])?;
    let mut probe = HttpConn::connect(served.addr).await?;
    probe
        .send_raw(b"GET / HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n\r\n")
        .await?;
    let hits = metrics.deny_cache_hits();
    let mut other = HttpConn::connect(served.addr).await?;
    // While it is out, others are refused locally. (Three checks were made before it:
    // wait for the probe's own, the fourth, or `other` could come first and probe.)
    let probing = eventually(|| metrics.checks() >= 4).await;
    let r = other.request("GET", "/", &[]).await?;
    let held = (r.status, metrics.deny_cache_hits());
    drop(probe);
    let removed = eventually(|| layer.deny_cache_len() == 0).await;
    redis.command(&["CLIENT", "UNPAUSE"])?;
    assert!(probing);
    assert_eq!(held, (429, hits + 1), "{r:?}");
    assert!(removed, "the cancelled probe removed its entry");

    // The next request asks Redis (the cancelled call ran too once Redis went on).
    let calls = mtake_calls(&redis)?;
    let r = other.request("GET", "/", &[]).await?;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        mtake_calls(&redis)? > calls,
        "the next request reached Redis"
    );
    assert_eq!(metrics.deny_cache_hits(), hits + 1, "not from the cache");
    Ok(())
}
