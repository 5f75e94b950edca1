//! Named policies: a limit (fixed, or chosen per request for plan tiers), a key function
//! (whose bucket), a cost, and the routes it applies to (route template + method).

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use std::collections::HashMap;

use http::request::Parts;
use http::{HeaderName, Method};

use crate::client::WindowMode;
use crate::ip::ClientIp;

/// A boxed, sendable future (what async key functions return).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type SyncKeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type AsyncKeyFn = dyn Fn(&Parts) -> BoxFuture<Option<String>> + Send + Sync;
type LimitFn = dyn Fn(&Parts) -> Option<Limit> + Send + Sync;
type CostFn = dyn Fn(&Parts) -> f64 + Send + Sync;
type TierFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// A limit: a token bucket (`capacity` tokens refilled at `rate` per second), a window
/// (SPEC W1: `capacity` is its `n`, `rate` is `n / seconds`) or an in-flight limit (SPEC
/// N1: `capacity` is its `n`, `rate` 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limit {
    /// Bucket size: the burst (`q` in `RateLimit-Policy`); a window's or in-flight
    /// limit's `n`.
    pub capacity: f64,
    /// Tokens added per second (a window's `n / seconds`; 0 for an in-flight limit).
    pub rate: f64,
    /// Which kind of limit (SPEC W, N); [`LimitKind::Bucket`] for the constructors that
    /// name a rate.
    pub kind: LimitKind,
}

/// The kind of a [`Limit`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum LimitKind {
    /// A token bucket (TB.TAKE / TB.MTAKE).
    #[default]
    Bucket,
    /// At most `n` per window of `seconds` (SPEC W1, TB.WINDOW).
    Window {
        /// The window in seconds.
        seconds: f64,
        /// `Sliding` (the default) or `Fixed` (SPEC C8: `Log` is not offered).
        mode: WindowMode,
    },
    /// At most `n` in progress, each holding a lease of `lease` seconds (SPEC N1), for
    /// at most `max_duration` seconds after its grant (N7).
    InFlight {
        /// The lease in seconds (renewed every half, SPEC N5).
        lease: f64,
        /// The longest a request holds its slot, in seconds (SPEC N7; default 300).
        max_duration: f64,
    },
}

impl LimitKind {
    /// `bucket`, `window` or `in_flight`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LimitKind::Bucket => "bucket",
            LimitKind::Window { .. } => "window",
            LimitKind::InFlight { .. } => "in_flight",
        }
    }
}

impl Limit {
    /// `capacity` tokens refilled at `rate` per second.
    pub const fn new(capacity: f64, rate: f64) -> Limit {
        Limit {
            capacity,
            rate,
            kind: LimitKind::Bucket,
        }
    }

    /// At most `n` requests (costs) per window of `seconds` (SPEC W1), checked with
    /// TB.WINDOW on the server's clock; a window policy is the only policy of its limiter
    /// (SPEC C10, W3).
    pub fn window(n: f64, seconds: f64, mode: WindowMode) -> Limit {
        Limit {
            capacity: n,
            rate: n / seconds,
            kind: LimitKind::Window { seconds, mode },
        }
    }
    /// `n` per second, as a window (SPEC W1).
    pub fn window_per_second(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 1.0, mode)
    }
    /// `n` per minute, as a window (SPEC W1).
    pub fn window_per_minute(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 60.0, mode)
    }
    /// `n` per hour, as a window (SPEC W1).
    pub fn window_per_hour(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 3600.0, mode)
    }
    /// `n` per day, as a window (SPEC W1).
    pub fn window_per_day(n: f64, mode: WindowMode) -> Limit {
        Limit::window(n, 86400.0, mode)
    }

    /// At most `n` requests of the policy's key in progress at once, each holding a lease
    /// of `lease` seconds (SPEC N1; 30 is the usual choice), released when its response
    /// ends (N4) and renewed while it runs (N5), for at most [`DEFAULT_MAX_DURATION`]
    /// seconds (N7; [`Limit::max_duration`] sets another). Such a policy has no cost (C9).
    pub fn in_flight(n: f64, lease: f64) -> Limit {
        Limit {
            capacity: n,
            rate: 0.0,
            kind: LimitKind::InFlight {
                lease,
                max_duration: DEFAULT_MAX_DURATION,
            },
        }
    }

    /// An in-flight limit whose requests hold their slot for at most `seconds` after the
    /// grant (SPEC N7: then the lease is released, the request counted in
    /// `leases_timed_out` and its response ended, whatever its client does). Checked when
    /// the limiter is built (C9: finite, in `[0.001, 31536000]`). Other limits are
    /// returned unchanged.
    pub fn max_duration(mut self, seconds: f64) -> Limit {
        if let LimitKind::InFlight { max_duration, .. } = &mut self.kind {
            *max_duration = seconds;
        }
        self
    }

    /// The lease in whole milliseconds (SPEC C9: `ceil(lease x 1000)`), for an in-flight
    /// limit.
    pub fn lease_ms(&self) -> Option<u64> {
        match self.kind {
            LimitKind::InFlight { lease, .. } => Some(ceil_ms(lease)),
            _ => None,
        }
    }

    /// The maximum duration in whole milliseconds (SPEC C9, N7: `ceil(max_duration x
    /// 1000)`), for an in-flight limit.
    pub fn max_duration_ms(&self) -> Option<u64> {
        match self.kind {
            LimitKind::InFlight { max_duration, .. } => Some(ceil_ms(max_duration)),
            _ => None,
        }
    }
    /// `n` per second (burst `n`).
    pub fn per_second(n: f64) -> Limit {
        Limit::new(n, n)
    }
    /// `n` per minute (burst `n`).
    pub fn per_minute(n: f64) -> Limit {
        Limit::new(n, n / 60.0)
    }
    /// `n` per hour (burst `n`).
    pub fn per_hour(n: f64) -> Limit {
        Limit::new(n, n / 3600.0)
    }
    /// `n` per day (burst `n`).
    pub fn per_day(n: f64) -> Limit {
        Limit::new(n, n / 86400.0)
    }
}

/// How long an in-flight request may hold its slot by default, in seconds (SPEC N7).
pub const DEFAULT_MAX_DURATION: f64 = 300.0;

/// `ceil(seconds x 1000)` (SPEC C9, G1), with float noise below 1e-9 snapped.
pub(crate) fn ceil_ms(seconds: f64) -> u64 {
    let t = seconds * 1000.0;
    let r = t.round();
    let ms = if (t - r).abs() <= 1e-9 * t.abs().max(1.0) {
        r
    } else {
        t.ceil()
    };
    if ms.is_finite() && ms >= 0.0 {
        ms as u64
    } else {
        0
    }
}

/// Whose bucket a request draws from. A key function returning `None` skips the policy
/// for that request (for example a per-user policy on an anonymous request).
#[derive(Clone)]
pub struct Key(KeyKind);

#[derive(Clone)]
enum KeyKind {
    ClientIp,
    Header(HeaderName),
    Fixed(Arc<str>),
    Sync(Arc<SyncKeyFn>),
    Async(Arc<AsyncKeyFn>),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            KeyKind::ClientIp => f.write_str("Key::client_ip()"),
            KeyKind::Header(h) => write!(f, "Key::header({h})"),
            KeyKind::Fixed(s) => write!(f, "Key::fixed({s:?})"),
            KeyKind::Sync(_) => f.write_str("Key::from_fn(..)"),
            KeyKind::Async(_) => f.write_str("Key::from_async_fn(..)"),
        }
    }
}

impl Key {
    /// The client address (peer, or behind trusted proxies), IPv6 grouped by prefix. The
    /// default. `None` when the server does not provide `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    pub fn client_ip() -> Key {
        Key(KeyKind::ClientIp)
    }

    /// The value of a request header (an API key), SPEC I2: its lines joined with `, `,
    /// optional white space trimmed; absent or empty skips the policy; bytes >= 0x80 are
    /// kept (and escaped in the key, SPEC K2); a control byte is a 400.
    pub fn header(name: HeaderName) -> Key {
        Key(KeyKind::Header(name))
    }

    /// One bucket for everybody (a global limit). An empty value is a configuration error
    /// (SPEC I3), found when the limiter is built.
    pub fn fixed(identity: &str) -> Key {
        Key(KeyKind::Fixed(Arc::from(identity)))
    }

    /// A synchronous function of the request head (read extensions set by auth, headers...).
    pub fn from_fn<F>(f: F) -> Key
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Key(KeyKind::Sync(Arc::new(f)))
    }

    /// An async function of the request head: copy what it needs out of `&Parts`, then
    /// return a future (a user id from a session store, a tenant from a token).
    pub fn from_async_fn<F, Fut>(f: F) -> Key
    where
        F: Fn(&Parts) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<String>> + Send + 'static,
    {
        Key(KeyKind::Async(Arc::new(move |parts| Box::pin(f(parts)))))
    }

    /// The identity for this request (SPEC I1, I2), borrowed from the request (or the key)
    /// when it can be.
    pub async fn identity<'a>(&'a self, parts: &'a Parts) -> Identity<'a> {
        match &self.0 {
            KeyKind::Async(f) => owned_identity(f(parts).await),
            _ => self.identity_now(parts, None),
        }
    }

    /// The identity without an await: `resolved` is what an async key's function gave
    /// for this request (the limiter awaits those first, so that a request with no async
    /// key builds its plan without a future of its own).
    pub(crate) fn identity_now<'a>(
        &'a self,
        parts: &'a Parts,
        resolved: Option<Option<String>>,
    ) -> Identity<'a> {
        match &self.0 {
            KeyKind::ClientIp => match parts.extensions.get::<ClientIp>() {
                Some(c) => Identity::Value(Cow::Borrowed(c.identity.as_bytes())),
                None => Identity::Skip,
            },
            KeyKind::Header(name) => {
                header_identity(parts.headers.get_all(name).iter().map(|v| v.as_bytes()))
            }
            KeyKind::Fixed(s) => Identity::Value(Cow::Borrowed(s.as_bytes())),
            KeyKind::Sync(f) => owned_identity(f(parts)),
            KeyKind::Async(_) => owned_identity(resolved.flatten()),
        }
    }

    /// The async key function's answer for this request; `None` for any other key.
    pub(crate) async fn resolve_async(&self, parts: &Parts) -> Option<Option<String>> {
        match &self.0 {
            KeyKind::Async(f) => Some(f(parts).await),
            _ => None,
        }
    }

    /// A [`Key::fixed`]'s identity.
    pub(crate) fn fixed_identity(&self) -> Option<&[u8]> {
        match &self.0 {
            KeyKind::Fixed(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    pub(crate) fn is_async(&self) -> bool {
        matches!(self.0, KeyKind::Async(_))
    }

    /// The header a [`Key::header`] reads.
    pub(crate) fn header_name(&self) -> Option<&HeaderName> {
        match &self.0 {
            KeyKind::Header(name) => Some(name),
            _ => None,
        }
    }

    /// `Key::fixed("")` (SPEC I3).
    pub(crate) fn is_empty_fixed(&self) -> bool {
        matches!(&self.0, KeyKind::Fixed(s) if s.is_empty())
    }

    pub(crate) fn uses_client_ip(&self) -> bool {
        matches!(self.0, KeyKind::ClientIp)
    }
}

/// A key function's answer: absent or empty skips the policy (SPEC I1).
fn owned_identity<'a>(s: Option<String>) -> Identity<'a> {
    match s {
        Some(s) if !s.is_empty() => Identity::Value(Cow::Owned(s.into_bytes())),
        _ => Identity::Skip,
    }
}

/// What a key gives for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity<'a> {
    /// No identity: the policy is skipped for this request (SPEC I1).
    Skip,
    /// The identity's bytes (escaped and bounded by the key builder, SPEC K2, K3).
    Value(Cow<'a, [u8]>),
    /// A header identity with a control byte: a bad request (SPEC I2).
    BadRequest,
}

/// A control byte of SPEC I2: 0x00-0x08, 0x0A-0x1F, 0x7F (a tab is kept).
fn control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The identity of a header's lines, in the order received (SPEC I2): joined with `, `,
/// optional white space trimmed at both ends; none or empty skips; a control byte in any
/// line is [`Identity::BadRequest`].
pub fn header_identity<'a, I>(lines: I) -> Identity<'a>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut lines = lines.into_iter();
    let Some(first) = lines.next() else {
        return Identity::Skip;
    };
    if first.iter().any(|&b| control(b)) {
        return Identity::BadRequest;
    }
    let mut joined: Option<Vec<u8>> = None;
    for line in lines {
        if line.iter().any(|&b| control(b)) {
            return Identity::BadRequest;
        }
        let buf = joined.get_or_insert_with(|| first.to_vec());
        buf.extend_from_slice(b", ");
        buf.extend_from_slice(line);
    }
    let value = match joined {
        None => Cow::Borrowed(trim_ows(first)),
        Some(buf) => Cow::Owned(trim_ows(&buf).to_vec()),
    };
    if value.is_empty() {
        Identity::Skip
    } else {
        Identity::Value(value)
    }
}

#[derive(Clone)]
enum Limits {
    Fixed(Limit),
    PerRequest(Arc<LimitFn>),
    Tiered {
        tiers: Arc<HashMap<String, Limit>>,
        default: Limit,
        tier: Arc<TierFn>,
    },
}

#[derive(Clone)]
enum Cost {
    Fixed(f64),
    PerRequest(Arc<CostFn>),
}

/// A route a policy is scoped to: a method (or any) and an axum route template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `None` for any method.
    pub method: Option<Method>,
    /// The template as registered with axum (`/items/{id}`), never the raw path.
    pub template: String,
}

/// A named rate limit. Several policies on one route are checked together, all or nothing,
/// in one TB.MTAKE.
#[derive(Clone)]
pub struct Policy {
    pub(crate) name: Arc<str>,
    limits: Limits,
    pub(crate) key: Key,
    cost: Cost,
    pub(crate) routes: Vec<Route>,
    pub(crate) per_route: bool,
    pub(crate) shadow: bool,
    pub(crate) settle_later: bool,
    /// A cost was set (`cost` or `cost_fn`): an error on an in-flight policy (SPEC C9).
    pub(crate) cost_set: bool,
    /// The kind of the limit given at construction (a `limit_fn` keeps it, SPEC C10).
    pub(crate) kind: LimitKind,
}

impl fmt::Debug for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Policy");
        d.field("name", &self.name);
        match &self.limits {
            Limits::Fixed(l) => d.field("limit", l),
            Limits::PerRequest(_) => d.field("limit", &"per request"),
            Limits::Tiered { tiers, default, .. } => {
                d.field("tiers", tiers).field("default", default)
            }
        };
        d.field("key", &self.key);
        match &self.cost {
            Cost::Fixed(c) => d.field("cost", c),
            Cost::PerRequest(_) => d.field("cost", &"per request"),
        };
        d.field("routes", &self.routes)
            .field("per_route", &self.per_route)
            .field("shadow", &self.shadow)
            .finish()
    }
}

impl Policy {
    /// A policy named `name` (a token: `[a-z0-9_-]+`) with a fixed limit, keyed by client
    /// IP, costing 1, on every route.
    pub fn new(name: &str, limit: Limit) -> Policy {
        Policy {
            name: Arc::from(name),
            limits: Limits::Fixed(limit),
            key: Key::client_ip(),
            cost: Cost::Fixed(1.0),
            routes: Vec::new(),
            per_route: false,
            shadow: false,
            settle_later: false,
            cost_set: false,
            kind: limit.kind,
        }
    }

    /// Plan tiers (SPEC L2): the limit of the tier `tier` names for the request; a tier
    /// not listed, or no tier, takes `default`. Every limit is checked when the limiter is
    /// built (SPEC C2).
    pub fn tiered<I, S, F>(name: &str, tiers: I, default: Limit, tier: F) -> Policy
    where
        I: IntoIterator<Item = (S, Limit)>,
        S: Into<String>,
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        let mut p = Policy::new(name, default);
        p.limits = Limits::Tiered {
            tiers: Arc::new(tiers.into_iter().map(|(k, l)| (k.into(), l)).collect()),
            default,
            tier: Arc::new(tier),
        };
        p
    }

    /// `n` requests per second.
    pub fn per_second(name: &str, n: f64) -> Policy {
        Policy::new(name, Limit::per_second(n))
    }

    /// `n` requests per minute.
    pub fn per_minute(name: &str, n: f64) -> Policy {
        Policy::new(name, Limit::per_minute(n))
    }

    /// `n` requests per hour.
    pub fn per_hour(name: &str, n: f64) -> Policy {
        Policy::new(name, Limit::per_hour(n))
    }

    /// `n` requests per day.
    pub fn per_day(name: &str, n: f64) -> Policy {
        Policy::new(name, Limit::per_day(n))
    }

    /// Whose bucket (default [`Key::client_ip`]).
    pub fn key(mut self, key: Key) -> Policy {
        self.key = key;
        self
    }

    /// A fixed cost per request (default 1; 0 only reports).
    pub fn cost(mut self, cost: f64) -> Policy {
        self.cost = Cost::Fixed(cost);
        self.cost_set = true;
        self
    }

    /// A cost computed from the request (a bulk endpoint charging per item).
    pub fn cost_fn<F>(mut self, f: F) -> Policy
    where
        F: Fn(&Parts) -> f64 + Send + Sync + 'static,
    {
        self.cost = Cost::PerRequest(Arc::new(f));
        self.cost_set = true;
        self
    }

    /// The limit chosen per request (plan tiers from an extension set by auth); `None`
    /// skips the policy for that request. The policy's fixed limit is then unused.
    pub fn limit_fn<F>(mut self, f: F) -> Policy
    where
        F: Fn(&Parts) -> Option<Limit> + Send + Sync + 'static,
    {
        self.limits = Limits::PerRequest(Arc::new(f));
        self
    }

    /// Applies the policy only to `method` on the route `template` (as registered with
    /// axum: `/items/{id}`). Call again to add routes. Without any, it applies everywhere.
    pub fn route(mut self, method: Method, template: &str) -> Policy {
        self.routes.push(Route {
            method: Some(method),
            template: template.to_owned(),
        });
        self
    }

    /// Applies the policy to every method of the route `template`.
    pub fn route_any_method(mut self, template: &str) -> Policy {
        self.routes.push(Route {
            method: None,
            template: template.to_owned(),
        });
        self
    }

    /// One bucket per route rather than one for all: the identity becomes
    /// `<METHOD> <template>:<identity>` (`GET /items/<id>:203.0.113.9`; braces become `<>`
    /// so that a template never makes a Redis Cluster hash tag).
    pub fn per_route(mut self) -> Policy {
        self.per_route = true;
        self
    }

    /// Shadow mode (default off): the policy is checked and charged exactly as when
    /// enforced (the same single TB.MTAKE, all or nothing), but when it refuses, the request
    /// goes on: the refusal is counted (`redis_tb_shadow_limited_total`), logged at most
    /// once per second, and listed in [`crate::Decision::shadow_limited`]. Shadow policies
    /// have no `RateLimit-Policy` / `RateLimit` / `X-RateLimit-*` items. Switching a policy
    /// between shadow and enforced is this flag alone: same keys, same buckets.
    pub fn shadow(mut self, on: bool) -> Policy {
        self.shadow = on;
        self
    }

    /// A policy charged later by its handler (SPEC G1): not in the check's call; its key
    /// and limit (a bucket limit, C10) are resolved at check time and kept on the decision
    /// for [`crate::Decision::hold`].
    pub fn settle_later(mut self, on: bool) -> Policy {
        self.settle_later = on;
        self
    }

    /// Whether the policy is settled later (SPEC G1).
    pub fn is_settle_later(&self) -> bool {
        self.settle_later
    }

    /// The kind of the policy's limit (SPEC C10).
    pub fn kind(&self) -> LimitKind {
        self.kind
    }

    /// Whether the policy is in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn fixed_limit(&self) -> Option<Limit> {
        match &self.limits {
            Limits::Fixed(l) => Some(*l),
            Limits::PerRequest(_) | Limits::Tiered { .. } => None,
        }
    }

    /// Every limit known when the limiter is built (the fixed one, or the tiers').
    pub(crate) fn static_limits(&self) -> Vec<Limit> {
        match &self.limits {
            Limits::Fixed(l) => vec![*l],
            Limits::PerRequest(_) => Vec::new(),
            Limits::Tiered { tiers, default, .. } => {
                tiers.values().copied().chain([*default]).collect()
            }
        }
    }

    pub(crate) fn fixed_cost(&self) -> Option<f64> {
        match &self.cost {
            Cost::Fixed(c) => Some(*c),
            Cost::PerRequest(_) => None,
        }
    }

    pub(crate) fn limit_for(&self, parts: &Parts) -> Option<Limit> {
        match &self.limits {
            Limits::Fixed(l) => Some(*l),
            Limits::PerRequest(f) => f(parts),
            Limits::Tiered {
                tiers,
                default,
                tier,
            } => Some(
                tier(parts)
                    .and_then(|t| tiers.get(&t).copied())
                    .unwrap_or(*default),
            ),
        }
    }

    pub(crate) fn cost_for(&self, parts: &Parts) -> f64 {
        match &self.cost {
            Cost::Fixed(c) => *c,
            Cost::PerRequest(f) => f(parts),
        }
    }

    /// Whether the policy applies to a request with this method and matched route.
    /// Unmatched requests (`route == None`) get only unscoped policies, and only when the
    /// layer limits unmatched requests.
    pub(crate) fn applies(&self, method: &Method, route: Option<&str>) -> bool {
        if self.routes.is_empty() {
            return true;
        }
        let Some(route) = route else {
            return false;
        };
        self.routes
            .iter()
            .any(|r| r.template == route && r.method.as_ref().is_none_or(|m| m == method))
    }
}

/// Whether `name` is a policy name (SPEC C1): `[a-z0-9_-]{1,64}`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Request;

    fn parts(method: Method, uri: &str) -> Parts {
        Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn convenience_limits_divide_by_the_period() {
        assert_eq!(Limit::per_hour(1000.0), Limit::new(1000.0, 1000.0 / 3600.0));
        assert_eq!(Limit::per_minute(60.0).rate, 1.0);
        assert_eq!(Limit::per_second(10.0), Limit::new(10.0, 10.0));
    }

    #[test]
    fn route_scope_is_template_and_method() {
        let p = Policy::per_minute("orders", 5.0).route(Method::POST, "/orders/{id}");
        assert!(p.applies(&Method::POST, Some("/orders/{id}")));
        assert!(!p.applies(&Method::GET, Some("/orders/{id}")));
        assert!(!p.applies(&Method::POST, Some("/orders")));
        assert!(!p.applies(&Method::POST, None));
        let any = Policy::per_minute("items", 5.0).route_any_method("/items");
        assert!(any.applies(&Method::DELETE, Some("/items")));
        let everywhere = Policy::per_second("ip", 5.0);
        assert!(everywhere.applies(&Method::GET, None));
    }

    #[test]
    fn policy_names_are_tokens() {
        assert!(valid_name("per-hour_1"));
        for bad in ["", "PerHour", "per hour", "per:hour", "per{hour}", "é"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    fn v(s: &str) -> Identity<'static> {
        Identity::Value(Cow::Owned(s.as_bytes().to_vec()))
    }

    #[tokio::test]
    async fn key_functions_read_the_request_head() {
        let mut p = parts(Method::GET, "/x");
        p.headers.insert("x-api-key", "k1".parse().unwrap());
        let header = |n| Key::header(HeaderName::from_static(n));
        assert_eq!(header("x-api-key").identity(&p).await, v("k1"));
        assert_eq!(header("x-other").identity(&p).await, Identity::Skip);
        assert_eq!(Key::fixed("all").identity(&p).await, v("all"));
        let k = Key::from_async_fn(|parts: &Parts| {
            let user = parts.headers.get("x-api-key").cloned();
            async move { user.map(|u| format!("user-{}", u.to_str().unwrap_or("?"))) }
        });
        assert_eq!(k.identity(&p).await, v("user-k1"));
        assert_eq!(
            Key::from_fn(|_| Some(String::new())).identity(&p).await,
            Identity::Skip
        );
        // No ClientIp in the extensions (no peer address): no identity.
        assert_eq!(Key::client_ip().identity(&p).await, Identity::Skip);
    }

    #[test]
    fn tiers_pick_a_limit_and_unknown_tiers_the_default() {
        let p = Policy::tiered(
            "plan",
            [("pro", Limit::per_hour(1000.0))],
            Limit::per_hour(10.0),
            |parts| {
                parts
                    .headers
                    .get("x-plan")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            },
        );
        let mut req = parts(Method::GET, "/");
        assert_eq!(p.limit_for(&req), Some(Limit::per_hour(10.0)));
        req.headers.insert("x-plan", "pro".parse().unwrap());
        assert_eq!(p.limit_for(&req), Some(Limit::per_hour(1000.0)));
        req.headers.insert("x-plan", "gold".parse().unwrap());
        assert_eq!(p.limit_for(&req), Some(Limit::per_hour(10.0)));
    }

    #[test]
    fn per_request_limits_and_costs() {
        let p = Policy::per_hour("user", 100.0)
            .limit_fn(
                |parts| match parts.headers.get("x-plan").map(|v| v.as_bytes()) {
                    Some(b"pro") => Some(Limit::per_hour(1000.0)),
                    Some(_) => Some(Limit::per_hour(100.0)),
                    None => None,
                },
            )
            .cost_fn(|parts| {
                if parts.uri.path() == "/bulk" {
                    10.0
                } else {
                    1.0
                }
            });
        let mut req = parts(Method::GET, "/bulk");
        assert_eq!(p.limit_for(&req), None);
        req.headers.insert("x-plan", "pro".parse().unwrap());
        assert_eq!(p.limit_for(&req), Some(Limit::per_hour(1000.0)));
        assert_eq!(p.cost_for(&req), 10.0);
    }
}
