//! Problem bodies (RFC 9457, `application/problem+json`) of the answers the limiter gives
//! itself: 429 (SPEC P1, P2), 503 (P3), 400 and 500 (P4), compact JSON with the keys in the
//! SPEC's order (P6) and one number format (P5).

use std::fmt::Write as _;

use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::decision::{Decision, PolicyResult};
use crate::headers::{self, rate_limit_headers_at};
use crate::hold::{Hold, HoldRefused};
use crate::policy::LimitKind;

/// `application/problem+json`.
pub const CONTENT_TYPE: &str = "application/problem+json";

/// Largest number a body writes (SPEC P5).
const BODY_MAX: f64 = 999_999_999_999.0;

/// A number of a problem body or detail (SPEC P5): clamped to `0..=999999999999`, rounded
/// up to the millisecond (a value within 1e-9 relative of a whole millisecond is that
/// millisecond), written as a decimal with no exponent and no trailing zeros.
pub fn body_number(x: f64) -> String {
    let x = if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, BODY_MAX)
    };
    let t = x * 1000.0;
    let r = t.round();
    let m = if (t - r).abs() <= 1e-9 * t.max(1.0) {
        r
    } else {
        t.ceil()
    };
    // 0 <= m <= 1e15 < 2^53: exact in f64 and in u64.
    let m = m as u64;
    let (int, frac) = (m / 1000, m % 1000);
    let mut out = int.to_string();
    if frac != 0 {
        let mut digits = format!("{frac:03}");
        while digits.ends_with('0') {
            digits.pop();
        }
        out.push('.');
        out.push_str(&digits);
    }
    out
}

/// A JSON string literal (names are `[a-z0-9_-]` tokens and header names are tokens, but
/// the writer does not rely on it).
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn head(out: &mut String, title: &str, status: u16, detail: &str) {
    out.push_str("{\"type\":\"about:blank\",\"title\":");
    json_string(out, title);
    let _ = write!(out, ",\"status\":{status},\"detail\":");
    json_string(out, detail);
}

/// The 429 body of a refusal (SPEC P1, P2): the enforced violated policies and D3's wait.
pub fn too_many_requests(decision: &Decision) -> String {
    let never: Vec<_> = decision
        .violated_results()
        .filter(|p| p.retry_after < 0.0)
        .collect();
    let detail = if never.is_empty() {
        let names = decision
            .violated
            .iter()
            .map(|n| format!("'{n}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let secs = decision
            .retry_after
            .and_then(headers::retry_after)
            .unwrap_or(1);
        format!("rate limit exceeded for {names}: retry after {secs} s")
    } else {
        never
            .iter()
            .map(|p| {
                format!(
                    "this request costs {} but policy '{}' allows at most {} at once: it can never succeed",
                    body_number(p.cost),
                    p.name,
                    body_number(p.capacity)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut out = String::with_capacity(160 + detail.len());
    head(&mut out, "Too Many Requests", 429, &detail);
    out.push_str(",\"violated_policies\":[");
    for (i, n) in decision.violated.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        json_string(&mut out, n);
    }
    out.push_str("],\"retry_after\":");
    match decision.retry_after {
        Some(wait) if never.is_empty() => out.push_str(&body_number(wait)),
        _ => out.push_str("null"),
    }
    out.push('}');
    out
}

/// The 503 body of fail-closed (SPEC P3).
pub fn unavailable() -> String {
    let mut out = String::new();
    head(
        &mut out,
        "Service Unavailable",
        503,
        "the rate limiter's store is unavailable; retry shortly",
    );
    out.push('}');
    out
}

/// The 400 body of a header identity with a control byte (SPEC I2, P4).
pub fn bad_request(header: &str) -> String {
    let mut out = String::new();
    head(
        &mut out,
        "Bad Request",
        400,
        &format!("header '{header}' holds a control byte"),
    );
    out.push('}');
    out
}

/// The 500 body of an out-of-range cost or limit (SPEC L3, P4): names the policy, never
/// the value.
pub fn invalid_input(policy: &str) -> String {
    let mut out = String::new();
    head(
        &mut out,
        "Internal Server Error",
        500,
        &format!("rate limit policy '{policy}' got an invalid cost or limit from the application"),
    );
    out.push('}');
    out
}

/// The 500 body of a call Redis answered `CROSSSLOT` (SPEC K6, P4): names the policies of
/// the call, in policy order.
pub fn cross_slot<S: AsRef<str>>(policies: &[S]) -> String {
    let mut out = String::new();
    head(
        &mut out,
        "Internal Server Error",
        500,
        &format!(
            "rate limit policies {} have keys in different cluster slots: give the limiter a hash tag",
            crate::error::quoted(policies)
        ),
    );
    out.push('}');
    out
}

/// A refused hold's answer (SPEC G2): the hold is taken on a decision, so its refusal is
/// rendered here, beside the bodies, as a decision of its one policy.
impl Hold {
    /// The refusal as a decision of this one policy (SPEC G2).
    fn refused_decision(&self) -> Option<Decision> {
        if self.allowed {
            return None;
        }
        Some(Decision::from_results(vec![PolicyResult {
            name: self.policy.clone(),
            key: self.key.clone(),
            capacity: self.target.capacity,
            rate: self.target.rate,
            cost: self.estimate,
            allowed: false,
            remaining: self.remaining,
            retry_after: self.retry_after,
            reset_after: self.reset_after,
            shadow: false,
            kind: LimitKind::Bucket,
        }]))
    }

    /// A refused hold's answer (SPEC G2, G6: a full hold table included): 429, H1-H3's
    /// headers for the policy, P1's body; `None` when the hold was taken.
    pub fn refusal(&self) -> Option<(StatusCode, HeaderMap, String)> {
        let d = self.refused_decision()?;
        let mut map = HeaderMap::new();
        map.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static(CONTENT_TYPE),
        );
        if let Some(h) = rate_limit_headers_at(&d, None, 0.0) {
            h.apply(&mut map);
        }
        Some((StatusCode::TOO_MANY_REQUESTS, map, too_many_requests(&d)))
    }

    /// [`Hold::refusal`] as an `http` response, ready to return from a handler (axum:
    /// `Response<String>` is `IntoResponse`); `None` when the hold was taken.
    pub fn too_many_requests(&self) -> Option<Response<String>> {
        let (status, headers, body) = self.refusal()?;
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        Some(resp)
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for HoldRefused {
    fn into_response(self) -> axum::response::Response {
        match self.0.too_many_requests() {
            Some(r) => r.into_response(),
            None => StatusCode::TOO_MANY_REQUESTS.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_numbers() {
        for (x, s) in [
            (35.99, "35.99"),
            (999_999.5, "999999.5"),
            (0.000_099_999_999, "0.001"),
            (36.0, "36"),
            (0.1, "0.1"),
            (1e20, "999999999999"),
            (f64::NAN, "0"),
            (-3.0, "0"),
        ] {
            assert_eq!(body_number(x), s, "{x}");
        }
    }
}
