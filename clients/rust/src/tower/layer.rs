//! [`RateLimitLayer`]: the tower `Layer` that owns a [`RateLimiter`] and wraps each inner
//! service in a [`RateLimit`]; built with the limiter's builder (SPEC C).

use std::fmt;

use tower_layer::Layer;

use super::service::RateLimit;
use crate::client::TbClient;
use crate::limiter::{FromLimiter, RateLimiter, RateLimiterBuilder, Stats, Store};

/// Builds a [`RateLimitLayer`]: `RateLimitLayer::builder(client).policy(..).build()?`.
pub type RateLimitBuilder<S = TbClient> = RateLimiterBuilder<S, RateLimitLayer<S>>;

/// The rate-limit layer. Clones share the limiter.
pub struct RateLimitLayer<S: Store = TbClient> {
    limiter: RateLimiter<S>,
}

impl<S: Store> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: self.limiter.clone(),
        }
    }
}

impl<S: Store> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<S: Store> FromLimiter<S> for RateLimitLayer<S> {
    fn from_limiter(limiter: RateLimiter<S>) -> Self {
        RateLimitLayer { limiter }
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// Starts a builder over a store (a connected [`TbClient`]).
    pub fn builder(store: S) -> RateLimitBuilder<S> {
        RateLimiterBuilder::new(store)
    }

    /// The layer of an existing limiter.
    pub fn new(limiter: RateLimiter<S>) -> Self {
        RateLimitLayer { limiter }
    }

    /// The limiter.
    pub fn limiter(&self) -> &RateLimiter<S> {
        &self.limiter
    }

    /// The limiter's startup check (SPEC U3, K6): see [`RateLimiter::startup`].
    pub async fn startup(&self) -> Result<(), crate::Error> {
        self.limiter.startup().await
    }

    /// The limiter's counters.
    pub fn stats(&self) -> Stats {
        self.limiter.stats()
    }

    /// The old name of [`RateLimitLayer::stats`].
    #[deprecated(note = "renamed stats (SPEC names)")]
    pub fn metrics(&self) -> Stats {
        self.limiter.stats()
    }

    /// The limiter's name (the `limiter` label of its metrics).
    pub fn name(&self) -> &str {
        self.limiter.name()
    }

    /// Entries in the local deny cache (0 when it is off).
    pub fn deny_cache_len(&self) -> usize {
        self.limiter.deny_cache_len()
    }
}

impl<I, S: Store> Layer<I> for RateLimitLayer<S> {
    type Service = RateLimit<I, S>;

    fn layer(&self, inner: I) -> RateLimit<I, S> {
        RateLimit::new(inner, self.limiter.clone())
    }
}
