"""The example project served for real: gunicorn (WSGI, threads) and uvicorn (ASGI),
each on a free loopback port against its own real redis-server with the module,
over real HTTP; Redis stopped mid-run and started again; a Redis without the module
stops the server at startup.

Exact header values come from policies that refill far slower than a test runs.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import socket

import httpx
import pytest
from http_sfv.list import List
from prometheus_client.parser import text_string_to_metric_families

from redis_tb import Client
from redis_tb_testing.servers import Gunicorn, RedisServer, Uvicorn, free_port

HERE = Path(__file__).parent
PROXY = "127.0.0.2"  # trusted by the project under test; requests carry X-Forwarded-For
ALICE = {"x-api-key": "key-alice"}  # pro plan
BOB = {"x-api-key": "key-bob"}  # free plan
ROOT = {"x-api-key": "key-root"}  # staff: no per-user limit


def server(kind: str, env: Mapping[str, str]) -> Gunicorn | Uvicorn:
    if kind == "wsgi":
        return Gunicorn("exampleproj.wsgi:application", HERE, env, threads=4)
    # Django's ASGI handler speaks HTTP only: no lifespan
    return Uvicorn("exampleproj.asgi:application", HERE, env, extra=["--lifespan", "off"])


class Stack:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.redis = RedisServer().start()
        # A generous timeout: these tests are about answers, not speed, and the machine may
        # be loaded (a 50 ms timeout would fail requests open now and then).
        env = {"REDIS_URL": self.redis.url, "TRUSTED_PROXIES": f"{PROXY}/32", "REDIS_TB_TIMEOUT_MS": "5000"}
        self.app = server(kind, env)

    def client(self, ip: str) -> httpx.Client:
        """A client behind the trusted proxy, with its own address (its own IP bucket)."""
        return httpx.Client(
            base_url=self.app.url,
            transport=httpx.HTTPTransport(local_address=PROXY),
            headers={"x-forwarded-for": ip},
            timeout=30,
        )

    def tb(self) -> Client:
        return Client.from_url(self.redis.url, timeout=10)


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def stack(request: pytest.FixtureRequest) -> Iterator[Stack]:
    s = Stack(request.param)
    try:
        s.app.start()
        # gunicorn's master listens before its worker has loaded the app (and run the
        # startup check): wait for an answer, so no test stops Redis under a booting worker
        deadline = time.monotonic() + 60
        while True:
            try:
                with s.client("198.51.100.250") as c:
                    if c.get("/metrics").status_code == 200:
                        break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {request.param} app never answered:\n{s.app.output()}")
            time.sleep(0.1)
        yield s
    finally:
        s.app.stop()
        s.redis.stop()


@pytest.fixture(autouse=True)
def fresh_buckets(request: pytest.FixtureRequest) -> None:
    """Every test starts from empty buckets (user buckets are shared across IPs)."""
    if "stack" in request.fixturenames:
        s: Stack = request.getfixturevalue("stack")
        tb = s.tb()
        tb.redis.flushall()
        tb.close()


def sf(value: str) -> list[tuple[object, dict[str, object]]]:
    out = List()
    out.parse(value.encode())
    return [(m.value, dict(m.params)) for m in out]


def test_layers_and_plan_tiers_in_one_header(stack: Stack) -> None:
    with stack.client("198.51.100.1") as c:
        pro = c.get("/items/1", headers=ALICE)
        free = c.get("/items/1", headers=BOB)
        staff = c.get("/items/1", headers=ROOT)
        anonymous = c.get("/items/1")
    assert [r.status_code for r in (pro, free, staff, anonymous)] == [200] * 4
    assert sf(pro.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1}), ("user", {"q": 5000, "w": 3600})]
    assert sf(free.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1}), ("user", {"q": 100, "w": 3600})]
    assert sf(staff.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1})]
    assert sf(anonymous.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1})]
    (_, ip), (_, user) = sf(free.headers["RateLimit"])
    # the second request from this address; the ip bucket refills a token per 0.1 s
    assert user["r"] == 99 and ip["r"] in (8, 9)
    assert pro.json() == {"id": 1, "name": "item 1", "slow_down": False}


def test_async_view(stack: Stack) -> None:
    with stack.client("198.51.100.2") as c:
        r = c.get("/async/items/5", headers=BOB)
    assert r.status_code == 200 and r.json() == {"id": 5, "async": True}
    assert [n for n, _ in sf(r.headers["RateLimit"])] == ["ip", "user"]


def test_endpoint_decorator_then_429_burning_nothing(stack: Stack) -> None:
    tb = stack.tb()
    with stack.client("198.51.100.3") as c:
        codes = [c.post("/orders", headers=ALICE, json={"quantity": 1}).status_code for _ in range(5)]
        before = tb.peek("rl:user:alice", 5000, 5000 / 3600).remaining
        refused = c.post("/orders", headers=ALICE, json={"quantity": 1})
        after = tb.peek("rl:user:alice", 5000, 5000 / 3600).remaining
    tb.close()
    assert codes == [201] * 5
    assert refused.status_code == 429
    assert refused.headers["Content-Type"] == "application/problem+json"
    problem = refused.json()
    assert problem["type"] == "about:blank" and problem["title"] == "Too Many Requests"
    assert problem["status"] == 429 and problem["violated_policies"] == ["orders"]
    wait = int(refused.headers["Retry-After"])
    assert 1 <= wait <= 12 and problem["detail"] == f"rate limit exceeded for 'orders': retry after {wait} s"
    assert 0 < problem["retry_after"] <= 12
    assert ("orders", {"q": 5, "w": 60}) in sf(refused.headers["RateLimit-Policy"])
    # all or nothing: the refusal spent nothing on the user layer
    assert after >= before


async def test_a_concurrent_burst_gets_exactly_the_tokens_there_are(stack: Stack) -> None:
    async with httpx.AsyncClient(
        base_url=stack.app.url,
        transport=httpx.AsyncHTTPTransport(local_address=PROXY),
        headers={"x-forwarded-for": "198.51.100.11", **ALICE},
        timeout=30,
    ) as c:
        burst = await asyncio.gather(*(c.post("/orders", json={"quantity": 1}) for _ in range(16)))
    codes = [r.status_code for r in burst]
    # gunicorn's threads / uvicorn's loop race for the 5 tokens: exactly 5 win
    assert codes.count(201) == 5 and codes.count(429) == 11


def test_refund_by_the_view_and_on_our_own_5xx(stack: Stack) -> None:
    tb = stack.tb()
    with stack.client("198.51.100.4") as c:
        bad = c.post("/orders", headers=BOB, json={"quantity": 0})
        assert bad.status_code == 422 and bad.json()["refunded"] is True
        assert c.get("/flaky", headers=BOB).status_code == 503
        ok = c.get("/items/1", headers=BOB)
    bob = tb.peek("rl:user:bob", 100, 100 / 3600).remaining
    orders = tb.peek("rl:orders:bob", 5, 5 / 60).remaining
    tb.close()
    # the 422 and the 503 were given back: only /items/1 counts
    assert [p["r"] for n, p in sf(ok.headers["RateLimit"]) if n == "user"] == [99]
    assert 99 <= bob < 100 and orders == 5


def test_search_costs_by_page_size_via_its_url_name(stack: Stack) -> None:
    with stack.client("198.51.100.5") as c:
        r = c.get("/search", params={"q": "x", "size": "120"})
    assert r.status_code == 200
    assert ("search", {"q": 60, "w": 60}) in sf(r.headers["RateLimit-Policy"])
    assert dict((n, p["r"]) for n, p in sf(r.headers["RateLimit"]))["search"] == 57


def test_shadow_policy_observes_without_refusing(stack: Stack) -> None:
    with stack.client("198.51.100.6") as c:
        # search-strict (shadow, 20 a minute) refuses the 6th search of 4 pages; 'search' never
        rs = [c.get("/search", params={"q": "x", "size": "200"}) for _ in range(6)]
    assert [r.status_code for r in rs] == [200] * 6
    assert all("search-strict" not in r.headers["RateLimit-Policy"] for r in rs)
    # the shadow refusal charged nothing (all or nothing): 'search' went 56 ... 40, 40
    assert [dict((n, p["r"]) for n, p in sf(r.headers["RateLimit"]))["search"] for r in rs] == [56, 52, 48, 44, 40, 40]


def test_trusted_proxy_right_to_left_and_ipv6_by_64(stack: Stack) -> None:
    with stack.client("6.6.6.6, 198.51.100.7") as c:
        r = c.get("/quota")
        assert [p["key"] for p in r.json()["policies"]] == ["rl:ip:198.51.100.7"]
    with stack.client("2001:db8:7:8::1") as c:
        assert [p["key"] for p in c.get("/quota").json()["policies"]] == ["rl:ip:2001:db8:7:8::/64"]
    # not from the trusted proxy: the header is ignored
    with httpx.Client(base_url=stack.app.url, timeout=30) as direct:
        r = direct.get("/quota", headers={"x-forwarded-for": "198.51.100.8"})
        assert [p["key"] for p in r.json()["policies"]] == ["rl:ip:127.0.0.1"]


def test_excluded_views_and_metrics_scrape(stack: Stack) -> None:
    with stack.client("198.51.100.9") as c:
        assert c.get("/items/1").status_code == 200
        health = c.get("/healthz")
        scrape = c.get("/metrics")
    assert health.status_code == 200 and "RateLimit" not in health.headers
    assert scrape.status_code == 200 and "RateLimit" not in scrape.headers
    samples = {
        (s.name, s.labels.get("policy")): s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
        if s.name.startswith("redis_tb_") and s.labels.get("limiter") == "api"
    }
    assert samples[("redis_tb_allowed_total", "ip")] >= 1
    assert samples[("redis_tb_limited_total", "orders")] >= 1
    assert samples[("redis_tb_shadow_limited_total", "search-strict")] >= 1
    assert samples[("redis_tb_refunded_total", "user")] >= 2
    assert samples[("redis_tb_redis_call_duration_seconds_count", None)] >= 1


def leases(tb: Client, key: str) -> int:
    """TB.PEEK key LEASES: the live leases of an in-flight key, on the server."""
    got: Any = tb.redis.execute_command("TB.PEEK", key, "LEASES")  # type: ignore[no-untyped-call]
    return int(got[0])


def sse(body: str) -> list[str]:
    return [e for e in body.split("\n\n") if e]


def test_stream_holds_a_slot_and_settles_the_tokens_it_sent(stack: Stack) -> None:
    """GET /stream (SPEC N, G): one of 2 stream slots per address (no w in its
    RateLimit-Policy item), the view holds max_tokens and settles the events sent; the
    slot is free once the body ended (N4), over WSGI and ASGI."""
    tb = stack.tb()
    with stack.client("198.51.100.20") as c:
        for _ in range(3):
            r = c.get("/stream", params={"tokens": 3, "max_tokens": 400})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert sse(r.text) == ["data: token-1", "data: token-2", "data: token-3", "data: [DONE]"]
            assert ("streams", {"q": 2}) in sf(r.headers["RateLimit-Policy"])
            items = dict((n, p) for n, p in sf(r.headers["RateLimit"]))
            assert items["streams"]["r"] == 1 and "tokens" not in items
        # 3 x 400 held would not fit in 1000: each stream settled 3 (its surplus back)
        left = tb.peek("rl:tokens:198.51.100.20", 1000, 1000 / 3600).remaining
        assert 991 - 1 <= left <= 1000 - 9 + 1
        never = c.get("/stream", params={"max_tokens": 1001})
        assert never.status_code == 429 and never.json()["violated_policies"] == ["tokens"]
    assert leases(tb, "rl:streams:198.51.100.20") == 0
    tb.close()


def test_a_client_gone_mid_stream_frees_its_slot(stack: Stack) -> None:
    ip = "198.51.100.21"
    streams = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", stack.app.port), source_address=(PROXY, 0))
        s.sendall(
            f"GET /stream?tokens=400&delay_ms=20 HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {ip}\r\n\r\n".encode()
        )
        got = b""
        while b"token-1" not in got:
            got += s.recv(4096)
        streams.append(s)
    with stack.client(ip) as c:
        assert c.get("/stream", params={"tokens": 1}).status_code == 429  # both slots taken
        for s in streams:
            s.close()
        deadline = time.monotonic() + 10
        while c.get("/stream", params={"tokens": 1}).status_code != 200:  # freed at the next event
            assert time.monotonic() < deadline, "the slots of clients gone mid-stream were not freed"
            time.sleep(0.1)  # no faster than 'ip' refills


def test_renewal_keeps_a_stream_lease_past_its_lease_time(stack: Stack) -> None:
    """SPEC N5: a 2 s lease renewed every second: 3 s into a stream it still holds its
    slot on the server (TB.PEEK key LEASES)."""
    tb = stack.tb()
    with stack.client("198.51.100.22") as c, c.stream("GET", "/stream", params={"tokens": 100, "delay_ms": 50}) as r:
        assert r.status_code == 200
        end = time.monotonic() + 3
        lines = r.iter_lines()
        while time.monotonic() < end:
            next(lines)
        assert leases(tb, "rl:streams:198.51.100.22") == 1
    tb.close()


def test_login_is_a_sliding_window_in_a_call_of_its_own(stack: Stack) -> None:
    with stack.client("198.51.100.23") as c:
        r = c.post("/login")
    assert r.status_code == 200
    assert ("login", {"q": 20, "w": 3600}) in sf(r.headers["RateLimit-Policy"])
    items = dict((n, p) for n, p in sf(r.headers["RateLimit"]))
    # a sliding window is whole again only after the next window: more than an hour away
    login: Any = items["login"]
    assert login["r"] == 19 and 3600 < login["t"] <= 7200 and "ip" in items


def test_redis_stopped_mid_run_then_back(stack: Stack) -> None:
    port = stack.redis.port
    stack.redis.stop()
    with stack.client("198.51.100.10") as c:
        # fail open for the API: served, without rate-limit headers
        opened = [c.get("/items/1", headers=BOB) for _ in range(3)]
        # the login fails closed
        login = c.post("/login")
        scrape = c.get("/metrics")
    assert [r.status_code for r in opened] == [200] * 3
    assert all("RateLimit" not in r.headers for r in opened)
    assert login.status_code == 503 and login.headers["Retry-After"] == "1"
    assert login.json() == {
        "type": "about:blank",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the rate limiter's store is unavailable; retry shortly",
    }
    counters = {
        s.name: s.value
        for family in text_string_to_metric_families(scrape.text)
        for s in family.samples
        if s.labels.get("limiter") == "api"
    }
    assert counters["redis_tb_store_errors_total"] >= 1
    assert counters["redis_tb_degraded_total"] >= 4
    # SPEC B5: the API limiter's store error is logged, one line a second at most: its
    # first line may be another call's of the same second (a stream of an earlier test
    # settling its hold as Redis went away), so any TB.* line that fails open counts
    out = stack.app.output()
    assert re.search(r"redis-tb: TB\.[A-Z]+ on 127\.0\.0\.1:\d+ failed .*; failing open", out), out[-3000:]

    stack.redis = RedisServer(port=port).start()
    # After the 1 s cool-down one request probes Redis again and the limits are back.
    # The login's fail-closed limiter keeps its own cool-down: polled the same way.
    deadline = time.monotonic() + 30
    with stack.client("198.51.100.10") as c:
        while True:
            r = c.get("/items/1", headers=BOB)
            if "RateLimit" in r.headers or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200 and [n for n, _ in sf(r.headers["RateLimit"])] == ["ip", "user"]
        while True:
            login = c.post("/login")
            # (the API's limiter, failing open, may meet one more stale connection: that
            # answer has no rate-limit header; poll on)
            if (login.status_code != 503 and "RateLimit-Policy" in login.headers) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert login.status_code == 200 and ("login", {"q": 20, "w": 3600}) in sf(login.headers["RateLimit-Policy"])


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_a_redis_without_the_module_stops_the_server_at_startup(kind: str) -> None:
    # SPEC E1: U1's line where the module is forced (auto starts on the scripts)
    plain = RedisServer(module=False).start()
    app = server(kind, {"REDIS_URL": plain.url, "REDIS_TB_BACKEND": "module"})
    try:
        app.spawn()
        assert app.proc is not None
        code = app.proc.wait(60)
        assert code == 3  # SPEC U4 (gunicorn: its worker's boot error)
        out = app.output()
        line = f"redis-tb module not loaded on 127.0.0.1:{plain.port}: load libredis_tb.so with loadmodule"
        # SPEC U1: one line, no traceback, and (gunicorn) no worker started again and again
        assert out.count(line) == 1, out
        assert "Traceback" not in out, out
    finally:
        app.stop()
        plain.stop()


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_an_unreachable_redis_stops_the_server_in_one_line(kind: str) -> None:
    port = free_port()
    app = server(kind, {"REDIS_URL": f"redis://127.0.0.1:{port}/0"})
    try:
        app.spawn()
        assert app.proc is not None
        assert app.proc.wait(60) == 3  # SPEC U4
        out = app.output()
        # SPEC U2: the address and what to do, once, and no traceback
        assert out.count(f"redis-tb: cannot reach Redis at 127.0.0.1:{port} (") == 1, out
        assert "start_degraded to start failing open" in out, out
        assert "Traceback" not in out, out
    finally:
        app.stop()


CLUSTER_REFUSAL = (
    "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'user', 'orders', 'search', "
    "'search-strict', 'streams'), which a Redis Cluster refuses unless they share a hash slot: set a tag "
    "function (SPEC K6)"
)


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_a_redis_cluster_stops_the_server_in_one_line(kind: str) -> None:
    """SPEC U3, U4: the configured policies go several in one call and there is no
    HASH_TAG: on a cluster such calls would be refused CROSSSLOT, so the start is. The
    line names them in the calls' order: 'orders' (the @rate_limit of POST /orders,
    which joins the middleware's call) after the configured policies of that call."""
    node = RedisServer(cluster=True).start()
    app = server(kind, {"REDIS_URL": node.url})
    try:
        app.spawn()
        assert app.proc is not None and app.proc.wait(60) == 3
        out = app.output()
        assert out.count(CLUSTER_REFUSAL) == 1 and "Traceback" not in out, out
    finally:
        app.stop()
        node.stop()


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_the_server_starts_degraded_only_when_asked(kind: str) -> None:
    """SPEC U2, U4: REDIS_TB_START_DEGRADED=1 with Redis unreachable: one line, then the
    API fails open (no rate-limit headers)."""
    port = free_port()
    app = server(kind, {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "REDIS_TB_START_DEGRADED": "1"})
    try:
        app.start()
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"{app.url}/items/1", headers={"host": "127.0.0.1"}, timeout=30)
                break
            except httpx.TransportError:  # gunicorn's worker still booting
                assert time.monotonic() < deadline, app.output()
                time.sleep(0.1)
        assert r.status_code == 200 and "RateLimit" not in r.headers
        line = (
            f"redis-tb: Redis at 127.0.0.1:{port} unreachable at startup; starting degraded "
            "(the limiter's failure mode applies until it answers)"
        )
        assert app.output().count(line) == 1, app.output()
    finally:
        app.stop()


# -- issue 39: the stream's bounds, its end when the client goes or stops reading -------

STREAM_BOUNDS = {"tokens": (0, 10000), "delay_ms": (0, 10000), "max_tokens": (1, 10000)}


def test_a_stream_query_value_out_of_its_bounds_is_a_400_problem(stack: Stack) -> None:
    """examples/manifest.json's bad_query: answered before anything is held or streamed."""
    cases = [("tokens", "1000000"), ("tokens", "-1"), ("tokens", "abc"), ("delay_ms", "10001"), ("max_tokens", "0")]
    with stack.client("198.51.100.30") as c:
        for name, value in cases:
            r = c.get("/stream", params={name: value})
            low, high = STREAM_BOUNDS[name]
            assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
            assert r.text == (
                '{"type":"about:blank","title":"Bad Request","status":400,'
                f'"detail":"query parameter \'{name}\' must be a whole number from {low} to {high}"}}'
            )


def open_stream(stack: Stack, ip: str, query: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", stack.app.port), source_address=(PROXY, 0))
    s.sendall(f"GET /stream?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {ip}\r\n\r\n".encode())
    return s


def test_a_client_gone_mid_stream_stops_it_within_a_second_and_it_settles_what_it_sent(stack: Stack) -> None:
    """A 100 s stream holding 500 tokens: its client reads 20 events and goes away;
    within a second the stream stops and settles what it sent, not the 500 held."""
    tb, ip = stack.tb(), "198.51.100.31"
    s = open_stream(stack, ip, "tokens=10000&delay_ms=10&max_tokens=500")
    got = b""
    while b"token-20" not in got:
        got += s.recv(4096)
    assert tb.peek(f"rl:tokens:{ip}", 1000, 1000 / 3600).remaining == pytest.approx(500, abs=1)
    s.close()
    gone = time.monotonic()
    while tb.peek(f"rl:tokens:{ip}", 1000, 1000 / 3600).remaining < 900:
        assert time.monotonic() - gone < 1.5, "not settled a second after the client left"
        time.sleep(0.05)
    tb.close()


def test_a_stream_whose_client_reads_nothing_is_ended_at_its_max_duration(stack: Stack) -> None:
    """SPEC N7: 'streams' ends a stream 6 s after its grant, whatever its client does
    (WSGI: the connection shut down; ASGI: the request's task cancelled)."""
    tb, ip = stack.tb(), "198.51.100.33"
    sent = time.monotonic()  # before the grant
    s = open_stream(stack, ip, "tokens=10000&delay_ms=10&max_tokens=1000")
    got = s.recv(4096)
    assert leases(tb, f"rl:streams:{ip}") == 1
    while leases(tb, f"rl:streams:{ip}") != 0:
        assert time.monotonic() - sent < 10, "the stream's slot outlived its max_duration"
        time.sleep(0.1)
    assert time.monotonic() - sent >= 6  # not before its max_duration
    s.settimeout(5)
    while chunk := s.recv(1 << 16):
        got += chunk
    s.close()
    assert b"token-1" in got and b"[DONE]" not in got
    tb.close()


@pytest.mark.parametrize("kind", ["wsgi", "asgi"])
def test_auto_serves_a_redis_without_the_module_on_the_scripts(kind: str) -> None:
    """SPEC E1, E6: REDIS_TB_BACKEND unset (auto) on a server without the module: the
    script library, requests limited, the gauge on /metrics says scripts."""
    plain = RedisServer(module=False).start()
    app = server(kind, {"REDIS_URL": plain.url, "REDIS_TB_TIMEOUT_MS": "2000"})
    try:
        app.start()
        with httpx.Client(base_url=app.url, timeout=30) as c:
            statuses = [c.get("/items/1").status_code for _ in range(25)]
            assert 429 in statuses and statuses[0] == 200, statuses
            text = c.get("/metrics").text
        gauge = {
            (s.labels["limiter"], s.labels["backend"]): s.value
            for f in text_string_to_metric_families(text) if f.name == "redis_tb_backend" for s in f.samples
        }
        assert gauge.get(("api", "scripts")) == 1 and gauge.get(("api", "module")) == 0, gauge
    finally:
        app.stop()
        plain.stop()


@pytest.mark.parametrize("kind", ["asgi", "wsgi"])
def test_a_bad_backend_exits_2_in_one_line(kind: str) -> None:
    """uvicorn reads the settings in its one process; under gunicorn the master's check
    (gunicorn.conf.py) stops before a worker starts: a worker that exits 2 would be
    started again forever (the master stops only on a worker's 3)."""
    app = server(kind, {"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_TB_BACKEND": "lua"})
    try:
        app.spawn()
        assert app.proc is not None and app.proc.wait(60) == 2
        out = app.output()
        assert out.count("REDIS_TB_BACKEND: backend must be auto, module or scripts, got 'lua'") == 1, out
    finally:
        app.stop()
