"""In-flight policies and holds through a real HTTP server (uvicorn) and a real
redis-server with the module: SPEC N4 (the lease ends once, when the response is
finished: a streamed body's last chunk, a client gone mid-stream, a raising
handler), N5 (renewed while the request runs, beside the responses' writes: issue 39's
L4), G1-G3 (a settled hold changes the bucket by actual minus estimate) and G5 (a hold
is renewed while its request runs). The server's own view is read with TB.PEEK.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from redis_tb_testing.servers import RedisServer, Uvicorn

HERE = Path(__file__).parent
LEASE_KEY = "rl:conc:127.0.0.1"


def in_flight(redis_server: RedisServer) -> int:
    """TB.PEEK key LEASES: the live leases of the test client's key."""
    return int(redis_server.cli("TB.PEEK", LEASE_KEY, "LEASES").split()[0])


def wait_for(what: str, cond: Callable[[], bool], seconds: float = 10) -> None:
    """Poll until ``cond()``: for what happens after the response (a disconnect seen
    by the server), failing with ``what`` when it never does."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(what)


@pytest.fixture(scope="module")
def server(redis_server: RedisServer) -> Iterator[Uvicorn]:
    s = Uvicorn("lease_app:app", HERE, {"TB_REDIS_URL": redis_server.url, "TB_LEASE": "0.4"}).start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def http(server: Uvicorn, redis_server: RedisServer) -> Iterator[httpx.Client]:
    redis_server.cli("FLUSHALL")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        c.get("/close")
        yield c
        c.get("/open")


def test_streamed_response_holds_its_lease_until_its_last_chunk(http: httpx.Client, redis_server: RedisServer) -> None:
    with http.stream("GET", "/stream") as r:
        assert r.status_code == 200
        assert r.headers["ratelimit-policy"] == '"conc";q=1'
        lines = r.iter_lines()
        assert next(lines) == "chunk-0"
        # the handler has returned its StreamingResponse; the body is still going
        assert in_flight(redis_server) == 1
        refused = http.get("/slow")
        assert refused.status_code == 429
        assert refused.json()["violated_policies"] == ["conc"]
        http.get("/open")
        assert list(lines) == ["chunk-1"]
    # released before the response completed (SPEC N4)
    assert in_flight(redis_server) == 0
    assert http.get("/hold", params={"estimate": 1, "actual": 1}).status_code == 200


def test_a_client_that_disconnects_mid_stream_frees_the_slot(server: Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /ticks HTTP/1.1\r\nHost: x\r\n\r\n")
        got = b""
        while b"tick-0" not in got:
            got += sock.recv(4096)
        assert in_flight(redis_server) == 1
    wait_for("the slot of a client gone mid-stream was not freed", lambda: in_flight(redis_server) == 0)
    assert http.get("/hold", params={"estimate": 1, "actual": 1}).status_code == 200


def test_a_raising_handler_frees_the_slot(http: httpx.Client, redis_server: RedisServer) -> None:
    # uvicorn closes the connection after a handler raised: not one to reuse for the next
    r = http.get("/boom", headers={"connection": "close"})
    assert r.status_code == 500
    assert in_flight(redis_server) == 0
    assert http.get("/hold", params={"estimate": 1, "actual": 1}).status_code == 200


def test_renewal_keeps_a_lease_alive_past_its_lease_time(http: httpx.Client, redis_server: RedisServer, server: Uvicorn) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as other:
        out: dict[str, int] = {}
        t = threading.Thread(target=lambda: out.update(status=other.get("/slow").status_code))
        t.start()
        wait_for("the slow request never took its lease", lambda: in_flight(redis_server) == 1)
        time.sleep(1.2)  # three lease times (0.4 s): alive only because it was renewed (N5)
        assert in_flight(redis_server) == 1
        assert http.get("/slow").status_code == 429
        http.get("/open")
        t.join(10)
        assert out["status"] == 200
    assert in_flight(redis_server) == 0


def test_a_settled_hold_changes_the_bucket_by_actual_minus_estimate(http: httpx.Client, redis_server: RedisServer) -> None:
    r = http.get("/hold", params={"estimate": 100, "actual": 30})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["settled"] is True
    assert body["held_remaining"] == pytest.approx(900, abs=1e-3)
    assert body["charged"] == pytest.approx(-70)
    peek = redis_server.cli("TB.PEEK", "rl:tokens:127.0.0.1", "1000", "1e-9").split()
    assert float(peek[1]) == pytest.approx(970, abs=1e-3)  # 1000 - 100 + 70


def test_a_refused_hold_is_a_ready_429(http: httpx.Client, redis_server: RedisServer) -> None:
    assert http.get("/hold", params={"estimate": 990, "actual": 990}).status_code == 200
    r = http.get("/hold", params={"estimate": 100, "actual": 1})
    assert r.status_code == 429
    assert r.headers["content-type"] == "application/problem+json"
    assert r.headers["ratelimit-policy"].startswith('"tokens";q=1000;w=')
    assert r.json()["violated_policies"] == ["tokens"]
    peek = redis_server.cli("TB.PEEK", "rl:tokens:127.0.0.1", "1000", "1e-9").split()
    assert float(peek[1]) == pytest.approx(10, abs=1e-3)  # the refused hold charged nothing


@pytest.mark.parametrize("how", ["middleware", "fastapi"])
def test_a_raised_hold_refusal_is_its_429_and_frees_the_slot(http: httpx.Client, redis_server: RedisServer, how: str) -> None:
    assert http.get("/hold-raise", params={"estimate": 1001, "how": how}).status_code == 429
    r = http.get("/hold-raise", params={"estimate": 1001, "how": how})
    assert r.status_code == 429 and r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["violated_policies"] == ["tokens"] and body["retry_after"] is None  # 1001 > 1000: never (P2)
    assert r.headers["ratelimit-policy"].startswith('"tokens";q=1000')
    assert in_flight(redis_server) == 0
    assert http.get("/hold-raise", params={"estimate": 10, "how": how}).json() == {"held": True}


def stats(http: httpx.Client) -> dict[str, Any]:
    got: dict[str, Any] = http.get("/stats").json()
    return got


def test_one_stalled_client_does_not_hold_up_another_requests_renewal(server: Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    """Issue 39 L4: the renewals run beside the responses' writes. Client A (127.0.0.2)
    reads nothing of an endless stream; client B (127.0.0.3) keeps a 1.2 s stream: its
    0.4 s lease is renewed every 0.2 s all along."""
    expired = stats(http)["leases_expired"]
    stalled = socket.create_connection(("127.0.0.1", server.port), source_address=("127.0.0.2", 0))
    with stalled:
        stalled.sendall(b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
        assert stalled.recv(4096).startswith(b"HTTP/1.1 200")
        with httpx.Client(base_url=server.url, timeout=10, transport=httpx.HTTPTransport(local_address="127.0.0.3")) as b:
            with b.stream("GET", "/ticks") as r:
                lines = r.iter_lines()
                for _ in range(60):  # 1.2 s of ticks, three lease times
                    next(lines)
                assert int(redis_server.cli("TB.PEEK", "rl:conc:127.0.0.3", "LEASES").split()[0]) == 1
    assert stats(http)["leases_expired"] == expired


def test_a_stream_that_outlives_its_hold_ttl_settles_its_actual_cost(http: httpx.Client, redis_server: RedisServer) -> None:
    """SPEC G5: a hold of 0.5 s renewed every 0.25 s while a 2 s stream runs; the
    settlement finds it and charges what was sent (300), not the estimate (100)."""
    body = http.get("/hold-stream", params={"estimate": 100, "actual": 300, "ttl": 0.5, "seconds": 2}).text
    assert body.count("tick") == 40
    wait_for("the stream never settled", lambda: len(stats(http)["settlements"]) >= 1)
    settled = stats(http)["settlements"][-1]
    assert settled["settled"] is True, settled
    assert settled["charged"] == pytest.approx(200)  # actual minus the hold's charge
    peek = redis_server.cli("TB.PEEK", "rl:tokens:127.0.0.1", "1000", "1e-9").split()
    assert float(peek[1]) == pytest.approx(700, abs=1e-3)
    assert stats(http)["holds_lost"] == 0


def test_a_full_hold_table_is_a_429_never_a_store_error(http: httpx.Client, redis_server: RedisServer) -> None:
    """SPEC G6: the module's 100 live holds on the 'tokens' bucket (made directly, at the
    price of a place, capacity / 100): the handler's hold is refused, a ready 429 naming
    'tokens' with a Retry-After, not a StoreError (a 500 from this app)."""
    for _ in range(100):
        assert redis_server.cli("TB.HOLD", "rl:tokens:127.0.0.1", "1000", "1e-9", "10", "60000").split()[0] == "1"
    r = http.get("/hold", params={"estimate": 1, "actual": 1})
    assert r.status_code == 429, r.text
    assert r.json()["violated_policies"] == ["tokens"] and r.headers["retry-after"]
    assert stats(http)["store_errors"] == 0
