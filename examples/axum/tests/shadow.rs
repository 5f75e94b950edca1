//! Shadow mode end to end: a shadow policy is charged exactly like an enforced one (the
//! same single TB.MTAKE, all or nothing), its refusals let the request go on, are counted
//! and listed in the decision, and it has no rate-limit header items. Moving a policy
//! between shadow and enforced is configuration only: same keys, same buckets.

use std::time::Duration;

use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use redis_tb_axum_example::support::{HttpConn, HttpResponse, RedisServer, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::Limit;
use redis_tb_client::{ClientConfig, Decision, Key, Policy, RateLimitLayer, TbClient};
use serde_json::{Value, json};

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

fn body(r: &HttpResponse) -> Value {
    serde_json::from_str(&r.body).unwrap_or(Value::Null)
}

fn config(shadow: &[&str]) -> Config {
    Config {
        ip: Limit::per_hour(2.0),
        user_free: Limit::per_hour(5.0),
        shadow_policies: shadow.iter().map(|s| (*s).to_owned()).collect(),
        ..Config::default()
    }
}

/// bob, on the free plan.
const BOB: [(&str, &str); 1] = [("x-api-key", "key-bob")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_to_enforced_and_back_by_configuration_only() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    let ip_left = || async {
        tb.peek("rl:ip:127.0.0.1", 2.0, 2.0 / 3600.0)
            .await
            .map(|p| p.remaining)
    };

    // `ip` in shadow: charged as usual, no header items (it is the only policy here).
    let layer = limiter(client(&redis).await?, &config(&["ip"]))?;
    let metrics = layer.stats();
    let shadow_app = serve(app(Some(layer))).await?;
    let mut conn = HttpConn::connect(shadow_app.addr).await?;
    for k in 1..=2 {
        let r = conn.request("GET", "/items/1", &[]).await?;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("ratelimit"), None, "shadow policies have no items");
        assert_eq!(r.header("ratelimit-policy"), None);
        let d = &body(&r)["rate_limit"];
        assert_eq!(d["outcome"], "allowed");
        assert_eq!(d["shadow_limited"], json!([]));
        assert_eq!(d["results"][0]["shadow"], true);
        let left = ip_left().await?;
        assert!(
            left >= 2.0 - k as f64 && left < 2.05 - k as f64,
            "charged: {left}"
        );
    }
    // The bucket is empty: the shadow policy refuses, the request goes on, uncharged.
    for n in 1..=3u64 {
        let r = conn.request("GET", "/items/1", &[]).await?;
        assert_eq!(r.status, 200, "{r:?}");
        let d = &body(&r)["rate_limit"];
        assert_eq!(d["outcome"], "allowed");
        assert_eq!(d["shadow_limited"], json!(["ip"]));
        assert_eq!(metrics.shadow_limited(), n);
    }
    assert_eq!(metrics.limited(), 0);
    assert!(
        ip_left().await? < 0.05,
        "nothing taken by the shadow refusals"
    );

    // The same bucket enforced: a new layer, same configuration but for the flag.
    let enforced = serve(app(Some(limiter(client(&redis).await?, &config(&[]))?))).await?;
    let r = HttpConn::connect(enforced.addr)
        .await?
        .request("GET", "/items/1", &[])
        .await?;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(body(&r)["violated_policies"], json!(["ip"]));
    assert_eq!(r.header("ratelimit-policy"), Some(r#""ip";q=2;w=3600"#));

    // And back to shadow: the request goes on again.
    let r = conn.request("GET", "/items/1", &[]).await?;
    assert_eq!(r.status, 200);
    assert_eq!(body(&r)["rate_limit"]["shadow_limited"], json!(["ip"]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_refusal_spends_nothing_on_the_enforced_policies() -> TestResult {
    let redis = RedisServer::start()?;
    let tb = client(&redis).await?;
    let layer = limiter(client(&redis).await?, &config(&["ip"]))?;
    let metrics = layer.stats();
    let served = serve(app(Some(layer))).await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    for _ in 0..2 {
        let r = conn.request("GET", "/items/1", &BOB).await?;
        assert_eq!(r.status, 200);
        // Only the enforced policy's items.
        assert_eq!(r.header("ratelimit-policy"), Some(r#""user";q=5;w=3600"#));
    }
    let user = tb.peek("rl:user:bob", 5.0, 5.0 / 3600.0).await?;
    assert!(user.remaining >= 3.0 && user.remaining < 3.05, "{user:?}");

    // ip (shadow) is empty now: TB.MTAKE refuses as a whole, so user is not charged
    // either (as if ip were enforced), yet the request goes on.
    let r = conn.request("GET", "/items/1", &BOB).await?;
    assert_eq!(r.status, 200);
    assert_eq!(body(&r)["rate_limit"]["shadow_limited"], json!(["ip"]));
    let rl = r.header("ratelimit").unwrap_or_default().to_owned();
    assert!(rl.starts_with(r#""user";r=3;t="#), "{rl}");
    let user = tb.peek("rl:user:bob", 5.0, 5.0 / 3600.0).await?;
    assert!(user.remaining >= 3.0 && user.remaining < 3.05, "{user:?}");

    // A refund of such a request does nothing (nothing was charged): /items/5000 is a 404
    // whose handler asks for a refund.
    let r = conn.request("GET", "/items/5000", &BOB).await?;
    assert_eq!(r.status, 404);
    assert_eq!(metrics.refunds(), 0);
    let user = tb.peek("rl:user:bob", 5.0, 5.0 / 3600.0).await?;
    assert!(user.remaining >= 3.0 && user.remaining < 3.05, "{user:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_wide_shadow_and_an_enforced_refusal_next_to_a_shadow_one() -> TestResult {
    async fn echo(Extension(d): Extension<Decision>) -> String {
        let names: Vec<&str> = d.shadow_limited.iter().map(|n| &**n).collect();
        format!("{:?} {}", d.outcome, names.join(","))
    }
    let redis = RedisServer::start()?;
    let policies = || {
        [
            Policy::per_hour("a", 1.0).key(Key::fixed("x")),
            Policy::per_hour("b", 2.0).key(Key::fixed("x")),
        ]
    };
    let [a, b] = policies();
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(a)
        .policy(b)
        .shadow(true)
        .build()?;
    let metrics = layer.stats();
    let served = serve(Router::new().route("/", get(echo)).layer(layer)).await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    let r = conn.request("GET", "/", &[]).await?;
    assert_eq!((r.status, r.body.as_str()), (200, "Allowed "));
    assert_eq!(r.header("ratelimit"), None);
    let r = conn.request("GET", "/", &[]).await?;
    assert_eq!((r.status, r.body.as_str()), (200, "Allowed a"));
    assert_eq!(metrics.shadow_limited(), 1);

    // `a` enforced, `b` in shadow, both refusing (b has 1 left, cost 2): 429 for `a`
    // only; the shadow refusal is still counted.
    let [a, b] = policies();
    let layer = RateLimitLayer::builder(client(&redis).await?)
        .policy(a)
        .policy(b.cost(2.0).shadow(true))
        .build()?;
    let metrics = layer.stats();
    let served = serve(Router::new().route("/", get(echo)).layer(layer)).await?;
    let r = HttpConn::connect(served.addr)
        .await?
        .request("GET", "/", &[])
        .await?;
    assert_eq!(r.status, 429);
    assert_eq!(body(&r)["violated_policies"], json!(["a"]));
    assert_eq!(r.header("ratelimit-policy"), Some(r#""a";q=1;w=3600"#));
    assert_eq!(metrics.shadow_limited(), 1);
    assert_eq!(metrics.limited(), 1);
    Ok(())
}
