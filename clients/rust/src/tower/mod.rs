//! The tower adapter: a `Layer` + `Service` pair around the framework-neutral
//! [`crate::RateLimiter`]. Per request it finds the peer address and the matched route template,
//! runs the check, and answers 429 / 503 / 400 / 500 itself or passes the request on with
//! the [`crate::Decision`] and a [`crate::RefundHandle`] in its extensions, adding the rate-limit headers
//! to the response.
//!
//! Peer: axum's `ConnectInfo<SocketAddr>` (feature `axum`), else a [`PeerAddr`] or a
//! `SocketAddr` extension. Route: axum's `MatchedPath` (feature `axum`), else a
//! [`RouteTemplate`] extension set by the router.

//!
//! The parts, as tower-http lays out a middleware: the layer ([`RateLimitLayer`], `layer`),
//! the service and its future ([`RateLimit`], `service`), and the response body that holds
//! a request's lease ([`LeaseBody`], `body`). Each imports only those after it; this file
//! holds the re-exports.

mod body;
mod layer;
mod service;

pub use body::{BoxError, LeaseBody, MaxDurationExceeded};
pub use layer::{RateLimitBuilder, RateLimitLayer};
pub use service::{BoxFuture, PeerAddr, RateLimit, RouteTemplate};
