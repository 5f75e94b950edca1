//! The story of one check (SPEC L, R, B, D, N, G): plan, deny cache, breaker, the one
//! call, the decision, and the [`Check`] an adapter turns into a response.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::client::{Acquired, MultiReply};
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

/// What came back from the one call: TB.TAKE / MTAKE / WINDOW's buckets, or
/// TB.ACQUIRE's buckets and lease.
type Reply = Result<Acquired, MultiReply>;

impl<S: Store> Inner<S> {
    /// One check, in the steps of SPEC L: scope and plan, the deny cache, the one
    /// guarded call, the decision, then what the response carries (lease, refund, holds).
    pub(super) async fn check(
        &self,
        this: &Arc<Inner<S>>,
        parts: &mut Parts,
        peer: Option<IpAddr>,
        route: Option<&str>,
    ) -> Check {
        // 1. scope (L1) and plan (K, I, L2, L3): a request with nothing to charge ends here.
        let mut plan = match self.planned(parts, peer, route).await {
            Planned::Charges(plan) if !plan.charges.is_empty() || plan.in_flight.is_some() => plan,
            other => return self.decided_without_a_call(this, other),
        };
        let settle = std::mem::take(&mut plan.settle);
        bump(&self.stats.0.checks);
        // 2. the deny cache (R2-R4): a cached refusal, or the entries this request probes
        //    (their drop removes those the answer did not renew, R4).
        let probe = match self.cached_refusal(&plan) {
            Ok(probe) => probe,
            Err(decision) => return self.cached_refusal_check(*decision),
        };
        // 3. the one guarded call (L4, L5, B).
        let (what, result) = self.call_store(&mut plan).await;
        let reply = match result {
            Guarded::Answered(reply) => reply,
            Guarded::Skipped => {
                probe.release(); // SPEC R6: never reached Redis; the entries stay
                return self.failure_mode(this, settle);
            }
            // SPEC K6, L5: a configuration error, never the failure mode
            Guarded::Failed(e) if e.is_cross_slot() => {
                drop(probe);
                return self.cross_slot(&plan, what);
            }
            Guarded::Failed(_) => {
                drop(probe);
                return self.failure_mode(this, settle);
            }
        };
        // 4. the decision (D1-D4, S2) and what the deny cache learns from it (R1, R4, R5).
        let (buckets, acquired) = match &reply {
            Err(multi) => (&multi.buckets, None),
            Ok(acq) => (&acq.buckets, Some(acq)),
        };
        let mut decision = plan_results(&plan, buckets, acquired, &self.policies);
        let order = plan.result_policies();
        self.decide(&decision, &order);
        self.learn(&decision);
        drop(probe);
        let headers = self.headers(&decision, &order);
        if decision.outcome == Outcome::Limited {
            return Check::too_many_requests(decision, headers);
        }
        // 5. what the admitted response carries: the lease (N1, N6), the refund (F1, F3),
        //    the holds' keys (G1).
        let mut lease = self.granted_lease(this, acquired, &plan, &mut decision);
        let refund = match decision.charged() {
            true => plan
                .into_refundable()
                .map_or_else(RefundHandle::default, |p| {
                    RefundHandle::new(this.clone(), p)
                }),
            false => RefundHandle::default(),
        };
        lease.scope = self.settle_later(this, &mut decision, settle);
        Check {
            decision,
            headers,
            problem: None,
            refund,
            lease,
        }
    }

    /// Step 1: the request's scope (L1), then its plan, with async key functions
    /// answered first when there are any.
    async fn planned(
        &self,
        parts: &mut Parts,
        peer: Option<IpAddr>,
        route: Option<&str>,
    ) -> Planned {
        if !self.in_scope(parts, peer, route) {
            return Planned::NotLimited(Vec::new());
        }
        let mut resolved = match self.async_keys {
            true => self.resolve_async_keys(parts, route).await,
            false => Vec::new(),
        };
        self.plan(parts, route, &mut resolved)
    }

    /// Step 1's early answers: nothing applies (the holds' keys are still resolved,
    /// G1), a header with a control byte (I2: 400) or a value out of range (L3: 500).
    fn decided_without_a_call(&self, this: &Arc<Inner<S>>, planned: Planned) -> Check {
        match planned {
            Planned::Charges(Plan { settle, .. }) | Planned::NotLimited(settle) => {
                let mut check = Check::pass(Decision::not_limited());
                check.lease.scope = self.settle_later(this, &mut check.decision, settle);
                check
            }
            Planned::BadRequest(header) => {
                bump(&self.stats.0.checks);
                let mut c = Check::pass(Decision::without_results(Outcome::BadRequest, false));
                c.problem = Some((StatusCode::BAD_REQUEST, problem::bad_request(&header)));
                c
            }
            Planned::Invalid(i, what, value) => {
                bump(&self.stats.0.checks);
                self.invalid_input(i, what, value)
            }
        }
    }

    /// Step 2's answer: a refusal from the deny cache, without a call (R2).
    fn cached_refusal_check(&self, decision: Decision) -> Check {
        let headers = rate_limit_headers_at(&decision, self.legacy_headers, self.clock.unix());
        Check::too_many_requests(decision, headers)
    }

    /// Step 3: the plan's one command through the one guarded call every command
    /// takes (B, L5); the plan keeps its charges for the decision and a refund.
    async fn call_store(&self, plan: &mut Plan) -> (&'static str, Guarded<Reply>) {
        let call = self.call(std::mem::take(&mut plan.charges), plan);
        let what = match call.kind {
            CallKind::Acquire => "TB.ACQUIRE",
            CallKind::Window => "TB.WINDOW",
            CallKind::Take if call.charges.len() == 1 => "TB.TAKE",
            CallKind::Take => "TB.MTAKE",
        };
        let result = match call.kind {
            CallKind::Acquire => self.guarded(what, self.store.acquire(&call)).await.map(Ok),
            CallKind::Take | CallKind::Window => {
                self.guarded(what, self.store.take(&call)).await.map(Err)
            }
        };
        let Call { charges, .. } = call;
        plan.charges = charges;
        (what, result)
    }

    /// Step 3's failure: the failure mode's answer (a refusal when failing closed, an
    /// admission when failing open, B4), with the holds' keys when it admits (G1).
    fn failure_mode(&self, this: &Arc<Inner<S>>, settle: Vec<SettleTarget>) -> Check {
        let mut check = self.store_error_check();
        if check.problem.is_none() {
            check.lease.scope = self.settle_later(this, &mut check.decision, settle);
        }
        check
    }

    /// Step 4: a refusal renews the probed entries and caches new ones (R1, R4); an
    /// admission that leaves a bucket below its cost is remembered too (R5).
    fn learn(&self, decision: &Decision) {
        match decision.outcome {
            Outcome::Limited => self.remember(decision),
            Outcome::Allowed if decision.charged() => self.remember_spent(decision),
            _ => {}
        }
    }

    /// Step 5: a granted lease is the decision's, and the in-flight gauge goes up
    /// (SPEC N1, N6, M2).
    fn granted_lease(
        &self,
        this: &Arc<Inner<S>>,
        acquired: Option<&Acquired>,
        plan: &Plan,
        decision: &mut Decision,
    ) -> LeaseHandle {
        let (Some(a), Some(f)) = (acquired, &plan.in_flight) else {
            return LeaseHandle::default();
        };
        let (true, Some(id)) = (a.granted, &a.id) else {
            return LeaseHandle::default();
        };
        let lease = Lease {
            key: f.key.clone(),
            id: id.clone(),
            policy: self.policies[f.policy].name.clone(),
        };
        decision.lease = Some(lease.clone());
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
                lease,
                f.policy,
                f.lease_ms,
                f.max_duration_ms,
            ))),
            scope: None,
        }
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
