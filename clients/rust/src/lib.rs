//! Rate limiting for axum and tower services on the redis-tb Redis module.
//!
//! - [`TbClient`]: TB.TAKE, TB.MTAKE, TB.PEEK, TB.REFUND and TB.RESERVE over one multiplexed
//!   connection, one round trip per call, typed replies, tight timeouts.
//! - [`RateLimitLayer`]: a `tower::Layer` for axum. Several named [`Policy`]s per route (per
//!   second and per hour, per IP and per user) checked together in one TB.MTAKE, all or
//!   nothing; IETF `RateLimit-Policy` / `RateLimit` headers; 429 with `Retry-After` and an
//!   RFC 9457 problem body; fail-open or fail-closed when Redis is down.
//! - The [`Decision`] and a [`RefundHandle`] are in the request extensions for handlers.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use redis_tb_client::{Key, Policy, RateLimitLayer, TbClient};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = TbClient::connect("redis://127.0.0.1:6379/").await?; // fails if the module is missing
//! let limiter = RateLimitLayer::builder(client)
//!     .policy(Policy::per_second("perip", 10.0))
//!     .policy(Policy::per_hour("perkey", 1000.0).key(Key::header("x-api-key".parse()?)))
//!     .build()?;
//! let app = Router::new().route("/items/{id}", get(|| async { "ok" })).layer(limiter);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![warn(missing_docs)]

mod client;
mod decision;
mod deny_cache;
mod error;
pub mod headers;
pub mod ip;
mod layer;
mod policy;
pub mod telemetry;

pub use client::{
    Charge, ClientConfig, MAX_NUMBER, MIN_RATE, MultiReply, Reply, Reservation, TbClient,
};
pub use decision::{Decision, PolicyResult, Status};
pub use error::{BuildError, Error};
pub use headers::LegacyReset;
pub use ip::{ClientIp, ClientIpConfig, ForwardedHeader};
pub use layer::{FailureMode, Metrics, RateLimit, RateLimitBuilder, RateLimitLayer, RefundHandle};
pub use policy::{BoxFuture, Key, Limit, Policy, Route};
/// The `redis` crate this client is built on (to configure a `redis::Client`).
pub use redis;
