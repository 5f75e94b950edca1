"""The RFC 9457 problem bodies of a refusal (SPEC P1-P6) and a decision's whole answer,
status, headers and body (H, P, B4, H5): :func:`respond`, and the limiter's
:class:`Answering` mixin."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from .cluster import CrossSlot, crossslot_detail
from .decision import Decision, Outcome, PolicyResult
from .headers import decision_headers, retry_after_seconds

__all__ = [
    "BODY_MAX",
    "PROBLEM_TYPE",
    "Answering",
    "Rejection",
    "Response",
    "bad_request_problem",
    "body_number",
    "crossslot_problem",
    "invalid_input_problem",
    "problem",
    "problem_body",
    "problem_bytes",
    "respond",
    "store_error_problem",
]

PROBLEM_TYPE = "application/problem+json"

#: SPEC P5: the largest number a body writes.
BODY_MAX = 999_999_999_999


def body_number(x: float) -> str:
    """SPEC P5: clamped to 0..=999999999999, rounded up to the millisecond (a
    product within 1e-9 relative of a whole number of milliseconds is that number),
    written as a decimal without exponent or trailing zeros."""
    if not x > 0:  # negative, zero or NaN
        return "0"
    t = min(x, BODY_MAX) * 1000
    m = round(t)
    if abs(t - m) > 1e-9 * max(1.0, t):
        m = math.ceil(t)
    whole, frac = divmod(int(m), 1000)
    if not frac:
        return str(whole)
    return f"{whole}.{frac:03d}".rstrip("0")


def _never(decision: Decision) -> list[PolicyResult]:
    return [r for r in decision.results if not r.allowed and not r.shadow and r.retry_after < 0]


def problem(decision: Decision) -> dict[str, object]:
    """The RFC 9457 body of a 429 (SPEC P1, P2) as a dict; :func:`problem_bytes`
    writes the exact text (P5, P6)."""
    violated = list(decision.violated)
    never = _never(decision)
    if never:
        detail = "; ".join(
            f"this request costs {body_number(r.cost)} but policy '{r.name}' allows at most "
            f"{body_number(r.capacity)} at once: it can never succeed"
            for r in never
        )
        retry: float | None = None
    else:
        wait = decision.retry_after
        secs = retry_after_seconds(wait if wait is not None else 0.0)
        names = ", ".join(f"'{n}'" for n in violated)
        detail = f"rate limit exceeded for {names}: retry after {secs} s"
        retry = wait
    return {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": detail,
        "violated_policies": violated,
        "retry_after": retry,
    }


def store_error_problem() -> dict[str, object]:
    """SPEC P3: the body of the 503 a fail-closed limiter answers when Redis fails."""
    return {
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the rate limiter's store is unavailable; retry shortly",
    }


def bad_request_problem(header: str) -> dict[str, object]:
    """SPEC P4: the body of the 400 for a header identity with a control byte."""
    return {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": f"header '{header}' holds a control byte",
    }


def invalid_input_problem(policy: str) -> dict[str, object]:
    """SPEC P4: the body of the 500 for an out-of-range cost or limit (never the value)."""
    return {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": f"rate limit policy '{policy}' got an invalid cost or limit from the application",
    }


def crossslot_problem(policies: Sequence[str]) -> dict[str, object]:
    """SPEC P4, K6: the body of the 500 for a call Redis Cluster refused (CROSSSLOT)."""
    return {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": crossslot_detail(policies),
    }


def _json_value(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return body_number(v) if isinstance(v, float) or v >= 0 else str(v)
    if isinstance(v, list):
        return "[" + ",".join(_json_value(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def problem_body(body: dict[str, object]) -> bytes:
    """SPEC P5, P6: compact JSON, keys in order, numbers in the one body format
    (``status`` is an integer and stays one)."""
    parts = []
    for k, v in body.items():
        text = str(v) if k == "status" else _json_value(v)
        parts.append(f"{json.dumps(k)}:{text}")
    return ("{" + ",".join(parts) + "}").encode()


def problem_bytes(decision: Decision) -> bytes:
    """The exact 429 body of a limited decision (SPEC P1, P2, P5, P6)."""
    return problem_body(problem(decision))


#: (status, headers, body or None): what a framework answers for a decision.
Response = tuple[int, list[tuple[str, str]], bytes | None]


def respond(
    decision: Decision,
    *,
    legacy: bool = False,
    legacy_reset: Literal["unix", "delta"] = "unix",
    now_unix: float | None = None,
) -> Response:
    """The HTTP side of a decision, framework-neutral: ``(200, rate-limit headers,
    None)`` when the request goes on; else the status (429, 503, 400, 500), its
    headers (``Content-Type`` included) and the problem body (SPEC H, P, B4)."""
    outcome = decision.outcome
    if decision.allowed:
        return 200, decision_headers(decision, legacy=legacy, legacy_reset=legacy_reset, now_unix=now_unix), None
    if outcome is Outcome.LIMITED:
        hs = decision_headers(decision, legacy=legacy, legacy_reset=legacy_reset, now_unix=now_unix)
        status, body = 429, problem_bytes(decision)
    elif outcome is Outcome.BAD_REQUEST:
        hs, status, body = [], 400, problem_body(bad_request_problem(decision.culprit or ""))
    elif outcome is Outcome.INVALID_INPUT:
        error = decision.error
        if isinstance(error, CrossSlot):  # SPEC K6: Redis Cluster refused the call
            hs, status, body = [], 500, problem_body(crossslot_problem(error.policies))
        else:  # SPEC L3
            hs, status, body = [], 500, problem_body(invalid_input_problem(decision.culprit or ""))
    else:  # a store error, failing closed (SPEC H5, B4)
        hs, status, body = [("Retry-After", "1")], 503, problem_body(store_error_problem())
    hs.append(("Content-Type", PROBLEM_TYPE))
    return status, hs, body


#: (status, headers, body) of a refusal: 429 or 503 with a problem+json body.
Rejection = tuple[int, list[tuple[str, str]], bytes]


class Answering:
    """The answers of :class:`~redis_tb.limiter.BaseLimiter` (a mixin): a decision's
    headers (SPEC H) and response (H, P), with the limiter's legacy-header settings and
    wall clock."""

    if TYPE_CHECKING:
        legacy_headers: bool
        legacy_reset: Literal["unix", "delta"]
        _wall: Callable[[], float]

    def headers(self, decision: Decision) -> list[tuple[str, str]]:
        """The rate-limit headers of a decision (shadow policies left out)."""
        return decision_headers(
            decision, legacy=self.legacy_headers, legacy_reset=self.legacy_reset,
            now_unix=self._wall() if self.legacy_headers else None,
        )

    def response(self, decision: Decision) -> Response:
        """``(status, headers, body)`` of a decision: 200 with the rate-limit headers
        and no body when the request goes on, else the refusal (429, 503, 400, 500)
        with its problem body (``Content-Type`` included). SPEC H, P."""
        return respond(
            decision, legacy=self.legacy_headers, legacy_reset=self.legacy_reset,
            now_unix=self._wall() if self.legacy_headers else None,
        )

    def rejection(self, decision: Decision) -> Rejection | None:
        """None when the request goes on; else ``(status, headers, body)`` of the
        refusal (429, 503, 400 or 500), body ``application/problem+json``."""
        status, hs, body = self.response(decision)
        if body is None:
            return None
        return status, hs, body
