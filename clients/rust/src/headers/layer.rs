//! SPEC H1, H2 on the layer's path: each policy's pieces serialized once when the limiter
//! is built, and a decision's headers written from them into per-thread buffers. The
//! result is byte for byte what [`super::rate_limit_headers_at`] writes.

use sfv::{Integer, ItemSerializer};

use super::fields::{Q, R, T, W, quota, remaining, reset, retry_after, window};
use super::legacy::{LegacyHeaders, LegacyReset, unix_reset};
use super::mapping::RateLimitHeaders;
use crate::decision::{Decision, Outcome, PolicyResult};
use crate::policy::{Limit, LimitKind};

/// One policy's header pieces, serialized once when the layer is built: its name as an
/// sf-string, and its whole `RateLimit-Policy` item for its fixed limit (a per-request
/// limit is serialized per request).
#[derive(Clone, Debug)]
pub(crate) struct PolicyHeader {
    name: sfv::String,
    fixed: Option<(f64, f64, String)>,
}

impl PolicyHeader {
    /// `None` when the name is not a valid sf-string (never for a validated policy name).
    pub(crate) fn new(name: &str, fixed: Option<Limit>) -> Option<PolicyHeader> {
        let mut header = PolicyHeader {
            name: sfv::String::from_string(name.to_owned()).ok()?,
            fixed: None,
        };
        if let Some(l) = fixed
            .filter(|l| l.kind == LimitKind::Bucket || matches!(l.kind, LimitKind::Window { .. }))
        {
            let mut item = String::new();
            header.policy_item(l.capacity, l.rate, &mut item)?;
            header.fixed = Some((l.capacity, l.rate, item));
        }
        Some(header)
    }

    /// Appends `"name";q=..;w=..` (from the cache when the limit is the fixed one).
    fn policy_item(&self, capacity: f64, rate: f64, out: &mut String) -> Option<()> {
        if let Some((c, r, item)) = &self.fixed
            && *c == capacity
            && *r == rate
        {
            out.push_str(item);
            return Some(());
        }
        let q = Integer::try_from(quota(capacity)).ok()?;
        let w = Integer::try_from(window(capacity, rate)).ok()?;
        let _ = ItemSerializer::with_buffer(out)
            .bare_item(&*self.name)
            .parameter(Q, q)
            .parameter(W, w)
            .finish();
        Some(())
    }
}

/// The layer's headers for a decision from Redis: [`rate_limit_headers_at`] with the
/// policies' pieces serialized once (`items[j]` belongs to `decision.policies[j]`).
pub(crate) fn layer_headers<'h>(
    decision: &Decision,
    items: impl IntoIterator<Item = &'h PolicyHeader>,
    legacy: Option<LegacyReset>,
    now_unix: f64,
) -> Option<RateLimitHeaders> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut s) => {
            let (policy, rate_limit) = &mut *s;
            policy.clear();
            rate_limit.clear();
            serialize_layer_headers(decision, items, legacy, now_unix, policy, rate_limit)
        }
        // Not reentrant in practice; a nested call gets buffers of its own.
        Err(_) => serialize_layer_headers(
            decision,
            items,
            legacy,
            now_unix,
            &mut String::new(),
            &mut String::new(),
        ),
    })
}

thread_local! {
    /// The serializer's buffers, kept per thread: the values are then copied once into
    /// strings of their exact length, which become header values without another
    /// allocation (`Bytes::from` a string with spare capacity allocates a control block).
    pub(super) static SCRATCH: std::cell::RefCell<(String, String)> =
        const { std::cell::RefCell::new((String::new(), String::new())) };
}

fn serialize_layer_headers<'h>(
    decision: &Decision,
    items: impl IntoIterator<Item = &'h PolicyHeader>,
    legacy: Option<LegacyReset>,
    now_unix: f64,
    policy: &mut String,
    rate_limit: &mut String,
) -> Option<RateLimitHeaders> {
    let mut lowest: Option<&PolicyResult> = None;
    for (p, h) in decision.results.iter().zip(items) {
        if p.shadow {
            continue;
        }
        let (Ok(r), Ok(t)) = (
            Integer::try_from(remaining(p.remaining)),
            Integer::try_from(reset(p.reset_after)),
        ) else {
            continue;
        };
        let mark = policy.len();
        if !policy.is_empty() {
            policy.push_str(", ");
        }
        if matches!(p.kind, LimitKind::InFlight { .. }) {
            // SPEC N3: `"name";q=<n>`, no `w`.
            let Ok(q) = Integer::try_from(quota(p.capacity)) else {
                policy.truncate(mark);
                continue;
            };
            let _ = ItemSerializer::with_buffer(&mut *policy)
                .bare_item(&*h.name)
                .parameter(Q, q)
                .finish();
        } else if h.policy_item(p.capacity, p.rate, policy).is_none() {
            policy.truncate(mark);
            continue;
        }
        if !rate_limit.is_empty() {
            rate_limit.push_str(", ");
        }
        let _ = ItemSerializer::with_buffer(&mut *rate_limit)
            .bare_item(&*h.name)
            .parameter(R, r)
            .parameter(T, t)
            .finish();
        if lowest.is_none_or(|l| p.remaining < l.remaining) {
            lowest = Some(p);
        }
    }
    let lowest = lowest?;
    let legacy = legacy.map(|mode| LegacyHeaders {
        limit: quota(lowest.capacity),
        remaining: remaining(lowest.remaining),
        reset: match mode {
            LegacyReset::UnixTime => unix_reset(now_unix, lowest.reset_after),
            LegacyReset::DeltaSeconds => reset(lowest.reset_after),
        },
    });
    let retry = if decision.outcome == Outcome::Limited {
        decision.retry_after.and_then(retry_after)
    } else {
        None
    };
    Some(RateLimitHeaders {
        policy: policy.as_str().to_owned(),
        rate_limit: rate_limit.as_str().to_owned(),
        legacy,
        retry_after: retry,
    })
}
