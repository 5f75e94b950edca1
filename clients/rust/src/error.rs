//! Every error this crate returns, as types: what went wrong talking to Redis ([`Error`]) and
//! what is wrong with a layer's configuration ([`BuildError`]).
//!
//! Being rate limited is not an error: it is a [`crate::Decision`] whose status is
//! [`crate::Status::Limited`].

use std::time::Duration;

/// A failed call to Redis (or one that was never sent because its arguments are invalid).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis cannot be reached at startup (SPEC U2).
    #[error(
        "redis-tb: cannot reach Redis at {addr} ({reason}): start it, or set start_degraded to start failing open"
    )]
    Unreachable {
        /// `host:port` of the server.
        addr: String,
        /// Why (refused, no answer within the startup timeout, ...).
        reason: String,
    },
    /// The user may not run `COMMAND INFO` (SPEC U1).
    #[error(
        "redis-tb: user cannot run COMMAND INFO on {addr}: grant +command|info (see docs/operations.md)"
    )]
    NoPermission {
        /// `host:port` of the server.
        addr: String,
    },
    /// `COMMAND INFO tb.take` answered with no entry: the server runs without the module.
    #[error("redis-tb module not loaded on {addr}: load libredis_tb.so with loadmodule")]
    ModuleNotLoaded {
        /// `host:port` of the server.
        addr: String,
    },
    /// SPEC E2: neither `FUNCTION LOAD REPLACE` nor `SCRIPT LOAD` took the script library
    /// (or `SCRIPT LOAD` answered another SHA-1 than tb.lua's).
    #[error(
        "redis-tb: cannot load the script backend on {addr} ({reason}): allow FUNCTION LOAD or SCRIPT LOAD, or load the module"
    )]
    ScriptLoad {
        /// `host:port` of the server.
        addr: String,
        /// The last load's error reply.
        reason: String,
    },
    /// SPEC E4: the operating system's random source gave no bytes for a lease or hold id;
    /// nothing was sent.
    #[error("redis-tb: no random id for a lease or hold ({reason})")]
    NoRandomness {
        /// The random source's error.
        reason: String,
    },
    /// SPEC U3, K6: on a Redis Cluster, a limiter that sends several keys in one call has
    /// no tag function, so its calls would be refused (`CROSSSLOT`).
    #[error(
        "redis-tb: limiter '{limiter}' sends several keys in one call (policies {}), which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)",
        quoted(.policies)
    )]
    ClusterNeedsTag {
        /// The limiter's name (its metrics label).
        limiter: String,
        /// Its policies that are in the call (not `settle_later`), in policy order.
        policies: Vec<String>,
    },
    /// The URL given to [`crate::TbClient::connect`] cannot be used.
    #[error("invalid redis URL {url:?}: {source}")]
    InvalidUrl {
        /// The URL.
        url: String,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// A hold or settlement not sent because the breaker is open after a failure (SPEC B2,
    /// G1, G3): the store is skipped until the cool-down ends.
    #[error("redis-tb: the store at {addr} is skipped during the breaker's cool-down")]
    StoreUnavailable {
        /// `host:port` of the server.
        addr: String,
    },
    /// No reply within the configured time (the call or the connect).
    #[error("redis call to {addr} timed out after {timeout:?}")]
    Timeout {
        /// `host:port` of the server.
        addr: String,
        /// The limit that ran out.
        timeout: Duration,
    },
    /// The connection could not be made or broke (refused, reset, closed).
    #[error("redis connection to {addr} failed: {source}")]
    Connection {
        /// `host:port` of the server.
        addr: String,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// Redis answered with an error reply (`ERR ...`, `WRONGTYPE`, `NOPERM`, `CROSSSLOT`, ...).
    #[error("redis on {addr} answered with an error: {source}")]
    Server {
        /// `host:port` of the server.
        addr: String,
        /// The error reply.
        #[source]
        source: redis::RedisError,
    },
    /// A reply that does not have the shape the module sends.
    #[error("unexpected reply from {addr} to {command}: {detail}")]
    UnexpectedReply {
        /// `host:port` of the server.
        addr: String,
        /// The command that got it.
        command: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// An argument outside the module's ranges; nothing was sent.
    #[error("invalid {name} {value}: must be {rule}")]
    InvalidArgument {
        /// `capacity`, `rate`, `n` or `max_wait`.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The accepted range.
        rule: &'static str,
    },
    /// [`crate::Decision::hold`] named a policy that is not a `settle_later` policy of the
    /// check (or was skipped for the request, SPEC G1).
    #[error("policy {policy:?} is not a settle_later policy of this check")]
    NotSettleLater {
        /// The name given.
        policy: String,
    },
    /// A multi-key call with no key.
    #[error("{command} needs at least one bucket")]
    NoBuckets {
        /// The command.
        command: &'static str,
    },
}

/// `'a', 'b'`: names as the SPEC's lines write them.
pub(crate) fn quoted(names: &[impl AsRef<str>]) -> String {
    names
        .iter()
        .map(|n| format!("'{}'", n.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Error {
    /// Whether Redis answered `CROSSSLOT` (SPEC K6, L5): the keys of one call are in
    /// different cluster slots, a configuration error rather than a store error.
    pub fn is_cross_slot(&self) -> bool {
        matches!(self, Error::Server { source, .. } if source.code() == Some("CROSSSLOT"))
    }

    /// SPEC U2: a connection that could not be made, or no answer in time, is "unreachable";
    /// an error reply is the server's answer.
    pub(crate) fn unreachable(addr: &str, e: &Error) -> Option<Error> {
        let reason = match e {
            Error::Connection { source, .. } if source.is_io_error() => source.to_string(),
            Error::Timeout { timeout, .. } => {
                format!("no answer within {} ms", timeout.as_millis())
            }
            Error::Unreachable { reason, .. } => reason.clone(),
            _ => return None,
        };
        Some(Error::Unreachable {
            addr: addr.to_owned(),
            reason,
        })
    }

    /// Whether the connection should be replaced before the next call.
    pub(crate) fn breaks_connection(&self) -> bool {
        // A timeout too: a silently dead peer would otherwise hold every later call until
        // TCP gives up. Calls in flight keep their clone of the old connection.
        matches!(
            self,
            Error::Connection { .. } | Error::Timeout { .. } | Error::Unreachable { .. }
        )
    }
}

/// A layer configuration that cannot work, found by [`crate::RateLimitBuilder::build`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Policy names are `[a-z0-9_-]{1,64}` (SPEC C1: they appear in keys and headers).
    #[error("policy name {0:?} must match [a-z0-9_-]{{1,64}}")]
    InvalidPolicyName(String),
    /// Two policies with the same name would share buckets and header items.
    #[error("two policies are named {0:?}")]
    DuplicatePolicy(String),
    /// A fixed capacity, rate or cost outside the module's ranges.
    #[error("policy {policy:?}: {detail}")]
    InvalidLimit {
        /// The policy.
        policy: String,
        /// What is wrong.
        detail: String,
    },
    /// A trusted-proxy entry that is not a CIDR (`10.0.0.0/8`) or an address.
    #[error("trusted proxy {0:?} is not an address or CIDR")]
    InvalidProxy(String),
    /// A prefix longer than the address (IPv4 > 32, IPv6 > 128).
    #[error("prefix length /{0} is too long for the address family")]
    InvalidPrefix(u8),
    /// The key prefix must match `[A-Za-z0-9_.:-]{1,64}` (SPEC C4).
    #[error(
        "key prefix {0:?} must match [A-Za-z0-9_.:-]{{1,64}} (no braces, spaces or control bytes)"
    )]
    InvalidPrefixText(String),
    /// The forwarding header is `x-forwarded-for` or `forwarded` (SPEC C6).
    #[error("forwarded header {0:?} must be x-forwarded-for or forwarded")]
    InvalidForwardedHeader(String),
    /// `Key::fixed("")` (SPEC I3).
    #[error("policy {0:?}: a fixed key must not be empty")]
    EmptyFixedKey(String),
    /// A deny cache of 0 entries, or a zero timeout (SPEC C7).
    #[error("{0}")]
    InvalidSetting(String),
    /// The limiter name (the `limiter` metrics label) must not be empty.
    #[error("limiter name {0:?} must not be empty")]
    InvalidLimiterName(String),
    /// More than 64 policies in one limiter (SPEC C11): the module takes at most 64
    /// buckets in one call.
    #[error("a limiter holds at most 64 policies (SPEC C11); this one has {0}")]
    TooManyPolicies(usize),
    /// No policy: the layer would do nothing.
    #[error("a rate-limit layer needs at least one policy")]
    NoPolicies,
}
