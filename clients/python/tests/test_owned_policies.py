"""A limiter owns its policies and applies their scope (SPEC C1, C10, C11, L1, F2) once,
in the core: the ASGI middleware and the FastAPI dependency only hand it the route.
Against a real redis-server; a limiter pointed at a closed port proves that an
out-of-scope request sends nothing."""

from __future__ import annotations

from typing import Any, AsyncIterator

import httpx
import pytest
from fastapi import Depends, FastAPI
from starlette.requests import Request

from redis_tb import (
    AsyncClient,
    Client,
    InFlightLimit,
    Outcome,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    SyncRateLimiter,
    WindowLimit,
    per_hour,
    per_minute,
)
from redis_tb.fastapi import RateLimit
from redis_tb_testing.servers import RedisServer, free_port


def request(peer: str = "203.0.113.7") -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "headers": [], "client": (peer, 1)})


@pytest.fixture
async def url(redis_server: RedisServer) -> AsyncIterator[str]:
    client = AsyncClient.from_url(redis_server.url, timeout=5)
    await client.redis.flushall()
    await client.aclose()
    yield redis_server.url


def dead_client() -> AsyncClient:
    return AsyncClient.from_url(f"redis://127.0.0.1:{free_port()}", timeout=0.5)


async def test_the_limiter_checks_its_own_policies(url: str) -> None:
    lim = RateLimiter(AsyncClient.from_url(url, timeout=5), timeout=5, policies=[per_minute("ip", 2), per_hour("ip-hour", 5)])
    try:
        got = [await lim.check(request(), route="GET /a") for _ in range(3)]
        assert [d.outcome for d in got] == [Outcome.ALLOWED, Outcome.ALLOWED, Outcome.LIMITED]
        assert [r.name for r in got[0].results] == ["ip", "ip-hour"]
        assert got[1].results[0].remaining < 0.01  # refilled a little since
    finally:
        await lim.aclose()


def test_its_policies_are_checked_when_it_is_built() -> None:
    client = dead_client()
    with pytest.raises(ValueError, match="distinct"):  # C1
        RateLimiter(client, policies=[per_minute("ip", 2), per_hour("ip", 5)])
    with pytest.raises(ValueError, match="in-flight"):  # C10
        RateLimiter(client, policies=[Policy("a", InFlightLimit(2)), Policy("b", InFlightLimit(2))])
    with pytest.raises(ValueError, match="window"):  # C10
        RateLimiter(client, policies=[Policy("w", WindowLimit(10, 60)), per_minute("ip", 2)])
    with pytest.raises(ValueError, match="at most 64"):  # C11
        RateLimiter(client, policies=[per_minute(f"p{i}", 2) for i in range(65)])


async def test_out_of_scope_requests_send_nothing() -> None:
    """L1: excluded routes (``* /x`` for every method) and unmatched requests are
    not limited, decided before anything is sent: against a dead Redis they are
    ``not_limited``, an in-scope one a store error."""
    lim = RateLimiter(dead_client(), policies=[per_minute("ip", 2)], exclude=["GET /healthz", "* /status"])
    try:
        for route in ("GET /healthz", "POST /status", None):
            d = await lim.check(request(), route=route)
            assert d.outcome is Outcome.NOT_LIMITED, route
            assert not lim.limits(route)
        assert lim.stats.store_errors == 0
        d = await lim.check(request(), route="GET /a")
        assert d.outcome is Outcome.STORE_ERROR and lim.stats.store_errors == 1
        assert lim.limits("GET /a") and lim.limits("POST /healthz")
    finally:
        await lim.aclose()


async def test_limit_unmatched_limits_by_the_route_less_policies(url: str) -> None:
    lim = RateLimiter(
        AsyncClient.from_url(url, timeout=5), timeout=5, limit_unmatched=True,
        policies=[per_minute("ip", 1), per_minute("items", 1, routes=["GET /items"])],
    )
    try:
        first, second = [await lim.check(request(), route=None) for _ in range(2)]
        assert [r.name for r in first.results] == ["ip"]
        assert (first.outcome, second.outcome) == (Outcome.ALLOWED, Outcome.LIMITED)
    finally:
        await lim.aclose()


async def test_refund_on_is_the_limiters(url: str) -> None:
    """F2: the scope's refund_on: ``finish(status)`` gives a listed status's tokens back."""
    lim = RateLimiter(AsyncClient.from_url(url, timeout=5), timeout=5, policies=[per_minute("ip", 1)], refund_on=[503])
    try:
        d = await lim.check(request(), route="GET /a")
        await d.finish(503)
        assert d.refunded
        again = await lim.check(request(), route="GET /a")
        assert again.outcome is Outcome.ALLOWED
        await again.finish(200)
        assert not again.refunded
        assert (await lim.check(request(), route="GET /a")).outcome is Outcome.LIMITED
    finally:
        await lim.aclose()


async def test_a_limiter_without_policies_says_so() -> None:
    lim = RateLimiter(dead_client())
    try:
        with pytest.raises(TypeError, match="owns no policies"):
            await lim.check(request(), route="GET /a")
        with pytest.raises(TypeError, match="needs a limiter with its policies"):
            RateLimitMiddleware(FastAPI(), limiter=lim)
        with pytest.raises(TypeError, match="RateLimit needs policies"):
            RateLimit(lim)
        owned = RateLimiter(dead_client(), policies=[per_minute("ip", 2)])
        with pytest.raises(TypeError, match="belong to the limiter"):
            RateLimitMiddleware(FastAPI(), limiter=owned, exclude=["GET /healthz"])
        await owned.aclose()
    finally:
        await lim.aclose()


async def test_with_policies_shares_the_connection_breaker_and_stats(url: str) -> None:
    lim = RateLimiter(AsyncClient.from_url(url, timeout=5), timeout=5, policies=[per_minute("ip", 5)])
    try:
        other = lim.with_policies([per_minute("login", 1)], exclude=["GET /free"])
        assert other.client is lim.client and other.breaker is lim.breaker and other.stats is lim.stats
        assert other.policies != lim.policies and lim.scope.exclude == frozenset()
        assert lim.policy_sets == [lim.policies, other.policies]  # U3: startup sees both
        assert (await other.check(request(), route="GET /free")).outcome is Outcome.NOT_LIMITED
        outcomes = [(await other.check(request(), route="GET /a")).outcome for _ in range(2)]
        assert outcomes == [Outcome.ALLOWED, Outcome.LIMITED]
        assert (await lim.check(request(), route="GET /a")).outcome is Outcome.ALLOWED
        assert lim.stats.limited == 1 and lim.stats.allowed == 2
        with pytest.raises(ValueError, match="distinct"):
            lim.with_policies([per_minute("x", 1), per_minute("x", 2)])
    finally:
        await lim.aclose()


def test_the_sync_limiter_owns_its_policies_too(redis_server: RedisServer) -> None:
    lim = SyncRateLimiter(Client.from_url(redis_server.url, timeout=5), timeout=5,
                          policies=[per_minute("sync", 1)], exclude=["GET /healthz"])
    try:
        lim.client.redis.flushall()
        assert lim.check(request(), route="GET /healthz").outcome is Outcome.NOT_LIMITED
        assert [lim.check(request(), route="GET /a").outcome for _ in range(2)] == [Outcome.ALLOWED, Outcome.LIMITED]
    finally:
        lim.close()


async def test_the_middleware_and_dependency_ask_the_limiter(url: str) -> None:
    """Over ASGI: the middleware takes a limiter that owns its policies and scope; the
    dependency a second set on the same connection."""
    lim = RateLimiter(AsyncClient.from_url(url, timeout=5), timeout=5,
                      policies=[per_minute("ip", 2)], exclude=["GET /healthz"])
    app = FastAPI()
    login = RateLimit(lim, [per_minute("login", 1)])

    @app.get("/a")
    async def a() -> dict[str, Any]:
        return {}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {}

    @app.post("/login", dependencies=[Depends(login)])
    async def do_login() -> dict[str, Any]:
        return {}

    app.add_middleware(RateLimitMiddleware, limiter=lim)
    transport = httpx.ASGITransport(app=app, client=("203.0.113.9", 1))
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            codes = [(await http.get("/a")).status_code for _ in range(3)]
            assert codes == [200, 200, 429]
            health = [await http.get("/healthz") for _ in range(3)]
            assert [r.status_code for r in health] == [200, 200, 200]
            assert "ratelimit" not in health[0].headers
            await lim.client.redis.flushall()
            logins = [(await http.post("/login")).status_code for _ in range(2)]
            assert logins == [200, 429]
    finally:
        await lim.aclose()
