"""From a decision to HTTP: ``RateLimit-Policy`` / ``RateLimit`` (IETF httpapi
ratelimit-headers, draft -10/-11 syntax), optional legacy ``X-RateLimit-*``,
and ``Retry-After`` (the problem bodies and a decision's whole answer: ``problem.py``).

The mapping (the same in the Rust integration):

=========  =====================================================================
``q``      ``floor(capacity)``: the quota a client may use at once (the burst).
``w``      ``ceil(capacity / rate)``, at least 1: seconds in which an empty bucket
           refills completely (the policy's window). ``capacity / rate`` within
           1e-9 (relative) of a whole number counts as that number, so
           ``per_minute(11)`` (11 / (11/60) = 60.00000000000001) says 60, not 61.
``r``      ``max(0, floor(remaining))``: whole requests left (a reservation's debt
           shows as 0).
``t``      ``ceil(reset_after)``: seconds until the full quota is back; 0 when full.
           On a refusal it stays the time to full; ``Retry-After`` says when to retry.
=========  =====================================================================

``Retry-After`` (on 429) is ``max(1, ceil(retry_after))`` of the largest wait among
the violated policies: whole seconds, rounded up, never 0, so a client that waits it
is admitted. When a policy can never admit the request (cost > capacity,
``retry_after = -1``) there is no ``Retry-After`` and the problem detail says so.

Structured-field integers stop at 999,999,999,999,999; larger values (capacity up
to 2^53, windows of a rate of 1e-9/s) are clamped to it. Each policy name is an
sf-string item, one list member per policy, in the order the policies were applied.
"""

from __future__ import annotations

import functools
import math
import time
from typing import Literal, Sequence

from http_sfv.item import Item
from http_sfv.list import List

from .decision import Decision, Outcome, PolicyResult

__all__ = [
    "SF_INT_MAX",
    "decision_headers",
    "legacy_headers",
    "quota",
    "ratelimit",
    "ratelimit_policy",
    "remaining_units",
    "reset_seconds",
    "retry_after_header",
    "retry_after_seconds",
    "window",
]

SF_INT_MAX = 999_999_999_999_999


def _sf_int(x: float) -> int:
    if x != x:  # NaN never reaches here from the module; refuse rather than guess
        raise ValueError("NaN in a rate-limit header value")
    return int(min(max(x, 0), SF_INT_MAX))


def quota(capacity: float) -> int:
    """``q``: floor(capacity)."""
    return _sf_int(math.floor(min(capacity, SF_INT_MAX)))


def window(capacity: float, rate: float) -> int:
    """``w``: seconds to refill the whole quota, ceil(capacity / rate), >= 1."""
    x = capacity / rate
    if x >= SF_INT_MAX:
        return SF_INT_MAX
    nearest = round(x)
    if abs(x - nearest) <= 1e-9 * max(1.0, x):
        x = nearest
    return _sf_int(max(1, math.ceil(x)))


def remaining_units(remaining: float) -> int:
    """``r``: max(0, floor(remaining))."""
    if 0.0 <= remaining < SF_INT_MAX:
        return int(remaining)  # floor, for a number >= 0
    return _sf_int(math.floor(min(max(remaining, 0.0), SF_INT_MAX)))


def reset_seconds(reset_after: float) -> int:
    """``t``: ceil(reset_after), 0 when the bucket is full."""
    if 0.0 <= reset_after < SF_INT_MAX:
        whole = int(reset_after)
        return whole if whole == reset_after else whole + 1  # ceil, for a number >= 0
    return _sf_int(math.ceil(min(max(reset_after, 0.0), SF_INT_MAX)))


def retry_after_seconds(retry_after: float) -> int | None:
    """Whole seconds for ``Retry-After``: max(1, ceil(retry_after)); None for -1 (never)."""
    if retry_after < 0:
        return None
    return max(1, math.ceil(min(retry_after, SF_INT_MAX)))




# The serializer (http_sfv) writes each policy's item once; a request only picks the
# cached strings. An sf-list is its members joined by ", ", and an sf-integer
# parameter is ";<key>=<decimal digits>", so the per-request RateLimit items are the
# cached "<name>" item plus two integers already clamped to the sf range.


@functools.lru_cache(maxsize=4096)
def _policy_item(name: str, capacity: float, rate: float | None, seconds: float | None = None) -> str:
    item = Item(name)
    item.params["q"] = quota(capacity)
    if seconds is not None:  # SPEC W2: a window's w is its window, at least 1
        item.params["w"] = window(seconds, 1.0)
    elif rate is not None:  # SPEC N3: an in-flight policy (rate None) has no w
        item.params["w"] = window(capacity, rate)
    out = List()
    out.append(item)
    return str(out)


@functools.lru_cache(maxsize=4096)
def _state_prefix(name: str) -> str:
    out = List()
    out.append(Item(name))
    return str(out) + ";r="


def ratelimit_policy(results: Sequence[PolicyResult]) -> str:
    """``RateLimit-Policy: "perhour";q=1000;w=3600, "persec";q=10;w=1``"""
    if len(results) == 1:
        r = results[0]
        return _policy_item(r.name, r.capacity, r.rate, r.window)
    return ", ".join([_policy_item(r.name, r.capacity, r.rate, r.window) for r in results])


def ratelimit(results: Sequence[PolicyResult]) -> str:
    """``RateLimit: "perhour";r=42;t=18, "persec";r=9;t=1``"""
    items = []
    for r in results:
        # remaining_units and reset_seconds, inline for in-range values (every value a
        # bucket reports): two calls fewer per policy on every response
        remaining, reset = r.remaining, r.reset_after
        units = int(remaining) if 0.0 <= remaining < SF_INT_MAX else remaining_units(remaining)
        if 0.0 <= reset < SF_INT_MAX:
            t = int(reset)
            if t != reset:
                t += 1
        else:
            t = reset_seconds(reset)
        items.append(f"{_state_prefix(r.name)}{units};t={t}")
    return ", ".join(items)


def legacy_headers(
    results: Sequence[PolicyResult], *, reset: Literal["unix", "delta"] = "unix", now_unix: float | None = None
) -> list[tuple[str, str]]:
    """SPEC H4: ``X-RateLimit-Limit/Remaining/Reset`` of the enforced policy with the
    smallest remaining (ties: the first): Limit = q, Remaining = r, Reset =
    ``ceil(now_unix + reset_after)`` (``"unix"``; ``now_unix`` defaults to
    ``time.time()``) or t (``"delta"``)."""
    if not results:
        return []
    tight = min(results, key=lambda r: r.remaining)  # min() keeps the first of equals
    if reset == "delta":
        when = reset_seconds(tight.reset_after)
    else:
        now = time.time() if now_unix is None else now_unix
        when = math.ceil(now + min(max(tight.reset_after, 0.0), SF_INT_MAX))
    return [
        ("X-RateLimit-Limit", str(quota(tight.capacity))),
        ("X-RateLimit-Remaining", str(remaining_units(tight.remaining))),
        ("X-RateLimit-Reset", str(when)),
    ]


def retry_after_header(decision: Decision) -> str | None:
    """SPEC H3: ``Retry-After`` of a refused decision, None when allowed or when the
    request can never pass."""
    if not decision.limited:
        return None
    wait = decision.retry_after
    if wait is None:
        return None
    secs = retry_after_seconds(wait)
    return None if secs is None else str(secs)


def decision_headers(
    decision: Decision,
    *,
    legacy: bool = False,
    legacy_reset: Literal["unix", "delta"] = "unix",
    now_unix: float | None = None,
) -> list[tuple[str, str]]:
    """SPEC H1-H4, H6: every rate-limit header of a decision (none when Redis and the
    deny cache were not consulted). Shadow policies are left out: a client must not
    slow down for a limit that is not enforced."""
    results = decision.results
    if not results:
        return []
    for r in results:
        if r.shadow:
            results = tuple(r for r in results if not r.shadow)
            if not results:
                return []
            break
    headers = [
        ("RateLimit-Policy", ratelimit_policy(results)),
        ("RateLimit", ratelimit(results)),
    ]
    if legacy:
        headers.extend(legacy_headers(results, reset=legacy_reset, now_unix=now_unix))
    if decision.outcome is Outcome.LIMITED:  # SPEC H3: only a refusal has a Retry-After
        retry = retry_after_header(decision)
        if retry is not None:
            headers.append(("Retry-After", retry))
    return headers
