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
    /// when no policy applied).
    pub policies: Vec<PolicyResult>,
}

impl Decision {
    /// Builds a decision from TB.MTAKE's reply and the policies' shapes, in the same order.
    /// `shapes` are `(name, key, capacity, rate, cost)`.
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
            })
            .collect();
        Decision {
            status: if reply.allowed {
                Status::Allowed
            } else {
                Status::Limited
            },
            allowed: reply.allowed,
            remaining: reply.remaining,
            retry_after: reply.retry_after,
            reset_after: reply.reset_after,
            policies,
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
        }
    }

    /// The policies that refused the request (empty unless [`Status::Limited`]).
    pub fn violated(&self) -> impl Iterator<Item = &PolicyResult> {
        let limited = self.status == Status::Limited;
        self.policies.iter().filter(move |p| limited && !p.allowed)
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
