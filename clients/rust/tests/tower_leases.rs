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
    Acquired, Call, Charge, Decision, Error, Hold, HoldReply, Limit, ManualClock,
    MaxDurationExceeded, MultiReply, PeerAddr, Policy, RateLimitLayer, Reply, RouteTemplate,
    SettleTarget, Store,
};
use tower_layer::Layer;
use tower_service::Service;

#[derive(Clone, Default)]
struct Leasing {
    released: Arc<Mutex<Vec<String>>>,
    renewed: Arc<Mutex<Vec<String>>>,
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
        // A round trip: the caller's task may be dropped while it waits.
        tokio::task::yield_now().await;
        self.released.lock().unwrap().push(format!("{key} {id}"));
        Ok((true, 0.0))
    }

    async fn renew(&self, key: &str, id: &str, ms: u64) -> Result<(bool, f64, f64), Error> {
        self.renewed
            .lock()
            .unwrap()
            .push(format!("{key} {id} {ms}"));
        Ok((true, 1.0, ms as f64))
    }

    async fn hold(&self, _: &SettleTarget, estimate: f64, _: u64) -> Result<HoldReply, Error> {
        Ok(HoldReply {
            reply: Reply {
                allowed: true,
                remaining: 100.0 - estimate,
                retry_after: 0.0,
                reset_after: 1.0,
            },
            id: Some("00000000000000b2".to_owned()),
        })
    }

    fn addr(&self) -> &str {
        "memory"
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(50)
    }
}

/// A body of `n` chunks, then its end; [`STALLED`]: a body that never gives a chunk (a
/// stream waiting for its source).
struct Chunks(usize);

const STALLED: usize = usize::MAX;

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
        if self.0 == STALLED {
            return Poll::Pending;
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
        let req = req;
        Box::pin(async move {
            match path.as_str() {
                "/error" => Err("the handler failed"),
                "/pending" => std::future::pending().await,
                "/stalled" => Ok(Response::new(Chunks(STALLED))),
                "/hold" => {
                    // A handler that holds an estimate (SPEC G1) and streams.
                    let d = req.extensions().get::<Decision>().cloned();
                    if let Some(d) = d {
                        let hold = d.hold("tokens", 10.0, 2.0).await.unwrap();
                        assert!(hold.allowed);
                        HOLDS.lock().unwrap().push(hold);
                    }
                    Ok(Response::new(Chunks(STALLED)))
                }
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

static HOLDS: Mutex<Vec<Hold>> = Mutex::new(Vec::new());

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

/// SPEC N7 through the layer: the limiter's clock past the deadline, the renewal timer
/// fires at it (tokio's clock paused: its sleeps end at once, in order).
fn timed_layer(store: &Leasing, clock: &ManualClock) -> RateLimitLayer<Leasing> {
    RateLimitLayer::builder(store.clone())
        .policy(Policy::new(
            "conc",
            Limit::in_flight(2.0, 30.0).max_duration(1.0),
        ))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_stream_still_running_at_max_duration_ends_with_an_error_and_releases_once() {
    let store = Leasing::default();
    let clock = ManualClock::new(0);
    let l = timed_layer(&store, &clock);
    let mut svc = l.layer(Inner);
    let resp = svc.call(request("/stalled")).await.unwrap();
    assert_eq!(l.stats().leases_in_flight(), 1);
    clock.set_ms(1000);
    // The body waits for a chunk that never comes; the timer's tick at the deadline
    // releases the lease and wakes it with the error that makes the server close the
    // connection.
    let mut body = resp.into_body();
    let frame = body.frame().await.expect("a frame");
    let err = frame.expect_err("the body ends with an error");
    assert!(err.downcast_ref::<MaxDurationExceeded>().is_some(), "{err}");
    // The server drops the body at once (and with it the timer's task): the release was
    // sent all the same.
    drop(body);
    assert_eq!(l.stats().leases_timed_out(), 1);
    assert_eq!(l.stats().leases_in_flight(), 0);
    assert_eq!(
        store.renewed.lock().unwrap().len(),
        0,
        "a tick at the deadline sends no TB.RENEW"
    );
    assert_eq!(released(&store, 1).await, 1, "one release, at the deadline");
}

#[tokio::test(start_paused = true)]
async fn a_handler_that_has_not_answered_at_max_duration_gets_no_response() {
    let store = Leasing::default();
    let clock = ManualClock::new(0);
    let l = timed_layer(&store, &clock);
    let mut svc = l.layer(Inner);
    let call = tokio::spawn(svc.call(request("/pending")));
    // The grant at 0 ms; the deadline at 1000 ms, before the handler answers.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(l.stats().leases_in_flight(), 1);
    clock.set_ms(1000);
    let resp = call.await.unwrap().unwrap();
    // Its body fails at once: hyper closes the connection without writing the head.
    let mut body = resp.into_body();
    let err = body.frame().await.expect("a frame").expect_err("an error");
    assert!(err.downcast_ref::<MaxDurationExceeded>().is_some(), "{err}");
    assert_eq!(l.stats().leases_timed_out(), 1);
    assert_eq!(released(&store, 1).await, 1);
}

#[tokio::test(start_paused = true)]
async fn before_max_duration_the_lease_is_renewed_every_half_lease() {
    let store = Leasing::default();
    let clock = ManualClock::new(0);
    let l = RateLimitLayer::builder(store.clone())
        .policy(Policy::new(
            "conc",
            Limit::in_flight(2.0, 2.0).max_duration(10.0),
        ))
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    let mut svc = l.layer(Inner);
    let resp = svc.call(request("/stalled")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        *store.renewed.lock().unwrap(),
        [
            "rl:conc:203.0.113.9 00000000000000a1 2000",
            "rl:conc:203.0.113.9 00000000000000a1 2000",
            "rl:conc:203.0.113.9 00000000000000a1 2000",
        ]
    );
    drop(resp);
    assert_eq!(released(&store, 1).await, 1);
    assert_eq!(l.stats().leases_timed_out(), 0);
}

/// SPEC G5 through the layer: a hold the handler took is renewed every `ttl / 2` by a task
/// of its own while the response runs, and not after it ends.
#[tokio::test(start_paused = true)]
async fn a_hold_is_renewed_while_the_response_runs_and_not_after() {
    let store = Leasing::default();
    let l = RateLimitLayer::builder(store.clone())
        .policy(
            Policy::per_hour("tokens", 100.0)
                .route_any_method("/stream")
                .settle_later(true),
        )
        .build()
        .unwrap();
    let mut svc = l.layer(Inner);
    let resp = svc.call(request("/hold")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        *store.renewed.lock().unwrap(),
        [
            "rl:tokens:203.0.113.9 00000000000000b2 2000",
            "rl:tokens:203.0.113.9 00000000000000b2 2000",
        ],
        "TB.RENEW key id ttl_ms every ttl / 2"
    );
    drop(resp); // the response ends
    tokio::time::sleep(Duration::from_millis(5000)).await;
    assert_eq!(
        store.renewed.lock().unwrap().len(),
        2,
        "no renewal after the end"
    );
    let hold = HOLDS.lock().unwrap().pop().unwrap();
    assert!(!hold.is_renewing());
}
