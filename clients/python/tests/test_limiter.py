"""The limiter's rules without HTTP: keys, tiers, route templates, failure mode,
cool-down and logging (a real redis-server, requests built from scopes)."""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator

import pytest
from fastapi import FastAPI
from starlette.requests import Request
from starlette.routing import Mount, Route

from redis_tb import (
    AsyncClient,
    Client,
    StartupError,
    SyncRateLimiter,
    Limit,
    Outcome,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    per_hour,
    per_minute,
    route_template,
    tiered,
)
from redis_tb_testing.servers import RedisServer, free_port


def request(peer: str = "203.0.113.7", headers: dict[str, str] | None = None, **scope: Any) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "client": (peer, 1), **scope})


@pytest.fixture
async def limiter(redis_server: RedisServer) -> AsyncIterator[RateLimiter]:
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5)
    await lim.client.redis.flushall()
    yield lim
    await lim.aclose()


async def test_keys_prefix_policy_identity(limiter: RateLimiter) -> None:
    d = await limiter.check(request(), [per_hour("ip", 10)])
    assert [r.key for r in d.results] == ["rl:ip:203.0.113.7"]


async def test_hash_tag_puts_every_key_of_a_request_in_one_slot(redis_server: RedisServer) -> None:
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5),
        prefix="api",
        hash_tag=lambda req: req.headers.get("x-user"),
        timeout=5,
    )
    user = Policy("user", Limit.per_hour(100), key=lambda req: req.headers.get("x-user"))
    d = await lim.check(request(headers={"x-user": "u42"}), [per_hour("ip", 10), user])
    assert [r.key for r in d.results] == ["api:{u42}:ip:203.0.113.7", "api:{u42}:user:u42"]
    await lim.aclose()


async def test_per_route_buckets_keep_braces_out_of_the_key(limiter: RateLimiter) -> None:
    p = per_minute("endpoint", 5, per_route=True)
    d = await limiter.check(request(), [p], route="GET /items/{item_id}")
    assert [r.key for r in d.results] == ["rl:endpoint@GET%20/items/%7Bitem_id%7D:203.0.113.7"]


async def test_route_scoped_policy_applies_to_its_routes_only(limiter: RateLimiter) -> None:
    p = per_minute("orders", 5, routes=["post /orders"])
    assert p.routes == frozenset({"POST /orders"})
    assert (await limiter.check(request(), [p], route="GET /orders")).outcome is Outcome.NOT_LIMITED
    assert (await limiter.check(request(), [p], route="POST /orders")).outcome is Outcome.ALLOWED
    assert (await limiter.check(request(), [p], route=None)).outcome is Outcome.NOT_LIMITED


async def test_tiers_choose_the_limit_per_request(limiter: RateLimiter) -> None:
    async def plan(req: Request) -> str | None:
        return req.headers.get("x-plan")

    p = tiered("user", {"free": Limit.per_hour(10), "pro": Limit.per_hour(1000), "internal": None}, plan, default="free")
    caps = []
    for hdr in ["pro", "free", "unknown", None]:
        d = await limiter.check(request(headers={"x-plan": hdr} if hdr else {}), [p])
        caps.append(d.results[0].capacity)
    assert caps == [1000, 10, 10, 10]
    internal = await limiter.check(request(headers={"x-plan": "internal"}), [p])
    assert internal.outcome is Outcome.NOT_LIMITED


async def test_key_function_returning_none_skips_the_policy(limiter: RateLimiter) -> None:
    user = Policy("user", Limit.per_hour(1), key=lambda req: None)
    d = await limiter.check(request(), [per_hour("ip", 10), user])
    assert [r.name for r in d.results] == ["ip"]


async def test_refused_request_reports_violations_and_cannot_be_refunded(limiter: RateLimiter) -> None:
    p = Policy("tiny", Limit(1, 1e-6))
    first = await limiter.check(request(), [p])
    second = await limiter.check(request(), [p])
    assert first.allowed and second.limited and second.violated == ("tiny",)
    assert second.retry_after is not None and second.retry_after > 0
    assert not await second.refund()
    assert await first.refund() and not await first.refund()  # idempotent
    assert limiter.stats.refunds == 1
    assert (await limiter.check(request(), [p])).allowed


async def test_dead_redis_fails_open_then_cools_down_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    lim = RateLimiter(AsyncClient.from_url(f"redis://127.0.0.1:{free_port()}"), cooldown=60)
    caplog.set_level(logging.WARNING, logger="redis_tb")
    first = await lim.check(request(), [per_hour("ip", 10)])
    second = await lim.check(request(), [per_hour("ip", 10)])
    assert first.outcome is second.outcome is Outcome.STORE_ERROR
    assert first.allowed and second.allowed and not first.limited
    assert first.error is not None and second.error is None  # the second never reached Redis
    assert first.results == () and first.retry_after is None
    assert lim.stats.store_errors == 1 and lim.stats.degraded == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "failing open: requests pass unlimited" in lines[0] and "Redis skipped for 60 s" in lines[0]
    await lim.aclose()


async def test_fail_closed_refuses_on_a_store_error() -> None:
    lim = RateLimiter(AsyncClient.from_url(f"redis://127.0.0.1:{free_port()}"), fail_open=False)
    d = await lim.check(request(), [per_hour("ip", 10)])
    assert d.outcome is Outcome.STORE_ERROR and not d.allowed and not d.limited
    await lim.aclose()


async def test_an_unreachable_redis_fails_the_start_unless_start_degraded(caplog: pytest.LogCaptureFixture) -> None:
    # SPEC U2: one line naming the address and what to do
    port = free_port()
    lim = RateLimiter(AsyncClient.from_url(f"redis://127.0.0.1:{port}"))
    with pytest.raises(StartupError) as info:
        await lim.startup()
    msg = str(info.value)
    assert msg.startswith(f"redis-tb: cannot reach Redis at 127.0.0.1:{port} (") and "\n" not in msg
    assert msg.endswith("): start it, or set start_degraded to start failing open")
    await lim.aclose()
    lim = RateLimiter(AsyncClient.from_url(f"redis://127.0.0.1:{port}"), start_degraded=True)
    caplog.set_level(logging.WARNING, logger="redis_tb")
    await lim.startup()
    assert (
        f"redis-tb: Redis at 127.0.0.1:{port} unreachable at startup; starting degraded "
        "(the limiter's failure mode applies until it answers)"
    ) in caplog.text  # SPEC U2, word for word (U4)
    await lim.aclose()


def test_route_template_matches_like_the_router() -> None:
    sub = FastAPI()

    @sub.get("/things/{thing_id:int}")
    async def thing(thing_id: int) -> None: ...

    app = FastAPI()

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> None: ...

    app.router.routes.append(Mount("/v2", app=sub))

    def scope(method: str, path: str) -> dict[str, Any]:
        return {"type": "http", "method": method, "path": path, "root_path": "", "app": app}

    assert route_template(scope("GET", "/items/42")) == "GET /items/{item_id}"
    assert route_template(scope("POST", "/items/42")) is None  # 405: no route serves it
    assert route_template(scope("GET", "/nowhere")) is None
    assert route_template(scope("GET", "/v2/things/7")) == "GET /v2/things/{thing_id}"
    assert route_template(scope("GET", "/v2/things/seven")) is None


def test_route_template_of_a_starlette_app_and_a_mounted_asgi_app() -> None:
    from starlette.applications import Starlette

    async def endpoint(request: Request) -> None: ...

    async def raw(scope: Any, receive: Any, send: Any) -> None: ...

    app = Starlette(routes=[Route("/a/{x}", endpoint), Mount("/static", app=raw)])
    base = {"type": "http", "method": "GET", "root_path": "", "app": app}
    assert route_template({**base, "path": "/a/1"}) == "GET /a/{x}"
    assert route_template({**base, "path": "/static/css/site.css"}) == "GET /static/{path}"


def test_configuration_errors_are_refused_at_setup() -> None:
    with pytest.raises(ValueError, match=r"\[a-z0-9_-\]"):
        per_hour("Per Hour", 10)
    with pytest.raises(ValueError, match="cost"):
        Policy("x", Limit(1, 1), cost=-1)
    # a Limit is a value; a policy checks it when built (SPEC C2), a limit function's
    # per request (L3: invalid_input, not an exception in the app's code)
    with pytest.raises(ValueError, match="capacity"):
        Policy("x", Limit(0, 1))
    with pytest.raises(ValueError, match="rate"):
        Policy("x", Limit(1, 0))
    with pytest.raises(ValueError, match="tier 'free'"):
        tiered("t", {"free": Limit(1, 0)}, lambda r: None)
    with pytest.raises(ValueError, match="prefix"):
        RateLimiter(AsyncClient.from_url("redis://127.0.0.1:1"), prefix="{rl}")
    with pytest.raises(ValueError, match="METHOD /template"):
        per_hour("x", 1, routes=["/items"])
    with pytest.raises(ValueError, match="distinct"):
        RateLimitMiddleware(FastAPI(), RateLimiter(AsyncClient.from_url("redis://127.0.0.1:1")), [per_hour("a", 1), per_hour("a", 2)])
    with pytest.raises(ValueError, match="default tier"):
        tiered("t", {"free": Limit(1, 1)}, lambda r: None, default="gold")


async def test_startup_without_permission_for_command_info_is_one_clear_line(redis_server: RedisServer) -> None:
    """SPEC U1: NOPERM on COMMAND INFO fails the start with one line saying what to grant."""
    admin = Client.from_url(redis_server.url, timeout=5)
    admin_redis: Any = admin.redis
    admin_redis.execute_command("ACL", "SETUSER", "nocmd", "on", ">pw", "~*", "+@all", "-command")
    try:
        host_port = redis_server.url.removeprefix("redis://").split("/")[0]
        for lim in (
            RateLimiter(AsyncClient.from_url(f"redis://nocmd:pw@{host_port}", timeout=5)),
            SyncRateLimiter(Client.from_url(f"redis://nocmd:pw@{host_port}", timeout=5)),
        ):
            with pytest.raises(StartupError) as info:
                if isinstance(lim, RateLimiter):
                    await lim.startup()
                else:
                    lim.startup()
            assert str(info.value) == (
                f"redis-tb: user cannot run COMMAND INFO on {host_port}: grant +command|info (see docs/operations.md)"
            )
            assert info.value.__cause__ is None and info.value.__suppress_context__
    finally:
        admin_redis.execute_command("ACL", "DELUSER", "nocmd")
        admin.close()


async def test_an_any_method_route_matches_every_method_with_a_bucket_each(limiter: RateLimiter) -> None:
    """SPEC K5: ``* <template>`` matches every method; per route, its key names the
    request's own method and the template (lim-074), so GET and POST have a bucket each."""
    p = per_minute("items", 5, routes=["* /items/{id}"], per_route=True)
    keys = []
    for method in ("GET", "POST", "DELETE"):
        d = await limiter.check(request(), [p], route=f"{method} /items/{{id}}")
        assert d.outcome is Outcome.ALLOWED
        keys.append(d.results[0].key)
    assert keys == [f"rl:items@{m}%20/items/%7Bid%7D:203.0.113.7" for m in ("GET", "POST", "DELETE")]
    assert d.results[0].remaining == pytest.approx(4, abs=0.01)
    assert (await limiter.check(request(), [p], route="GET /other")).outcome is Outcome.NOT_LIMITED
