//! The story of one check (SPEC L, R, B, D, N, G): plan, deny cache, breaker, the one
//! call, the decision, and the [`Check`] an adapter turns into a response.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::decision::{Decision, Outcome};
use crate::headers::{RateLimitHeaders, rate_limit_headers_at};
use crate::hold::{Holds, SettleTarget};
use crate::lease::{Lease, LeaseHandle, LeaseState, RequestScope};
use crate::problem;

use super::decide::plan_results;
use super::guarded::Guarded;
use super::plan::{Plan, Planned};
use super::refund::RefundHandle;
use super::state::{FailureMode, Inner};
use super::stats::bump;
use super::store::{Call, CallKind, Store};

/// The result of one check: the decision, and what the response carries.
#[derive(Debug)]
pub struct Check {
    /// The decision (also put in the request extensions by the adapter).
    pub decision: Decision,
    /// The rate-limit headers (SPEC H), on a refusal and on the admitted response.
    pub headers: Option<RateLimitHeaders>,
    /// The limiter's own answer when the request does not go on: status and problem body.
    pub problem: Option<(StatusCode, String)>,
    /// Gives the tokens back (SPEC F1); does nothing when nothing was charged.
    pub refund: RefundHandle,
    /// The lease of the in-flight policy (SPEC N4, N5): finish it when the response ends;
    /// does nothing without a lease.
    pub lease: LeaseHandle,
}

impl Check {
    pub(super) fn pass(decision: Decision) -> Check {
        Check {
            decision,
            headers: None,
            problem: None,
            refund: RefundHandle::default(),
            lease: LeaseHandle::default(),
        }
    }

    /// A refusal (SPEC H, P): the 429 problem and the headers of `decision`, nothing
    /// charged to refund, no lease.
    pub(super) fn too_many_requests(
        decision: Decision,
        headers: Option<RateLimitHeaders>,
    ) -> Check {
        let body = problem::too_many_requests(&decision);
        Check {
            decision,
            headers,
            problem: Some((StatusCode::TOO_MANY_REQUESTS, body)),
            refund: RefundHandle::default(),
            lease: LeaseHandle::default(),
        }
    }

    /// The response status: the problem's, else 200 (the handler decides).
    pub fn status(&self) -> StatusCode {
        self.problem.as_ref().map_or(StatusCode::OK, |(s, _)| *s)
    }

    /// Writes the headers of the limiter's own answer (problem content type, rate-limit
    /// headers, `Retry-After`) or of an admitted response (rate-limit headers) into `map`.
    pub fn write_headers(&self, map: &mut HeaderMap) {
        match &self.problem {
            Some((status, _)) => write_problem_headers(*status, self.headers.as_ref(), map),
            None => {
                if let Some(h) = &self.headers {
                    h.apply(map);
                }
            }
        }
    }
}

/// The headers of the limiter's own answer of `status` (problem content type, rate-limit
/// headers, `Retry-After`), as [`Check::write_headers`] writes them.
pub(crate) fn write_problem_headers(
    status: StatusCode,
    headers: Option<&RateLimitHeaders>,
    map: &mut HeaderMap,
) {
    map.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(problem::CONTENT_TYPE),
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        map.insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(h) = headers {
        h.apply(map);
    }
}

impl<S: Store> Inner<S> {
    pub(super) async fn check(
        &self,
        this: &Arc<Inner<S>>,
        parts: &mut Parts,
        peer: Option<IpAddr>,
        route: Option<&str>,
    ) -> Check {
        // The plan is made without an await unless a key is an async function, and
        // `planned` lives in this block only: outside it, its storage would stay in the
        // future's state beside the plan's across the call.
        let mut plan = {
            let planned = if self.in_scope(parts, peer, route) {
                // One call of `plan` (inlined here), with or without async answers.
                let mut resolved = match self.async_keys {
                    true => self.resolve_async_keys(parts, route).await,
                    false => Vec::new(),
                };
                self.plan(parts, route, &mut resolved)
            } else {
                Planned::NotLimited(Vec::new())
            };
            match planned {
                Planned::Charges(plan) if !plan.charges.is_empty() || plan.in_flight.is_some() => {
                    plan
                }
                Planned::Charges(Plan { settle, .. }) | Planned::NotLimited(settle) => {
                    let mut check = Check::pass(Decision::not_limited());
                    check.lease.scope = self.settle_later(this, &mut check.decision, settle);
                    return check;
                }
                Planned::BadRequest(header) => {
                    bump(&self.stats.0.checks);
                    let mut c = Check::pass(Decision::without_results(Outcome::BadRequest, false));
                    c.problem = Some((StatusCode::BAD_REQUEST, problem::bad_request(&header)));
                    return c;
                }
                Planned::Invalid(i, what, value) => {
                    bump(&self.stats.0.checks);
                    return self.invalid_input(i, what, value);
                }
            }
        };
        let settle = std::mem::take(&mut plan.settle);
        bump(&self.stats.0.checks);
        // The call and its decision, in this future (not one of its own inside it: the
        // check is made in place, and not moved out of a second future).
        let mut check = 'call: {
            // The entries this request probes (one probe per expired refusal, SPEC R4): the
            // drop removes those the answer did not renew (or all, if the request is
            // cancelled).
            let probe = match self.cached_refusal(&plan) {
                Ok(probe) => probe,
                Err(decision) => {
                    let decision = *decision;
                    let headers =
                        rate_limit_headers_at(&decision, self.legacy_headers, self.clock.unix());
                    return Check::too_many_requests(decision, headers);
                }
            };

            let call = self.call(std::mem::take(&mut plan.charges), &plan);
            let what = match call.kind {
                CallKind::Acquire => "TB.ACQUIRE",
                CallKind::Window => "TB.WINDOW",
                CallKind::Take if call.charges.len() == 1 => "TB.TAKE",
                CallKind::Take => "TB.MTAKE",
            };
            // The one guarded call (B, L5), as every other command's.
            let result = match call.kind {
                CallKind::Acquire => {
                    let r = self.guarded(what, self.store.acquire(&call)).await;
                    r.map(Ok)
                }
                CallKind::Take | CallKind::Window => {
                    let r = self.guarded(what, self.store.take(&call)).await;
                    r.map(Err)
                }
            };
            let Call { charges, .. } = call;
            plan.charges = charges;
            let reply = match result {
                Guarded::Answered(reply) => reply,
                Guarded::Skipped => {
                    // SPEC R6: this probe never reaches Redis; the entries stay for the
                    // next one.
                    probe.release();
                    break 'call self.store_error_check();
                }
                // SPEC K6, L5: a configuration error, never the failure mode (the guarded
                // call left the breaker and the counters alone).
                Guarded::Failed(e) if e.is_cross_slot() => {
                    drop(probe);
                    return self.cross_slot(&plan, what);
                }
                Guarded::Failed(_) => {
                    drop(probe);
                    break 'call self.store_error_check();
                }
            };
            let (buckets, acquired) = match &reply {
                Err(multi) => (&multi.buckets, None),
                Ok(acq) => (&acq.buckets, Some(acq)),
            };
            let mut decision = plan_results(&plan, buckets, acquired, &self.policies);
            let order = plan.result_policies();
            self.decide(&decision, &order);
            match decision.outcome {
                // SPEC R4: a refusal renews the probed entries (and caches new ones, R1).
                Outcome::Limited => self.remember(&decision),
                // SPEC R5: after any admission that leaves a bucket below the cost.
                Outcome::Allowed if decision.charged() => self.remember_spent(&decision),
                _ => {}
            }
            drop(probe);
            let headers = self.headers(&decision, &order);
            if decision.outcome == Outcome::Limited {
                return Check::too_many_requests(decision, headers);
            }
            // SPEC N1, N6: a granted lease is the decision's; the gauge goes up (M2).
            let lease = match (acquired, &plan.in_flight) {
                (Some(a), Some(f)) if a.granted => match &a.id {
                    Some(id) => {
                        let l = Lease {
                            key: f.key.clone(),
                            id: id.clone(),
                            policy: self.policies[f.policy].name.clone(),
                        };
                        decision.lease = Some(l.clone());
                        self.stats
                            .0
                            .leases_in_flight
                            .fetch_add(1, Ordering::Relaxed);
                        if let Some(l) = &self.runtime[f.policy].metrics.leases {
                            l.in_flight.increment(1.0);
                        }
                        LeaseHandle {
                            state: Some(Arc::new(LeaseState::new(
                                this.clone(),
                                l,
                                f.policy,
                                f.lease_ms,
                                f.max_duration_ms,
                            ))),
                            scope: None,
                        }
                    }
                    None => LeaseHandle::default(),
                },
                _ => LeaseHandle::default(),
            };
            // SPEC F3: only the bucket policies are refunded.
            let refund = match decision.charged() {
                true => plan
                    .into_refundable()
                    .map_or_else(RefundHandle::default, |p| {
                        RefundHandle::new(this.clone(), p)
                    }),
                false => RefundHandle::default(),
            };
            let mut lease = lease;
            lease.scope = self.settle_later(this, &mut decision, settle);
            // Returned from here, not moved out of the block and again out of the future.
            return Check {
                decision,
                headers,
                problem: None,
                refund,
                lease,
            };
        };
        // A store error (a refusal when failing closed, an admission when failing open).
        if check.problem.is_none() {
            check.lease.scope = self.settle_later(this, &mut check.decision, settle);
        }
        check
    }

    /// SPEC G1: the settle_later policies' keys and limits, for `decision.hold`, and the
    /// request's scope, whose end stops the renewals of the holds taken (G5).
    pub(super) fn settle_later(
        &self,
        this: &Arc<Inner<S>>,
        decision: &mut Decision,
        settle: Vec<SettleTarget>,
    ) -> Option<Arc<RequestScope>> {
        if settle.is_empty() {
            return None;
        }
        let scope = Arc::new(RequestScope::default());
        decision.settle_later = settle;
        decision.holds = Some(Holds {
            store: this.clone(),
            scope: scope.clone(),
        });
        Some(scope)
    }

    /// SPEC L3: the application gave an out-of-range cost or limit. Nothing is sent,
    /// nothing admitted; counted, logged at most once a second per policy, 500.
    pub(super) fn invalid_input(&self, i: usize, what: &str, value: f64) -> Check {
        bump(&self.stats.0.invalid_inputs);
        let rt = &self.runtime[i];
        rt.metrics.invalid_inputs.increment(1);
        let name = &self.policies[i].name;
        if let Some(held_back) = rt.invalid_log.admit(&*self.clock) {
            tracing::error!(
                target: "redis_tb",
                "redis-tb: policy '{name}' got an invalid {what} from the application ({value}); the request is answered 500 ({} since the last line)",
                held_back + 1
            );
        }
        let mut c = Check::pass(Decision::without_results(Outcome::InvalidInput, false));
        c.problem = Some((
            StatusCode::INTERNAL_SERVER_ERROR,
            problem::invalid_input(name),
        ));
        c
    }

    /// SPEC B4: the failure mode's answer to a request whose call failed or was skipped.
    pub(super) fn store_error_check(&self) -> Check {
        bump(&self.stats.0.degraded);
        self.telemetry.degraded.increment(1);
        let fail_open = self.failure_mode == FailureMode::FailOpen;
        let mut c = Check::pass(Decision::store_error(fail_open));
        if !fail_open {
            c.problem = Some((StatusCode::SERVICE_UNAVAILABLE, problem::unavailable()));
        }
        c
    }

    /// SPEC K6, L5, P4: Redis answered `CROSSSLOT`. Nothing admitted, never the failure
    /// mode: 500 naming the policies of the call, counted in `invalid_inputs` (not
    /// `store_errors`), the breaker untouched, logged at most once a second per limiter.
    pub(super) fn cross_slot(&self, plan: &Plan, what: &str) -> Check {
        bump(&self.stats.0.invalid_inputs);
        let order = plan.result_policies();
        let names: Vec<&str> = order.iter().map(|&i| self.policies[i].name()).collect();
        for &i in order.iter() {
            self.runtime[i].metrics.invalid_inputs.increment(1);
        }
        if let Some(held_back) = self.cross_slot_log.admit(&*self.clock) {
            tracing::error!(
                target: "redis_tb",
                "redis-tb: {what} on {} answered CROSSSLOT: limiter '{}' sends keys of policies {} in one call, which a Redis Cluster refuses unless they share a hash slot; requests get 500 until the limiter has a tag function (SPEC K6) ({} since the last line)",
                self.store.addr(),
                self.name,
                crate::error::quoted(&names),
                held_back + 1
            );
        }
        let mut c = Check::pass(Decision::without_results(Outcome::InvalidInput, false));
        c.problem = Some((
            StatusCode::INTERNAL_SERVER_ERROR,
            problem::cross_slot(&names),
        ));
        c
    }
}
