"""The framework-neutral core: any request object, the peer and a header getter
supplied by the adapter, the sync path (SyncRateLimiter over redis.Redis) and
the async path sharing every rule. A real redis-server with the module."""

from __future__ import annotations

import json
import logging
from typing import Any, AsyncIterator, Iterator, Sequence

import pytest

from redis_tb import (
    AsyncClient,
    Client,
    ClientIP,
    Limit,
    Outcome,
    Policy,
    RateLimiter,
    SyncRateLimiter,
    per_hour,
    tiered,
)
from redis_tb_testing.servers import RedisServer, free_port


class FrameworkRequest:
    """A request object of some other framework: no Starlette attributes at all."""

    def __init__(self, user: str | None = None, plan: str | None = None) -> None:
        self.user = user
        self.plan = plan


def header_getter(values: dict[str, list[str]]) -> Any:
    seen: list[str] = []

    def get(name: str) -> Sequence[str]:
        seen.append(name)
        return values.get(name, [])

    get.seen = seen  # type: ignore[attr-defined]
    return get


@pytest.fixture
def sync_limiter(redis_server: RedisServer) -> Iterator[SyncRateLimiter]:
    lim = SyncRateLimiter(Client.from_url(redis_server.url, timeout=5), timeout=5,
                          client_ip=ClientIP(["10.0.0.0/8"]))
    lim.client.redis.flushall()
    yield lim
    lim.close()


@pytest.fixture
async def async_limiter(redis_server: RedisServer) -> AsyncIterator[RateLimiter]:
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5,
                      client_ip=ClientIP(["10.0.0.0/8"]))
    yield lim
    await lim.aclose()


def user_key(req: FrameworkRequest) -> str | None:
    return req.user


POLICIES = [
    per_hour("ip", 100),
    tiered("user", {"free": Limit(2, 1e-6), "pro": Limit(100, 1)}, lambda r: r.plan, default="free", key=user_key),
]


def test_sync_path_uses_the_adapters_peer_and_headers(sync_limiter: SyncRateLimiter) -> None:
    get = header_getter({"x-forwarded-for": ["198.51.100.9, 10.0.0.5"]})
    d = sync_limiter.check(FrameworkRequest("u1"), POLICIES, "GET /items/{id}", peer="10.1.2.3", headers=get)
    assert d.outcome is Outcome.ALLOWED
    assert [r.key for r in d.results] == ["rl:ip:198.51.100.9", "rl:user:u1"]
    assert [r.capacity for r in d.results] == [100, 2]
    assert get.seen == ["x-forwarded-for"]
    # an untrusted peer: the header is not even read
    get2 = header_getter({"x-forwarded-for": ["198.51.100.9"]})
    d2 = sync_limiter.check(FrameworkRequest(), POLICIES, None, peer="203.0.113.5", headers=get2)
    assert [r.key for r in d2.results] == ["rl:ip:203.0.113.5"] and get2.seen == []


def test_sync_all_or_nothing_refusal_and_refund(sync_limiter: SyncRateLimiter) -> None:
    req = FrameworkRequest("u2")
    kw: dict[str, Any] = {"peer": "203.0.113.6", "headers": header_getter({})}
    first = sync_limiter.check(req, POLICIES, **kw)
    second = sync_limiter.check(req, POLICIES, **kw)
    third = sync_limiter.check(req, POLICIES, **kw)
    assert first.allowed and second.allowed and third.limited
    assert third.violated == ("user",)
    # the refusal by 'user' spent nothing on 'ip': 100 - 2 left
    assert [r.remaining for r in third.results][0] == pytest.approx(98, abs=0.01)
    assert second.refund_sync() and not second.refund_sync()
    assert sync_limiter.stats.refunds == 1
    assert sync_limiter.check(req, POLICIES, **kw).allowed
    status, headers, body = sync_limiter.rejection(sync_limiter.check(req, POLICIES, **kw)) or (0, [], b"")
    assert status == 429 and ("Content-Type", "application/problem+json") in headers
    assert json.loads(body)["violated_policies"] == ["user"]
    assert sync_limiter.rejection(first) is None


def test_sync_path_refuses_awaitable_functions(sync_limiter: SyncRateLimiter) -> None:
    async def key(req: Any) -> str:
        return "x"

    with pytest.raises(TypeError, match="synchronous path"):
        sync_limiter.check(FrameworkRequest(), [Policy("a", Limit(1, 1), key=key)], peer="203.0.113.1")


async def test_both_paths_decide_alike(async_limiter: RateLimiter, sync_limiter: SyncRateLimiter) -> None:
    async def akey(req: FrameworkRequest) -> str | None:  # the async path awaits these
        return req.user

    apolicies = [POLICIES[0], tiered("user", {"free": Limit(2, 1e-6)}, lambda r: r.plan, default="free", key=akey)]
    kw: dict[str, Any] = {"peer": "203.0.113.7", "headers": header_getter({})}
    a = [await async_limiter.check(FrameworkRequest(f"a{i % 2}"), apolicies, **kw) for i in range(6)]
    sync_limiter.client.redis.flushall()
    s = [sync_limiter.check(FrameworkRequest(f"a{i % 2}"), POLICIES, **kw) for i in range(6)]
    assert [d.outcome for d in a] == [d.outcome for d in s] == [Outcome.ALLOWED] * 4 + [Outcome.LIMITED] * 2
    assert [[r.key for r in d.results] for d in a] == [[r.key for r in d.results] for d in s]
    assert [sync_limiter.headers(d) for d in s][:4] != []
    assert [[(n, v) for n, v in async_limiter.headers(d) if n != "RateLimit"] for d in a] == [
        [(n, v) for n, v in sync_limiter.headers(d) if n != "RateLimit"] for d in s
    ]


def test_sync_dead_redis_fails_open_then_cools_down(caplog: pytest.LogCaptureFixture) -> None:
    lim = SyncRateLimiter(Client.from_url(f"redis://127.0.0.1:{free_port()}"), cooldown=60)
    caplog.set_level(logging.WARNING, logger="redis_tb")
    first = lim.check(FrameworkRequest(), [per_hour("ip", 10)], peer="203.0.113.7")
    second = lim.check(FrameworkRequest(), [per_hour("ip", 10)], peer="203.0.113.7")
    assert first.outcome is second.outcome is Outcome.STORE_ERROR and first.allowed
    assert first.error is not None and second.error is None
    assert lim.stats.store_errors == 1 and lim.stats.degraded == 2
    assert len(caplog.records) == 1 and "Redis skipped for 60 s" in caplog.records[0].getMessage()
    closed = SyncRateLimiter(Client.from_url(f"redis://127.0.0.1:{free_port()}"), fail_open=False)
    d = closed.check(FrameworkRequest(), [per_hour("ip", 10)], peer="203.0.113.7")
    status, headers, body = closed.rejection(d) or (0, [], b"")
    assert status == 503 and ("Retry-After", "1") in headers and json.loads(body)["status"] == 503
    lim.close()
    closed.close()


def test_sync_startup_finds_a_missing_module() -> None:
    from redis_tb import ModuleNotLoadedError

    bare = RedisServer(module=False).start()
    try:
        lim = SyncRateLimiter(Client.from_url(bare.url, timeout=5), backend="module")  # SPEC E1: forced
        with pytest.raises(ModuleNotLoadedError, match="module not loaded"):
            lim.startup()
        lim.close()
    finally:
        bare.stop()


def test_client_ip_as_a_key_of_a_django_style_request() -> None:
    class Meta:
        META = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "198.51.100.1, 10.0.0.2"}

    assert ClientIP(["10.0.0.0/8"])(Meta()) == "198.51.100.1"
    assert ClientIP()(Meta()) == "10.0.0.1"
