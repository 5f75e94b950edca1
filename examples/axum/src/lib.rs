//! An axum app rate-limited by redis-tb: layered policies (per client IP per second, per
//! user per hour with plan tiers, an endpoint policy on `POST /orders`), a cost per request
//! (`GET /export?rows=N`), a refund (a 404 is not counted), and the decision used in a
//! handler. `main.rs` serves it; the tests and the overhead benchmark build it in-process.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use axum::extract::{Extension, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use redis_tb_client::{
    BuildError, Decision, FailureMode, Key, Limit, Metrics, Policy, RateLimitLayer, RefundHandle,
    Status, TbClient,
};
use serde_json::{Value, json};

#[doc(hidden)]
pub mod support;

/// The app's limits and limiter options (the tests and the benchmark change them).
#[derive(Clone, Debug)]
pub struct Config {
    /// Policy `ip`: every route, per client address.
    pub ip: Limit,
    /// Policy `user` for the free plan: per authenticated user.
    pub user_free: Limit,
    /// Policy `user` for the pro plan.
    pub user_pro: Limit,
    /// Policy `orders`: `POST /orders` only, per user (or per address when anonymous).
    pub orders: Limit,
    /// `GET /export?rows=N` costs one token per this many rows (at least 1).
    pub rows_per_token: f64,
    /// Fail open (default) or closed when Redis is unreachable.
    pub failure_mode: FailureMode,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<String>,
    /// Also send `X-RateLimit-*`.
    pub legacy_headers: bool,
    /// Skip Redis this long after a failure.
    pub cooldown: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ip: Limit::per_second(10.0),
            user_free: Limit::per_hour(100.0),
            user_pro: Limit::per_hour(1000.0),
            orders: Limit::per_minute(5.0),
            rows_per_token: 100.0,
            failure_mode: FailureMode::FailOpen,
            trusted_proxies: Vec::new(),
            legacy_headers: false,
            cooldown: Duration::from_secs(1),
        }
    }
}

/// A signed-in user, put in the request extensions by [`auth`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// The user id (the `user` policy's identity).
    pub id: String,
    /// The plan, which picks the `user` policy's limit.
    pub plan: Plan,
}

/// Plan tiers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// 100 requests per hour by default.
    Free,
    /// 1000 requests per hour by default.
    Pro,
}

/// Demo authentication: `Authorization: Bearer <token>` with two fixed tokens. A real app
/// verifies a session or JWT here; what matters is that it runs before the limiter and
/// leaves a [`User`] in the extensions for the key and limit functions.
pub async fn auth(mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let user = match token {
        Some("alice-token") => Some(User {
            id: "alice".into(),
            plan: Plan::Free,
        }),
        Some("bob-token") => Some(User {
            id: "bob".into(),
            plan: Plan::Pro,
        }),
        _ => None,
    };
    if let Some(user) = user {
        req.extensions_mut().insert(user);
    }
    next.run(req).await
}

fn user_of(parts: &Parts) -> Option<User> {
    parts.extensions.get::<User>().cloned()
}

/// The limiter: three policies, checked together in one TB.MTAKE per request.
pub fn limiter(client: TbClient, config: &Config) -> Result<RateLimitLayer, BuildError> {
    let (free, pro) = (config.user_free, config.user_pro);
    let rows_per_token = config.rows_per_token;
    RateLimitLayer::builder(client)
        // Per client address (behind trusted proxies only), every route.
        .policy(
            Policy::new("ip", config.ip).cost_fn(move |parts| export_cost(parts, rows_per_token)),
        )
        // Per user, limit by plan; anonymous requests skip it (the key is None).
        .policy(
            Policy::new("user", free)
                .key(Key::from_async_fn(|parts: &Parts| {
                    // An async key function: a real app might look the account up here.
                    let user = user_of(parts);
                    async move { user.map(|u| u.id) }
                }))
                .limit_fn(move |parts| {
                    user_of(parts).map(|u| match u.plan {
                        Plan::Free => free,
                        Plan::Pro => pro,
                    })
                })
                .cost_fn(move |parts| export_cost(parts, rows_per_token)),
        )
        // An endpoint policy: only POST /orders (the route template, not the raw path).
        .policy(
            Policy::new("orders", config.orders)
                .route(axum::http::Method::POST, "/orders")
                .key(Key::from_fn(|parts| {
                    let client = parts.extensions.get::<redis_tb_client::ClientIp>();
                    user_of(parts)
                        .map(|u| format!("user-{}", u.id))
                        .or_else(|| client.map(|c| format!("ip-{}", c.identity)))
                })),
        )
        .trusted_proxies(&config.trusted_proxies)
        .failure_mode(config.failure_mode)
        .cooldown(config.cooldown)
        .legacy_headers(config.legacy_headers)
        .build()
}

/// `GET /export?rows=N` costs `ceil(N / rows_per_token)` tokens (at least 1); the rest 1.
fn export_cost(parts: &Parts, rows_per_token: f64) -> f64 {
    if parts.uri.path() != "/export" {
        return 1.0;
    }
    (export_rows(&parts.uri) as f64 / rows_per_token)
        .ceil()
        .max(1.0)
}

/// The `rows` query parameter (0 when missing or not a number).
fn export_rows(uri: &Uri) -> u64 {
    uri.query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("rows=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The app. `limiter: None` serves the same routes without rate limiting (for the
/// overhead benchmark). `metrics` is served at `/metrics` when given.
pub fn app(limiter: Option<RateLimitLayer>) -> Router {
    let metrics = limiter.as_ref().map(RateLimitLayer::metrics);
    let mut limited = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/items/{id}", get(get_item))
        .route("/orders", post(create_order))
        .route("/export", get(export));
    if let Some(layer) = limiter {
        limited = limited.layer(layer);
    }
    // Layers added later run first: auth sets the User before the limiter reads it.
    limited = limited.layer(middleware::from_fn(auth));
    // Routes added after the layers are not limited.
    limited.route("/health", get(|| async { "ok" })).route(
        "/metrics",
        get(move || async move { metrics_text(metrics.as_ref()) }),
    )
}

fn metrics_text(metrics: Option<&Metrics>) -> String {
    match metrics {
        None => String::new(),
        Some(m) => format!(
            "ratelimit_checks {}\nratelimit_allowed {}\nratelimit_limited {}\n\
             ratelimit_store_errors {}\nratelimit_degraded {}\nratelimit_refunds {}\n\
             ratelimit_refund_errors {}\n",
            m.checks(),
            m.allowed(),
            m.limited(),
            m.store_errors(),
            m.degraded(),
            m.refunds(),
            m.refund_errors()
        ),
    }
}

/// The decision as JSON, for the handlers' bodies.
pub fn decision_json(decision: Option<&Decision>) -> Value {
    let Some(d) = decision else {
        return Value::Null;
    };
    let status = match d.status {
        Status::Allowed => "allowed",
        Status::Limited => "limited",
        Status::StoreError => "store_error",
        Status::NotLimited => "not_limited",
    };
    json!({
        "status": status,
        "remaining": if d.remaining.is_finite() { json!(d.remaining) } else { Value::Null },
        "policies": d.policies.iter().map(|p| json!({
            "name": &*p.name,
            "key": p.key,
            "capacity": p.capacity,
            "rate": p.rate,
            "cost": p.cost,
            "remaining": p.remaining,
            "reset_after": p.reset_after,
        })).collect::<Vec<_>>(),
    })
}

/// Items 1..=1000 exist. A miss is refunded: looking up a wrong id should not cost quota.
async fn get_item(
    Path(id): Path<u64>,
    decision: Option<Extension<Decision>>,
    refund: Option<Extension<RefundHandle>>,
) -> Response {
    let decision = decision.map(|Extension(d)| d);
    if !(1..=1000).contains(&id) {
        if let Some(Extension(refund)) = refund {
            refund.refund();
        }
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no such item"})),
        )
            .into_response();
    }
    // The decision used in the handler: warn the client before it hits the wall.
    let last_one = decision
        .as_ref()
        .is_some_and(|d| d.status == Status::Allowed && d.remaining < 1.0);
    Json(json!({
        "id": id,
        "last_request_in_quota": last_one,
        "rate_limit": decision_json(decision.as_ref()),
    }))
    .into_response()
}

async fn create_order(decision: Option<Extension<Decision>>) -> Response {
    let decision = decision.map(|Extension(d)| d);
    (
        StatusCode::CREATED,
        Json(json!({"order": "created", "rate_limit": decision_json(decision.as_ref())})),
    )
        .into_response()
}

async fn export(uri: Uri, decision: Option<Extension<Decision>>) -> Response {
    let decision = decision.map(|Extension(d)| d);
    Json(json!({
        "rows": export_rows(&uri),
        "rate_limit": decision_json(decision.as_ref()),
    }))
    .into_response()
}
