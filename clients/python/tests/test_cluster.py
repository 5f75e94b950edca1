"""SPEC K6, U3 against a real single-node Redis Cluster (``cluster-enabled yes``, every
slot on one node) with the module: a limiter whose policies go several in one call and
that has no tag function refuses to start there (U3's line, word for word); with a tag
function it starts and limits as anywhere else; started degraded (Redis unreachable at
startup, so nothing was asked), its calls are refused CROSSSLOT by the server, and each
is a 500 naming the call's policies, never an admission (K6)."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from redis_tb import AsyncClient, Client, Limit, Policy, RateLimiter, RateLimitMiddleware, StartupError, SyncRateLimiter
from redis_tb_testing.servers import RedisServer, free_port
from test_lifespan import run_lifespan

POLICIES = [
    Policy("ip", Limit(2, 1e-9)),
    Policy("user", Limit(100, 1e-9), key=lambda request: "alice"),
    Policy("llm", Limit(1000, 1e-9), settle_later=True),
]
REFUSAL = (
    "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'user'), which a Redis Cluster "
    "refuses unless they share a hash slot: set a tag function (SPEC K6)"
)
CROSSSLOT_BODY = (
    b'{"type":"about:blank","title":"Internal Server Error","status":500,"detail":"rate limit policies '
    b"'ip', 'user' have keys in different cluster slots: give the limiter a hash tag\"}"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisServer]:
    node = RedisServer(cluster=True).start()
    try:
        yield node
    finally:
        node.stop()


def limiters(url: str, **options: Any) -> list[RateLimiter | SyncRateLimiter]:
    return [
        RateLimiter(AsyncClient.from_url(url, timeout=2), timeout=2, name="api", **options),
        SyncRateLimiter(Client.from_url(url, timeout=2), timeout=2, name="api", **options),
    ]


async def start(lim: RateLimiter | SyncRateLimiter) -> None:
    if isinstance(lim, RateLimiter):
        await lim.startup(POLICIES)
    else:
        lim.startup(POLICIES)


async def check(lim: RateLimiter | SyncRateLimiter) -> Any:
    if isinstance(lim, RateLimiter):
        return await lim.check(None, POLICIES, peer="203.0.113.9")
    return lim.check(None, POLICIES, peer="203.0.113.9")


async def test_a_limiter_sending_several_keys_without_a_tag_does_not_start_on_a_cluster(cluster: RedisServer) -> None:
    for lim in limiters(cluster.url):
        with pytest.raises(StartupError) as info:
            await start(lim)
        assert str(info.value) == REFUSAL


async def test_with_a_tag_function_it_starts_and_limits(cluster: RedisServer) -> None:
    cluster.cli("FLUSHALL")
    for lim in limiters(cluster.url, hash_tag=lambda request: "acme", prefix="tagged"):
        cluster.cli("FLUSHALL")
        await start(lim)
        outcomes = [(await check(lim)).outcome.value for _ in range(3)]
        assert outcomes == ["allowed", "allowed", "limited"]  # ip: 2, never refilled
        assert lim.stats.invalid_inputs == 0 and lim.stats.store_errors == 0


async def test_a_degraded_start_then_gets_500s_never_admissions(caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    caplog.set_level(logging.WARNING, logger="redis_tb")
    lims = limiters(url, start_degraded=True)
    for lim in lims:
        await start(lim)  # unreachable: nothing asked, started in the failure mode
    assert caplog.text.count("starting degraded (the limiter's failure mode applies until it answers)") == 2
    node = RedisServer(cluster=True, port=port).start()
    try:
        for lim in lims:
            for _ in range(3):
                d = await check(lim)
                assert d.outcome.value == "invalid_input" and not d.allowed
                status, headers, body = lim.response(d)
                assert (status, body) == (500, CROSSSLOT_BODY)
                assert not any(k.lower().startswith("ratelimit") for k, _ in headers)
            assert lim.stats.invalid_inputs == 3 and lim.stats.store_errors == 0 and lim.stats.degraded == 0
            assert lim.stats.allowed == 0
        # one line a second per limiter, naming its policies
        assert "Redis Cluster refused a call of policies 'ip', 'user' (CROSSSLOT" in caplog.text
    finally:
        node.stop()


async def test_through_the_middleware_the_start_fails_and_a_crossslot_call_is_a_500(cluster: RedisServer) -> None:
    """The ASGI adapter over a real cluster node: its lifespan fails with U3's line
    (the middleware registered its policies before the app's startup ran); served
    anyway (as a degraded start would), a request is the 500 with P4's body and the
    handler is never called."""
    limiter = RateLimiter(AsyncClient.from_url(cluster.url, timeout=2), timeout=2, name="api")
    calls: list[str] = []

    async def hello(request: Request) -> PlainTextResponse:
        calls.append(request.url.path)
        return PlainTextResponse("hi")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await limiter.startup()
        yield

    app = Starlette(routes=[Route("/hello", hello)], lifespan=lifespan)
    app.add_middleware(RateLimitMiddleware, limiter=limiter, policies=POLICIES)
    sent, escaped = await run_lifespan(app)
    assert escaped is None and sent == [{"type": "lifespan.startup.failed", "message": REFUSAL}]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://x") as c:
        r = await c.get("/hello")
    assert r.status_code == 500 and r.content == CROSSSLOT_BODY
    assert r.headers["content-type"] == "application/problem+json"
    assert calls == []
    await limiter.aclose()
