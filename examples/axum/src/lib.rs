//! An axum app rate-limited by redis-tb: layered policies (per client IP per second, per
//! user per hour with plan tiers, an endpoint policy on `POST /orders`), a cost per request
//! (`GET /export?rows=N`), a refund (a 404 is not counted), the decision used in a
//! handler, shadow policies, the local deny cache, and Prometheus metrics at `/metrics`
//! (the `metrics` facade with `metrics-exporter-prometheus`). `main.rs` serves it; the
//! tests and the overhead benchmark build it in-process.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Extension, Path, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redis_tb_client::telemetry::{CALL_DURATION_BUCKETS, REDIS_CALL_DURATION_SECONDS};
use redis_tb_client::{
    BuildError, Decision, FailureMode, Key, LegacyReset, Limit, Outcome, Policy, RateLimitLayer,
    RefundHandle, TbClient, WindowMode,
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
    /// Policy `orders`: `POST /orders` only, per user (anonymous orders skip it, SPEC I1).
    pub orders: Limit,
    /// Policy `search`: `GET /search`, per client address, one token per 50 results.
    pub search: Limit,
    /// Policy `search-strict`: a tighter search limit tried out in shadow mode (SPEC S).
    pub search_strict: Limit,
    /// `GET /export?rows=N` costs one token per this many rows (at least 1).
    pub rows_per_token: f64,
    /// Fail open (default) or closed when Redis is unreachable.
    pub failure_mode: FailureMode,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<String>,
    /// Also send `X-RateLimit-*` (`X-RateLimit-Reset` a Unix time or delta seconds).
    pub legacy_headers: Option<LegacyReset>,
    /// Skip Redis this long after a failure.
    pub cooldown: Duration,
    /// Policies (by name: `ip`, `user`, `orders`) in shadow mode: charged and counted,
    /// never refusing.
    pub shadow_policies: Vec<String>,
    /// Local deny cache size (0: off).
    pub deny_cache: usize,
    /// The limiter's name: the `limiter` label of its metrics.
    pub name: String,
    /// Policy `streams`: `GET /stream` in progress per client address (SPEC N).
    pub streams: Limit,
    /// Policy `tokens`: `GET /stream`'s tokens per client address, settled later (SPEC G).
    pub tokens: Limit,
    /// Policy `login` of the login limiter: `POST /login` per client address, a window
    /// (SPEC W).
    pub login: Limit,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ip: Limit::per_second(10.0),
            user_free: Limit::per_hour(100.0),
            user_pro: Limit::per_hour(5000.0),
            orders: Limit::per_minute(5.0),
            search: Limit::per_minute(60.0),
            search_strict: Limit::per_minute(20.0),
            rows_per_token: 100.0,
            failure_mode: FailureMode::FailOpen,
            trusted_proxies: Vec::new(),
            legacy_headers: None,
            cooldown: Duration::from_secs(1),
            shadow_policies: Vec::new(),
            deny_cache: 0,
            name: "api".to_owned(),
            // SPEC N7: a stream still running 6 s after its grant is ended.
            streams: Limit::in_flight(2.0, 2.0).max_duration(6.0),
            tokens: Limit::per_hour(1000.0),
            login: Limit::window_per_hour(20.0, WindowMode::Sliding),
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
    /// 5000 requests per hour by default.
    Pro,
}

/// Demo authentication, a stand-in: `X-API-Key: key-alice` is alice on the pro plan,
/// `key-bob` is bob on the free plan; no key (or an unknown one) is anonymous, and the
/// per-user policies are skipped (SPEC I1). A real app verifies a session or JWT here;
/// what matters is that it runs before the limiter and leaves a [`User`] in the
/// extensions for the key and limit functions.
pub async fn auth(mut req: Request, next: Next) -> Response {
    let account = match req.headers().get("x-api-key").map(|v| v.as_bytes()) {
        Some(b"key-alice") => Some("alice"),
        Some(b"key-bob") => Some("bob"),
        _ => None,
    };
    let user = account.map(|id| User {
        id: id.into(),
        plan: if id == "alice" { Plan::Pro } else { Plan::Free },
    });
    if let Some(user) = user {
        req.extensions_mut().insert(user);
    }
    next.run(req).await
}

fn user_of(parts: &Parts) -> Option<User> {
    parts.extensions.get::<User>().cloned()
}

/// The process-wide Prometheus recorder behind the `metrics` facade, installed on first
/// use. `None` if another recorder was installed first (then `/metrics` is empty).
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                // Histogram buckets are the exporter's business: the limiter's are these.
                .set_buckets_for_metric(
                    Matcher::Full(REDIS_CALL_DURATION_SECONDS.to_owned()),
                    &CALL_DURATION_BUCKETS,
                )
                .ok()?
                .install_recorder()
                .ok()
        })
        .as_ref()
}

/// The limiter: three policies, checked together in one TB.MTAKE per request.
pub fn limiter(client: TbClient, config: &Config) -> Result<RateLimitLayer, BuildError> {
    // The recorder first: the layer registers its counters when it is built.
    let _ = prometheus();
    let (free, pro) = (config.user_free, config.user_pro);
    let rows_per_token = config.rows_per_token;
    let shadow = |name: &str| config.shadow_policies.iter().any(|s| s == name);
    let builder = RateLimitLayer::builder(client);
    // SPEC C7: a deny cache holds at least one entry; 0 in the config means off.
    let builder = match config.deny_cache {
        0 => builder,
        n => builder.deny_cache(n),
    };
    builder
        // Per client address (behind trusted proxies only), every route.
        .policy(
            Policy::new("ip", config.ip)
                .cost_fn(move |parts| export_cost(parts, rows_per_token))
                .shadow(shadow("ip")),
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
                .cost_fn(move |parts| export_cost(parts, rows_per_token))
                .shadow(shadow("user")),
        )
        // An endpoint policy: only POST /orders (the route template, not the raw path),
        // per user; anonymous orders skip it (SPEC I1).
        .policy(
            Policy::new("orders", config.orders)
                .route(axum::http::Method::POST, "/orders")
                .key(Key::from_fn(|parts| user_of(parts).map(|u| u.id)))
                .shadow(shadow("orders")),
        )
        // A cost function: one token per 50 results asked for (`size`, default 50).
        .policy(
            Policy::new("search", config.search)
                .route(axum::http::Method::GET, "/search")
                .cost_fn(search_cost)
                .shadow(shadow("search")),
        )
        // A tighter search limit being tried out: charged and counted like an enforced one,
        // never refusing, left out of the headers (SPEC S1, S2). Enforcing it later is
        // removing `.shadow(true)`.
        .policy(
            Policy::new("search-strict", config.search_strict)
                .route(axum::http::Method::GET, "/search")
                .cost_fn(search_cost)
                .shadow(true),
        )
        // SPEC N: at most 2 streams in progress per client address; with the buckets
        // above, one TB.ACQUIRE ... TAKE on GET /stream (all or nothing).
        .policy(Policy::new("streams", config.streams).route(axum::http::Method::GET, "/stream"))
        // SPEC G: the stream's tokens, held by the handler and settled after the fact.
        .policy(
            Policy::new("tokens", config.tokens)
                .route(axum::http::Method::GET, "/stream")
                .settle_later(true),
        )
        .trusted_proxies(&config.trusted_proxies)
        .failure_mode(config.failure_mode)
        .cooldown(config.cooldown)
        .legacy_headers(config.legacy_headers)
        .name(&config.name)
        .build()
}

/// The login limiter: `POST /login` only, a sliding window of 20 an hour per client
/// address (SPEC W: never more than 20 in a window, where a token bucket would admit 40 in
/// the first hour). A window policy is the only policy of its limiter (SPEC C10), so it
/// is a second layer; it fails closed (SPEC B4: 503 while Redis is down).
pub fn login_limiter(client: TbClient, config: &Config) -> Result<RateLimitLayer, BuildError> {
    let _ = prometheus();
    RateLimitLayer::builder(client)
        .policy(Policy::new("login", config.login).route(axum::http::Method::POST, "/login"))
        .trusted_proxies(&config.trusted_proxies)
        .failure_mode(FailureMode::FailClosed)
        .cooldown(config.cooldown)
        .legacy_headers(config.legacy_headers)
        .name("login")
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

/// `GET /search?size=N` costs `ceil(N / 50)` tokens, at least 1 (`size` defaults to 50).
fn search_cost(parts: &Parts) -> f64 {
    let size = parts
        .uri
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("size=")))
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(50.0);
    (size / 50.0).ceil().max(1.0)
}

/// The `rows` query parameter (0 when missing or not a number).
fn export_rows(uri: &Uri) -> u64 {
    uri.query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("rows=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The app. `limiter: None` serves the same routes without rate limiting (for the
/// overhead benchmark). `/metrics` serves the process's metrics in the Prometheus text
/// format (not limited).
pub fn app(limiter: Option<RateLimitLayer>) -> Router {
    app_with(|limited| match limiter {
        Some(layer) => limited.layer(layer),
        None => limited,
    })
}

/// The app with the api limiter and the login limiter (`POST /login`, inside the api
/// limiter: both lists of rate-limit items are in its responses).
pub fn app_with_login(api: Option<RateLimitLayer>, login: Option<RateLimitLayer>) -> Router {
    routes(
        |limited| match api {
            Some(layer) => limited.layer(layer),
            None => limited,
        },
        login,
    )
}

/// The app with `limit` applied to the limited routes (the overhead benchmark puts other
/// layers there: one bare Redis PING per request, for instance).
pub fn app_with(limit: impl FnOnce(Router) -> Router) -> Router {
    routes(limit, None)
}

fn routes(limit: impl FnOnce(Router) -> Router, login_limiter: Option<RateLimitLayer>) -> Router {
    let login_route = match login_limiter {
        Some(layer) => post(login).layer(layer),
        None => post(login),
    };
    let limited = Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/items/{id}", get(get_item))
        .route("/orders", post(create_order))
        .route("/export", get(export))
        .route("/search", get(search))
        .route("/stream", get(stream))
        .route("/login", login_route);
    // Layers added later run first: auth sets the User before the limiter reads it.
    let limited = limit(limited).layer(middleware::from_fn(auth));
    // Routes added after the layers are not limited.
    limited
        .route("/healthz", get(|| async { "ok" }))
        .route("/health", get(|| async { "ok" }))
        .route("/metrics", get(metrics_text))
}

/// `GET /metrics`: the Prometheus text exposition format.
async fn metrics_text() -> Response {
    let text = prometheus().map_or_else(String::new, |h| {
        // Publishes the metric descriptions (HELP lines); histograms drain on render.
        h.run_upkeep();
        h.render()
    });
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The decision as JSON, for the handlers' bodies.
pub fn decision_json(decision: Option<&Decision>) -> Value {
    let Some(d) = decision else {
        return Value::Null;
    };
    json!({
        "outcome": d.outcome.as_str(),
        "shadow_limited": d.shadow_limited.iter().map(|n| &**n).collect::<Vec<_>>(),
        "remaining": d.remaining,
        "from_cache": d.from_cache,
        "results": d.results.iter().map(|p| json!({
            "name": &*p.name,
            "key": p.key,
            "capacity": p.capacity,
            "rate": p.rate,
            "cost": p.cost,
            "remaining": p.remaining,
            "reset_after": p.reset_after,
            "shadow": p.shadow,
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
            // SPEC F1: TB.REFUND now; true when the tokens were given back.
            refund.refund().await;
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
        .is_some_and(|d| d.outcome == Outcome::Allowed && d.remaining.is_some_and(|r| r < 1.0));
    Json(json!({
        "id": id,
        "last_request_in_quota": last_one,
        "rate_limit": decision_json(decision.as_ref()),
    }))
    .into_response()
}

/// `POST /orders` reads its body (the order), even though this demo stores nothing: a
/// handler that answers without reading a body the client is still sending makes hyper
/// drop the keep-alive connection after the response, without `Connection: close`, and
/// the client's next request on it fails. (`Bytes` reads it whole, up to axum's default
/// 2 MB limit; larger bodies get 413.)
async fn create_order(
    decision: Option<Extension<Decision>>,
    refund: Option<Extension<RefundHandle>>,
    body: Bytes,
) -> Response {
    let decision = decision.map(|Extension(d)| d);
    // The order `{item_id, quantity}`: a quantity of 0 or less is rejected, and the
    // rejected order is not counted (SPEC F1: its tokens are given back).
    let quantity = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("quantity").and_then(Value::as_f64));
    if quantity.is_some_and(|q| q <= 0.0) {
        let refunded = match refund {
            Some(Extension(r)) => r.refund().await,
            None => false,
        };
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": "quantity must be at least 1", "refunded": refunded})),
        )
            .into_response();
    }
    (
        StatusCode::CREATED,
        Json(json!({
            "order": "created",
            "bytes": body.len(),
            "rate_limit": decision_json(decision.as_ref()),
        })),
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

/// `POST /login`: a stand-in (no password is checked); limited by the login limiter.
async fn login(decision: Option<Extension<Decision>>, body: Bytes) -> Response {
    let decision = decision.map(|Extension(d)| d);
    Json(json!({
        "login": "ok",
        "bytes": body.len(),
        "rate_limit": decision_json(decision.as_ref()),
    }))
    .into_response()
}

/// `GET /stream`'s query: `tokens` to send (default 3), `delay_ms` between events
/// (default 0), `max_tokens` held before streaming (default 100); each a whole number
/// within [`STREAM_BOUNDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamQuery {
    /// Token events to send.
    pub tokens: u64,
    /// Milliseconds between events.
    pub delay_ms: u64,
    /// The estimate held on `tokens` before streaming (SPEC G1).
    pub max_tokens: u64,
}

/// The bounds of `GET /stream`'s query (examples/manifest.json's `bounds`): a value
/// outside them, or not a whole number, is a 400 before anything is held or streamed.
pub const STREAM_BOUNDS: [(&str, u64, u64); 3] = [
    ("tokens", 0, 10_000),
    ("delay_ms", 0, 10_000),
    ("max_tokens", 1, 10_000),
];

/// The query of `GET /stream`, or the name of the first parameter (in [`STREAM_BOUNDS`]'s
/// order) that is not a whole number within its bounds.
pub fn stream_query(uri: &Uri) -> Result<StreamQuery, &'static str> {
    let mut values = [3, 0, 100];
    for (k, v) in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
    {
        if let Some(i) = STREAM_BOUNDS.iter().position(|(name, _, _)| *name == k) {
            // Digits only: `+3`, `-1`, `1.5`, `1e3` and an empty value are refused; a
            // number too large for u64 is out of bounds.
            values[i] = match v.bytes().all(|b| b.is_ascii_digit()) && !v.is_empty() {
                true => v.parse().unwrap_or(u64::MAX),
                false => u64::MAX,
            };
        }
    }
    for ((name, min, max), v) in STREAM_BOUNDS.iter().zip(values) {
        if !(*min..=*max).contains(&v) {
            return Err(name);
        }
    }
    let [tokens, delay_ms, max_tokens] = values;
    Ok(StreamQuery {
        tokens,
        delay_ms,
        max_tokens,
    })
}

/// The 400 of a query value out of its bounds (the manifest's `bad_query` body).
fn bad_query(name: &str) -> Response {
    let (min, max) = STREAM_BOUNDS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map_or((0, 0), |(_, min, max)| (*min, *max));
    // RFC 9457, compact, the keys in the order of every problem body (SPEC P6).
    let detail = Value::String(format!(
        "query parameter '{name}' must be a whole number from {min} to {max}"
    ));
    let body = format!(
        "{{\"type\":\"about:blank\",\"title\":\"Bad Request\",\"status\":400,\"detail\":{detail}}}"
    );
    (
        StatusCode::BAD_REQUEST,
        [(
            axum::http::header::CONTENT_TYPE,
            redis_tb_client::problem::CONTENT_TYPE,
        )],
        body,
    )
        .into_response()
}

/// `GET /stream`: an LLM-proxy-style server-sent-event stream. The limiter's check took a
/// `streams` slot (SPEC N: released when this body ends, or when the client goes away;
/// renewed while it runs; ended 6 s after its grant whatever the client does, N7); the
/// handler refuses a query out of bounds with a 400, holds `max_tokens` on `tokens` (SPEC
/// G1, renewed by the layer every 30 s while the response runs, G5), answers a refused
/// hold with its 429 (G2, G6), streams `data: token-<i>` events and `data: [DONE]`, and
/// settles the number of token events it sent (G3), also when the client disconnected
/// mid-stream.
///
/// The events are written as the client reads them: the writer hands one event at a time
/// to the body through a channel of one, so a client that stops reading stops the writer
/// (hyper polls the body only when it can write). A client that goes away drops the body
/// and the channel's receiver: the writer sees it at once, even in the middle of a delay,
/// stops and settles.
async fn stream(uri: Uri, decision: Option<Extension<Decision>>) -> Response {
    let q = match stream_query(&uri) {
        Ok(q) => q,
        Err(name) => return bad_query(name),
    };
    let hold = match decision {
        Some(Extension(d)) if !d.settle_later.is_empty() => {
            match d.hold("tokens", q.max_tokens as f64, 60.0).await {
                Ok(h) => match h.or_refused() {
                    Ok(h) => Some(h),
                    // SPEC G2, G6: a refusal (a full hold table included) is a 429.
                    Err(refused) => return refused.into_response(),
                },
                // The store is down: stream without a hold (the failure mode is open).
                Err(e) => {
                    tracing::warn!("GET /stream: no hold on 'tokens' ({e}); streaming anyway");
                    None
                }
            }
        }
        _ => None,
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    tokio::spawn(async move {
        let sent = write_events(&tx, q).await;
        if let Some(hold) = hold {
            // SPEC G3: the actual count; the surplus of the estimate goes back.
            if let Err(e) = hold.settle(sent as f64).await {
                tracing::warn!("GET /stream: settling 'tokens' failed ({e})");
            }
        }
        if sent == q.tokens {
            let _ = tx.send(Bytes::from_static(b"data: [DONE]\n\n")).await;
        }
    });
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<Bytes, std::convert::Infallible>(b), rx))
    });
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/event-stream"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(events),
    )
        .into_response()
}

/// Writes the token events of `q` as the body takes them; the number sent. Stops as soon
/// as the body is gone (the client disconnected, or the request reached its
/// `max_duration`), a delay included.
async fn write_events(tx: &tokio::sync::mpsc::Sender<Bytes>, q: StreamQuery) -> u64 {
    let mut sent = 0;
    for i in 1..=q.tokens {
        if q.delay_ms > 0 && i > 1 {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(q.delay_ms)) => {}
                () = tx.closed() => break,
            }
        }
        if tx
            .send(Bytes::from(format!("data: token-{i}\n\n")))
            .await
            .is_err()
        {
            break;
        }
        sent += 1;
    }
    sent
}

/// `GET /search?q=..&size=N`: a stand-in search (limited by `search`, whose cost grows
/// with `size`, and the shadow `search-strict`).
async fn search(uri: Uri, decision: Option<Extension<Decision>>) -> Response {
    let decision = decision.map(|Extension(d)| d);
    Json(json!({
        "query": uri.query().unwrap_or(""),
        "results": [],
        "rate_limit": decision_json(decision.as_ref()),
    }))
    .into_response()
}
