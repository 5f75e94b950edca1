//! Startup (SPEC U1-U4): what an application finds out before its first request, each
//! failure one line naming the address and what to do.
//!
//! - [`check_store`] (what [`crate::TbClient::start`] runs): `COMMAND INFO tb.take`. A
//!   server without the module fails the start (U1), so does a user without the right to
//!   run `COMMAND INFO`; an unreachable Redis fails it too (U2) unless the start is
//!   degraded ([`crate::TbClient::start_degraded`]), which logs one line instead.
//! - [`crate::RateLimiter::startup`] (U3, K6): a limiter that can send several keys in one
//!   call and has no tag function sends `HELLO`, and a Redis Cluster fails its start.
//!
//! An example application prints the line and exits with status 3 (U4).

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
}

/// SPEC U2: a connection that could not be made, or no answer in time, is "unreachable";
/// an error reply is the server's answer.
fn unreachable(addr: &str, e: &Error) -> Option<Error> {
    let reason = match e {
        Error::Connection { source, .. } if source.is_io_error() => source.to_string(),
        Error::Timeout { timeout, .. } => format!("no answer within {} ms", timeout.as_millis()),
        Error::Unreachable { reason, .. } => reason.clone(),
        _ => return None,
    };
    Some(Error::Unreachable {
        addr: addr.to_owned(),
        reason,
    })
}

/// SPEC U1, U2: `COMMAND INFO tb.take` through `store`. Without the module:
/// [`Error::ModuleNotLoaded`]; `NOPERM`: [`Error::NoPermission`]; unreachable:
/// [`Error::Unreachable`], or with `start_degraded` one line logged and a degraded start.
/// Each error's text is the SPEC's line, word for word.
pub async fn check_store<S: Store>(store: &S, start_degraded: bool) -> Result<Started, Error> {
    let addr = store.addr().to_owned();
    match store.command_info().await {
        Ok(true) => Ok(Started {
            degraded: false,
            log: None,
        }),
        Ok(false) => Err(Error::ModuleNotLoaded { addr }),
        Err(Error::Server { source, .. })
            if source.to_string().to_ascii_uppercase().contains("NOPERM") =>
        {
            Err(Error::NoPermission { addr })
        }
        Err(e) => match unreachable(&addr, &e) {
            Some(_) if start_degraded => {
                let line = format!(
                    "redis-tb: Redis at {addr} unreachable at startup; starting degraded (the limiter's failure mode applies until it answers)"
                );
                tracing::warn!(target: "redis_tb", "{line}");
                Ok(Started {
                    degraded: true,
                    log: Some(line),
                })
            }
            Some(unreachable) => Err(unreachable),
            None => Err(e),
        },
    }
}

/// SPEC U3: `HELLO` (no argument: the connection's protocol is not switched) for a
/// limiter whose calls carry several keys and that has no tag function; a `mode` of
/// `cluster` fails the start naming the limiter and `policies`. Any other reply, an error
/// reply included, passes; an unreachable store fails the start unless it was started
/// degraded (its calls then take the failure mode, and a `CROSSSLOT` later is K6's 500).
pub(crate) async fn check_cluster<S: Store>(
    store: &S,
    limiter: &str,
    policies: Vec<String>,
) -> Result<(), Error> {
    match store.hello().await {
        Ok(Some(mode)) if mode == "cluster" => Err(Error::ClusterNeedsTag {
            limiter: limiter.to_owned(),
            policies,
        }),
        Ok(_) => Ok(()),
        Err(e) => match unreachable(store.addr(), &e) {
            Some(_) if store.started_degraded() => Ok(()),
            Some(unreachable) => Err(unreachable),
            None => Ok(()),
        },
    }
}
