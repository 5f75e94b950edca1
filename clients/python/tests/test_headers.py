"""The header mapping on its edge cases; every emitted field parses back with a
structured-field parser (http_sfv)."""

from __future__ import annotations

import json
import math
import time

import pytest
from http_sfv.list import List

from redis_tb import Decision, Outcome, PolicyResult
from redis_tb.headers import (
    SF_INT_MAX,
    decision_headers,
    legacy_headers,
    quota,
    retry_after_seconds,
    window,
)
from redis_tb.problem import problem


def result(
    name: str = "perhour",
    *,
    capacity: float = 1000,
    rate: float = 1000 / 3600,
    cost: float = 1,
    allowed: bool = True,
    remaining: float = 42,
    retry_after: float = 0,
    reset_after: float = 17.2,
) -> PolicyResult:
    return PolicyResult(name, f"rl:{name}:x", capacity, rate, cost, allowed, remaining, retry_after, reset_after)


def allowed(*results: PolicyResult) -> Decision:
    return Decision(Outcome.ALLOWED, True, results)


def limited(*results: PolicyResult) -> Decision:
    return Decision(Outcome.LIMITED, False, results)


def parse(value: str) -> list[tuple[object, dict[str, object]]]:
    out = List()
    out.parse(value.encode())
    return [(m.value, dict(m.params)) for m in out]


def headers(decision: Decision, legacy: bool = False) -> dict[str, str]:
    hs = decision_headers(decision, legacy=legacy, legacy_reset="delta")
    names = [k for k, _ in hs]
    assert len(names) == len(set(names)), names
    return dict(hs)


def test_allowed_request_gets_policy_and_state_items_that_parse_back() -> None:
    h = headers(allowed(result()))
    assert h["RateLimit-Policy"] == '"perhour";q=1000;w=3600'
    assert h["RateLimit"] == '"perhour";r=42;t=18'
    assert parse(h["RateLimit-Policy"]) == [("perhour", {"q": 1000, "w": 3600})]
    assert parse(h["RateLimit"]) == [("perhour", {"r": 42, "t": 18})]
    assert "Retry-After" not in h
    assert "X-RateLimit-Limit" not in h


def test_fractional_remaining_is_floored() -> None:
    h = headers(allowed(result(remaining=8.999999)))
    assert parse(h["RateLimit"]) == [("perhour", {"r": 8, "t": 18})]


def test_remaining_below_one_is_zero_and_a_reservation_debt_is_zero() -> None:
    assert parse(headers(allowed(result(remaining=0.4)))["RateLimit"])[0][1]["r"] == 0
    assert parse(headers(allowed(result(remaining=-3.5)))["RateLimit"])[0][1]["r"] == 0


def test_full_bucket_has_reset_zero() -> None:
    h = headers(allowed(result(remaining=1000, reset_after=0)))
    assert parse(h["RateLimit"]) == [("perhour", {"r": 1000, "t": 0})]


def test_reset_after_is_rounded_up_even_by_a_microsecond() -> None:
    h = headers(allowed(result(reset_after=0.000001)))
    assert parse(h["RateLimit"])[0][1]["t"] == 1


def test_sub_second_retry_after_becomes_one_second_never_zero() -> None:
    d = limited(result(allowed=False, remaining=0.2, retry_after=0.3, reset_after=3))
    h = headers(d)
    assert h["Retry-After"] == "1"
    body = problem(d)
    assert body["retry_after"] == 0.3
    assert body["violated_policies"] == ["perhour"]


def test_retry_after_is_rounded_up_to_whole_seconds() -> None:
    d = limited(result(allowed=False, remaining=0, retry_after=2.000001, reset_after=5))
    assert headers(d)["Retry-After"] == "3"
    d = limited(result(allowed=False, remaining=0, retry_after=2.0, reset_after=5))
    assert headers(d)["Retry-After"] == "2"


def test_cost_above_capacity_is_429_without_retry_after_and_says_never() -> None:
    d = limited(result("small", capacity=5, rate=1, cost=6, allowed=False, remaining=5, retry_after=-1, reset_after=0))
    h = headers(d)
    assert "Retry-After" not in h
    body = problem(d)
    assert body["retry_after"] is None
    assert body["violated_policies"] == ["small"]
    assert "never" in str(body["detail"])
    assert body["status"] == 429 and body["title"] == "Too Many Requests" and body["type"] == "about:blank"
    # still the quota headers, which parse
    assert parse(h["RateLimit"]) == [("small", {"r": 5, "t": 0})]


def test_never_wins_over_a_finite_wait_of_another_policy() -> None:
    d = limited(
        result("a", allowed=False, retry_after=3),
        result("b", capacity=1, rate=1, cost=2, allowed=False, remaining=1, retry_after=-1, reset_after=0),
    )
    assert d.retry_after is None  # SPEC D3: one violated policy can never pass
    assert "Retry-After" not in headers(d)
    assert problem(d)["violated_policies"] == ["a", "b"]


def test_several_policies_one_item_each_in_order_and_the_largest_wait() -> None:
    d = limited(
        result("perhour", allowed=True, remaining=42, reset_after=18),
        result("persec", capacity=10, rate=10, allowed=False, remaining=0.5, retry_after=0.05, reset_after=0.95),
        result("perday", capacity=5000, rate=5000 / 86400, allowed=False, remaining=0, retry_after=17.28, reset_after=86400),
    )
    h = headers(d, legacy=True)
    assert parse(h["RateLimit-Policy"]) == [
        ("perhour", {"q": 1000, "w": 3600}),
        ("persec", {"q": 10, "w": 1}),
        ("perday", {"q": 5000, "w": 86400}),
    ]
    assert parse(h["RateLimit"]) == [
        ("perhour", {"r": 42, "t": 18}),
        ("persec", {"r": 0, "t": 1}),
        ("perday", {"r": 0, "t": 86400}),
    ]
    assert h["Retry-After"] == "18"
    assert problem(d)["violated_policies"] == ["persec", "perday"]
    # legacy: the policy with the smallest remaining, the first of a tie (perday: 0 < 0.5)
    assert h["X-RateLimit-Limit"] == "5000"
    assert h["X-RateLimit-Remaining"] == "0"
    assert h["X-RateLimit-Reset"] == "86400"


def test_legacy_reset_is_a_unix_timestamp_by_default() -> None:
    d = allowed(result("a", reset_after=17.2), result("b", capacity=9, remaining=1, reset_after=30.5))
    before = time.time()
    h = dict(decision_headers(d, legacy=True))
    after = time.time()
    assert math.ceil(before + 30.5) <= int(h["X-RateLimit-Reset"]) <= math.ceil(after + 30.5)
    assert dict(decision_headers(d, legacy=True, legacy_reset="delta"))["X-RateLimit-Reset"] == "31"
    assert h["X-RateLimit-Limit"] == "9" and h["X-RateLimit-Remaining"] == "1"
    assert "X-RateLimit-Reset" not in dict(decision_headers(d))


def test_shadow_results_are_left_out_of_every_header() -> None:
    watched = PolicyResult("watch", "rl:watch:x", 5, 1, 1, False, 0, 3, 5, shadow=True)
    d = allowed(result("enforced", remaining=7), watched)
    h = dict(decision_headers(d, legacy=True, legacy_reset="delta"))
    assert parse(h["RateLimit-Policy"]) == [("enforced", {"q": 1000, "w": 3600})]
    assert parse(h["RateLimit"]) == [("enforced", {"r": 7, "t": 18})]
    assert h["X-RateLimit-Remaining"] == "7" and "Retry-After" not in h
    only_shadow = allowed(watched)
    assert decision_headers(only_shadow, legacy=True) == []
    assert only_shadow.remaining is None and only_shadow.violated == ()


def test_legacy_headers_pick_the_first_of_equal_remaining() -> None:
    got = dict(legacy_headers([result("a", capacity=7, remaining=1), result("b", capacity=9, remaining=1)]))
    assert got["X-RateLimit-Limit"] == "7"


def test_window_of_n_per_period_is_the_period_despite_float_rounding() -> None:
    for n in range(1, 2000):
        for period in (1, 60, 3600, 86400):
            assert window(n, n / period) == period, (n, period)


def test_window_is_rounded_up_and_at_least_one() -> None:
    assert window(10, 3) == 4  # 3.33 s
    assert window(1, 1000) == 1  # 1 ms
    assert window(2.5, 1) == 3


def test_fractional_capacity_quota_is_floored() -> None:
    assert quota(2.5) == 2
    assert quota(0.5) == 0


def test_huge_values_are_clamped_to_the_structured_field_integer_range() -> None:
    d = allowed(result(capacity=2.0**53, rate=1e-9, remaining=2.0**53, reset_after=1e17))
    h = headers(d)
    assert parse(h["RateLimit-Policy"]) == [("perhour", {"q": SF_INT_MAX, "w": SF_INT_MAX})]
    assert parse(h["RateLimit"]) == [("perhour", {"r": SF_INT_MAX, "t": SF_INT_MAX})]


def test_policy_names_with_dash_and_underscore_are_sf_strings() -> None:
    h = headers(allowed(result("per-ip_1")))
    assert h["RateLimit"].startswith('"per-ip_1";')
    assert parse(h["RateLimit"])[0][0] == "per-ip_1"


def test_retry_after_seconds_edges() -> None:
    assert retry_after_seconds(0) == 1
    assert retry_after_seconds(1e-6) == 1
    assert retry_after_seconds(1) == 1
    assert retry_after_seconds(1.0000001) == 2
    assert retry_after_seconds(-1) is None


def test_store_error_and_not_limited_emit_no_headers() -> None:
    assert decision_headers(Decision(Outcome.STORE_ERROR, True)) == []
    assert decision_headers(Decision(Outcome.NOT_LIMITED, True)) == []


def test_problem_body_is_json_with_the_rfc_9457_members() -> None:
    from redis_tb.problem import problem_body

    d = limited(result(allowed=False, remaining=0, retry_after=4, reset_after=16))
    body = json.loads(problem_body(problem(d)))
    assert body == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "rate limit exceeded for 'perhour': retry after 4 s",
        "violated_policies": ["perhour"],
        "retry_after": 4,
    }


@pytest.mark.parametrize("remaining", [0.0, 0.999, 1.0, 41.5, 1e15 - 0.5])
def test_remaining_header_never_promises_more_than_there_is(remaining: float) -> None:
    r = parse(headers(allowed(result(capacity=1e15, remaining=remaining)))["RateLimit"])[0][1]["r"]
    assert isinstance(r, int) and r <= remaining
