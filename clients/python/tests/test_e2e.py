"""End to end: a real redis-server with the module, the test app served by real
uvicorn processes on loopback ports, real HTTP.

No timing thresholds: exact values come from a fixed clock or from policies that
refill slower than any test runs; the recovery test sleeps Retry-After.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from http_sfv.list import List

from redis_tb import Client
from redis_tb_testing.servers import RedisServer, Uvicorn, start_all

HERE = Path(__file__).parent
NOW = 1764456268.0
TRUSTED_PEER = "127.0.0.2"  # the apps trust it as a proxy; 127.0.0.1 is an ordinary client


def app(redis_url: str, **env: str) -> Uvicorn:
    return Uvicorn("e2e_app:app", HERE, {"TB_REDIS_URL": redis_url, "TB_TRUSTED": f"{TRUSTED_PEER}/32", **env})


@pytest.fixture(scope="module")
def apps(redis_server: RedisServer) -> Iterator[dict[str, Uvicorn]]:
    servers = {
        "main": app(redis_server.url),
        "second": app(redis_server.url),
        "fixed": app(redis_server.url, TB_NOW=str(NOW)),
    }
    try:
        start_all(list(servers.values()))
        yield servers
    finally:
        for s in servers.values():
            s.stop()


@pytest.fixture
def tb(redis_server: RedisServer) -> Iterator[Client]:
    c = Client.from_url(redis_server.url, timeout=10)
    c.redis.flushall()
    yield c
    c.close()


@pytest.fixture
def http(apps: dict[str, Uvicorn]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=apps["main"].url, timeout=30) as c:
        yield c


def sf(value: str) -> list[tuple[object, dict[str, object]]]:
    out = List()
    out.parse(value.encode())
    return [(m.value, dict(m.params)) for m in out]


def test_burst_to_the_limit_then_429_with_every_header_value_exact(apps: dict[str, Uvicorn], tb: Client) -> None:
    # Fixed clock: capacity 4, one token back every 4 s, no time passes.
    with httpx.Client(base_url=apps["fixed"].url, timeout=30) as c:
        for i in range(1, 5):
            before = time.time()
            r = c.get("/burst")
            after = time.time()
            assert r.status_code == 200
            assert r.headers["RateLimit-Policy"] == '"burst";q=4;w=16'
            assert sf(r.headers["RateLimit"]) == [("burst", {"r": 4 - i, "t": 4 * i})]
            assert r.headers["X-RateLimit-Limit"] == "4"
            assert r.headers["X-RateLimit-Remaining"] == str(4 - i)
            # a Unix timestamp by the app server's wall clock: ceil(now + t)
            assert math.ceil(before + 4 * i) <= int(r.headers["X-RateLimit-Reset"]) <= math.ceil(after + 4 * i)
            assert "Retry-After" not in r.headers
            assert r.json()["keys"] == ["rl:burst:127.0.0.1"]
        before = time.time()
        r = c.get("/burst")
        after = time.time()
    assert r.status_code == 429
    assert r.headers["Content-Type"] == "application/problem+json"
    assert r.headers["Retry-After"] == "4"
    assert r.headers["RateLimit-Policy"] == '"burst";q=4;w=16'
    assert r.headers["RateLimit"] == '"burst";r=0;t=16'
    assert r.headers["X-RateLimit-Limit"] == "4"
    assert r.headers["X-RateLimit-Remaining"] == "0"
    assert math.ceil(before + 16) <= int(r.headers["X-RateLimit-Reset"]) <= math.ceil(after + 16)
    assert r.json() == {
        "type": "about:blank",
        "title": "Too Many Requests",
        "status": 429,
        "detail": "rate limit exceeded for 'burst': retry after 4 s",
        "violated_policies": ["burst"],
        "retry_after": 4.0,
    }
    assert tb.peek("rl:burst:127.0.0.1", 4, 0.25, now=NOW).remaining == 0


def test_burst_on_the_server_clock(http: httpx.Client, tb: Client) -> None:
    # per_hour(5): a token comes back every 720 s, far longer than this test runs.
    started = time.monotonic()
    for i in range(1, 6):
        r = http.get("/hourly")
        assert r.status_code == 200
        assert r.headers["RateLimit-Policy"] == '"hourly";q=5;w=3600'
        ((name, params),) = sf(r.headers["RateLimit"])
        assert name == "hourly" and params["r"] == 5 - i
        assert isinstance(params["t"], int) and 0 < params["t"] <= 720 * i
    r = http.get("/hourly")
    elapsed = time.monotonic() - started
    assert r.status_code == 429
    retry = int(r.headers["Retry-After"])
    # a token is 720 s away from the first take: the wait is at most that, and at
    # least that less the time the test took (measured, not a threshold)
    assert 720 - elapsed - 1 <= retry <= 720
    assert r.json()["violated_policies"] == ["hourly"]
    assert 720 - elapsed - 1 <= r.json()["retry_after"] <= 720


def test_recovery_after_sleeping_retry_after(http: httpx.Client, tb: Client) -> None:
    assert [http.get("/fast").status_code for _ in range(2)] == [200, 200]
    refused = http.get("/fast")
    assert refused.status_code == 429
    assert refused.headers["Retry-After"] == "1"  # a sub-second wait is never "0"
    time.sleep(int(refused.headers["Retry-After"]))
    assert http.get("/fast").status_code == 200


async def test_two_app_workers_share_one_limit_exactly(apps: dict[str, Uvicorn], tb: Client) -> None:
    urls = [apps["main"].url, apps["second"].url]
    async with httpx.AsyncClient(timeout=30) as c:
        # two each, one after another: both workers charge the one bucket
        first = [await c.get(f"{urls[i % 2]}/shared") for i in range(4)]
        assert [sf(r.headers["RateLimit"])[0][1]["r"] for r in first] == [9, 8, 7, 6]
        # then a concurrent burst across both: exactly the 6 tokens left are handed out
        burst = await asyncio.gather(*(c.get(f"{urls[i % 2]}/shared") for i in range(26)))
    codes = [r.status_code for r in burst]
    assert codes.count(200) == 6 and codes.count(429) == 20
    assert tb.peek("rl:shared:127.0.0.1", 10, 10 / 3600).remaining < 1


def test_layered_policies_burn_nothing_on_refusal(http: httpx.Client, tb: Client) -> None:
    ipwide = ("rl:ipwide:127.0.0.1", 100, 100 / 3600)
    for _ in range(2):
        r = http.get("/layered", headers={"x-user": "ann"})
        assert r.status_code == 200
    assert [n for n, _ in sf(r.headers["RateLimit-Policy"])] == ["ipwide", "user"]
    for _ in range(3):
        r = http.get("/layered", headers={"x-user": "ann"})
        assert r.status_code == 429
        assert r.json()["violated_policies"] == ["user"]
    # the per-IP bucket paid for the two admitted requests only
    assert 98 <= tb.peek(*ipwide).remaining < 99
    # another user from the same IP still gets through: the IP layer was not burnt
    assert http.get("/layered", headers={"x-user": "bob"}).status_code == 200
    assert 97 <= tb.peek(*ipwide).remaining < 98
    # no user header: the user policy is skipped, the IP policy alone applies
    r = http.get("/layered")
    assert r.status_code == 200 and [n for n, _ in sf(r.headers["RateLimit"])] == ["ipwide"]


def test_spoofed_forwarded_for_from_an_untrusted_peer_is_ignored(http: httpx.Client, tb: Client) -> None:
    keys = []
    for i in range(3):
        r = http.get("/whoami", headers={"x-forwarded-for": f"198.51.100.{i}"})
        assert r.status_code == 200
        keys.append(r.json()["keys"])
    assert keys == [["rl:who:127.0.0.1"]] * 3
    # rotating forged addresses does not buy more requests
    assert http.get("/whoami", headers={"x-forwarded-for": "198.51.100.99"}).status_code == 429


def test_forwarded_for_from_a_trusted_proxy_is_honoured_right_to_left(apps: dict[str, Uvicorn], tb: Client) -> None:
    transport = httpx.HTTPTransport(local_address=TRUSTED_PEER)
    with httpx.Client(base_url=apps["main"].url, transport=transport, timeout=30) as proxy:
        r = proxy.get("/whoami", headers={"x-forwarded-for": "6.6.6.6, 198.51.100.7"})
        assert r.json()["keys"] == ["rl:who:198.51.100.7"]
        r = proxy.get("/whoami", headers={"x-forwarded-for": "2001:db8:1:2::1"})
        assert r.json()["keys"] == ["rl:who:2001:db8:1:2::/64"]
        r = proxy.get("/whoami", headers={"x-forwarded-for": "2001:db8:1:2::ffff"})
        assert r.json()["keys"] == ["rl:who:2001:db8:1:2::/64"]
        r = proxy.get("/whoami", headers={"x-forwarded-for": "not an address"})
        assert r.json()["keys"] == [f"rl:who:{TRUSTED_PEER}"]
    assert tb.peek("rl:who:2001:db8:1:2::/64", 3, 3 / 3600).remaining < 2


def test_cost_from_the_request_and_a_cost_that_can_never_fit(http: httpx.Client, tb: Client) -> None:
    r = http.get("/cost", headers={"x-cost": "3"})
    assert r.status_code == 200 and sf(r.headers["RateLimit"])[0][1]["r"] == 2
    never = http.get("/cost", headers={"x-cost": "6"})
    assert never.status_code == 429
    assert "Retry-After" not in never.headers
    body = never.json()
    assert body["retry_after"] is None and "never" in body["detail"]
    assert body["violated_policies"] == ["costly"]


def test_handler_refund_and_automatic_refund_on_5xx(http: httpx.Client, tb: Client) -> None:
    bucket = ("rl:refunds:127.0.0.1", 2, 2 / 3600)
    assert http.get("/refund", params={"skip": 1}).status_code == 200
    assert tb.peek(*bucket).remaining == 2  # refunded by the handler
    assert http.get("/boom/503").status_code == 503
    assert tb.peek(*bucket).remaining == 2  # refunded by refund_on=5xx
    assert http.get("/boom/404").status_code == 404
    assert tb.peek(*bucket).remaining < 2  # a 404 is counted
    assert http.get("/stats").json()["refunds"] >= 2


def test_dependency_refusal_refunds_the_middleware_and_answers_problem_json(http: httpx.Client, tb: Client) -> None:
    r = http.get("/combo")
    assert r.status_code == 200
    assert r.json()["keys"] == ["rl:comboip:127.0.0.1", "rl:combodep:127.0.0.1"]
    assert r.json()["dependency"] == ["rl:combodep:127.0.0.1"]
    assert [n for n, _ in sf(", ".join(r.headers.get_list("RateLimit")))] == ["comboip", "combodep"]
    refused = http.get("/combo")
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["violated_policies"] == ["combodep"]
    assert refused.headers["Retry-After"] == "3600"
    assert 99 <= tb.peek("rl:comboip:127.0.0.1", 100, 100 / 3600).remaining < 100


def test_routes_without_a_policy_are_not_limited(http: httpx.Client) -> None:
    r = http.get("/stats")
    assert r.status_code == 200 and "RateLimit" not in r.headers
    assert http.get("/no/such/route").status_code == 404


@pytest.mark.parametrize("fail_open", [True, False])
def test_redis_stopped_mid_run(fail_open: bool) -> None:
    store = RedisServer().start()
    served = app(store.url, TB_FAIL_OPEN="1" if fail_open else "0", TB_TIMEOUT="0.2", TB_COOLDOWN="1")
    try:
        served.start()
        with httpx.Client(base_url=served.url, timeout=30) as c:
            ok = c.get("/hourly")
            assert ok.status_code == 200 and "RateLimit" in ok.headers

            store.freeze()  # Redis hangs: the per-call timeout answers for it
            hung = c.get("/hourly")
            store.thaw()
            store.stop()  # Redis gone: connection refused
            gone = [c.get("/hourly") for _ in range(3)]
            stats = c.get("/stats").json()
        for r in [hung, *gone]:
            if fail_open:
                assert r.status_code == 200
                assert "RateLimit" not in r.headers and "RateLimit-Policy" not in r.headers
                assert r.json()["outcome"] == "store_error"
            else:
                assert r.status_code == 503
                assert r.headers["Retry-After"] == "1"
                assert r.headers["content-type"] == "application/problem+json"
                assert r.json()["status"] == 503
        assert stats["store_errors"] >= 1  # the timeout; the cool-down then spares Redis
        assert stats["degraded"] == 4  # every request after the failure, cool-down included
        log = served.output()
        assert "redis-tb: TB.TAKE on 127.0.0.1:" in log  # SPEC L4: one policy
        assert ("failing open" if fail_open else "failing closed") in log
    finally:
        served.stop()
        store.stop()


def test_missing_module_at_startup_is_a_clear_error() -> None:
    # SPEC E1: U1's line where the module is forced (auto starts on the scripts)
    bare = RedisServer(module=False).start()
    served = app(bare.url, TB_BACKEND="module")
    try:
        served.spawn()
        assert served.proc is not None
        code = served.proc.wait(120)
        assert code != 0
        assert (
            f"redis-tb module not loaded on 127.0.0.1:{bare.port}: load libredis_tb.so with loadmodule"
            in served.output()
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the app kept running without the module")
    finally:
        served.stop()
        bare.stop()


def test_problem_json_is_valid_json_with_content_length(apps: dict[str, Uvicorn], tb: Client) -> None:
    with httpx.Client(base_url=apps["fixed"].url, timeout=30) as c:
        for _ in range(4):
            c.get("/burst")
        r = c.get("/burst")
    assert int(r.headers["content-length"]) == len(r.content)
    assert json.loads(r.content)["status"] == 429


def test_issue_27_costs_tags_identity_length_key_ambiguity_and_header_identities(
    redis_server: RedisServer, tb: Client
) -> None:
    """Issue 27 over real HTTP (uvicorn) and a real redis-server with the module."""
    big = Uvicorn(
        "e2e_app:app", HERE, {"TB_REDIS_URL": redis_server.url},
        extra=["--h11-max-incomplete-event-size", str(1 << 20)],  # a 100 KB header gets through
    )
    start_all([big])
    try:
        with httpx.Client(base_url=big.url, timeout=30) as c:
            # out-of-range costs and limits (SPEC L3): 500, the policy named, never the
            # value; no Redis call (the other policy is not charged); counted
            for bad in ("nan", "-1", "inf", "1e18"):
                r = c.get("/invalid", headers={"x-cost": bad})
                assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
                assert r.text == (
                    '{"type":"about:blank","title":"Internal Server Error","status":500,'
                    '"detail":"rate limit policy \'export\' got an invalid cost or limit from the application"}'
                )
                assert bad not in r.text and "ratelimit" not in r.headers
            r = c.get("/invalid", headers={"x-rate": "0"})
            assert r.status_code == 500 and "'exportlim'" in r.json()["detail"]
            assert tb.redis.keys("rl:invip:*") == []  # nothing sent, nothing charged
            assert c.get("/stats/invalid").json()["invalid_inputs"] == 5
            r = c.get("/invalid", headers={"x-cost": "2"})
            assert r.status_code == 200 and r.json()["keys"] == [
                "rl:invip:127.0.0.1", "rl:export:127.0.0.1", "rl:exportlim:127.0.0.1",
            ]
            # hash tags (SPEC K2, K4): an empty tag is no tag; braces never reach a key
            assert c.get("/tagged", headers={"x-user": "alice", "x-tag": ""}).json()["keys"] == ["rl:tagged:alice"]
            assert c.get("/tagged", headers={"x-user": "alice", "x-tag": "{x}"}).json()["keys"] == [
                "rl:{%7Bx%7D}:tagged:alice"
            ]
            assert c.get("/tagged", headers={"x-user": "{x}bob"}).json()["keys"] == ["rl:tagged:%7Bx%7Dbob"]
            # identity length (SPEC K3): a 100 KB header makes a bounded key
            huge = "z" * 100_000
            r = c.get("/hdr", headers={"x-api-key": huge})
            assert r.status_code == 200
            (key,) = r.json()["keys"]
            assert key == "rl:apikey:%h" + hashlib.sha256(huge.encode()).hexdigest()[:32]
            assert tb.redis.exists(key) == 1 and all(len(k) <= 64 for k in tb.redis.keys("rl:apikey:*"))
            # key ambiguity (SPEC K2): route "/amb/x:y" with user "bob" and route "/amb/x"
            # with user "y:bob" were one key before; now two
            k1 = c.get("/amb/x:y", headers={"x-user": "bob"}).json()["keys"]
            k2 = c.get("/amb/x", headers={"x-user": "y:bob"}).json()["keys"]
            assert k1 == ["rl:amb@GET%20/amb/x%3Ay:bob"] and k2 == ["rl:amb@GET%20/amb/x:y:bob"]
            # header identities (SPEC I2): non-ASCII bytes kept, duplicates joined
            assert c.get("/hdr", headers={b"x-api-key": b"\xc3\xa9"}).json()["keys"] == ["rl:apikey:%C3%A9"]
            assert c.get("/hdr", headers={b"x-api-key": b"\xe9"}).json()["keys"] == ["rl:apikey:%E9"]
            r = c.get("/hdr", headers=[("x-api-key", "k"), ("x-api-key", "x1")])
            assert r.json()["keys"] == ["rl:apikey:k,%20x1"]
            assert c.get("/hdr").json()["keys"] == []  # absent: skipped
        # a control byte: uvicorn's HTTP parser (h11) refuses the request itself with a
        # 400 before any app runs; the limiter's own 400 (SPEC P4) is checked through
        # the ASGI middleware in test_header_identity_control_byte_is_a_400_problem
        with socket.create_connection(("127.0.0.1", big.port)) as s:
            s.sendall(b"GET /hdr HTTP/1.1\r\nHost: x\r\nX-Api-Key: a\x01b\r\nConnection: close\r\n\r\n")
            reply = s.recv(65536)
        assert reply.startswith(b"HTTP/1.1 400")
    finally:
        big.stop()


async def test_header_identity_control_byte_is_a_400_problem(redis_server: RedisServer, tb: Client) -> None:
    """SPEC I2, P4 through the ASGI middleware (a server that lets the byte through):
    400 with the problem body, no Redis call, the policy not skipped."""
    from redis_tb import AsyncClient, Key, RateLimiter, RateLimitMiddleware, per_hour

    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5)
    sent: list[dict[str, object]] = []

    async def app(scope: object, receive: object, send: object) -> None:  # never reached
        raise AssertionError("the app ran")

    mw = RateLimitMiddleware(app, lim, [per_hour("apikey", 5, key=Key.header("x-api-key"))], limit_unmatched=True)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request"}

    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"x-api-key", b"a\x01b")], "client": ("127.0.0.1", 1)}
    await mw(scope, receive, send)
    assert sent[0]["status"] == 400
    assert sent[1]["body"] == (
        b'{"type":"about:blank","title":"Bad Request","status":400,"detail":"header \'x-api-key\' holds a control byte"}'
    )
    assert tb.redis.keys("rl:apikey:*") == [] and lim.stats.checks == 1
    await lim.aclose()
