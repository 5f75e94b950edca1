"""SPEC G5 in the core, without a store: which holds an adapter renews and when it
stops. A decision's holds are told to the adapter that watches it (watch_holds), also
when the handler takes them on a merged decision (the middleware's and a dependency's,
FastAPI's RateLimit); the response's end (finish) stops their renewals, and a settled
or refused hold is never renewed."""

from __future__ import annotations

from typing import Any, cast

from redis_tb import Decision, Hold, Outcome
from redis_tb.limiter import BaseLimiter


class StubLimiter:
    """What Decision.hold calls: a hold taken (or refused, for an estimate over 100)."""

    async def _hold(self, policy: str, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int) -> Hold:
        ok = estimate <= 100
        return Hold(
            cast(BaseLimiter, self), allowed=ok, remaining=100 - estimate if ok else 100, retry_after=0 if ok else 1,
            reset_after=1, id="0123456789abcdef" if ok else None, key=key, policy=policy, capacity=capacity,
            rate=rate, estimate=estimate, ttl_ms=ttl_ms,
        )


def decision(holdable: dict[str, tuple[str, float, float]] | None = None) -> Decision:
    d = Decision(Outcome.ALLOWED, True)
    d._limiter = cast(Any, StubLimiter())
    if holdable:
        d._holdable = holdable
    return d


async def test_a_hold_taken_on_a_merged_decision_is_renewed_by_the_watching_adapter_and_stops_with_it() -> None:
    middleware = decision()
    taken: list[Hold] = []
    middleware.watch_holds(taken.append)
    dependency = decision({"llm": ("rl:llm:203.0.113.9", 100.0, 1.0)})
    merged = middleware.merged(dependency)
    hold = await merged.hold("llm", 10, ttl=4)
    assert taken == [hold] and hold.renewing and hold.renew_seconds == 2
    assert middleware.holds == (hold,)
    await middleware.finish()  # the response ended (N4): renewals stop, settling stays possible
    assert not hold.renewing and not hold.lost


async def test_a_refused_hold_is_never_renewed() -> None:
    d = decision({"llm": ("rl:llm:203.0.113.9", 100.0, 1.0)})
    taken: list[Hold] = []
    d.watch_holds(taken.append)
    refused = await d.hold("llm", 1000)
    assert not refused.allowed and not refused.renewing and taken == [] and d.holds == ()
    assert await refused.renew() is False  # nothing sent
