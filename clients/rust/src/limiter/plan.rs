//! Which policies apply to a request and what it is charged (SPEC L1-L4, I, K): the
//! plan, and the one call it makes.

use std::borrow::Cow;
use std::net::IpAddr;

use http::Method;
use http::request::Parts;

use crate::client::{Charge, MAX_NUMBER, MIN_RATE, WindowMode, num};
use crate::hold::SettleTarget;
use crate::keys::{self};
use crate::policy::limit::valid_cost;
use crate::policy::{Identity, LimitKind, Policy, ceil_ms, check_limit};

use super::state::Inner;
use super::store::{Call, CallKind, Store};

/// The buckets one request is charged on, and the index of each one's policy.
pub(super) struct Plan {
    pub(super) charges: Vec<Charge>,
    pub(super) policy: Vec<usize>,
    /// The charge is a window (SPEC W2): its seconds and mode.
    pub(super) window: Option<(f64, WindowMode)>,
    /// The in-flight policy of the request (SPEC N2).
    pub(super) in_flight: Option<InFlight>,
    /// The `settle_later` policies (SPEC G1): not in the call.
    pub(super) settle: Vec<SettleTarget>,
}

/// The in-flight part of a plan.
#[derive(Clone)]
pub(super) struct InFlight {
    pub(super) key: String,
    pub(super) n: f64,
    pub(super) lease_ms: u64,
    /// SPEC N7: how long after its grant the request may hold the slot.
    pub(super) max_duration_ms: u64,
    pub(super) policy: usize,
    /// Its place among the applied policies (the results are in policy order, D2).
    pub(super) pos: usize,
}

impl Plan {
    /// The policy of each result, in policy order (the in-flight one at its place);
    /// borrowed when there is no in-flight policy.
    pub(super) fn result_policies(&self) -> Cow<'_, [usize]> {
        match &self.in_flight {
            None => Cow::Borrowed(&self.policy),
            Some(f) => {
                let mut out = self.policy.clone();
                out.insert(f.pos.min(out.len()), f.policy);
                Cow::Owned(out)
            }
        }
    }

    /// The bucket charges only: what `refund()` may give back (SPEC F3). Takes the plan:
    /// the charges move into the refund instead of being copied.
    pub(super) fn into_refundable(self) -> Option<Plan> {
        if self.window.is_some() || self.charges.is_empty() {
            return None;
        }
        Some(Plan {
            charges: self.charges,
            policy: self.policy,
            window: None,
            in_flight: None,
            settle: Vec::new(),
        })
    }
}

pub(super) enum Planned {
    NotLimited(Vec<SettleTarget>),
    Charges(Plan),
    BadRequest(String),
    Invalid(usize, &'static str, f64),
}

impl<S: Store> Inner<S> {
    pub(super) fn applies(&self, p: &Policy, method: &Method, route: Option<&str>) -> bool {
        p.applies(method, route)
    }

    /// SPEC L1, A8: whether any policy applies to this request; if so, its resolved
    /// [`crate::ClientIp`] is put in the extensions (key, cost and limit functions read it).
    pub(super) fn in_scope(
        &self,
        parts: &mut Parts,
        peer: Option<IpAddr>,
        route: Option<&str>,
    ) -> bool {
        if route.is_none() && !self.limit_unmatched {
            return false;
        }
        if let Some(route) = route
            && self.exclude.iter().any(|r| {
                r.template == route && r.method.as_ref().is_none_or(|m| *m == parts.method)
            })
        {
            return false;
        }
        if !self
            .policies
            .iter()
            .any(|p| self.applies(p, &parts.method, route))
        {
            return false;
        }
        if let Some(peer) = peer {
            let client = self.ip.resolve(peer, &parts.headers);
            parts.extensions.insert(client);
        }
        true
    }

    /// What the applicable policies' async key functions give for this request (SPEC I1),
    /// by policy index, awaited one after another before the plan is made.
    pub(super) async fn resolve_async_keys(
        &self,
        parts: &Parts,
        route: Option<&str>,
    ) -> Vec<Option<Option<String>>> {
        let mut resolved = Vec::with_capacity(self.policies.len());
        for p in self.policies.iter() {
            resolved.push(match self.applies(p, &parts.method, route) {
                true => p.key.resolve_async(parts).await,
                false => None,
            });
        }
        resolved
    }

    /// SPEC L1, I, K, L2, L3: the applicable policies' keys, limits and costs, for a
    /// request [`Self::in_scope`] admitted; `resolved` holds the async keys' answers.
    pub(super) fn plan(
        &self,
        parts: &Parts,
        route: Option<&str>,
        resolved: &mut [Option<Option<String>>],
    ) -> Planned {
        let tag = self.hash_tag.as_ref().and_then(|f| f(parts));
        let tag = tag.as_deref().map(str::as_bytes).filter(|t| !t.is_empty());
        let mut route_segment: Option<String> = None;
        let mut plan = Plan {
            charges: Vec::with_capacity(self.policies.len()),
            policy: Vec::with_capacity(self.policies.len()),
            window: None,
            in_flight: None,
            settle: Vec::new(),
        };
        for (i, p) in self.policies.iter().enumerate() {
            if !self.applies(p, &parts.method, route) {
                continue;
            }
            let answer = resolved.get_mut(i).and_then(Option::take);
            let identity = match p.key.identity_now(parts, answer) {
                Identity::Skip => continue,
                Identity::BadRequest => {
                    let name = p.key.header_name().map_or("", |h| h.as_str());
                    return Planned::BadRequest(name.to_owned());
                }
                Identity::Value(v) => v,
            };
            let Some(limit) = p.limit_for(parts) else {
                continue;
            };
            // SPEC L3, C10: a per-request limit is checked as its kind, and keeps the
            // policy's kind.
            if std::mem::discriminant(&limit.kind) != std::mem::discriminant(&p.kind) {
                return Planned::Invalid(i, "limit kind", limit.capacity);
            }
            if let LimitKind::Bucket = limit.kind {
                if !(limit.capacity > 0.0 && limit.capacity <= MAX_NUMBER) {
                    return Planned::Invalid(i, "capacity", limit.capacity);
                }
                if !(MIN_RATE..=MAX_NUMBER).contains(&limit.rate) {
                    return Planned::Invalid(i, "rate", limit.rate);
                }
            } else if check_limit(&limit).is_err() {
                return Planned::Invalid(i, "limit", limit.capacity);
            }
            let segment = match (route, p.per_route) {
                (Some(route), true) => Some(
                    route_segment
                        .get_or_insert_with(|| {
                            keys::route_segment(&format!("{} {route}", parts.method))
                        })
                        .as_str(),
                ),
                _ => None,
            };
            if p.settle_later {
                // SPEC G1: resolved now, charged by the handler's hold.
                let key = self.runtime[i].head.key(tag, segment, &identity);
                plan.settle.push(SettleTarget {
                    policy: p.name.clone(),
                    key,
                    capacity: limit.capacity,
                    rate: limit.rate,
                });
                continue;
            }
            if let LimitKind::InFlight {
                lease,
                max_duration,
            } = limit.kind
            {
                // SPEC N2, C9: one slot, no cost.
                let key = self.runtime[i].head.key(tag, segment, &identity);
                plan.in_flight = Some(InFlight {
                    key,
                    n: limit.capacity,
                    lease_ms: ceil_ms(lease),
                    max_duration_ms: ceil_ms(max_duration),
                    policy: i,
                    pos: plan.charges.len(),
                });
                continue;
            }
            if let LimitKind::Window { seconds, mode } = limit.kind {
                plan.window = Some((seconds, mode));
            }
            let cost = p.cost_for(parts);
            if !valid_cost(cost) {
                return Planned::Invalid(i, "cost", cost);
            }
            let key = self.runtime[i].head.key(tag, segment, &identity);
            plan.charges.push(Charge {
                key,
                capacity: limit.capacity,
                rate: limit.rate,
                n: cost,
            });
            plan.policy.push(i);
        }
        if plan.charges.is_empty() && plan.in_flight.is_none() {
            Planned::NotLimited(plan.settle)
        } else {
            Planned::Charges(plan)
        }
    }

    /// `TB.TAKE key capacity rate cost` for one bucket (SPEC L4), else `TB.MTAKE n key..
    /// (capacity rate cost)..`, the fixed limits' and costs' numbers formatted once.
    pub(super) fn call(&self, charges: Vec<Charge>, plan: &Plan) -> Call {
        let policy = &plan.policy;
        let n = charges.len();
        let mut cmd = redis::Cmd::with_capacity(
            6 + 4 * n,
            48 + charges.iter().map(|c| c.key.len() + 32).sum::<usize>(),
        );
        if let (Some((seconds, mode)), [c]) = (plan.window, charges.as_slice()) {
            // SPEC W2: TB.WINDOW key limit seconds cost MODE.
            cmd.arg("TB.WINDOW")
                .arg(c.key.as_str())
                .arg(num(c.capacity))
                .arg(num(seconds))
                .arg(num(c.n))
                .arg(match mode {
                    WindowMode::Fixed => "FIXED",
                    _ => "SLIDING",
                });
            return Call {
                charges,
                cmd,
                kind: CallKind::Window,
            };
        }
        let kind = if let Some(f) = &plan.in_flight {
            // SPEC N2: TB.ACQUIRE key n lease_ms [TAKE numkeys keys.. (capacity rate cost)..].
            cmd.arg("TB.ACQUIRE")
                .arg(f.key.as_str())
                .arg(num(f.n))
                .arg(f.lease_ms);
            if n > 0 {
                cmd.arg("TAKE").arg(n);
            }
            CallKind::Acquire
        } else {
            if n == 1 {
                cmd.arg("TB.TAKE");
            } else {
                cmd.arg("TB.MTAKE").arg(n);
            }
            CallKind::Take
        };
        for c in &charges {
            cmd.arg(c.key.as_str());
        }
        for (c, &i) in charges.iter().zip(policy) {
            let rt = &self.runtime[i];
            match &rt.fixed {
                Some((l, capacity, rate)) if l.capacity == c.capacity && l.rate == c.rate => {
                    cmd.arg(capacity.as_str()).arg(rate.as_str());
                }
                _ => {
                    cmd.arg(num(c.capacity)).arg(num(c.rate));
                }
            }
            match &rt.cost {
                Some((cost, text)) if *cost == c.n => {
                    cmd.arg(text.as_str());
                }
                _ => {
                    cmd.arg(num(c.n));
                }
            }
        }
        Call { charges, cmd, kind }
    }
}
