"""SPEC N7 through redis_tb.django under real servers (gunicorn for WSGI, uvicorn for
ASGI; djangolease with a 3 s max_duration) and a real redis-server with the module: a
request holds its slot for at most its in-flight policy's max_duration after its grant,
whatever its client does; at the deadline its lease is released (once, counted in
leases_timed_out) and its response ended (WSGI: gunicorn's connection shut down; ASGI:
the request's task cancelled)."""

from __future__ import annotations

import socket
import tempfile
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from redis_tb_testing.servers import Gunicorn, RedisServer, Uvicorn
from test_django_leases import in_flight, wait_for
from test_max_duration import drained_to_eof

HERE = Path(__file__).parent
MAX_DURATION = 3.0


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def server(request: pytest.FixtureRequest, redis_server: RedisServer) -> Iterator[Gunicorn | Uvicorn]:
    gate = Path(tempfile.mkdtemp()) / "gate"
    env = {"TB_REDIS_URL": redis_server.url, "TB_LEASE": "0.4", "TB_MAX_DURATION": str(MAX_DURATION), "TB_GATE": str(gate)}
    s: Gunicorn | Uvicorn
    if request.param == "wsgi":
        s = Gunicorn("djangolease.wsgi:application", HERE, env, threads=4).start()
    else:
        s = Uvicorn("djangolease.asgi:application", HERE, env, extra=["--lifespan", "off"]).start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def http(server: Gunicorn | Uvicorn, redis_server: RedisServer) -> Iterator[httpx.Client]:
    redis_server.cli("FLUSHALL")
    with httpx.Client(base_url=server.url, timeout=10) as c:
        c.get("/close")
        yield c
        c.get("/open")


def timed_out(http: httpx.Client) -> int:
    return int(http.get("/stats").json()["leases_timed_out"])


def test_a_client_that_reads_nothing_is_cut_off_at_max_duration(server: Gunicorn | Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    before = timed_out(http)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sent = time.monotonic()  # before the grant
        sock.sendall(b"GET /flood HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        assert in_flight(redis_server) == 1
        wait_for("the slot of a client that reads nothing outlived max_duration",
                 lambda: in_flight(redis_server) == 0, seconds=MAX_DURATION + 5)
        assert time.monotonic() - sent >= MAX_DURATION, "released before max_duration"
        assert timed_out(http) == before + 1
        assert drained_to_eof(sock, 10), "the server kept the stream going past max_duration"
    # the slot is free for the next request
    with http.stream("GET", "/stream", params={"ticks": "1"}) as r:
        assert r.status_code == 200


def test_a_response_not_started_at_max_duration_is_never_sent(server: Gunicorn | Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    started = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=10) as other:
        try:
            r = other.get("/slow")  # waits for /open
            got: str | None = f"{r.status_code} {r.text}"
        except httpx.HTTPError:  # WSGI: the connection was shut down, no response at all
            got = None
    assert time.monotonic() - started >= MAX_DURATION
    assert got is None or ("done" not in got and not got.startswith("200")), got
    wait_for("the lease of a request ended at max_duration was kept", lambda: in_flight(redis_server) == 0)
