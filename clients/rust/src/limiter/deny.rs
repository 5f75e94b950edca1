//! The local deny cache on the request path (SPEC R): refusals answered without Redis,
//! and the entries a refusal or a spent bucket leaves.

use std::time::Duration;

use crate::decision::{Decision, PolicyResult};
use crate::deny_cache::{DenyCache, Entry, Lookup, Probe};
use crate::policy::LimitKind;

use super::plan::Plan;
use super::state::Inner;
use super::stats::bump;
use super::store::Store;

impl<S: Store> Inner<S> {
    /// A refusal from the deny cache (`Err`, SPEC R2, R4, H6), else the entries this
    /// request is to probe.
    pub(super) fn cached_refusal(&self, plan: &Plan) -> Result<Probe<'_>, Box<Decision>> {
        let Some(cache) = self.deny_cache.as_ref() else {
            return Ok(Probe::none());
        };
        let now = self.clock.monotonic();
        let wanted = plan
            .charges
            .iter()
            .zip(&plan.policy)
            .enumerate()
            .filter(|(_, (_, i))| !self.policies[**i].shadow)
            .map(|(j, (c, _))| (j, c.key.as_str(), c.capacity, c.rate, c.n));
        let Lookup { hits, probe } = cache.lookup(wanted, now);
        if hits.is_empty() {
            return Ok(probe);
        }
        bump(&self.stats.0.limited);
        bump(&self.stats.0.deny_cache_hits);
        let mut results = Vec::with_capacity(hits.len());
        for (j, e) in hits {
            let (Some(c), Some(&i)) = (plan.charges.get(j), plan.policy.get(j)) else {
                continue;
            };
            let rt = &self.runtime[i];
            rt.metrics.deny_cache_hits.increment(1);
            rt.metrics.limited.increment(1);
            results.push(PolicyResult {
                name: self.policies[i].name.clone(),
                key: c.key.clone(),
                capacity: c.capacity,
                rate: c.rate,
                cost: c.n,
                allowed: false,
                remaining: 0.0,
                retry_after: e.deny_until.saturating_sub(now).as_secs_f64(),
                reset_after: e.reset_at.saturating_sub(now).as_secs_f64(),
                shadow: false,
                kind: self.policies[i].kind,
            });
        }
        let mut decision = Decision::from_results(results);
        decision.from_cache = true;
        Err(Box::new(decision))
    }

    pub(super) fn cache_entry(&self, cache: &DenyCache, p: &PolicyResult, wait: f64) {
        let now = self.clock.monotonic();
        let (Ok(wait), Ok(full)) = (
            Duration::try_from_secs_f64(wait),
            Duration::try_from_secs_f64(p.reset_after.max(0.0)),
        ) else {
            return;
        };
        let (Some(deny_until), Some(reset_at)) = (now.checked_add(wait), now.checked_add(full))
        else {
            return;
        };
        cache.insert(
            &p.key,
            Entry::new(p.capacity, p.rate, p.cost, deny_until, reset_at),
        );
    }

    /// SPEC R1: a Redis refusal's enforced violated buckets that a wait can cure.
    pub(super) fn remember(&self, decision: &Decision) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        // SPEC R10: an in-flight refusal is never cached.
        for p in decision
            .violated_results()
            .filter(|p| p.retry_after > 0.0 && !matches!(p.kind, LimitKind::InFlight { .. }))
        {
            self.cache_entry(cache, p, p.retry_after);
        }
    }

    /// SPEC R5: after any admission, an enforced bucket left with `remaining < cost` is
    /// refused by Redis to the next such request until `(cost - remaining) / rate`.
    pub(super) fn remember_spent(&self, decision: &Decision) {
        let Some(cache) = &self.deny_cache else {
            return;
        };
        for p in &decision.results {
            // R5 is for buckets only (SPEC W3, R10).
            if p.shadow || p.kind != LimitKind::Bucket || p.rate <= 0.0 || p.remaining >= p.cost {
                continue;
            }
            self.cache_entry(cache, p, (p.cost - p.remaining) / p.rate);
        }
    }
}
