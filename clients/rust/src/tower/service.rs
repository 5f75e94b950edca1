//! [`RateLimit`]: the tower `Service` of the layer. Per request it finds the peer address
//! and the matched route template, runs the limiter's check, and answers 429 / 503 / 400 /
//! 500 itself or calls the inner service with the [`Decision`] and a
//! [`crate::RefundHandle`] in the request's extensions, then adds the headers to the
//! response and wraps its body in a [`LeaseBody`].

use std::fmt;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, Request, Response, header};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower_service::Service;

use super::body::{BoxError, LeaseBody, LeaseGuard};
use crate::client::TbClient;
use crate::decision::Decision;
use crate::headers::RateLimitHeaders;
use crate::limiter::{Check, RateLimiter, Store};

/// A boxed, sendable future (the service's future).
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// The peer address of a request, for servers that are not axum (put it in the request
/// extensions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub IpAddr);

/// The matched route template (`/items/{id}`), for routers that are not axum (put it in
/// the request extensions before the layer runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTemplate(pub Arc<str>);

/// The rate-limit service wrapping `I`.
pub struct RateLimit<I, S: Store = TbClient> {
    inner: I,
    limiter: RateLimiter<S>,
}

impl<I, S: Store> RateLimit<I, S> {
    pub(super) fn new(inner: I, limiter: RateLimiter<S>) -> Self {
        RateLimit { inner, limiter }
    }
}

impl<I: Clone, S: Store> Clone for RateLimit<I, S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

impl<I: fmt::Debug, S: Store> fmt::Debug for RateLimit<I, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<I, S, ReqB, ResB> Service<Request<ReqB>> for RateLimit<I, S>
where
    I: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    I::Future: Send + 'static,
    S: Store,
    ReqB: Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
    // The limiter's own answers (429, 503, 400, 500) are made in the inner service's body
    // type (axum's `Body`, `Full<Bytes>`, ...), so the response is passed through
    // unwrapped: no second body layer, no boxing by the framework.
    ResB: Body<Data = Bytes> + From<Bytes> + Send,
    ResB::Error: Into<BoxError>,
{
    type Response = Response<LeaseBody<ResB>>;
    type Error = I::Error;
    type Future = BoxFuture<Result<Self::Response, I::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        // The clone is not ready; the instance that was polled ready serves this request.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        // The handler's future itself, boxed once: no async wrapper that would hold the
        // request a second time.
        Box::pin(handle(limiter, req, inner))
    }
}

/// The route template the router matched.
enum Matched {
    #[cfg(feature = "axum")]
    Axum(axum::extract::MatchedPath),
    Own(Arc<str>),
}

impl Matched {
    fn as_str(&self) -> &str {
        match self {
            #[cfg(feature = "axum")]
            Matched::Axum(m) => m.as_str(),
            Matched::Own(s) => s,
        }
    }
}

fn route_of(parts: &Parts) -> Option<Matched> {
    #[cfg(feature = "axum")]
    if let Some(m) = parts.extensions.get::<axum::extract::MatchedPath>() {
        return Some(Matched::Axum(m.clone()));
    }
    parts
        .extensions
        .get::<RouteTemplate>()
        .map(|r| Matched::Own(r.0.clone()))
}

fn peer_of(parts: &Parts) -> Option<IpAddr> {
    if let Some(PeerAddr(ip)) = parts.extensions.get::<PeerAddr>() {
        return Some(*ip);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(addr.ip());
    }
    parts.extensions.get::<SocketAddr>().map(SocketAddr::ip)
}

/// The request's way through the layer. A plain function returning an `async move`
/// block rather than an `async fn`: the block keeps the request's head and body where it
/// captured them, where an `async fn` would hold its arguments twice (as arguments and
/// as locals), and this future is boxed and moved on every request.
fn handle<I, S, ReqB, ResB>(
    limiter: RateLimiter<S>,
    req: Request<ReqB>,
    mut inner: I,
) -> impl Future<Output = Result<Response<LeaseBody<ResB>>, I::Error>> + Send + 'static
where
    I: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    I::Future: Send + 'static,
    ResB: From<Bytes> + Send,
    S: Store,
    ReqB: Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
{
    let (mut parts, body) = req.into_parts();
    let peer = peer_of(&parts);
    let route = route_of(&parts);
    if peer.is_none() && limiter.needs_peer() {
        limiter.warn_once(
            "redis-tb-client: no peer address in the request (serve axum apps with \
             into_make_service_with_connect_info::<SocketAddr>(), or insert a PeerAddr): \
             policies keyed by client IP are skipped",
        );
    }
    async move {
        // Taken apart at once: a `Check` kept as a local (and borrowed) would stay in this
        // future's state across every later await.
        let Check {
            decision,
            headers,
            problem,
            refund,
            lease,
        } = limiter
            .check(&mut parts, peer, route.as_ref().map(Matched::as_str))
            .await;
        if let Some(problem) = problem {
            return Ok(refuse(limiter.drain_settings(), problem, headers, body).await);
        }
        // SPEC N4, N5: from here the lease ends exactly once: with the response body (its
        // end, or its drop when the client goes away), or with this future (an error from
        // the inner service, a panic, a cancelled request). The holds taken on the
        // decision are renewed until then (G5).
        let timed = lease.is_active();
        let guard = LeaseGuard::start(lease);
        insert_decision(&mut parts, decision);
        parts.extensions.insert(refund.clone());
        let call = inner.call(Request::from_parts(parts, body));
        // SPEC N7: the request's deadline may come before its handler answers.
        let mut resp = match match (&guard, timed) {
            (Some(g), true) => until_timed_out(call, &g.lease).await,
            _ => Some(call.await),
        } {
            Some(answered) => answered?.map(|body| LeaseBody::new(body, guard)),
            None => {
                // SPEC N7: the response had not started: none is sent.
                let mut resp = Response::new(LeaseBody::cut(ResB::from(Bytes::new())));
                *resp.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                return Ok(resp);
            }
        };
        // SPEC F2: the limiter's rule, on the handler's status.
        refund.answered(resp.status()).await;
        if let Some(h) = headers {
            // An inner limiter's items (a second layer on one route) stay in the lists, after
            // this limiter's own (SPEC H1: one list of the enforced policies).
            // A scan of the response's few header names is cheaper than two hashed lookups,
            // and finds none in the common case.
            let names = [
                &crate::headers::RATELIMIT_POLICY,
                &crate::headers::RATELIMIT,
            ];
            let inner_items: Vec<(http::HeaderName, HeaderValue)> =
                if resp.headers().keys().any(|k| names.contains(&k)) {
                    names
                        .into_iter()
                        .filter_map(|n| resp.headers().get(n).map(|v| (n.clone(), v.clone())))
                        .collect()
                } else {
                    Vec::new()
                };
            h.apply_owned(resp.headers_mut());
            for (name, theirs) in inner_items {
                let Some(mine) = resp.headers().get(&name) else {
                    continue;
                };
                let mut joined = mine.as_bytes().to_vec();
                joined.extend_from_slice(b", ");
                joined.extend_from_slice(theirs.as_bytes());
                if let Ok(v) = HeaderValue::from_bytes(&joined) {
                    resp.headers_mut().insert(name, v);
                }
            }
        }
        Ok(resp)
    }
}

/// The limiter's own answer (429, 503, 400, 500): the problem body and the headers, after
/// the request body is drained (SPEC P). Its own future, so that its state is in the
/// request's future only while it runs.
fn refuse<ReqB, ResB>(
    (limit, wait): (usize, Duration),
    (status, text): (http::StatusCode, String),
    headers: Option<RateLimitHeaders>,
    body: ReqB,
) -> impl Future<Output = Response<LeaseBody<ResB>>> + Send
where
    ResB: From<Bytes> + Send,
    ReqB: Body<Data = Bytes> + Send + 'static,
    ReqB::Error: Into<BoxError>,
{
    let mut resp = Response::new(LeaseBody::new(ResB::from(Bytes::from(text)), None));
    *resp.status_mut() = status;
    crate::limiter::write_problem_headers(status, headers.as_ref(), resp.headers_mut());
    async move {
        if !drain(body, limit, wait).await {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        resp
    }
}

/// The inner service's answer, or `None` when the request reached its `max_duration`
/// first (SPEC N7: the handler's future is dropped).
async fn until_timed_out<F: Future>(
    call: F,
    lease: &crate::lease::LeaseHandle,
) -> Option<F::Output> {
    let mut call = std::pin::pin!(call);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = call.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        match lease.poll_timed_out(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await
}

fn insert_decision(parts: &mut Parts, decision: Decision) {
    parts.extensions.insert(decision);
}

/// Reads and drops a request body of at most `limit` bytes within `wait`; `false` when the
/// body is larger, slower, or broken (the connection should then be closed).
async fn drain<B>(body: B, limit: usize, wait: Duration) -> bool
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    if body.is_end_stream() {
        return true;
    }
    if body.size_hint().lower() > u64::try_from(limit).unwrap_or(u64::MAX) {
        return false;
    }
    matches!(
        tokio::time::timeout(wait, Limited::new(body, limit).collect()).await,
        Ok(Ok(_))
    )
}
