"""SPEC N7 through a real HTTP server (uvicorn, lease_app.py with a 3 s max_duration)
and a real redis-server with the module: a request holds its slot for at most its
in-flight policy's max_duration after its grant, whatever its client does; at the
deadline its lease is released (once, counted in leases_timed_out) and its response
ended. The server's own view is read with TB.PEEK."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from redis_tb_testing.servers import RedisServer, Uvicorn
from test_leases import in_flight, stats, wait_for

HERE = Path(__file__).parent
LEASE = 0.4
MAX_DURATION = 3.0


@pytest.fixture(scope="module")
def server(redis_server: RedisServer) -> Iterator[Uvicorn]:
    env = {"TB_REDIS_URL": redis_server.url, "TB_LEASE": str(LEASE), "TB_MAX_DURATION": str(MAX_DURATION)}
    s = Uvicorn("lease_app:app", HERE, env).start()
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


def drained_to_eof(sock: socket.socket, seconds: float) -> bool:
    """Read everything the server sent; True when it closed the connection (EOF)."""
    sock.settimeout(0.5)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if not sock.recv(1 << 20):
                return True
        except TimeoutError:
            continue
    return False


def test_a_client_that_reads_nothing_is_cut_off_at_max_duration(server: Uvicorn, http: httpx.Client, redis_server: RedisServer) -> None:
    before = stats(http)["leases_timed_out"]
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sent = time.monotonic()  # before the grant
        sock.sendall(b"GET /flood HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
        assert in_flight(redis_server) == 1
        # the client reads nothing more: its writer waits on the full socket, and the
        # lease would be renewed for as long as the connection stays open
        wait_for("the slot of a client that reads nothing outlived max_duration",
                 lambda: in_flight(redis_server) == 0, seconds=MAX_DURATION + 5)
        assert time.monotonic() - sent >= MAX_DURATION, "released before max_duration"
        # released by N7, once: counted, and the slot is free for the next request
        assert stats(http)["leases_timed_out"] == before + 1
        assert http.get("/hold", params={"estimate": 1, "actual": 1}).status_code == 200
        # and the stream was ended: once the client reads, the connection closes
        assert drained_to_eof(sock, 10), "the server kept the stream going past max_duration"


def test_a_response_not_started_at_max_duration_is_never_sent(http: httpx.Client, redis_server: RedisServer, server: Uvicorn) -> None:
    started = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=10) as other:
        r = other.get("/slow")  # waits for /open, which never comes in time
    assert time.monotonic() - started >= MAX_DURATION
    # the handler's 200 was never sent: uvicorn answers an app that sent nothing itself
    assert r.status_code != 200 and "done" not in r.text, r.text
    assert in_flight(redis_server) == 0
    assert stats(http)["leases_timed_out"] >= 1


def test_a_request_that_ends_before_max_duration_is_not_timed_out(http: httpx.Client, redis_server: RedisServer) -> None:
    before = stats(http)["leases_timed_out"]
    with http.stream("GET", "/ticks") as r:  # 200 ticks of 20 ms: 4 s, past max_duration
        lines = r.iter_lines()
        assert next(lines) == "tick-0"
    # a client that leaves before the deadline frees its slot then (N4), not at N7
    wait_for("the slot of a client gone mid-stream was not freed", lambda: in_flight(redis_server) == 0)
    assert http.get("/hold", params={"estimate": 1, "actual": 1}).status_code == 200
    assert stats(http)["leases_timed_out"] == before
