"""redis_tb.django through Django's own handlers (test Client = the sync/WSGI path,
AsyncClient = the async/ASGI path) against a real redis-server with the module.

The real-server tests (gunicorn, uvicorn) are examples/django/test_example_django.py.
Exact header values come from a fixed clock (CLOCK) or from policies that refill far
slower than a test runs: no timing thresholds.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import Any, Iterator

import django
import pytest
from django.conf import settings

if not settings.configured:
    settings.configure(
        DEBUG=False,
        SECRET_KEY="redis-tb-tests",
        ROOT_URLCONF="djangoapp.urls",
        ALLOWED_HOSTS=["testserver"],
        DATABASES={},
        INSTALLED_APPS=[],
        MIDDLEWARE=["redis_tb.django.RateLimitMiddleware"],
        USE_TZ=True,
    )
    django.setup()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.test import AsyncClient as DjangoAsyncClient  # noqa: E402
from django.test import Client as DjangoClient  # noqa: E402
from django.test import override_settings  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from redis_tb import Client, Limit, Policy, per_minute  # noqa: E402
from redis_tb.django import get_rate_limit, normalise_route, parse_config  # noqa: E402
from redis_tb.django.apps import RedisTbConfig  # noqa: E402
from redis_tb_testing.servers import RedisServer, free_port  # noqa: E402

NOW = 1764456268.0


def fixed_clock() -> float:
    return NOW


def user_key(request: Any) -> str | None:
    value = request.headers.get("X-User")
    return str(value) if value else None


def cost_header(request: Any) -> float:
    return float(request.headers.get("X-Cost", "1"))


def plan_of(request: Any) -> str | None:
    value = request.headers.get("X-Plan")
    return str(value) if value else None


def policies_from_a_function() -> list[Policy]:
    return [per_minute("fromfunc", 7)]


A_POLICY = per_minute("dotted", 3)


@pytest.fixture
def tb(redis_server: RedisServer) -> Iterator[Client]:
    c = Client.from_url(redis_server.url, timeout=10)
    c.redis.flushall()
    yield c
    c.close()


def conf(redis_server: RedisServer, policies: list[Any], **extra: Any) -> dict[str, Any]:
    # a generous timeout: these tests are about answers, and the machine may be loaded
    return {"URL": redis_server.url, "POLICIES": policies, "TIMEOUT": 5, **extra}


def body(response: Any) -> Any:
    return json.loads(response.content)


def sf_items(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]


# -- settings -------------------------------------------------------------------


def test_settings_dicts_dotted_paths_and_policy_objects() -> None:
    c = parse_config({
        "url": "redis://127.0.0.1:1/0",
        "trusted_proxies": ["10.0.0.0/8"],
        "POLICIES": [
            {"NAME": "ip", "PER_SECOND": 10},
            {"name": "shape", "capacity": 5, "rate": 0.5, "cost": "test_django.cost_header"},
            {
                "NAME": "plan",
                "TIERS": {"free": {"PER_HOUR": 100}, "pro": Limit.per_hour(5000), "staff": None},
                "TIER": "test_django.plan_of",
                "DEFAULT_TIER": "free",
                "KEY": user_key,
            },
            {"NAME": "routes", "PER_MINUTE": 1, "ROUTES": ["get items/<int:item_id>"], "URL_NAMES": ["shop:order"]},
            "test_django.A_POLICY",
            "test_django.policies_from_a_function",
            per_minute("object", 2),
        ],
    })
    assert [p.name for p in c.policies] == ["ip", "shape", "plan", "routes", "dotted", "fromfunc", "object"]
    assert c.policies[0].policy.limit == Limit(10, 10)
    # (imported again by its dotted path: the same function, another module object)
    cost = c.policies[1].policy.cost
    assert c.policies[1].policy.limit == Limit(5, 0.5) and getattr(cost, "__qualname__", "") == "cost_header"
    assert c.policies[3].routes == frozenset({"GET /items/<int:item_id>"})
    assert c.policies[3].url_names == frozenset({"shop:order"})
    assert c.client_ip.trusted and c.fail_open and c.prefix == "rl"
    assert normalise_route("post  /orders/") == "POST /orders/"


def test_window_in_flight_and_settle_later_settings() -> None:
    """SPEC W1, N1, G1 in settings dicts."""
    c = parse_config({
        "URL": "redis://127.0.0.1:1/0",
        "POLICIES": [
            {"NAME": "login", "WINDOW": {"LIMIT": 20, "SECONDS": 3600, "MODE": "FIXED"}},
            {"NAME": "streams", "IN_FLIGHT": {"LIMIT": 2, "LEASE": 0.0015}},
            {"NAME": "tokens", "PER_HOUR": 1000, "SETTLE_LATER": True},
        ],
    })
    login, streams, tokens = (p.policy for p in c.policies)
    assert login.limit == Limit.window(20, 3600, "fixed") and login.kind == "window"
    assert streams.kind == "in_flight" and getattr(streams.limit, "lease_ms") == 2
    assert tokens.settle_later and tokens.kind == "bucket"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"POLICIES": []}, "URL"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a"}]}, "exactly one of"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "PER_MINUTE": 1, "PER_HOUR": 2}]}, "exactly one of"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "PER_MINUTE": 1, "COLOUR": 2}]}, "COLOUR"),
        ({"URL": "redis://x", "FAIL_OPNE": True}, "FAIL_OPNE"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "PER_MINUTE": 1}, {"NAME": "a", "PER_HOUR": 1}]}, "distinct"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "A b", "PER_MINUTE": 1}]}, r"\[a-z0-9_-\]\{1,64\}"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "PER_MINUTE": 1, "KEY": "no.such.module"}]}, "import"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "TIERS": {"x": None}}]}, "TIER"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "PER_MINUTE": 1, "ROUTES": ["items/"]}]}, "METHOD"),
        ({"URL": "redis://x", "LEGACY_RESET": "iso"}, "LEGACY_RESET"),
        ({"URL": "redis://x", "DENY_CACHE": 0}, "DENY_CACHE"),
        ({"URL": "redis://x", "REFUND_ON": ["5xx"]}, "REFUND_ON"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "CAPACITY": -1, "RATE": 1}]}, "capacity"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "WINDOW": {"LIMIT": 1.5, "SECONDS": 60}}]}, "whole number"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "WINDOW": {"LIMIT": 5, "SECONDS": 60, "MODE": "log"}}]}, "mode"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "IN_FLIGHT": {"LIMIT": 1}, "PER_MINUTE": 1}]}, "only limit"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "IN_FLIGHT": {"LIMIT": 1}, "COST": 2}]}, "no cost"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "IN_FLIGHT": {"LIMIT": 1, "LEASE": 0}}]}, "lease"),
        ({"URL": "redis://x", "POLICIES": [{"NAME": "a", "WINDOW": {"LIMIT": 1, "SECONDS": 1}, "SETTLE_LATER": True}]}, "bucket"),
    ],
)
def test_bad_settings_fail_with_what_is_wrong(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        parse_config(raw)


# -- the sync path (WSGI handler) ----------------------------------------------------


def test_burst_then_429_with_exact_headers_and_problem_body(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "burst", "CAPACITY": 4, "RATE": 0.25}]
    with override_settings(REDIS_TB=conf(redis_server, policies, CLOCK=fixed_clock, LEGACY_HEADERS=True, LEGACY_RESET="delta")):
        c = DjangoClient()
        for i in range(1, 5):
            r = c.get("/items/1")
            assert r.status_code == 200
            assert r.headers["RateLimit-Policy"] == '"burst";q=4;w=16'
            assert r.headers["RateLimit"] == f'"burst";r={4 - i};t={4 * i}'
            assert r.headers["X-RateLimit-Limit"] == "4"
            assert r.headers["X-RateLimit-Remaining"] == str(4 - i)
            assert r.headers["X-RateLimit-Reset"] == str(4 * i)
            assert "Retry-After" not in r.headers
            assert body(r)["keys"] == ["rl:burst:127.0.0.1"]
        r = c.get("/items/2")
    assert r.status_code == 429
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.headers["Retry-After"] == "4"
    assert r.headers["RateLimit"] == '"burst";r=0;t=16'
    assert body(r) == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "rate limit exceeded for 'burst': retry after 4 s",
        "violated_policies": ["burst"],
        "retry_after": 4.0,
    }
    assert tb.peek("rl:burst:127.0.0.1", 4, 0.25, now=NOW).remaining == 0


async def test_the_async_path_gives_the_same_answers(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "burst", "CAPACITY": 4, "RATE": 0.25}]
    with override_settings(REDIS_TB=conf(redis_server, policies, CLOCK=fixed_clock)):
        c = DjangoAsyncClient()
        for i in range(1, 5):
            r = await c.get("/async/items/1")
            assert r.status_code == 200
            assert r.headers["RateLimit"] == f'"burst";r={4 - i};t={4 * i}'
        # a sync view behind the async middleware (Django runs it in a thread)
        r = await c.get("/items/1")
        assert r.status_code == 429 and r.headers["Retry-After"] == "4"
        assert body(r)["violated_policies"] == ["burst"]
        rl = get_rate_limit()
        assert rl.async_limiter().stats.limited == 1 and rl.sync_limiter().stats.checks == 0


def test_legacy_headers_with_a_unix_reset(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "a", "PER_HOUR": 100}, {"NAME": "b", "CAPACITY": 4, "RATE": 0.25}]
    with override_settings(REDIS_TB=conf(redis_server, policies, LEGACY_HEADERS=True)):
        before = time.time()
        r = DjangoClient().get("/items/1")
        after = time.time()
    # the policy with the smallest remaining: "b" (3 left, full again in 4 s)
    assert r.headers["X-RateLimit-Limit"] == "4"
    assert r.headers["X-RateLimit-Remaining"] == "3"
    reset = int(r.headers["X-RateLimit-Reset"])
    assert math.ceil(before + 3) <= reset <= math.ceil(after + 4)


async def test_async_server_with_a_sync_only_middleware_below(redis_server: RedisServer, tb: Client) -> None:
    # Django then runs this middleware in sync mode under ASGI: the sync limiter decides.
    middleware = ["redis_tb.django.RateLimitMiddleware", "djangoapp.views.sync_only_middleware"]
    with override_settings(MIDDLEWARE=middleware, REDIS_TB=conf(redis_server, [{"NAME": "ip", "PER_HOUR": 2}])):
        c = DjangoAsyncClient()
        codes = [(await c.get("/async/items/1")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert get_rate_limit().sync_limiter().stats.checks == 3


def test_bad_settings_fail_when_django_loads_the_middleware(redis_server: RedisServer) -> None:
    with override_settings(REDIS_TB={"URL": redis_server.url, "POLICIES": [{"NAME": "x"}]}):
        with pytest.raises(ImproperlyConfigured, match="exactly one of"):
            DjangoClient().get("/items/1")


def test_layered_policies_are_one_mtake_and_a_refusal_burns_nothing(redis_server: RedisServer, tb: Client) -> None:
    policies = [
        {"NAME": "ip", "PER_HOUR": 100},
        {"NAME": "user", "PER_HOUR": 2, "KEY": user_key},
    ]
    with override_settings(REDIS_TB=conf(redis_server, policies)):
        c = DjangoClient()
        for _ in range(2):
            assert c.get("/items/1", HTTP_X_USER="ann").status_code == 200
        for _ in range(3):
            r = c.get("/items/1", HTTP_X_USER="ann")
            assert r.status_code == 429 and body(r)["violated_policies"] == ["user"]
        r = c.get("/items/1")  # no user: that policy is skipped
        assert r.status_code == 200 and body(r)["keys"] == ["rl:ip:127.0.0.1"]
        stats = get_rate_limit().sync_limiter().stats
    assert 97 <= tb.peek("rl:ip:127.0.0.1", 100, 100 / 3600).remaining < 98
    assert stats.checks == 6 and stats.limited == 3


def test_route_and_url_name_policies_and_per_route_keys(redis_server: RedisServer, tb: Client) -> None:
    policies = [
        {"NAME": "byroute", "PER_HOUR": 10, "ROUTES": ["GET items/<int:item_id>"], "PER_ROUTE": True},
        {"NAME": "byname", "PER_HOUR": 10, "URL_NAMES": ["shop:order", "legacy"]},
        {"NAME": "bare", "PER_HOUR": 10, "URL_NAMES": ["order"]},
    ]
    with override_settings(REDIS_TB=conf(redis_server, policies)):
        c = DjangoClient()
        r = c.get("/items/7")
        assert body(r)["keys"] == ["rl:byroute@GET%20/items/<int%3Aitem_id>:127.0.0.1"]  # SPEC K1, K2
        assert c.post("/items/7").status_code == 200  # another method: not this route
        assert body(c.post("/items/7"))["outcome"] == "not_limited"
        assert body(c.get("/shop/orders/3"))["keys"] == ["rl:byname:127.0.0.1", "rl:bare:127.0.0.1"]
        # a re_path route: its regex is the template (braces kept out of the key)
        r = c.get("/legacy/12")
        assert r.status_code == 200 and body(r)["keys"] == ["rl:byname:127.0.0.1"]
        r = c.get("/nothing/here")  # no pattern: not limited
        assert r.status_code == 404 and "RateLimit" not in r.headers


def test_hash_tag_forwarded_header_and_braces_of_a_regex_route(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "re", "PER_HOUR": 10, "URL_NAMES": ["legacy"], "PER_ROUTE": True}]
    extra = {"HASH_TAG": lambda request: "tenant-1", "TRUSTED_PROXIES": ["10.0.0.0/8"], "FORWARDED_HEADER": "forwarded"}
    with override_settings(REDIS_TB=conf(redis_server, policies, **extra)):
        r = DjangoClient().get(
            "/legacy/12", REMOTE_ADDR="10.0.0.1", HTTP_FORWARDED='for=198.51.100.1, for="[2001:db8::1]:443"'
        )
    # a Redis Cluster hash tag's braces are the only ones in the key: the route's are <>
    assert body(r)["keys"] == ["rl:{tenant-1}:re@GET%20/^legacy/(?P<item_id>[0-9]%7B1,4%7D)$:2001:db8::/64"]  # SPEC K2


def test_limit_unmatched_charges_404s(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "all", "PER_HOUR": 2}, {"NAME": "routed", "PER_HOUR": 1, "URL_NAMES": ["item"]}]
    with override_settings(REDIS_TB=conf(redis_server, policies, LIMIT_UNMATCHED=True)):
        c = DjangoClient()
        assert [c.get(f"/nope/{i}").status_code for i in range(3)] == [404, 404, 429]
    assert tb.peek("rl:all:127.0.0.1", 2, 2 / 3600).remaining < 1
    assert tb.redis.exists("rl:routed:127.0.0.1") == 0


def test_exclude_and_exempt(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "all", "PER_HOUR": 1}]
    excluded = ["fail", "refund", "GET shop/orders/<int:order_id>"]
    with override_settings(REDIS_TB=conf(redis_server, policies, EXCLUDE=excluded)):
        c = DjangoClient()
        for _ in range(3):
            assert c.get("/fail").status_code == 503
            assert c.get("/shop/orders/1").status_code == 200
            r = c.get("/exempt")
            assert r.status_code == 200 and "RateLimit" not in r.headers
            # request.rate_limit is there all the same: not limited, refund a no-op
            assert body(r)["outcome"] == "not_limited"
            assert body(c.get("/refund"))["refunded"] == [False, False]
        # exempt from the configured policies, its own @rate_limit still applies
        assert [c.get("/exempt-own").status_code for _ in range(2)] == [200, 429]
        assert tb.redis.exists("rl:all:127.0.0.1") == 0


def test_exclude_by_namespaced_name_and_for_every_method(redis_server: RedisServer, tb: Client) -> None:
    # SPEC L1 through the core's Scope: "* <route>" excludes the route for every method;
    # a namespaced URL name excludes its pattern (the Django input the core has no word for)
    policies = [{"NAME": "all", "PER_HOUR": 1}]
    excluded = ["shop:order", "* items/<int:item_id>"]
    with override_settings(REDIS_TB=conf(redis_server, policies, EXCLUDE=excluded)):
        c = DjangoClient()
        for _ in range(3):
            assert c.get("/shop/orders/1").status_code == 200
            r = c.get("/items/1")
            assert r.status_code == 200 and "RateLimit" not in r.headers
        assert tb.redis.exists("rl:all:127.0.0.1") == 0
        assert [c.get("/async/items/1").status_code for _ in range(2)] == [200, 429]


def test_trusted_proxies_right_to_left_and_ipv6_prefix(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "who", "PER_HOUR": 100}]
    with override_settings(REDIS_TB=conf(redis_server, policies, TRUSTED_PROXIES=["10.0.0.0/8"])):
        c = DjangoClient()
        proxy: dict[str, Any] = {"REMOTE_ADDR": "10.1.2.3"}
        assert body(c.get("/items/1", HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.7", **proxy))["keys"] == ["rl:who:198.51.100.7"]
        assert body(c.get("/items/1", HTTP_X_FORWARDED_FOR="198.51.100.8, 10.9.9.9", **proxy))["keys"] == ["rl:who:198.51.100.8"]
        assert body(c.get("/items/1", HTTP_X_FORWARDED_FOR="2001:db8:1:2::1", **proxy))["keys"] == ["rl:who:2001:db8:1:2::/64"]
        assert body(c.get("/items/1", HTTP_X_FORWARDED_FOR="::ffff:192.0.2.1", **proxy))["keys"] == ["rl:who:192.0.2.1"]
        # a spoofed header from an untrusted peer is ignored
        r = c.get("/items/1", HTTP_X_FORWARDED_FOR="198.51.100.7", REMOTE_ADDR="203.0.113.9")
        assert body(r)["keys"] == ["rl:who:203.0.113.9"]
        r = c.get("/items/1", REMOTE_ADDR="2001:db8:aa:bb:1:2:3:4")
        assert body(r)["keys"] == ["rl:who:2001:db8:aa:bb::/64"]


def test_costs_tiers_and_a_cost_that_never_fits(redis_server: RedisServer, tb: Client) -> None:
    policies = [
        {
            "NAME": "plan",
            "TIERS": {"free": {"CAPACITY": 5, "RATE": 0.001}, "staff": None},
            "TIER": plan_of,
            "DEFAULT_TIER": "free",
            "COST": cost_header,
        }
    ]
    with override_settings(REDIS_TB=conf(redis_server, policies, CLOCK=fixed_clock)):
        c = DjangoClient()
        r = c.get("/items/1", HTTP_X_COST="3")
        assert r.status_code == 200 and r.headers["RateLimit"].startswith('"plan";r=2;')
        never = c.get("/items/1", HTTP_X_COST="6")
        assert never.status_code == 429 and "Retry-After" not in never.headers
        assert body(never)["retry_after"] is None and "never" in body(never)["detail"]
        r = c.get("/items/1", HTTP_X_COST="6", HTTP_X_PLAN="staff")  # unlimited plan
        assert r.status_code == 200 and body(r)["outcome"] == "not_limited"


# -- refunds -----------------------------------------------------------------------


def test_view_refund_and_automatic_refund_on_5xx(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "r", "CAPACITY": 3, "RATE": 0.001}]
    with override_settings(REDIS_TB=conf(redis_server, policies, CLOCK=fixed_clock, REFUND_ON=range(500, 600))):
        c = DjangoClient(raise_request_exception=False)
        r = c.get("/refund")
        assert body(r)["refunded"] == [True, False]  # idempotent
        assert tb.peek("rl:r:127.0.0.1", 3, 0.001, now=NOW).remaining == 3
        assert c.get("/fail").status_code == 503
        assert c.get("/boom").status_code == 500
        assert tb.peek("rl:r:127.0.0.1", 3, 0.001, now=NOW).remaining == 3
        assert c.get("/items/1").status_code == 200
        assert tb.peek("rl:r:127.0.0.1", 3, 0.001, now=NOW).remaining == 2
        assert get_rate_limit().sync_limiter().stats.refunds == 3


async def test_async_refund_and_5xx_refund(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "r", "CAPACITY": 3, "RATE": 0.001}]
    with override_settings(REDIS_TB=conf(redis_server, policies, CLOCK=fixed_clock, REFUND_ON=[503])):
        c = DjangoAsyncClient()
        assert body(await c.get("/arefund"))["refunded"] == [True, False]
        # a sync view under the async middleware: refund() crosses to the server's loop
        assert body(await c.get("/refund"))["refunded"] == [True, False]
        assert (await c.get("/fail")).status_code == 503
        assert tb.peek("rl:r:127.0.0.1", 3, 0.001, now=NOW).remaining == 3
        assert (await c.get("/items/1")).status_code == 200
        assert tb.peek("rl:r:127.0.0.1", 3, 0.001, now=NOW).remaining == 2


# -- the decorator ---------------------------------------------------------------------


def test_decorator_policies_join_the_middlewares_single_mtake(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "ip", "PER_HOUR": 100}]
    with override_settings(REDIS_TB=conf(redis_server, policies)):
        c = DjangoClient()
        r = c.get("/deco")
        assert r.status_code == 200
        assert body(r)["keys"] == ["rl:ip:127.0.0.1", "rl:deco:127.0.0.1"]
        assert [i.split(";")[0] for i in sf_items(r.headers["RateLimit-Policy"])] == ['"ip"', '"deco"']
        assert c.get("/deco").status_code == 200
        r = c.get("/deco")
        assert r.status_code == 429 and body(r)["violated_policies"] == ["deco"]
        assert get_rate_limit().sync_limiter().stats.checks == 3  # one round trip each
    # the refused request burnt nothing on the ip layer
    assert 98 <= tb.peek("rl:ip:127.0.0.1", 100, 100 / 3600).remaining < 99


async def test_async_decorator_with_the_async_middleware(redis_server: RedisServer, tb: Client) -> None:
    with override_settings(REDIS_TB=conf(redis_server, [{"NAME": "ip", "PER_HOUR": 100}])):
        c = DjangoAsyncClient()
        codes = [(await c.get("/adeco")).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert get_rate_limit().async_limiter().stats.checks == 3


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_decorator_without_the_middleware(redis_server: RedisServer, tb: Client, asynchronous: bool) -> None:
    with override_settings(
        MIDDLEWARE=[], REDIS_TB=conf(redis_server, [{"NAME": "ip", "PER_HOUR": 100}], REFUND_ON=[500])
    ):
        path = "/adeco" if asynchronous else "/deco"
        if asynchronous:
            ac = DjangoAsyncClient()
            rs: list[Any] = [await ac.get(path) for _ in range(3)]
        else:
            c = DjangoClient()
            rs = [c.get(path) for _ in range(3)]
        assert [r.status_code for r in rs] == [200, 200, 429]
        name = "adeco" if asynchronous else "deco"
        assert rs[0].headers["RateLimit-Policy"] == f'"{name}";q=2;w=3600'  # its own headers
        assert body(rs[0])["keys"] == [f"rl:{name}:127.0.0.1"]  # configured policies are the middleware's
        assert body(rs[2])["violated_policies"] == [name]
        if not asynchronous:
            # the decorator refunds the view's own 5xx when no middleware does
            assert [DjangoClient().get("/decofail").status_code for _ in range(7)] == [500] * 7


def test_async_view_decorator_under_wsgi_takes_the_sync_path(redis_server: RedisServer, tb: Client) -> None:
    # Under WSGI an async view runs in a throwaway event loop: no redis.asyncio there.
    with override_settings(MIDDLEWARE=[], REDIS_TB=conf(redis_server, [])):
        c = DjangoClient()
        assert [c.get("/adeco").status_code for _ in range(3)] == [200, 200, 429]
        rl = get_rate_limit()
        assert rl.sync_limiter().stats.checks == 3 and len(rl._async) == 0


def test_decorator_with_policy_objects_fails_closed(tb: Client) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    with override_settings(REDIS_TB={"URL": dead, "POLICIES": [{"NAME": "ip", "PER_HOUR": 100}]}):
        c = DjangoClient()
        r = c.get("/closed")
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert body(r)["title"] == "Service Unavailable"
        r = c.get("/items/1")  # the rest of the site fails open, without headers
        assert r.status_code == 200 and "RateLimit" not in r.headers
        assert body(r)["outcome"] == "store_error"


# -- failure modes ---------------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_fail_open_and_fail_closed(asynchronous: bool, caplog: pytest.LogCaptureFixture) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    for fail_open, status in ((True, 200), (False, 503)):
        # a long cool-down: the three requests surely fall inside it, however slow the machine
        settings_ = {"URL": dead, "FAIL_OPEN": fail_open, "COOLDOWN": 600, "POLICIES": [{"NAME": "ip", "PER_HOUR": 1}]}
        with override_settings(REDIS_TB=settings_), caplog.at_level(logging.WARNING, "redis_tb"):
            if asynchronous:
                ac = DjangoAsyncClient()
                rs: list[Any] = [await ac.get("/async/items/1") for _ in range(3)]
                stats = get_rate_limit().async_limiter().stats
            else:
                c = DjangoClient()
                rs = [c.get("/items/1") for _ in range(3)]
                stats = get_rate_limit().sync_limiter().stats
        assert [r.status_code for r in rs] == [status] * 3
        assert all("RateLimit" not in r.headers for r in rs)
        if not fail_open:
            assert rs[0].headers["Retry-After"] == "1"
            assert body(rs[0])["detail"] == "the rate limiter's store is unavailable; retry shortly"
        # one Redis call, then the cool-down skips Redis
        assert stats.store_errors == 1 and stats.degraded == 3
    assert "redis-tb: TB.TAKE on 127.0.0.1" in caplog.text  # SPEC L4: one policy


# -- issue 21: shadow, deny cache, metrics ----------------------------------------------


def test_shadow_policy_charges_like_enforced_but_lets_requests_through(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "ip", "PER_HOUR": 100}, {"NAME": "watch", "PER_HOUR": 2, "SHADOW": True}]
    registry = CollectorRegistry()
    with override_settings(REDIS_TB=conf(redis_server, policies, METRICS=registry)):
        c = DjangoClient()
        rs = [c.get("/items/1") for _ in range(4)]
        stats = get_rate_limit().sync_limiter().stats
    assert [r.status_code for r in rs] == [200] * 4
    assert [body(r)["shadow_limited"] for r in rs] == [[], [], ["watch"], ["watch"]]
    # allowed counts what Redis admitted (as Rust and Node do)
    assert (stats.allowed, stats.shadow_limited, stats.limited) == (2, 2, 0)
    assert all(r.headers["RateLimit-Policy"] == '"ip";q=100;w=3600' for r in rs)  # shadow left out
    # all or nothing: the shadow refusals spent nothing on the ip layer either
    assert 98 <= tb.peek("rl:ip:127.0.0.1", 100, 100 / 3600).remaining < 99
    value = registry.get_sample_value
    assert value("redis_tb_shadow_limited_total", {"limiter": "default", "policy": "watch"}) == 2
    assert value("redis_tb_allowed_total", {"limiter": "default", "policy": "watch"}) == 2
    assert value("redis_tb_allowed_total", {"limiter": "default", "policy": "ip"}) == 2


async def test_shadow_refusals_are_not_counted_as_allowed_on_the_async_path(redis_server: RedisServer, tb: Client) -> None:
    policies = [{"NAME": "ip", "PER_HOUR": 100}, {"NAME": "watch", "PER_HOUR": 2, "SHADOW": True}]
    registry = CollectorRegistry()
    with override_settings(REDIS_TB=conf(redis_server, policies, METRICS=registry)):
        ac = DjangoAsyncClient()
        rs: list[Any] = [await ac.get("/async/items/1") for _ in range(4)]
        stats = get_rate_limit().async_limiter().stats
    assert [r.status_code for r in rs] == [200] * 4
    assert [body(r)["shadow_limited"] for r in rs] == [[], [], ["watch"], ["watch"]]
    assert (stats.allowed, stats.shadow_limited, stats.limited) == (2, 2, 0)
    value = registry.get_sample_value
    assert value("redis_tb_allowed_total", {"limiter": "default", "policy": "ip"}) == 2
    assert value("redis_tb_allowed_total", {"limiter": "default", "policy": "watch"}) == 2


def test_limiter_wide_shadow(redis_server: RedisServer, tb: Client) -> None:
    with override_settings(REDIS_TB=conf(redis_server, [{"NAME": "ip", "PER_HOUR": 1}], SHADOW=True)):
        c = DjangoClient()
        rs = [c.get("/items/1") for _ in range(3)]
    assert [r.status_code for r in rs] == [200] * 3
    assert "RateLimit" not in rs[0].headers
    assert body(rs[2])["shadow_limited"] == ["ip"]


def test_deny_cache_answers_repeated_refusals_locally(redis_server: RedisServer, tb: Client) -> None:
    registry = CollectorRegistry()
    policies = [{"NAME": "hot", "CAPACITY": 1, "RATE": 0.001}]
    with override_settings(REDIS_TB=conf(redis_server, policies, DENY_CACHE=100, METRICS=registry, NAME="api")):
        c = DjangoClient()
        assert c.get("/items/1").status_code == 200
        first = c.get("/items/1")
        cached = [c.get("/items/1") for _ in range(3)]
        stats = get_rate_limit().sync_limiter().stats
    assert first.status_code == 429 and all(r.status_code == 429 for r in cached)
    assert body(cached[0])["violated_policies"] == ["hot"]
    assert int(cached[0].headers["Retry-After"]) >= 1
    # Redis saw one request: the admission spent the last token, so the refusal Redis
    # would give next was cached with it and every 429 came from the cache
    assert stats.checks - stats.deny_cache_hits == 1
    value = registry.get_sample_value
    assert value("redis_tb_deny_cache_hits_total", {"limiter": "api", "policy": "hot"}) == 4
    assert value("redis_tb_limited_total", {"limiter": "api", "policy": "hot"}) == 4


def test_metrics_per_policy(redis_server: RedisServer, tb: Client) -> None:
    registry = CollectorRegistry()
    policies = [{"NAME": "a", "PER_HOUR": 100}, {"NAME": "b", "PER_HOUR": 1}]
    with override_settings(REDIS_TB=conf(redis_server, policies, METRICS=registry, REFUND_ON=[503])):
        c = DjangoClient()
        assert c.get("/items/1").status_code == 200
        assert c.get("/items/1").status_code == 429
        tb.redis.flushall()
        assert c.get("/fail").status_code == 503
    value = registry.get_sample_value
    assert value("redis_tb_allowed_total", {"limiter": "default", "policy": "a"}) == 2
    assert value("redis_tb_limited_total", {"limiter": "default", "policy": "b"}) == 1
    assert value("redis_tb_limited_total", {"limiter": "default", "policy": "a"}) is None
    assert value("redis_tb_refunded_total", {"limiter": "default", "policy": "b"}) == 1
    assert value("redis_tb_redis_call_duration_seconds_count", {"limiter": "default"}) == 4


# -- startup -------------------------------------------------------------------------------


def test_startup_check_fails_without_the_module_and_only_logs_when_unreachable(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    # SPEC U1/U2: the failure is one line on stderr and SystemExit(3), never a traceback
    plain = RedisServer(module=False).start()
    try:
        # SPEC E1: U1's line where the module is forced (auto starts on the scripts)
        with override_settings(REDIS_TB={"URL": plain.url, "POLICIES": [], "BACKEND": "module"}):
            app = RedisTbConfig("redis_tb.django", __import__("redis_tb.django").django)
            with pytest.raises(SystemExit) as exited:
                app.ready()
            assert exited.value.code == 3
            err = capsys.readouterr().err
            assert err == f"redis-tb module not loaded on 127.0.0.1:{plain.port}: load libredis_tb.so with loadmodule\n"
    finally:
        plain.stop()
    dead_port = free_port()
    dead = f"redis://127.0.0.1:{dead_port}/0"
    # SPEC U2: an unreachable Redis fails the start, in one line, unless START_DEGRADED
    with override_settings(REDIS_TB={"URL": dead, "POLICIES": []}):
        with pytest.raises(SystemExit):
            RedisTbConfig("redis_tb.django", __import__("redis_tb.django").django).ready()
        err = capsys.readouterr().err
        assert re.fullmatch(f"redis-tb: cannot reach Redis at 127.0.0.1:{dead_port} .*start_degraded to start failing open\n", err), err
    with override_settings(REDIS_TB={"URL": dead, "POLICIES": [], "START_DEGRADED": True}), caplog.at_level(
        logging.WARNING, "redis_tb"
    ):
        RedisTbConfig("redis_tb.django", __import__("redis_tb.django").django).ready()
    assert f"Redis at 127.0.0.1:{dead_port} unreachable at startup; starting degraded" in caplog.text
    with override_settings(REDIS_TB={"URL": dead, "CHECK_MODULE": False}):
        RedisTbConfig("redis_tb.django", __import__("redis_tb.django").django).ready()


def test_the_startup_names_the_policies_of_the_calls_in_their_order(redis_server: RedisServer) -> None:
    """SPEC U3: the cluster check's policies are those the project's calls send: the
    configured ones and, after the configured policies of its call, each joining
    @rate_limit view's own (URLconf order); a view that is exempt, or a limiter of its
    own, makes calls of its own and is left out."""
    from redis_tb.django.calls import call_policies
    from redis_tb.django.conf import parse_config

    config = parse_config(conf(redis_server, [
        {"NAME": "ip", "PER_SECOND": 10},
        {"NAME": "items", "PER_SECOND": 10, "URL_NAMES": ["item"]},
    ]))
    names = [p.name for p in call_policies(config)]
    assert names == ["ip", "deco", "adeco", "pair-a", "pair-b", "decofail", "items"]
