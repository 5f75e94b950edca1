//! The tower layer without axum (this test runs with and without the `axum` feature): the
//! peer comes from a `PeerAddr` extension, the route from a `RouteTemplate`, the store is
//! an in-memory one that admits and records the keys.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use redis_tb_client::{
    Call, Charge, ClientIp, Decision, Error, Key, LeaseBody, Limit, MultiReply, Outcome, PeerAddr,
    Policy, RateLimitLayer, Reply, RouteTemplate, Store,
};
use tower_layer::Layer;
use tower_service::Service;

#[derive(Clone, Default)]
struct Admitting {
    keys: Arc<Mutex<Vec<String>>>,
}

impl Store for Admitting {
    async fn take(&self, call: &Call) -> Result<MultiReply, Error> {
        let r = Reply {
            allowed: true,
            remaining: 4.0,
            retry_after: 0.0,
            reset_after: 1.0,
        };
        for c in call.charges() {
            self.keys.lock().unwrap().push(c.key.clone());
        }
        Ok(MultiReply {
            allowed: true,
            remaining: 4.0,
            retry_after: 0.0,
            reset_after: 1.0,
            buckets: vec![r; call.charges().len()],
        })
    }

    async fn refund(&self, charges: &[Charge]) -> Result<Vec<Reply>, Error> {
        Ok(vec![
            Reply {
                allowed: true,
                remaining: 5.0,
                retry_after: 0.0,
                reset_after: 0.0,
            };
            charges.len()
        ])
    }

    fn addr(&self) -> &str {
        "memory"
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(50)
    }
}

/// The handler: answers the decision's outcome.
#[derive(Clone)]
struct Handler;

impl Service<Request<Full<Bytes>>> for Handler {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let outcome = req
            .extensions()
            .get::<Decision>()
            .map_or("none", |d| d.outcome.as_str());
        ready(Ok(Response::new(Full::new(Bytes::from(outcome)))))
    }
}

async fn get(
    svc: &mut impl Service<
        Request<Full<Bytes>>,
        Response = Response<LeaseBody<Full<Bytes>>>,
        Error = Infallible,
    >,
    route: Option<&str>,
    path: &str,
) -> (StatusCode, Option<String>, String) {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(path)
        .body(Full::new(Bytes::new()))
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr("203.0.113.9".parse::<IpAddr>().unwrap()));
    if let Some(r) = route {
        req.extensions_mut().insert(RouteTemplate(Arc::from(r)));
    }
    let resp = svc.call(req).await.unwrap();
    let status = resp.status();
    let header = resp
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, header, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn the_layer_works_on_any_tower_stack() {
    let store = Admitting::default();
    let layer = RateLimitLayer::builder(store.clone())
        .policy(Policy::per_second("ip", 5.0))
        .policy(
            Policy::new("export", Limit::per_second(10.0))
                .route_any_method("/export")
                .cost_fn(|parts| {
                    if parts.uri.query() == Some("huge") {
                        1e18
                    } else {
                        1.0
                    }
                }),
        )
        .exclude_any_method("/health")
        .build()
        .unwrap();
    let mut svc = layer.layer(Handler);

    let (status, header, body) = get(&mut svc, Some("/items/{id}"), "/items/1").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "allowed"));
    assert_eq!(header.as_deref(), Some(r#""ip";r=4;t=1"#));
    assert_eq!(*store.keys.lock().unwrap(), ["rl:ip:203.0.113.9"]);

    // SPEC L1: excluded routes and unmatched requests are not limited.
    let (_, header, body) = get(&mut svc, Some("/health"), "/health").await;
    assert_eq!((header, body.as_str()), (None, "not_limited"));
    let (_, header, body) = get(&mut svc, None, "/nowhere").await;
    assert_eq!((header, body.as_str()), (None, "not_limited"));

    // SPEC L3: an out-of-range cost is the application's error, answered by the layer.
    let (status, header, body) = get(&mut svc, Some("/export"), "/export?huge").await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(header, None);
    assert!(
        body.contains("rate limit policy 'export' got an invalid cost"),
        "{body}"
    );
    assert_eq!(layer.stats().invalid_inputs(), 1);
    assert_eq!(store.keys.lock().unwrap().len(), 1, "nothing sent");

    let (status, _, body) = get(&mut svc, Some("/export"), "/export").await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, Outcome::Allowed.as_str())
    );
}

/// SPEC I1: async key functions are awaited (they may suspend), see the resolved client
/// address, and key their policy's bucket in the policy order, beside sync keys; `None`
/// or an empty identity skips only that policy; a policy that does not apply to the
/// route is never asked.
#[tokio::test]
async fn async_keys_are_awaited_in_policy_order() {
    let store = Admitting::default();
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = asked.clone();
    let user = Key::from_async_fn(move |parts: &http::request::Parts| {
        let path = parts.uri.path().to_owned();
        let ip = parts
            .extensions
            .get::<ClientIp>()
            .map(|c| c.identity.clone());
        let log = log.clone();
        async move {
            tokio::task::yield_now().await;
            log.lock().unwrap().push(path.clone());
            match path.as_str() {
                "/anon" => None,
                "/empty" => Some(String::new()),
                _ => ip.map(|ip| format!("user-of-{ip}")),
            }
        }
    });
    let only_export = Key::from_async_fn(|_: &http::request::Parts| async { Some("e".into()) });
    let layer = RateLimitLayer::builder(store.clone())
        .policy(Policy::per_second("user", 5.0).key(user))
        .policy(Policy::per_second("ip", 5.0))
        .policy(
            Policy::per_second("export", 5.0)
                .key(only_export)
                .route_any_method("/export"),
        )
        .build()
        .unwrap();
    let mut svc = layer.layer(Handler);

    let (status, _, body) = get(&mut svc, Some("/items/{id}"), "/items/1").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "allowed"));
    assert_eq!(
        *store.keys.lock().unwrap(),
        ["rl:user:user-of-203.0.113.9", "rl:ip:203.0.113.9"]
    );

    for path in ["/anon", "/empty"] {
        store.keys.lock().unwrap().clear();
        get(&mut svc, Some(path), path).await;
        assert_eq!(*store.keys.lock().unwrap(), ["rl:ip:203.0.113.9"], "{path}");
    }

    store.keys.lock().unwrap().clear();
    get(&mut svc, Some("/export"), "/export").await;
    assert_eq!(
        *store.keys.lock().unwrap(),
        [
            "rl:user:user-of-203.0.113.9",
            "rl:ip:203.0.113.9",
            "rl:export:e"
        ]
    );
    assert_eq!(
        *asked.lock().unwrap(),
        ["/items/1", "/anon", "/empty", "/export"]
    );
}
