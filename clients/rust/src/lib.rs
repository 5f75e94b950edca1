//! Rate limiting on the redis-tb Redis module: a typed client, a framework-neutral
//! limiter, and a tower layer (axum's `MatchedPath` and `ConnectInfo` with the `axum`
//! feature). The behaviour is the contract in `clients/SPEC.md`; comments cite its rules.
//!
//! - [`TbClient`]: TB.TAKE, TB.MTAKE, TB.PEEK, TB.REFUND, TB.RESERVE, TB.WINDOW, TB.RELEASE,
//!   TB.RENEW, TB.HOLD and TB.SETTLE over one multiplexed connection, one round trip per
//!   call, typed replies, tight timeouts; on the module's commands, or where the module is
//!   missing on the script library of clients/lua ([`BackendSetting`], SPEC E).
//! - The core, framework-neutral: [`Policy`] and [`Key`] ([`policy`]), the client address
//!   ([`ip`]), the key builder ([`keys`]), headers ([`headers`]), problem bodies
//!   ([`problem`]), the [`Decision`], the deny cache, the breaker, and the [`RateLimiter`]
//!   with its injected [`Clock`].
//! - [`RateLimitLayer`] ([`tower`]): the tower `Layer` around a limiter. The [`Decision`]
//!   and a [`RefundHandle`] are in the request extensions for handlers; an in-flight
//!   policy's lease is held by the response body ([`LeaseBody`]) until it ends (SPEC N4),
//!   and `decision.hold(..)` gives a [`Hold`] to settle later (SPEC G).
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use redis_tb_client::{Key, Policy, RateLimitLayer, TbClient};
//!
//! let client = TbClient::connect("redis://127.0.0.1:6379/").await?; // the module, else the scripts (SPEC E1)
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

mod breaker;
mod client;
pub mod clock;
mod decision;
mod deny_cache;
mod error;
pub mod headers;
mod hold;
pub mod ip;
pub mod keys;
mod lease;
mod limiter;
pub mod policy;
pub mod problem;
pub mod startup;
pub mod telemetry;
pub mod tower;

pub use client::lua;
pub use client::{
    Acquired, Backend, BackendSetting, Charge, Chosen, ClientConfig, HoldReply, MAX_NUMBER,
    MIN_RATE, MultiReply, Reply, Reservation, ScriptsVia, Sent, SettleReply, TbClient, Throttle,
    Transport, WindowMode,
};
pub use clock::{Clock, ManualClock, SystemClock};
#[allow(deprecated)]
pub use decision::Status;
pub use decision::{Decision, Outcome, PolicyResult};
pub use error::{BuildError, Error};
pub use headers::LegacyReset;
pub use hold::{Hold, HoldRefused, SettleTarget, Settlement};
pub use ip::{ClientIp, ClientIpConfig, ForwardedHeader};
pub use lease::{Lease, LeaseHandle, Renewal};
#[allow(deprecated)]
pub use limiter::Metrics;
pub use limiter::{
    Call, CallKind, Check, FailureMode, FromLimiter, MAX_POLICIES, RateLimiter, RateLimiterBuilder,
    RefundHandle, Stats, Store,
};
pub use policy::limit::{valid_cost, valid_limit};
pub use policy::{BoxFuture, DEFAULT_MAX_DURATION, Identity, Key, Limit, LimitKind, Policy, Route};
/// The `redis` crate this client is built on (to configure a `redis::Client`).
pub use redis;
pub use tower::{
    LeaseBody, MaxDurationExceeded, PeerAddr, RateLimit, RateLimitBuilder, RateLimitLayer,
    RouteTemplate,
};
