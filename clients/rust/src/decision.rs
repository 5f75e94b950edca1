//! The result of one check (SPEC D1-D4), as handlers see it in the request extensions.

use std::sync::Arc;

use crate::hold::{Holds, SettleTarget, take_hold};
use crate::lease::Lease;
use crate::policy::LimitKind;

/// How a check ended (SPEC D1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Every enforced policy had the tokens (or only shadow policies refused).
    Allowed,
    /// An enforced policy refused: 429.
    Limited,
    /// The call failed, timed out, or was skipped in the cool-down: the failure mode
    /// decided (`allowed` says which way).
    StoreError,
    /// No policy applied: no call.
    NotLimited,
    /// A cost or limit function returned an out-of-range value (SPEC L3): 500, nothing
    /// sent, nothing admitted.
    InvalidInput,
    /// A header identity held a control byte (SPEC I2): 400.
    BadRequest,
}

impl Outcome {
    /// The SPEC's name: `allowed`, `limited`, `store_error`, `not_limited`,
    /// `invalid_input`, `bad_request`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Limited => "limited",
            Outcome::StoreError => "store_error",
            Outcome::NotLimited => "not_limited",
            Outcome::InvalidInput => "invalid_input",
            Outcome::BadRequest => "bad_request",
        }
    }
}

/// The old name of [`Outcome`].
#[deprecated(note = "renamed Outcome (SPEC D1)")]
pub type Status = Outcome;

/// One policy's part of a decision (SPEC D2).
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyResult {
    /// The policy's name.
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
    /// Tokens left (after the deduction when the request was admitted).
    pub remaining: f64,
    /// Seconds until this bucket admits the request: 0 when it can now, -1 when never.
    pub retry_after: f64,
    /// Seconds until this bucket is full.
    pub reset_after: f64,
    /// A shadow policy (SPEC S1): charged like the others, never in a header.
    pub shadow: bool,
    /// The kind of the policy's limit: a window's `capacity` is its `n` and `rate`
    /// `n / seconds` (SPEC W2); an in-flight policy's `capacity` is its `n`, its `rate` 0
    /// (SPEC N3: no rate) and it has no `w` in `RateLimit-Policy`.
    pub kind: LimitKind,
}

/// The decision for one request (SPEC D); in the request extensions for handlers.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// How the check ended.
    pub outcome: Outcome,
    /// Whether the request goes on (also true for a store error when failing open).
    pub allowed: bool,
    /// The smallest remaining of the enforced policies; `None` without one (D3).
    pub remaining: Option<f64>,
    /// The largest `retry_after` of the enforced violated policies; `None` when none
    /// refused or one of them can never pass (D3).
    pub retry_after: Option<f64>,
    /// The largest reset of the enforced policies; `None` without one (D3).
    pub reset_after: Option<f64>,
    /// One result per applied policy, in order (D2); a refusal from the deny cache lists
    /// only the cached violated policies.
    pub results: Vec<PolicyResult>,
    /// The enforced policies that refused, in policy order (D4).
    pub violated: Vec<Arc<str>>,
    /// The shadow policies that refused (D4). When the request was admitted with a
    /// non-empty list, nothing was charged (S2).
    pub shadow_limited: Vec<Arc<str>>,
    /// The refusal came from the local deny cache, without a Redis call (R2).
    pub from_cache: bool,
    /// The lease of the in-flight policy (SPEC N6), `None` when none was taken.
    pub lease: Option<Lease>,
    /// The `settle_later` policies of this check (SPEC G1), for [`Decision::hold`].
    pub settle_later: Vec<SettleTarget>,
    pub(crate) holds: Option<Holds>,
}

impl Decision {
    /// The decision of per-policy results (D1, D3, D4).
    pub fn from_results(results: Vec<PolicyResult>) -> Decision {
        let mut never = false;
        let mut wait: Option<f64> = None;
        let mut remaining: Option<f64> = None;
        let mut reset_after: Option<f64> = None;
        let mut violated = Vec::new();
        let mut shadow_limited = Vec::new();
        for p in &results {
            if p.shadow {
                if !p.allowed {
                    shadow_limited.push(p.name.clone());
                }
                continue;
            }
            remaining = Some(remaining.map_or(p.remaining, |r| r.min(p.remaining)));
            reset_after = Some(reset_after.map_or(p.reset_after, |r| r.max(p.reset_after)));
            if !p.allowed {
                violated.push(p.name.clone());
                if p.retry_after < 0.0 {
                    never = true;
                } else {
                    wait = Some(wait.map_or(p.retry_after, |w| w.max(p.retry_after)));
                }
            }
        }
        let limited = !violated.is_empty();
        Decision {
            outcome: if limited {
                Outcome::Limited
            } else {
                Outcome::Allowed
            },
            allowed: !limited,
            remaining,
            retry_after: if never { None } else { wait },
            reset_after,
            results,
            violated,
            shadow_limited,
            from_cache: false,
            lease: None,
            settle_later: Vec::new(),
            holds: None,
        }
    }

    /// A decision without results: `outcome`, and whether the request goes on.
    pub fn without_results(outcome: Outcome, allowed: bool) -> Decision {
        Decision {
            outcome,
            allowed,
            remaining: None,
            retry_after: None,
            reset_after: None,
            results: Vec::new(),
            violated: Vec::new(),
            shadow_limited: Vec::new(),
            from_cache: false,
            lease: None,
            settle_later: Vec::new(),
            holds: None,
        }
    }

    /// The failure mode decided; `fail_open` says whether the request goes on.
    pub fn store_error(fail_open: bool) -> Decision {
        Decision::without_results(Outcome::StoreError, fail_open)
    }

    /// No policy applied.
    pub fn not_limited() -> Decision {
        Decision::without_results(Outcome::NotLimited, true)
    }

    /// The results of the enforced policies that refused (empty unless limited).
    pub fn violated_results(&self) -> impl Iterator<Item = &PolicyResult> {
        let limited = self.outcome == Outcome::Limited;
        self.results
            .iter()
            .filter(move |p| limited && !p.allowed && !p.shadow)
    }

    /// The lease of the in-flight policy, `None` when none was taken (SPEC N6).
    pub fn lease(&self) -> Option<&Lease> {
        self.lease.as_ref()
    }

    /// TB.HOLD of `estimate` on the `settle_later` policy `policy` of this check (SPEC
    /// G1), for `ttl` seconds (60 is the usual choice): the [`crate::Hold`] to settle
    /// later with the actual cost. An invalid estimate (C3, `> 0`), a policy that is not
    /// a `settle_later` policy of this check (or was skipped, I1) or an invalid ttl is an
    /// [`crate::Error::InvalidArgument`] / [`crate::Error::NotSettleLater`] and sends
    /// nothing; a failed call is a store error. Through the tower layer the hold is
    /// renewed every `ttl / 2` while the request runs (G5), until it is settled or the
    /// response ends.
    pub async fn hold(
        &self,
        policy: &str,
        estimate: f64,
        ttl: f64,
    ) -> Result<crate::Hold, crate::Error> {
        let target = self
            .settle_later
            .iter()
            .find(|t| &*t.policy == policy)
            .cloned();
        let (Some(target), Some(holds)) = (target, self.holds.as_ref()) else {
            return Err(crate::Error::NotSettleLater {
                policy: policy.to_owned(),
            });
        };
        take_hold(holds, target, estimate, ttl).await
    }

    /// Whether the request's tokens were taken: admitted by every policy, shadow ones
    /// included (TB.MTAKE is all or nothing).
    pub fn charged(&self) -> bool {
        self.outcome == Outcome::Allowed
            && !self.from_cache
            && !self.results.is_empty()
            && self.results.iter().all(|p| p.allowed)
    }

    /// Refused, and no wait will help: a violated policy's cost exceeds its capacity.
    pub fn never(&self) -> bool {
        self.outcome == Outcome::Limited && self.retry_after.is_none()
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
            kind: LimitKind::Bucket,
        }
    }

    #[test]
    fn a_shadow_refusal_lets_the_request_go_on_uncharged() {
        let d = Decision::from_results(vec![
            result("ip", true, 0.0, false),
            result("user", false, 7.0, true),
        ]);
        assert_eq!(d.outcome, Outcome::Allowed);
        assert!(!d.charged(), "TB.MTAKE took nothing");
        assert_eq!(d.shadow_limited, vec![Arc::<str>::from("user")]);
        assert_eq!(d.retry_after, None);
        assert_eq!(d.remaining, Some(5.0), "over the enforced policies only");
    }

    #[test]
    fn an_enforced_refusal_names_only_enforced_policies() {
        let d = Decision::from_results(vec![
            result("ip", false, 2.0, false),
            result("user", false, 70.0, true),
        ]);
        assert_eq!(d.outcome, Outcome::Limited);
        assert_eq!(d.violated, vec![Arc::<str>::from("ip")]);
        assert_eq!(d.retry_after, Some(2.0));
        let never = Decision::from_results(vec![
            result("ip", false, -1.0, false),
            result("b", false, 3.0, false),
        ]);
        assert!(never.never());
    }
}
