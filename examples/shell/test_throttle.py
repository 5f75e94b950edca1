"""throttle.sh against a real redis-server with the module.

No timing thresholds: a refill far slower than the test for exact refusals; for
the reservation, the wait the server booked is checked against the debt set up
just before (margins of whole seconds), and the run against sleep's guarantee."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from redis_tb_testing.servers import RedisServer, free_port

SCRIPT = Path(__file__).with_name("throttle.sh")


@pytest.fixture(scope="module")
def store() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


def run(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "REDIS_URL": url},
    )


def test_take_runs_until_the_bucket_is_empty_then_exits_75(store: RedisServer) -> None:
    args = ["-m", "take", "-k", "ci:deploy", "-c", "2", "-r", "0.001", "--", "echo", "deployed"]
    for _ in range(2):
        ok = run(store.url, *args)
        assert ok.returncode == 0 and ok.stdout == "deployed\n"
    refused = run(store.url, *args)
    assert refused.returncode == 75 and refused.stdout == ""
    m = re.search(r"ci:deploy is over its limit; retry after (\d+) s", refused.stderr)
    assert m is not None, refused.stderr
    assert 990 <= int(m.group(1)) <= 1000  # a token every 1000 s


def test_reserve_waits_the_booked_time_then_runs(store: RedisServer) -> None:
    key = "cron:report"
    # Book two tokens ahead on a bucket of 1 refilling 1/s: the next caller waits ~3 s.
    for _ in range(3):
        assert store.cli("TB.RESERVE", key, "1", "1", "1", "60").split("\n")[0] == "1"
    started = time.monotonic()
    done = run(store.url, "-k", key, "-c", "1", "-r", "1", "-w", "60", "--", "echo", "report sent")
    took = time.monotonic() - started
    assert done.returncode == 0 and done.stdout == "report sent\n"
    m = re.search(r"reserved; waiting ([0-9.e-]+) s", done.stderr)
    assert m is not None, done.stderr
    wait = float(m.group(1))
    assert 1 < wait <= 3
    assert took >= wait  # it did sleep before running


def test_reserve_refuses_when_the_wait_would_exceed_max_wait(store: RedisServer) -> None:
    key = "cron:slow"
    assert run(store.url, "-k", key, "-c", "1", "-r", "0.001", "-w", "5", "--", "true").returncode == 0
    refused = run(store.url, "-k", key, "-c", "1", "-r", "0.001", "-w", "5", "--", "echo", "ran")
    assert refused.returncode == 75 and refused.stdout == ""
    assert "retry after" in refused.stderr


def test_cost_above_capacity_can_never_run(store: RedisServer) -> None:
    never = run(store.url, "-m", "take", "-k", "big", "-c", "2", "-r", "1", "-n", "3", "--", "echo", "ran")
    assert never.returncode == 2 and "can never hold 3 tokens" in never.stderr


def test_unreachable_redis_fails_open_by_default_and_closed_with_C() -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}"
    open_ = run(nowhere, "-k", "x", "--", "echo", "ran anyway")
    assert open_.returncode == 0 and open_.stdout == "ran anyway\n"
    assert "failing open" in open_.stderr
    closed = run(nowhere, "-C", "-k", "x", "--", "echo", "ran")
    assert closed.returncode == 69 and closed.stdout == ""
    assert "failing closed" in closed.stderr


def test_missing_module_is_a_clear_error() -> None:
    bare = RedisServer(module=False).start()
    try:
        r = run(bare.url, "-k", "x", "--", "echo", "ran")
    finally:
        bare.stop()
    assert r.returncode == 2 and r.stdout == ""
    assert f"redis-tb module not loaded on {bare.url}: load libredis_tb.so with loadmodule" in r.stderr


def test_usage_errors() -> None:
    assert run("redis://127.0.0.1:1", "-k", "x").returncode == 2
    assert run("redis://127.0.0.1:1", "-m", "wait", "-k", "x", "--", "true").returncode == 2
