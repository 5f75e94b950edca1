//! The tower layer ends a request's lease exactly once (SPEC N4) on every path a response
//! can take: its body read to the end, its body dropped mid-stream, the inner service
//! failing, and the request future dropped before any response. The store grants every
//! lease and records the releases; the real-server tests are in examples/axum/tests.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use redis_tb_client::{
    Acquired, Call, Charge, Error, Limit, MultiReply, PeerAddr, Policy, RateLimitLayer, Reply,
    RouteTemplate, Store,
};
use tower_layer::Layer;
use tower_service::Service;

#[derive(Clone, Default)]
struct Leasing {
    released: Arc<Mutex<Vec<String>>>,
}

impl Store for Leasing {
    async fn take(&self, _: &Call) -> Result<MultiReply, Error> {
        Err(Error::NoBuckets { command: "TB.TAKE" })
    }

    async fn refund(&self, _: &[Charge]) -> Result<Vec<Reply>, Error> {
        Ok(Vec::new())
    }

    async fn acquire(&self, _: &Call) -> Result<Acquired, Error> {
        Ok(Acquired {
            granted: true,
            in_flight: 1.0,
            id: Some("00000000000000a1".to_owned()),
            ms: 30_000.0,
            buckets: Vec::new(),
        })
    }

    async fn release(&self, key: &str, id: &str) -> Result<(bool, f64), Error> {
        self.released.lock().unwrap().push(format!("{key} {id}"));
        Ok((true, 0.0))
    }

    fn addr(&self) -> &str {
        "memory"
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(50)
    }
}

/// A body of `n` chunks, then its end.
struct Chunks(usize);

/// The layer's own answers (429, 503...) in this body type: not used by these tests.
impl From<Bytes> for Chunks {
    fn from(_: Bytes) -> Chunks {
        Chunks(1)
    }
}

impl http_body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.0 == 0 {
            return Poll::Ready(None);
        }
        self.0 -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk")))))
    }
}

/// `/ok`: a body of 3 chunks; `/error`: the inner service fails; `/pending`: never answers.
#[derive(Clone)]
struct Inner;

impl Service<Request<Full<Bytes>>> for Inner {
    type Response = Response<Chunks>;
    type Error = &'static str;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Chunks>, &'static str>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let path = req.uri().path().to_owned();
        Box::pin(async move {
            match path.as_str() {
                "/error" => Err("the handler failed"),
                "/pending" => std::future::pending().await,
                _ => Ok(Response::new(Chunks(3))),
            }
        })
    }
}

fn request(path: &str) -> Request<Full<Bytes>> {
    let mut req = Request::builder()
        .uri(path)
        .body(Full::new(Bytes::new()))
        .unwrap();
    req.extensions_mut()
        .insert(PeerAddr("203.0.113.9".parse::<IpAddr>().unwrap()));
    req.extensions_mut()
        .insert(RouteTemplate(Arc::from("/stream")));
    req
}

fn layer(store: &Leasing) -> RateLimitLayer<Leasing> {
    RateLimitLayer::builder(store.clone())
        .policy(Policy::new("conc", Limit::in_flight(2.0, 30.0)))
        .build()
        .unwrap()
}

/// Waits (bounded) for the spawned releases to land; the count of releases.
async fn released(store: &Leasing, want: usize) -> usize {
    for _ in 0..200 {
        if store.released.lock().unwrap().len() >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A little longer, so a second (wrong) release would show.
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.released.lock().unwrap().len()
}

#[tokio::test]
async fn a_body_read_to_its_end_releases_once() {
    let store = Leasing::default();
    let l = layer(&store);
    let mut svc = l.layer(Inner);
    let resp = svc.call(request("/ok")).await.unwrap();
    assert_eq!(l.stats().leases_in_flight(), 1);
    assert_eq!(
        store.released.lock().unwrap().len(),
        0,
        "not before the body"
    );
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body.as_ref(), b"chunkchunkchunk");
    assert_eq!(released(&store, 1).await, 1);
    assert_eq!(
        *store.released.lock().unwrap(),
        ["rl:conc:203.0.113.9 00000000000000a1"]
    );
    assert_eq!(l.stats().leases_in_flight(), 0);
}

#[tokio::test]
async fn a_body_dropped_mid_stream_releases_once() {
    let store = Leasing::default();
    let l = layer(&store);
    let mut svc = l.layer(Inner);
    let resp = svc.call(request("/ok")).await.unwrap();
    let mut body = resp.into_body();
    assert!(body.frame().await.is_some());
    drop(body); // the client went away
    assert_eq!(released(&store, 1).await, 1);
    assert_eq!(l.stats().leases_in_flight(), 0);
}

#[tokio::test]
async fn an_inner_error_releases_once() {
    let store = Leasing::default();
    let l = layer(&store);
    let mut svc = l.layer(Inner);
    assert!(svc.call(request("/error")).await.is_err());
    assert_eq!(released(&store, 1).await, 1);
    assert_eq!(l.stats().leases_in_flight(), 0);
}

#[tokio::test]
async fn a_request_cancelled_before_its_response_releases_once() {
    let store = Leasing::default();
    let l = layer(&store);
    let mut svc = l.layer(Inner);
    let fut = svc.call(request("/pending"));
    // The check runs and the lease is taken; the handler never answers; the request is
    // dropped (a client that went away, a server timeout).
    assert!(
        tokio::time::timeout(Duration::from_millis(50), fut)
            .await
            .is_err()
    );
    assert_eq!(released(&store, 1).await, 1);
    assert_eq!(l.stats().leases_in_flight(), 0);
}
