"""Shadow mode (issue 21): a shadow policy is charged exactly as when enforced, in the
same TB.MTAKE, but only observes: real redis-server with the module."""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator

import pytest

from prometheus_client import CollectorRegistry

from redis_tb import AsyncClient, Client, DenyCache, Limit, Outcome, Policy, RateLimiter, SyncRateLimiter, per_hour
from redis_tb.metrics import PrometheusMetrics
from redis_tb_testing.servers import RedisServer

PEER: dict[str, Any] = {"peer": "203.0.113.9"}


class Req:
    """A request object of any framework: the policies here use the peer only."""


@pytest.fixture
async def limiter(redis_server: RedisServer) -> AsyncIterator[RateLimiter]:
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5)
    await lim.client.redis.flushall()
    yield lim
    await lim.aclose()


@pytest.fixture
def tb(redis_server: RedisServer) -> Any:
    c = Client.from_url(redis_server.url, timeout=5)
    yield c
    c.close()


def tight(shadow: bool) -> Policy:
    return Policy("tight", Limit(2, 1e-6), shadow=shadow)


async def test_shadow_refusal_lets_the_request_through_uncharged(
    limiter: RateLimiter, tb: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_tb")
    policies = [per_hour("ip", 100), tight(shadow=True)]
    got = [await limiter.check(Req(), policies, **PEER) for _ in range(5)]
    assert [d.outcome for d in got] == [Outcome.ALLOWED] * 5
    assert all(d.allowed and not d.limited for d in got)
    assert [d.shadow_limited for d in got] == [(), (), ("tight",), ("tight",), ("tight",)]
    assert [r.shadow for r in got[0].results] == [False, True]
    # all or nothing, as if enforced: the refused requests spent nothing on 'ip'
    assert tb.peek("rl:ip:203.0.113.9", 100, 100 / 3600).remaining == pytest.approx(98, abs=0.01)
    # nothing was charged, so there is nothing to refund
    assert not await got[2].refund()
    assert limiter.stats.shadow_limited == 3 and limiter.stats.limited == 0
    # allowed counts what Redis admitted (as Rust and Node do): the two charged requests
    assert limiter.stats.allowed == 2 and limiter.stats.checks == 5
    # the headers describe the enforced policy only
    names = dict(limiter.headers(got[3]))
    assert names["RateLimit-Policy"] == '"ip";q=100;w=3600' and "Retry-After" not in names
    # logged once (within a second) with the spec's text
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["redis-tb: shadow policy 'tight' would have limited a request (1 since the last line)"]


async def test_moving_a_policy_between_shadow_and_enforced_is_configuration_only(limiter: RateLimiter) -> None:
    enforced = [per_hour("ip", 100), tight(shadow=False)]
    shadowed = [per_hour("ip", 100), tight(shadow=True)]
    assert (await limiter.check(Req(), enforced, **PEER)).allowed
    assert (await limiter.check(Req(), shadowed, **PEER)).allowed
    # the same bucket: enforced now refuses, shadow lets through, enforced refuses again
    d1 = await limiter.check(Req(), enforced, **PEER)
    d2 = await limiter.check(Req(), shadowed, **PEER)
    d3 = await limiter.check(Req(), enforced, **PEER)
    assert (d1.outcome, d2.outcome, d3.outcome) == (Outcome.LIMITED, Outcome.ALLOWED, Outcome.LIMITED)
    assert d1.violated == d3.violated == ("tight",) and d2.shadow_limited == ("tight",)
    # the limiter-wide switch does the same for every policy
    everything = RateLimiter(limiter.client, shadow=True, timeout=5)
    d4 = await everything.check(Req(), enforced, **PEER)
    assert d4.outcome is Outcome.ALLOWED and d4.shadow_limited == ("tight",)
    assert all(r.shadow for r in d4.results) and everything.headers(d4) == []


async def test_enforced_refusal_names_only_enforced_policies(limiter: RateLimiter) -> None:
    policies = [Policy("hard", Limit(1, 1e-6)), tight(shadow=True), Policy("soft", Limit(1, 1e-6), shadow=True)]
    assert (await limiter.check(Req(), policies, **PEER)).allowed
    d = await limiter.check(Req(), policies, **PEER)
    assert d.outcome is Outcome.LIMITED and d.violated == ("hard",)
    assert d.shadow_limited == ("soft",)  # 'tight' still had a token
    rejection = limiter.rejection(d)
    assert rejection is not None and rejection[0] == 429
    headers = dict(rejection[1])
    assert headers["RateLimit-Policy"] == '"hard";q=1;w=1000000'
    assert b'"violated_policies":["hard"]' in rejection[2]


async def test_shadow_refusals_never_enter_the_deny_cache(redis_server: RedisServer) -> None:
    cache = DenyCache(max_entries=10)
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5, deny_cache=cache)
    await lim.client.redis.flushall()
    for _ in range(4):
        await lim.check(Req(), [tight(shadow=True)], **PEER)
    assert len(cache) == 0 and lim.stats.deny_cache_hits == 0 and lim.stats.shadow_limited == 2
    await lim.aclose()


def test_sync_path_counts_only_charged_requests_as_allowed(redis_server: RedisServer) -> None:
    registry = CollectorRegistry()
    lim = SyncRateLimiter(
        Client.from_url(redis_server.url, timeout=5), timeout=5, metrics=PrometheusMetrics(registry, limiter="s")
    )
    lim.client.redis.flushall()
    policies = [per_hour("ip", 100), tight(shadow=True)]
    got = [lim.check(Req(), policies, **PEER) for _ in range(4)]
    assert [d.outcome for d in got] == [Outcome.ALLOWED] * 4
    assert [d.shadow_limited for d in got] == [(), (), ("tight",), ("tight",)]
    assert (lim.stats.allowed, lim.stats.shadow_limited, lim.stats.limited) == (2, 2, 0)

    def allowed_total(policy: str) -> float | None:
        return registry.get_sample_value("redis_tb_allowed_total", {"limiter": "s", "policy": policy})

    # tokens were taken only for the two admitted requests, on both policies
    assert allowed_total("ip") == 2 and allowed_total("tight") == 2
    lim.close()
