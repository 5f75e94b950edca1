//! Keep-alive after a response to a request whose body arrives late. Some clients write
//! the request head and the body in separate segments (here: the head, a 2 ms gap, then
//! the body). A response made before the body was read (the limiter's 429, or a handler
//! that ignores the body) used to make hyper drop the connection after the response,
//! without `Connection: close`: the client's next request on it failed (broken pipe).
//! Each test sends exactly that way, then a second request on the same connection.

use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use redis_tb_axum_example::support::{HttpConn, RedisServer, serve};
use redis_tb_axum_example::{Config, app, limiter};
use redis_tb_client::{ClientConfig, Limit, TbClient};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const GAP: Duration = Duration::from_millis(2);
const ORDER: &[u8] = br#"{"item":42,"qty":1}"#;
/// A signed-in caller: `orders` is per user (anonymous orders skip it).
const BOB: [(&str, &str); 1] = [("x-api-key", "key-bob")];

async fn client(redis: &RedisServer) -> Result<TbClient, redis_tb_client::Error> {
    let timeouts = ClientConfig {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
        startup_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    TbClient::connect_with(&redis.url(), timeouts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_201_and_the_429_keep_the_connection_for_the_next_request() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        ip: Limit::per_hour(100.0),
        orders: Limit::per_hour(1.0),
        ..Config::default()
    };
    let app = serve(app(Some(limiter(client(&redis).await?, &config)?))).await?;
    let mut conn = HttpConn::connect(app.addr).await?;

    // The handler's 201.
    let r = conn
        .request_split("POST", "/orders", &BOB, ORDER, GAP)
        .await?;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(r.header("connection"), None);
    let next = conn.request("GET", "/health", &[]).await?;
    assert_eq!(
        next.status, 200,
        "second request on the connection after the 201"
    );

    // The limiter's 429 (orders: 1 per hour), answered before the body arrived.
    let r = conn
        .request_split("POST", "/orders", &BOB, ORDER, GAP)
        .await?;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(
        r.header("connection"),
        None,
        "the small body was drained: the connection stays open"
    );
    let next = conn.request("GET", "/health", &[]).await?;
    assert_eq!(
        next.status, 200,
        "second request on the connection after the 429"
    );

    // Several in a row, alternating with other requests.
    for _ in 0..3 {
        let r = conn
            .request_split("POST", "/orders", &BOB, ORDER, GAP)
            .await?;
        assert_eq!(r.status, 429);
        let r = conn.request("GET", "/items/1", &[]).await?;
        assert_eq!(r.status, 200);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_too_large_to_drain_gets_connection_close_and_a_clean_close() -> TestResult {
    let redis = RedisServer::start()?;
    let config = Config {
        ip: Limit::per_hour(100.0),
        orders: Limit::per_hour(1.0),
        ..Config::default()
    };
    let app = serve(app(Some(limiter(client(&redis).await?, &config)?))).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    let r = conn
        .request_split("POST", "/orders", &BOB, ORDER, GAP)
        .await?;
    assert_eq!(r.status, 201);
    // 1 MB announced, above the layer's 64 KiB drain limit: the 429 comes at once, says
    // `Connection: close`, and the server closes the connection after it.
    conn.send_head("POST", "/orders", &BOB, 1_048_576).await?;
    let r = conn.response().await?;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(
        conn.closed_by_server().await?,
        "the server closed the connection"
    );
    Ok(())
}

/// The control: a handler that answers before its body is read (here the body is sent
/// only after the response, so no scheduling can hide it) shows the bug, so the tests
/// above would see it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_handler_ignoring_the_body_loses_the_connection() -> TestResult {
    let router = Router::new().route("/ignore", post(|| async { StatusCode::CREATED }));
    let app = serve(router).await?;
    let mut conn = HttpConn::connect(app.addr).await?;
    // The body is sent only after the response has come: whatever the scheduling (a
    // busy machine can deliver a 2 ms gap's two segments in one read), the handler has
    // answered before its body was read, which is the case the layer must not have.
    conn.send_head("POST", "/ignore", &[], ORDER.len()).await?;
    let r = conn.response().await?;
    assert_eq!(r.status, 201);
    assert_eq!(r.header("connection"), None, "no warning to the client");
    // A write to a connection the server is closing may still succeed (the kernel's
    // buffer): the failure shows on the next request.
    let _ = conn.send_raw(ORDER).await;
    let next = conn.request("GET", "/ignore", &[]).await;
    assert!(
        next.is_err(),
        "hyper dropped the connection after the response: {next:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fail_closed_503_keeps_the_connection_too() -> TestResult {
    let mut redis = RedisServer::start()?;
    let config = Config {
        failure_mode: redis_tb_client::FailureMode::FailClosed,
        ..Config::default()
    };
    let app = serve(app(Some(limiter(client(&redis).await?, &config)?))).await?;
    redis.stop();
    let mut conn = HttpConn::connect(app.addr).await?;
    let r = conn
        .request_split("POST", "/orders", &BOB, ORDER, GAP)
        .await?;
    assert_eq!(r.status, 503, "{r:?}");
    assert_eq!(r.header("connection"), None);
    let next = conn.request("GET", "/health", &[]).await?;
    assert_eq!(
        next.status, 200,
        "second request on the connection after the 503"
    );
    Ok(())
}
