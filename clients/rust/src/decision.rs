//! The outcome of one request's check, as handlers see it in the request extensions:
//! allowed, limited (a normal outcome), or decided without Redis (a store error).

use std::sync::Arc;

use crate::client::MultiReply;

/// How a request's rate-limit check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// Every policy had the tokens; they were taken.
    Allowed,
    /// At least one policy refused; nothing was taken from any bucket.
    Limited,
    /// Redis could not be asked (down, timed out, in cooldown, or an error reply): the
    /// layer's failure mode decided. Never confused with [`Status::Limited`].
    StoreError,
    /// No policy applied to this request (no route match, or every key function gave
    /// `None`): nothing was checked.
    NotLimited,
}

/// One policy's part of a decision.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyResult {
    /// The policy's name (its header item and key segment).
    pub name: Arc<str>,
    /// The bucket's key.
    pub key: String,
    /// Capacity used for this request.
    pub capacity: f64,
    /// Rate used for this request (tokens per second).
    pub rate: f64,
    /// Tokens this request costs under the policy.
    pub cost: f64,
    /// Whether this bucket alone had the tokens.
    pub allowed: bool,
    /// Tokens left (after the deduction when the request was allowed).
    pub remaining: f64,
    /// Seconds until this bucket admits the request: 0 when it can now, -1 when never.
    pub retry_after: f64,
    /// Seconds until this bucket is full.
    pub reset_after: f64,
    /// A shadow policy: charged like the others, but its refusal only counts and logs
    /// (the request goes on) and it has no rate-limit header items.
    pub shadow: bool,
}

/// The rate-limit decision for one request; in the request extensions for handlers.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// How the check ended.
    pub status: Status,
    /// Whether the request goes through (also true for a store error in fail-open mode).
    pub allowed: bool,
    /// The smallest remaining over the policies (`f64::INFINITY` with no policy result).
    pub remaining: f64,
    /// 0 when allowed; -1 if a violated policy can never admit the request; else the
    /// longest wait of the violated policies.
    pub retry_after: f64,
    /// The largest reset_after over the policies.
    pub reset_after: f64,
    /// One result per applied policy, in configuration order (empty for a store error or
    /// when no policy applied). For a refusal from the local deny cache, only the cached
    /// violated policies (the others' state was not read).
    pub policies: Vec<PolicyResult>,
    /// Shadow policies that refused this request (it went on anyway, or was refused by an
    /// enforced policy). When the request was allowed with a non-empty list, nothing was
    /// charged on any policy: TB.MTAKE is all or nothing, as if they were enforced.
    pub shadow_limited: Vec<Arc<str>>,
    /// The refusal came from the layer's local deny cache, without a Redis call.
    pub from_cache: bool,
}

impl Decision {
    /// Builds a decision from TB.MTAKE's reply and the policies' shapes, in the same order,
    /// every policy enforced. `shapes` are `(name, key, capacity, rate, cost)`.
    pub fn from_reply(
        reply: &MultiReply,
        shapes: Vec<(Arc<str>, String, f64, f64, f64)>,
    ) -> Decision {
        let policies = shapes
            .into_iter()
            .zip(reply.buckets.iter())
            .map(|((name, key, capacity, rate, cost), b)| PolicyResult {
                name,
                key,
                capacity,
                rate,
                cost,
                allowed: b.allowed,
                remaining: b.remaining,
                retry_after: b.retry_after,
                reset_after: b.reset_after,
                shadow: false,
            })
            .collect();
        Decision::from_results(policies)
    }

    /// Builds a decision from per-policy results (TB.MTAKE's per-bucket replies with the
    /// policies' shapes and shadow flags):
    /// - an ENFORCED policy refused: [`Status::Limited`]; `retry_after` is the longest wait
    ///   of the enforced violated policies (-1 if one can never admit);
    /// - else [`Status::Allowed`] (also when only shadow policies refused: their names are
    ///   in `shadow_limited` and nothing was charged).
    ///
    /// `remaining` and `reset_after` are taken over the enforced policies only.
    pub fn from_results(policies: Vec<PolicyResult>) -> Decision {
        let mut limited = false;
        let mut never = false;
        let mut wait: f64 = 0.0;
        let mut remaining = f64::INFINITY;
        let mut reset_after: f64 = 0.0;
        let mut shadow_limited = Vec::new();
        for p in &policies {
            if p.shadow {
                if !p.allowed {
                    shadow_limited.push(p.name.clone());
                }
                continue;
            }
            remaining = remaining.min(p.remaining);
            reset_after = reset_after.max(p.reset_after);
            if !p.allowed {
                limited = true;
                if p.retry_after < 0.0 {
                    never = true;
                } else {
                    wait = wait.max(p.retry_after);
                }
            }
        }
        Decision {
            status: if limited {
                Status::Limited
            } else {
                Status::Allowed
            },
            allowed: !limited,
            remaining,
            retry_after: if !limited {
                0.0
            } else if never {
                -1.0
            } else {
                wait
            },
            reset_after,
            policies,
            shadow_limited,
            from_cache: false,
        }
    }

    /// A decision made without Redis; `fail_open` says whether the request goes through.
    pub fn store_error(fail_open: bool) -> Decision {
        Decision {
            status: Status::StoreError,
            allowed: fail_open,
            remaining: f64::INFINITY,
            retry_after: 0.0,
            reset_after: 0.0,
            policies: Vec::new(),
            shadow_limited: Vec::new(),
            from_cache: false,
        }
    }

    /// Nothing was checked: no policy applied to the request.
    pub fn not_limited() -> Decision {
        Decision {
            status: Status::NotLimited,
            allowed: true,
            remaining: f64::INFINITY,
            retry_after: 0.0,
            reset_after: 0.0,
            policies: Vec::new(),
            shadow_limited: Vec::new(),
            from_cache: false,
        }
    }

    /// The enforced policies that refused the request (empty unless [`Status::Limited`]).
    pub fn violated(&self) -> impl Iterator<Item = &PolicyResult> {
        let limited = self.status == Status::Limited;
        self.policies
            .iter()
            .filter(move |p| limited && !p.allowed && !p.shadow)
    }

    /// Whether the request's tokens were taken: allowed by every policy, shadow ones
    /// included. A request that only shadow policies refused goes on, but uncharged (so
    /// a refund of it does nothing).
    pub fn charged(&self) -> bool {
        self.status == Status::Allowed
            && !self.policies.is_empty()
            && self.policies.iter().all(|p| p.allowed)
    }

    /// Names of the policies that refused the request.
    pub fn violated_names(&self) -> Vec<String> {
        self.violated().map(|p| p.name.to_string()).collect()
    }

    /// Refused, and no wait will help: a violated policy's cost exceeds its capacity.
    pub fn never(&self) -> bool {
        self.status == Status::Limited && self.retry_after < 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(name: &str, allowed: bool, retry: f64, shadow: bool) -> PolicyResult {
        PolicyResult {
            name: Arc::from(name),
            key: format!("rl:{name}:x"),
            capacity: 10.0,
            rate: 1.0,
            cost: 1.0,
            allowed,
            remaining: if allowed { 5.0 } else { 0.0 },
            retry_after: retry,
            reset_after: 3.0,
            shadow,
        }
    }

    #[test]
    fn a_shadow_refusal_lets_the_request_go_on_uncharged() {
        let d = Decision::from_results(vec![
            result("ip", true, 0.0, false),
            result("user", false, 7.0, true),
        ]);
        assert_eq!(d.status, Status::Allowed);
        assert!(d.allowed);
        assert!(!d.charged(), "TB.MTAKE took nothing");
        assert_eq!(d.shadow_limited, vec![Arc::<str>::from("user")]);
        assert_eq!(d.retry_after, 0.0);
        assert_eq!(d.remaining, 5.0, "over the enforced policies only");
        assert_eq!(d.violated().count(), 0);
    }

    #[test]
    fn an_enforced_refusal_is_a_429_naming_only_enforced_policies() {
        let d = Decision::from_results(vec![
            result("ip", false, 2.0, false),
            result("user", false, 70.0, true),
        ]);
        assert_eq!(d.status, Status::Limited);
        assert_eq!(d.violated_names(), vec!["ip"]);
        assert_eq!(
            d.retry_after, 2.0,
            "the shadow policy's wait is not the client's"
        );
        assert_eq!(d.shadow_limited, vec![Arc::<str>::from("user")]);
        let never = Decision::from_results(vec![
            result("ip", false, -1.0, false),
            result("b", false, 3.0, false),
        ]);
        assert!(never.never());
    }

    #[test]
    fn everything_allowed_is_charged() {
        let d = Decision::from_results(vec![
            result("ip", true, 0.0, false),
            result("user", true, 0.0, true),
        ]);
        assert!(d.charged());
        assert!(d.shadow_limited.is_empty());
        assert!(!Decision::not_limited().charged());
        assert!(!Decision::store_error(true).charged());
    }
}
