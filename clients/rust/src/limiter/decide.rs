//! The decision of a call's replies (SPEC D, N3) and what it counts and sends (M, H).

use crate::client::{Acquired, Reply};
use crate::decision::{Decision, Outcome, PolicyResult};
use crate::headers::{LegacyReset, RateLimitHeaders, layer_headers};
use crate::policy::Policy;

use super::plan::Plan;
use super::state::Inner;
use super::stats::bump;
use super::store::Store;

/// The decision's per-policy results: the per-bucket replies with the plan's shapes, and
/// the in-flight result (SPEC N3) at its place.
pub(super) fn plan_results(
    plan: &Plan,
    buckets: &[Reply],
    acquired: Option<&Acquired>,
    policies: &[Policy],
) -> Decision {
    let mut results: Vec<PolicyResult> = plan
        .charges
        .iter()
        .zip(&plan.policy)
        .zip(buckets)
        .map(|((c, &i), b)| PolicyResult {
            name: policies[i].name.clone(),
            key: c.key.clone(),
            capacity: c.capacity,
            rate: c.rate,
            cost: c.n,
            allowed: b.allowed,
            remaining: b.remaining,
            retry_after: b.retry_after,
            reset_after: b.reset_after,
            shadow: policies[i].shadow,
            kind: policies[i].kind,
        })
        .collect();
    if let (Some(f), Some(a)) = (&plan.in_flight, acquired) {
        // SPEC N3: refused for the slot only when not granted and `in_flight >= n`.
        let slot_free = a.granted || a.in_flight < f.n;
        let wait = if slot_free {
            0.0
        } else {
            a.ms.max(0.0) / 1000.0
        };
        let p = &policies[f.policy];
        let r = PolicyResult {
            name: p.name.clone(),
            key: f.key.clone(),
            capacity: f.n,
            rate: 0.0,
            cost: 1.0,
            allowed: slot_free,
            remaining: (f.n - a.in_flight).max(0.0),
            retry_after: wait,
            reset_after: wait,
            shadow: p.shadow,
            kind: p.kind,
        };
        results.insert(f.pos.min(results.len()), r);
    }
    Decision::from_results(results)
}

impl<S: Store> Inner<S> {
    /// Counts a Redis decision (allowed, limited, shadow-limited, SPEC M1) and logs shadow
    /// refusals; by reference, so the decision is not copied on the request path.
    pub(super) fn decide(&self, decision: &Decision, policy_index: &[usize]) {
        let results = decision.results.iter().zip(policy_index);
        match decision.outcome {
            Outcome::Allowed if decision.charged() => {
                bump(&self.stats.0.allowed);
                for (_, &i) in results.clone() {
                    self.runtime[i].metrics.allowed.increment(1);
                }
            }
            Outcome::Limited => {
                bump(&self.stats.0.limited);
                for (_, &i) in results.clone().filter(|(p, _)| !p.allowed && !p.shadow) {
                    self.runtime[i].metrics.limited.increment(1);
                }
            }
            _ => {}
        }
        if !decision.shadow_limited.is_empty() {
            bump(&self.stats.0.shadow_limited);
            for (p, &i) in results.filter(|(p, _)| !p.allowed && p.shadow) {
                let rt = &self.runtime[i];
                rt.metrics.shadow_limited.increment(1);
                if let Some(held_back) = rt.shadow_log.admit(&*self.clock) {
                    tracing::warn!(
                        target: "redis_tb",
                        "redis-tb: shadow policy '{}' would have limited a request ({} since the last line)",
                        p.name,
                        held_back + 1
                    );
                }
            }
        }
    }

    pub(super) fn headers(&self, decision: &Decision, order: &[usize]) -> Option<RateLimitHeaders> {
        let items = order.iter().map(|&i| &self.runtime[i].header);
        let now = match self.legacy_headers {
            Some(LegacyReset::UnixTime) => self.clock.unix(),
            _ => 0.0,
        };
        layer_headers(decision, items, self.legacy_headers, now)
    }
}
