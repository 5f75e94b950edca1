//! Named policies: a limit (fixed, or chosen per request for plan tiers), a key function
//! (whose bucket), a cost, and the routes it applies to (route template + method). The
//! limits and their bounds are in `limit`, the keys and identities in `identity`; both are
//! re-exported here.

use std::fmt;
use std::sync::Arc;

use std::collections::HashMap;

use http::Method;
use http::request::Parts;

mod identity;
pub(crate) mod limit;

pub use identity::{BoxFuture, Identity, Key, header_identity};
pub use limit::{DEFAULT_MAX_DURATION, Limit, LimitKind};
pub(crate) use limit::{ceil_ms, check_limit};

type LimitFn = dyn Fn(&Parts) -> Option<Limit> + Send + Sync;
type CostFn = dyn Fn(&Parts) -> f64 + Send + Sync;
type TierFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

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
    use http::{HeaderName, Request};
    use std::borrow::Cow;

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
