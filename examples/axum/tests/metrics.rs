//! `/metrics` of the example: the limiter's counters through the `metrics` facade, exported
//! by metrics-exporter-prometheus, scraped over HTTP and read back with a Prometheus text
//! parser (the `prometheus-parse` crate). Labels: `limiter` and `policy`, never a client.

use std::time::Duration;

use prometheus_parse::{Sample, Scrape, Value};
use redis_tb_axum_example::support::{HttpConn, RedisServer, request, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::telemetry::CALL_DURATION_BUCKETS;
use redis_tb_client::{ClientConfig, Limit, TbClient};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn timeouts() -> ClientConfig {
    ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

async fn scrape(addr: std::net::SocketAddr) -> Result<Scrape, Box<dyn std::error::Error>> {
    let r = request(addr, "GET", "/metrics", &[]).await?;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .is_some_and(|v| v.starts_with("text/plain; version=0.0.4")),
        "{r:?}"
    );
    assert_eq!(r.header("ratelimit"), None, "/metrics is not limited");
    Ok(Scrape::parse(
        r.body
            .lines()
            .map(|l| Ok(l.to_owned()))
            .collect::<Vec<_>>()
            .into_iter(),
    )?)
}

fn find<'a>(s: &'a Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    s.samples.iter().find(|x| {
        x.metric == metric
            && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v))
            && x.labels.len() == labels.len()
    })
}

fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    match find(s, metric, labels).map(|x| &x.value) {
        Some(Value::Counter(v) | Value::Untyped(v) | Value::Gauge(v)) => *v,
        other => panic!("{metric} {labels:?}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_serves_per_policy_counters_and_the_call_histogram() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        ip: Limit::per_hour(3.0),
        deny_cache: 100,
        name: "scrape".to_owned(),
        ..Config::default()
    };
    let served = serve(app(Some(limiter(
        TbClient::connect_with(&redis.url(), timeouts()).await?,
        &config,
    )?)))
    .await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    let mut statuses = Vec::new();
    // 2 allowed, 1 allowed and refunded (a 404), 1 allowed (it spends the bucket, so the
    // refusal Redis would give next is cached, SPEC R5), 2 refused by the deny cache.
    for path in [
        "/items/1",
        "/items/1",
        "/items/5000",
        "/items/1",
        "/items/1",
        "/items/1",
    ] {
        statuses.push(conn.request("GET", path, &[]).await?.status);
    }
    assert_eq!(statuses, [200, 200, 404, 200, 429, 429]);

    // The same bucket through a second limiter with `ip` in shadow: it would refuse.
    let shadow = Config {
        shadow_policies: vec!["ip".to_owned()],
        name: "scrape-shadow".to_owned(),
        ..config.clone()
    };
    let shadow_app = serve(app(Some(limiter(
        TbClient::connect_with(&redis.url(), timeouts()).await?,
        &shadow,
    )?)))
    .await?;
    assert_eq!(
        request(shadow_app.addr, "GET", "/items/1", &[])
            .await?
            .status,
        200
    );

    // A third limiter whose Redis is gone: a store error, decided by the failure mode.
    let mut gone = RedisServer::start()?;
    let down = Config {
        name: "scrape-down".to_owned(),
        ..config.clone()
    };
    let down_app = serve(app(Some(limiter(
        TbClient::connect_with(&gone.url(), timeouts()).await?,
        &down,
    )?)))
    .await?;
    gone.stop();
    assert_eq!(
        request(down_app.addr, "GET", "/items/1", &[]).await?.status,
        200
    );

    let s = scrape(served.addr).await?;
    let ip = [("limiter", "scrape"), ("policy", "ip")];
    assert_eq!(value(&s, "redis_tb_allowed_total", &ip), 4.0);
    assert_eq!(value(&s, "redis_tb_refunded_total", &ip), 1.0);
    assert_eq!(value(&s, "redis_tb_limited_total", &ip), 2.0);
    assert_eq!(value(&s, "redis_tb_deny_cache_hits_total", &ip), 2.0);
    assert_eq!(value(&s, "redis_tb_shadow_limited_total", &ip), 0.0);
    let shadow_ip = [("limiter", "scrape-shadow"), ("policy", "ip")];
    assert_eq!(value(&s, "redis_tb_shadow_limited_total", &shadow_ip), 1.0);
    assert_eq!(value(&s, "redis_tb_limited_total", &shadow_ip), 0.0);
    assert_eq!(value(&s, "redis_tb_allowed_total", &shadow_ip), 0.0);
    let down = [("limiter", "scrape-down")];
    assert_eq!(value(&s, "redis_tb_store_errors_total", &down), 1.0);
    assert_eq!(value(&s, "redis_tb_degraded_total", &down), 1.0);
    assert_eq!(
        value(&s, "redis_tb_store_errors_total", &[("limiter", "scrape")]),
        0.0
    );
    // No series is labelled with a client identity.
    assert!(
        s.samples
            .iter()
            .all(|x| x.labels.values().all(|v| !v.contains("127.0.0.1")))
    );

    // One observation per Redis call: 4 checks (TB.TAKE: one policy applies; the two
    // cache hits made none) + 1 refund.
    let limiter_only = [("limiter", "scrape")];
    let h =
        find(&s, "redis_tb_redis_call_duration_seconds", &limiter_only).ok_or("no histogram")?;
    let Value::Histogram(buckets) = &h.value else {
        return Err(format!("not a histogram: {h:?}").into());
    };
    let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
    let mut expected = CALL_DURATION_BUCKETS.to_vec();
    expected.push(f64::INFINITY);
    assert_eq!(bounds, expected);
    assert_eq!(buckets.last().map(|b| b.count), Some(5.0));
    assert_eq!(
        value(
            &s,
            "redis_tb_redis_call_duration_seconds_count",
            &limiter_only
        ),
        5.0
    );
    assert!(
        s.docs
            .get("redis_tb_allowed_total")
            .is_some_and(|d| !d.is_empty()),
        "HELP text: {:?}",
        s.docs
    );
    Ok(())
}

/// SPEC E6: the gauge `redis_tb_backend{limiter,backend}`, 1 for the backend in use: here
/// the scripts, on a server without the module (the default backend, auto, chose them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backend_in_use_is_a_gauge() -> TestResult {
    let bare = RedisServer::start_without_module()?;
    let config = Config {
        ip: Limit::per_hour(2.0),
        name: "scrape-scripts".to_owned(),
        ..Config::default()
    };
    let layer = limiter(
        TbClient::connect_with(&bare.url(), timeouts()).await?,
        &config,
    )?;
    layer.startup().await?;
    let served = serve(app(Some(layer))).await?;
    let mut conn = HttpConn::connect(served.addr).await?;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(conn.request("GET", "/items/1", &[]).await?.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
    let s = scrape(served.addr).await?;
    let on = |b| [("limiter", "scrape-scripts"), ("backend", b)];
    assert_eq!(value(&s, "redis_tb_backend", &on("scripts")), 1.0);
    assert_eq!(value(&s, "redis_tb_backend", &on("module")), 0.0);
    let ip = [("limiter", "scrape-scripts"), ("policy", "ip")];
    assert_eq!(value(&s, "redis_tb_allowed_total", &ip), 2.0);
    assert_eq!(value(&s, "redis_tb_limited_total", &ip), 1.0);
    Ok(())
}
