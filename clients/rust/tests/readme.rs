//! The README's window, in-flight and hold snippets, as code that must compile (the
//! README shows them as fragments; these are their whole functions).
#![cfg(feature = "axum")]

use axum::Extension;
use axum::Router;
use axum::response::{IntoResponse, Response};
use redis_tb_client::{
    BuildError, Decision, FailureMode, Limit, Policy, RateLimitLayer, TbClient, WindowMode,
};

async fn login_handler() -> &'static str {
    "ok"
}

#[allow(dead_code)]
fn windows(client: TbClient, app: Router) -> Result<Router, BuildError> {
    let login = RateLimitLayer::builder(client.clone())
        .policy(
            Policy::new("login", Limit::window_per_hour(20.0, WindowMode::Sliding))
                .route(http::Method::POST, "/login"),
        )
        .failure_mode(FailureMode::FailClosed)
        .name("login")
        .build()?;
    let app = app.route("/login", axum::routing::post(login_handler).layer(login));
    Ok(app)
}

#[allow(dead_code)]
fn in_flight(client: TbClient) -> Result<RateLimitLayer, BuildError> {
    let layer = RateLimitLayer::builder(client)
        .policy(Policy::per_second("ip", 10.0))
        .policy(
            Policy::new("streams", Limit::in_flight(2.0, 30.0)).route(http::Method::GET, "/stream"),
        )
        .policy(
            Policy::per_hour("tokens", 1000.0)
                .route(http::Method::GET, "/stream")
                .settle_later(true),
        )
        .build()?;
    Ok(layer)
}

#[allow(dead_code)]
async fn stream(Extension(d): Extension<Decision>) -> Response {
    let hold = match d.hold("tokens", 100.0, 60.0).await {
        Ok(h) => h,
        Err(e) => return (http::StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response(),
    };
    let hold = match hold.or_refused() {
        Ok(h) => h,
        Err(refused) => return refused.into_response(),
    };
    let sent = 42.0;
    let _ = hold.settle(sent).await;
    "done".into_response()
}

#[test]
fn the_snippets_build_a_router() {
    let _ = Router::<()>::new().route("/stream", axum::routing::get(stream));
}

/// The README's backend snippet (SPEC E).
#[allow(dead_code)]
async fn backend() -> Result<(), Box<dyn std::error::Error>> {
    use redis_tb_client::{BackendSetting, ClientConfig};
    let config = ClientConfig {
        backend: "auto".parse::<BackendSetting>()?,
        ..ClientConfig::default()
    };
    let client = TbClient::start("redis://127.0.0.1:6379/", config).await?;
    println!("{:?}", client.backend().map(|c| &c.line)); // the module or the scripts
    Ok(())
}
