"""The example app, served by uvicorn against a real redis-server with the module."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from http_sfv.list import List
from prometheus_client.parser import text_string_to_metric_families

from redis_tb_testing.servers import RedisServer, Uvicorn, free_port, start_all

HERE = Path(__file__).parent
PROXY = "127.0.0.2"  # trusted by the app under test; requests carry X-Forwarded-For
ALICE = {"x-api-key": "key-alice"}  # pro plan
BOB = {"x-api-key": "key-bob"}  # free plan


def sf(value: str) -> list[tuple[object, dict[str, object]]]:
    out = List()
    out.parse(value.encode())
    return [(m.value, dict(m.params)) for m in out]


@pytest.fixture(scope="module")
def store() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def servers(store: RedisServer) -> Iterator[dict[str, Uvicorn]]:
    env = {"REDIS_URL": store.url, "TRUSTED_PROXIES": f"{PROXY}/32", "REDIS_TB_TIMEOUT_MS": "5000"}
    apps = {
        "limited": Uvicorn("app:app", HERE, env),
        "plain": Uvicorn("app:app", HERE, {**env, "RATE_LIMIT": "off"}),
    }
    try:
        start_all(list(apps.values()))
        yield apps
    finally:
        for a in apps.values():
            a.stop()


def client(app: Uvicorn, ip: str) -> httpx.Client:
    """A client behind the trusted proxy, with its own address (so its own IP bucket)."""
    return httpx.Client(
        base_url=app.url,
        transport=httpx.HTTPTransport(local_address=PROXY),
        headers={"x-forwarded-for": ip},
        timeout=30,
    )


def test_layers_and_plan_tiers_in_one_header(servers: dict[str, Uvicorn]) -> None:
    with client(servers["limited"], "198.51.100.1") as c:
        pro = c.get("/items/1", headers=ALICE)
        free = c.get("/items/1", headers=BOB)
        anonymous = c.get("/items/1")
    assert pro.status_code == free.status_code == anonymous.status_code == 200
    assert sf(pro.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1}), ("user", {"q": 5000, "w": 3600})]
    assert sf(free.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1}), ("user", {"q": 100, "w": 3600})]
    assert sf(anonymous.headers["RateLimit-Policy"]) == [("ip", {"q": 10, "w": 1})]


def test_endpoint_policy_refund_and_refusal(servers: dict[str, Uvicorn]) -> None:
    with client(servers["limited"], "198.51.100.2") as c:
        rejected = c.post("/orders", json={"item_id": 1, "quantity": 0}, headers=ALICE)
        assert rejected.status_code == 422
        left = []
        for _ in range(5):
            r = c.post("/orders", json={"item_id": 1, "quantity": 1}, headers=ALICE)
            assert r.status_code == 201
            left.append(dict(sf(r.headers["RateLimit"]))["orders"]["r"])
        # the rejected order was refunded: five real orders fit in the five tokens
        assert left == [4, 3, 2, 1, 0]
        refused = c.post("/orders", json={"item_id": 1, "quantity": 1}, headers=ALICE)
    assert refused.status_code == 429
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["violated_policies"] == ["orders"]
    assert int(refused.headers["Retry-After"]) >= 1


def test_decision_used_in_handlers(servers: dict[str, Uvicorn]) -> None:
    with client(servers["limited"], "198.51.100.3") as c:
        q = c.get("/quota", headers=BOB).json()
        item = c.get("/items/7", headers=BOB).json()
    assert q["outcome"] == "allowed"
    assert [p["name"] for p in q["policies"]] == ["ip", "user"]
    assert q["policies"][1]["capacity"] == 100
    assert item == {"id": 7, "name": "item 7", "slow_down": False}


def test_search_cost_and_login_dependency(servers: dict[str, Uvicorn]) -> None:
    with client(servers["limited"], "198.51.100.4") as c:
        r = c.get("/search", params={"q": "x", "size": 200})
        login = c.post("/login")
    assert dict(sf(r.headers["RateLimit"]))["search"]["r"] == 56
    assert login.status_code == 200 and login.json()["attempts_left"] < 20
    assert [n for n, _ in sf(", ".join(login.headers.get_list("RateLimit")))] == ["ip", "login"]


def test_health_and_the_unlimited_twin_carry_no_headers(servers: dict[str, Uvicorn]) -> None:
    with client(servers["limited"], "198.51.100.5") as c:
        assert "RateLimit" not in c.get("/healthz").headers
    with client(servers["plain"], "198.51.100.5") as c:
        r = c.get("/items/1", headers=ALICE)
    assert r.status_code == 200 and "RateLimit" not in r.headers


def scrape(app: Uvicorn) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics over HTTP, parsed with prometheus_client's own text parser."""
    r = httpx.get(f"{app.url}/metrics", timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert "RateLimit" not in r.headers  # /metrics itself is not limited
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_and_shadow_policy_scraped_over_http(servers: dict[str, Uvicorn]) -> None:
    app = servers["limited"]
    before = scrape(app)
    with client(app, "198.51.100.6") as c:
        stats0 = c.get("/stats").json()
        # search-strict (shadow, 20 per minute) refuses the 6th search of 4 pages; the
        # enforced search policy (60) never does: every search is a 200
        searches = [c.get("/search", params={"q": "x", "size": 200}) for _ in range(6)]
        stats1 = c.get("/stats").json()
        # the enforced 'ip' policy (10 per second) refuses
        codes = [c.get("/items/1").status_code for _ in range(30)]
        stats = c.get("/stats").json()
    assert [r.status_code for r in searches] == [200] * 6
    assert all("search-strict" not in r.headers["RateLimit-Policy"] for r in searches)
    # the shadow refusal charged nothing (all or nothing): 'search' went 56, 52, 48, 44, 40, 40
    assert [dict(sf(r.headers["RateLimit"]))["search"]["r"] for r in searches] == [56, 52, 48, 44, 40, 40]
    assert 429 in codes
    # stats.allowed counts the requests Redis admitted (as in Rust and Node): every check
    # between the two /stats reads but the search only the shadow policy refused
    grown = {k: stats1[k] - stats0[k] for k in stats0}
    assert grown["shadow_limited"] == 1 and grown["limited"] == 0 and grown["degraded"] == 0
    assert grown["allowed"] == grown["checks"] - 1
    after = scrape(app)

    def grew(name: str, **labels: str) -> float:
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert grew("redis_tb_shadow_limited_total", limiter="api", policy="search-strict") == 1
    assert grew("redis_tb_allowed_total", limiter="api", policy="search-strict") == 5
    assert grew("redis_tb_allowed_total", limiter="api", policy="search") == 5
    refused = codes.count(429)
    assert grew("redis_tb_limited_total", limiter="api", policy="ip") == refused
    # the deny cache is off in this app (bench_app.py turns it on): every refusal asked Redis
    assert grew("redis_tb_deny_cache_hits_total", limiter="api", policy="ip") == 0
    assert stats["deny_cache_hits"] == 0
    assert grew("redis_tb_redis_call_duration_seconds_count", limiter="api") >= 6 + codes.count(200)
    # only limiter and policy names as label values (and SPEC E6's backend, module or scripts)
    assert all(set(dict(labels)) <= {"limiter", "policy", "le", "backend"} for _, labels in after)
    assert {dict(labels).get("backend") for _, labels in after} <= {None, "module", "scripts"}


def sse_events(body: str) -> list[str]:
    return [e for e in body.split("\n\n") if e]


def test_stream_holds_a_slot_and_settles_the_tokens_it_sent(servers: dict[str, Uvicorn]) -> None:
    """GET /stream (SPEC N, G): the check takes one of 2 stream slots (no w in its
    RateLimit-Policy item), the handler holds max_tokens and settles the events sent,
    so each stream costs what it streamed; the slot is free once the body ended."""
    app = servers["limited"]
    with client(app, "198.51.100.20") as c:
        for _ in range(3):
            r = c.get("/stream", params={"tokens": 3, "max_tokens": 400})
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert sse_events(r.text) == ["data: token-1", "data: token-2", "data: token-3", "data: [DONE]"]
            items = dict(sf(r.headers["RateLimit"]))
            assert '"streams";q=2' in r.headers["RateLimit-Policy"].split(", ")
            assert items["streams"]["r"] == 1 and "tokens" not in items  # a slot of 2; tokens held later
        # 3 x 400 held would not fit in 1000: each stream gave its surplus back
        assert c.get("/stats").json()["settlements"] >= 3
        never = c.get("/stream", params={"max_tokens": 1001})
        assert never.status_code == 429 and never.json()["violated_policies"] == ["tokens"]
        assert never.json()["retry_after"] is None


def test_a_client_gone_mid_stream_frees_its_slot(servers: dict[str, Uvicorn]) -> None:
    app = servers["limited"]
    ip = "198.51.100.21"
    streams = []
    for _ in range(2):
        s = socket.create_connection(("127.0.0.1", app.port), source_address=(PROXY, 0))
        s.sendall(
            f"GET /stream?tokens=400&delay_ms=20 HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {ip}\r\n\r\n".encode()
        )
        got = b""
        while b"token-1" not in got:
            got += s.recv(4096)
        streams.append(s)
    with client(app, ip) as c:
        assert c.get("/stream", params={"tokens": 1}).status_code == 429  # both slots taken
        for s in streams:
            s.close()
        deadline = time.monotonic() + 10
        while c.get("/stream", params={"tokens": 1}).status_code != 200:  # freed at the next event
            assert time.monotonic() < deadline, "the slots of clients gone mid-stream were not freed"
            time.sleep(0.1)  # no faster than 'ip' refills


# -- issue 39: the stream's bounds, its end when the client goes or stops reading, startup

STREAM_BOUNDS = {"tokens": (0, 10000), "delay_ms": (0, 10000), "max_tokens": (1, 10000)}


@pytest.mark.parametrize("name,value", [
    ("tokens", "1000000"), ("tokens", "10001"), ("tokens", "-1"), ("tokens", "1.5"), ("tokens", "abc"), ("tokens", ""),
    ("delay_ms", "10001"), ("delay_ms", "1e3"), ("max_tokens", "0"), ("max_tokens", "10001"),
])
def test_a_stream_query_value_out_of_its_bounds_is_a_400_problem(servers: dict[str, Uvicorn], name: str, value: str) -> None:
    """examples/manifest.json's bad_query: answered before anything is held or streamed."""
    with client(servers["limited"], "198.51.100.30") as c:
        r = c.get("/stream", params={name: value})
    low, high = STREAM_BOUNDS[name]
    assert r.status_code == 400 and r.headers["content-type"] == "application/problem+json"
    assert r.text == (
        '{"type":"about:blank","title":"Bad Request","status":400,'
        f'"detail":"query parameter \'{name}\' must be a whole number from {low} to {high}"}}'
    )


def tokens_left(store: RedisServer, ip: str) -> float:
    """What the 'tokens' bucket (1000 an hour) of ``ip`` holds now."""
    return float(store.cli("TB.PEEK", f"rl:tokens:{ip}", "1000", str(1000 / 3600)).split()[1])


def open_stream(app: Uvicorn, ip: str, query: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", app.port), source_address=(PROXY, 0))
    s.sendall(f"GET /stream?{query} HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: {ip}\r\n\r\n".encode())
    return s


def test_a_client_gone_mid_stream_stops_it_within_a_second_and_it_settles_what_it_sent(
    servers: dict[str, Uvicorn], store: RedisServer,
) -> None:
    """A 100 s stream (10000 events, 10 ms apart) holding 500 tokens: its client reads
    20 events and goes away; within a second the stream stops and settles what it sent
    (tens of tokens), not the 500 held."""
    app, ip = servers["limited"], "198.51.100.31"
    s = open_stream(app, ip, "tokens=10000&delay_ms=10&max_tokens=500")
    got = b""
    while b"token-20" not in got:
        got += s.recv(4096)
    assert tokens_left(store, ip) == pytest.approx(500, abs=1)  # held
    s.close()
    gone = time.monotonic()
    while tokens_left(store, ip) < 900:
        assert time.monotonic() - gone < 1.5, f"not settled a second after the client left: {tokens_left(store, ip)}"
        time.sleep(0.05)


def test_a_client_gone_from_a_fast_stream_costs_no_log_storm(servers: dict[str, Uvicorn], store: RedisServer) -> None:
    """Issue 39 L4: a stream with no delay whose client leaves stops at once; it used to
    run to its end, one 'socket.send() raised exception' line per event."""
    app, ip = servers["limited"], "198.51.100.32"
    before = app.output().count("socket.send() raised exception")
    s = open_stream(app, ip, "tokens=10000&delay_ms=0&max_tokens=1000")
    s.recv(4096)
    s.close()
    time.sleep(1)
    assert app.output().count("socket.send() raised exception") - before <= 10
    assert tokens_left(store, ip) > 0  # settled what was sent, not the whole 10000 (and not the 1000 held)


def test_a_stream_whose_client_reads_nothing_is_ended_at_its_max_duration(
    servers: dict[str, Uvicorn], store: RedisServer,
) -> None:
    """SPEC N7: 'streams' ends a stream 6 s after its grant, whatever its client does: a
    100 s stream whose client reads nothing loses its slot (and is counted), and the
    connection is closed before [DONE]."""
    app, ip = servers["limited"], "198.51.100.33"
    before = metric(scrape(app), "redis_tb_leases_timed_out_total", limiter="api", policy="streams")
    sent = time.monotonic()  # before the grant
    s = open_stream(app, ip, "tokens=10000&delay_ms=10&max_tokens=1000")
    got = s.recv(4096)
    lease_key = f"rl:streams:{ip}"
    assert store.cli("TB.PEEK", lease_key, "LEASES").split()[0] == "1"
    while store.cli("TB.PEEK", lease_key, "LEASES").split()[0] != "0":
        assert time.monotonic() - sent < 10, "the stream's slot outlived its max_duration"
        time.sleep(0.1)
    assert time.monotonic() - sent >= 6  # not before its max_duration
    assert metric(scrape(app), "redis_tb_leases_timed_out_total", limiter="api", policy="streams") == before + 1
    s.settimeout(5)
    while chunk := s.recv(1 << 16):
        got += chunk
    s.close()
    assert b"token-1" in got and b"[DONE]" not in got


CLUSTER_REFUSAL = (
    "redis-tb: limiter 'api' sends several keys in one call (policies 'ip', 'user', 'orders', 'search', "
    "'search-strict', 'streams'), which a Redis Cluster refuses unless they share a hash slot: set a tag "
    "function (SPEC K6)"
)


@pytest.mark.parametrize("cause", ["unreachable", "no-module", "cluster"])
def test_the_app_exits_3_in_one_line_when_its_limiter_cannot_start(cause: str) -> None:
    """SPEC U1-U4: the line of U1-U3, once, no traceback, exit status 3."""
    store = None if cause == "unreachable" else RedisServer(module=cause != "no-module", cluster=cause == "cluster").start()
    port = free_port() if store is None else store.port
    # SPEC E1: U1's line where the module is forced (auto starts on the scripts)
    app = Uvicorn("app:app", HERE, {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "REDIS_TB_BACKEND": "module"})
    try:
        app.spawn()
        assert app.proc is not None and app.proc.wait(60) == 3
        out = app.output()
        line = {
            "unreachable": f"redis-tb: cannot reach Redis at 127.0.0.1:{port} (",
            "no-module": f"redis-tb module not loaded on 127.0.0.1:{port}: load libredis_tb.so with loadmodule",
            "cluster": CLUSTER_REFUSAL,
        }[cause]
        assert out.count(line) == 1 and "Traceback" not in out, out
    finally:
        app.stop()
        if store is not None:
            store.stop()


def test_the_app_starts_degraded_only_when_asked() -> None:
    """SPEC U2, U4: REDIS_TB_START_DEGRADED=1 with Redis unreachable: one line, then the
    API fails open (no rate-limit headers) until Redis answers."""
    port = free_port()
    app = Uvicorn("app:app", HERE, {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "REDIS_TB_START_DEGRADED": "1"})
    try:
        app.start()
        line = (
            f"redis-tb: Redis at 127.0.0.1:{port} unreachable at startup; starting degraded "
            "(the limiter's failure mode applies until it answers)"
        )
        assert app.output().count(line) == 1, app.output()
        r = httpx.get(f"{app.url}/items/1", timeout=30)
        assert r.status_code == 200 and "RateLimit" not in r.headers
    finally:
        app.stop()


def test_auto_serves_a_redis_without_the_module_on_the_scripts() -> None:
    """SPEC E1, E6: REDIS_TB_BACKEND unset (auto) on a server without the module: the
    script library, requests limited, the gauge on /metrics says scripts for both limiters."""
    plain = RedisServer(module=False).start()
    app = Uvicorn("app:app", HERE, {"REDIS_URL": plain.url, "REDIS_TB_TIMEOUT_MS": "2000"})
    try:
        app.start()
        with httpx.Client(base_url=app.url, timeout=30) as c:
            statuses = [c.get("/items/1").status_code for _ in range(25)]
            assert statuses[0] == 200 and 429 in statuses, statuses
            text = c.get("/metrics").text
        gauge = {
            (s.labels["limiter"], s.labels["backend"]): s.value
            for f in text_string_to_metric_families(text) if f.name == "redis_tb_backend" for s in f.samples
        }
        for name in ("api", "login"):
            assert gauge.get((name, "scripts")) == 1 and gauge.get((name, "module")) == 0, gauge
    finally:
        app.stop()
        plain.stop()


def test_a_bad_backend_exits_2_in_one_line() -> None:
    app = Uvicorn("app:app", HERE, {"REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_TB_BACKEND": "lua"})
    try:
        app.spawn()
        assert app.proc is not None and app.proc.wait(60) == 2
        out = app.output()
        assert out.count("REDIS_TB_BACKEND: backend must be auto, module or scripts, got 'lua'") == 1 and "Traceback" not in out, out
    finally:
        app.stop()
