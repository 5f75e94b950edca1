//! Startup (SPEC U1-U4, E1): what an application finds out before its first request, each
//! failure one line naming the address and what to do.
//!
//! - [`check_store`] (what [`crate::TbClient::start`] runs): the backend chosen (SPEC E1,
//!   [`ClientConfig::backend`]): `COMMAND INFO tb.take` finds the module, or else the
//!   script library of clients/lua is loaded (E2) and the choice logged in one line (E6).
//!   A server without the module fails the start only when the backend is forced to
//!   `module` (U1); a user without the right to run `COMMAND INFO` fails it, so does a
//!   library neither load takes (E2); an unreachable Redis fails it too (U2) unless the
//!   start is degraded ([`crate::TbClient::start_degraded`]), which logs one line instead
//!   and chooses before its first call that reaches Redis.
//! - [`crate::RateLimiter::startup`] (U3, K6, in the limiter's `cluster.rs`): a limiter
//!   that can send several keys in one call and has no tag function sends `HELLO`, and a
//!   Redis Cluster fails its start.
//!
//! An example application prints the line and exits with status 3 (U4).

use crate::client::{Backend, ClientConfig, TbClient, open_url};
use crate::error::Error;
use crate::limiter::Store;

/// What a start that did not fail found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// Redis was unreachable and the start degraded (SPEC U2): the limiter's failure mode
    /// applies until it answers.
    pub degraded: bool,
    /// The one line logged (tracing WARN, target `redis_tb`), `None` when none was.
    pub log: Option<String>,
    /// SPEC E1: the backend chosen, `None` after a degraded start (it is chosen before the
    /// first call that reaches Redis).
    pub backend: Option<Backend>,
    /// SPEC E6: the choice's line (each limiter's [`crate::RateLimiter::startup`] logs it,
    /// tracing INFO, target `redis_tb`), `None` when no choice was made.
    pub backend_log: Option<String>,
}

/// The starts of a [`TbClient`] (SPEC U1, U2, E1): each connects, then [`check_store`]
/// chooses the backend ([`ClientConfig::backend`]).
impl TbClient {
    /// Connects to `url` (`redis://host:port/db`) with the default timeouts and chooses the
    /// backend (the module, or the scripts where it is missing, SPEC E1). The connection speaks RESP3 (`HELLO 3`, Redis 6+ and Valkey),
    /// whose replies carry the module's numbers as doubles, cheaper to read than RESP2's
    /// bulk strings, unless the URL names a protocol (`?protocol=resp2`); a server without
    /// `HELLO` gets RESP2.
    pub async fn connect(url: &str) -> Result<TbClient, Error> {
        TbClient::connect_with(url, ClientConfig::default()).await
    }

    /// Connects to `url` with `config`; the same start as [`TbClient::start`].
    pub async fn connect_with(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        TbClient::start(url, config).await
    }

    /// Connects with a configured `redis::Client` (TLS, auth, RESP3...) and chooses the
    /// backend at startup, not on the first request (SPEC E1; forced to the module, a
    /// missing one is [`Error::ModuleNotLoaded`]). Strict, as [`TbClient::start`].
    pub async fn connect_client(
        client: redis::Client,
        config: ClientConfig,
    ) -> Result<TbClient, Error> {
        let tb = TbClient::lazy(client, config);
        check_store(&tb, false).await?;
        Ok(tb)
    }

    /// Connects to `url` and checks the server (SPEC U1, U2), failing the start with one
    /// line naming the address and what to do: Redis unreachable ([`Error::Unreachable`]:
    /// `redis-tb: cannot reach Redis at <host:port> (<reason>): start it, or set
    /// start_degraded to start failing open`), the module missing where the backend is
    /// forced to it ([`Error::ModuleNotLoaded`]), the script library refused
    /// ([`Error::ScriptLoad`]) or `COMMAND INFO` not permitted ([`Error::NoPermission`]). Then each limiter's [`crate::RateLimiter::startup`]
    /// (U3: a cluster without a tag function). RESP3 unless the URL names a protocol.
    pub async fn start(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        let (client, fallback) = open_url(url)?;
        let tb = TbClient::lazy_with_fallback(client, fallback, config);
        check_store(&tb, false).await?;
        Ok(tb)
    }

    /// Like [`TbClient::start`], but an unreachable Redis is not an error (SPEC U2's
    /// `start_degraded`, an explicit choice): one line is logged, `redis-tb: Redis at
    /// <host:port> unreachable at startup; starting degraded (the limiter's failure mode
    /// applies until it answers)`, and the client connects on first use (the limiter's
    /// failure mode covers the requests until then), so the app can start before Redis
    /// does. A server that answers is held to the same choice
    /// (SPEC E1), one without the right to run `COMMAND INFO`
    /// [`Error::NoPermission`]. RESP3 unless the URL names a protocol.
    pub async fn start_degraded(url: &str, config: ClientConfig) -> Result<TbClient, Error> {
        let (client, fallback) = open_url(url)?;
        let tb = TbClient::lazy_with_fallback(client, fallback, config);
        let started = check_store(&tb, true).await?;
        if started.degraded {
            tb.degrade();
        }
        Ok(tb)
    }
}

/// SPEC U1, U2, E1: the backend chosen through `store` ([`Store::choose_backend`]: `COMMAND
/// INFO tb.take`, and where the module is missing, or the scripts are forced, the script
/// library loaded). Forced to the module on a server without it:
/// [`Error::ModuleNotLoaded`]; no load taken: [`Error::ScriptLoad`]; `NOPERM` on
/// `COMMAND INFO`: [`Error::NoPermission`]; unreachable: [`Error::Unreachable`], or with
/// `start_degraded` one line logged and a degraded start. Each error's text is the SPEC's
/// line, word for word.
pub async fn check_store<S: Store>(store: &S, start_degraded: bool) -> Result<Started, Error> {
    let addr = store.addr().to_owned();
    match store.choose_backend().await {
        Ok(chosen) => Ok(Started {
            degraded: false,
            log: None,
            backend: Some(chosen.backend),
            backend_log: Some(chosen.line),
        }),
        Err(e @ (Error::ModuleNotLoaded { .. } | Error::ScriptLoad { .. })) => Err(e),
        Err(Error::Server { source, .. })
            if source.to_string().to_ascii_uppercase().contains("NOPERM") =>
        {
            Err(Error::NoPermission { addr })
        }
        Err(e) => match Error::unreachable(&addr, &e) {
            Some(_) if start_degraded => {
                let line = format!(
                    "redis-tb: Redis at {addr} unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)"
                );
                tracing::warn!(target: "redis_tb", "{line}");
                Ok(Started {
                    degraded: true,
                    log: Some(line),
                    backend: None,
                    backend_log: None,
                })
            }
            Some(unreachable) => Err(unreachable),
            None => Err(e),
        },
    }
}
