"""redis_tb.django's in-flight leases and holds through real servers (gunicorn for
WSGI, uvicorn for ASGI) and a real redis-server with the module: SPEC N4 (the lease
ends once, when the response is finished: a streamed body after its last chunk, a
client gone mid-stream, a raising view), N5 (renewed while the request runs: a
thread under WSGI, a task under ASGI) and G1-G3 (a settled hold changes the bucket by
actual minus estimate) and G5 (a hold is renewed while the request runs: a stream that
outlives the hold's ttl settles its actual cost). The server's own view is read with
TB.PEEK.
"""

from __future__ import annotations

import json
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest

from redis_tb_testing.servers import Gunicorn, RedisServer, Uvicorn

HERE = Path(__file__).parent
LEASE_KEY = "rl:conc:127.0.0.1"


GATES: dict[int, Path] = {}


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def server(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Gunicorn | Uvicorn]:
    gate = Path(tempfile.mkdtemp()) / "gate"
    env = {"TB_REDIS_URL": redis_server.url, "TB_LEASE": "0.4", "TB_GATE": str(gate)}
    s: Gunicorn | Uvicorn
    if request.param == "wsgi":
        s = Gunicorn("djangolease.wsgi:application", HERE, env, threads=4).start()
    else:
        s = Uvicorn("djangolease.asgi:application", HERE, env, extra=["--lifespan", "off"]).start()
    GATES[s.port] = gate
    try:
        yield s
    finally:
        s.stop()


def in_flight(redis_server: RedisServer) -> int:
    return int(redis_server.cli("TB.PEEK", LEASE_KEY, "LEASES").split()[0])


def wait_for(what: str, cond: Callable[[], bool], seconds: float = 10) -> None:
    """Poll until ``cond()`` (what the server does after a client left)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(what)


@pytest.fixture
def http(server: Gunicorn | Uvicorn, redis_server: RedisServer) -> Iterator[httpx.Client]:
    redis_server.cli("FLUSHALL")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        c.get("/close")
        yield c
        c.get("/open")


def test_a_streamed_response_holds_its_lease_until_its_last_chunk(http: httpx.Client, redis_server: RedisServer) -> None:
    with http.stream("GET", "/stream") as r:
        assert r.status_code == 200 and r.headers["ratelimit-policy"] == '"conc";q=1'
        lines = r.iter_lines()
        assert next(lines) == "chunk-0"
        assert in_flight(redis_server) == 1  # the view returned; the body goes on
        assert http.get("/slow").status_code == 429
        http.get("/open")
        assert list(lines) == ["chunk-1"]
    wait_for("the lease outlived the streamed body", lambda: in_flight(redis_server) == 0)


def test_a_client_gone_mid_stream_frees_the_slot(server: Gunicorn | Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /stream?ticks=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        got = b""
        while b"chunk-0" not in got:
            got += sock.recv(4096)
        assert in_flight(redis_server) == 1
    wait_for("the slot of a client gone mid-stream was not freed", lambda: in_flight(redis_server) == 0)


def test_a_raising_view_frees_the_slot(http: httpx.Client, redis_server: RedisServer) -> None:
    # a server may close the connection after a view raised: not one to reuse for the next
    assert http.get("/boom", headers={"connection": "close"}).status_code == 500
    wait_for("a raising view kept its lease", lambda: in_flight(redis_server) == 0)
    assert http.get("/open").status_code == 200


def test_renewal_keeps_a_lease_alive_past_its_lease_time(server: Gunicorn | Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    out: dict[str, int] = {}
    with httpx.Client(base_url=server.url, timeout=10) as other:
        t = threading.Thread(target=lambda: out.update(status=other.get("/slow").status_code))
        t.start()
        wait_for("the slow request never took its lease", lambda: in_flight(redis_server) == 1)
        time.sleep(1.2)  # three lease times (0.4 s): alive only because it was renewed (N5)
        assert in_flight(redis_server) == 1
        http.get("/open")
        t.join(10)
    assert out["status"] == 200
    wait_for("the renewed lease was not released", lambda: in_flight(redis_server) == 0)


def test_a_settled_hold_changes_the_bucket_by_actual_minus_estimate(http: httpx.Client, redis_server: RedisServer) -> None:
    r = http.get("/hold", params={"estimate": 100, "actual": 30})
    assert r.status_code == 200, r.text
    assert r.json()["settled"] is True and r.json()["charged"] == pytest.approx(-70)
    peek = redis_server.cli("TB.PEEK", "rl:tokens:127.0.0.1", "1000", "1e-9").split()
    assert float(peek[1]) == pytest.approx(970, abs=1e-3)
    assert http.get("/hold", params={"estimate": 960, "actual": 960}).status_code == 200
    refused = http.get("/hold", params={"estimate": 100, "actual": 1})
    assert refused.status_code == 429 and refused.json()["violated_policies"] == ["tokens"]
    assert refused.headers["ratelimit-policy"].startswith('"tokens";q=1000')


def test_a_stream_that_outlives_its_hold_ttl_settles_its_actual_cost(server: Gunicorn | Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    """SPEC G5: a hold of 0.5 s renewed every 0.25 s while a 2 s stream runs (a thread
    under WSGI, a task under ASGI); the settlement finds it and charges what was sent."""
    settled_file = GATES[server.port].with_name("settled")
    settled_file.unlink(missing_ok=True)
    body = http.get("/hold-stream", params={"estimate": 100, "actual": 300, "ttl": 0.5, "seconds": 2}).text
    assert body.count("tick") == 40
    wait_for("the stream never settled", settled_file.exists)
    settled = json.loads(settled_file.read_text().splitlines()[-1])
    assert settled["settled"] is True, settled
    assert settled["charged"] == pytest.approx(200)
    peek = redis_server.cli("TB.PEEK", "rl:tokens:127.0.0.1", "1000", "1e-9").split()
    assert float(peek[1]) == pytest.approx(700, abs=1e-3)
