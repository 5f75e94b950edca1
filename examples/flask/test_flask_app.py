"""The flask-limiter example end to end: gunicorn on a free port, redis-server with the
module, real HTTP requests; the same requests against limits' own Redis storage agree."""

from __future__ import annotations

from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import redis
from redis_tb_testing.servers import Gunicorn, RedisServer

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    s = RedisServer().start()
    try:
        yield s
    finally:
        s.stop()


def app_on(server: RedisServer, scheme: str, strategy: str) -> Gunicorn:
    uri = f"{scheme}://127.0.0.1:{server.port}/0"
    return Gunicorn("app:app", HERE, {"STORAGE_URI": uri, "STRATEGY": strategy}).start()


def run(app: Gunicorn, path: str, times: int) -> list[httpx.Response]:
    with httpx.Client(base_url=app.url, timeout=10) as c:
        return [c.get(path) for _ in range(times)]


@pytest.fixture
def db(server: RedisServer) -> redis.Redis:
    r = redis.Redis(port=server.port, decode_responses=True)
    r.flushall()
    return r


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter"])
def test_default_limit_headers_and_429(server: RedisServer, db: redis.Redis, strategy: str) -> None:
    app = app_on(server, "redis+tb", strategy)
    try:
        got = run(app, "/", 6)
    finally:
        app.stop()
    assert [r.status_code for r in got] == [200] * 5 + [429]
    assert [r.headers["X-RateLimit-Limit"] for r in got] == ["5"] * 6
    assert [r.headers["X-RateLimit-Remaining"] for r in got] == ["4", "3", "2", "1", "0", "0"]
    assert int(got[-1].headers["Retry-After"]) > 0
    assert all(int(r.headers["X-RateLimit-Reset"]) > 1_700_000_000 for r in got)
    keys = db.keys("LIMITS_TB:*")
    assert len(keys) == 1, keys
    # the module's own state: a LOG sorted set, or a SLIDING hash
    if strategy == "moving-window":
        assert db.type(keys[0]) == "zset" and db.zcard(keys[0]) == 5
    else:
        assert db.type(keys[0]) == "hash" and str(db.hget(keys[0], "counts")).split()[0] == "5"


def test_per_route_limit_and_exempt_route(server: RedisServer, db: redis.Redis) -> None:
    app = app_on(server, "redis+tb", "moving-window")
    try:
        login = run(app, "/login", 3)
        index = run(app, "/", 1)
        health = run(app, "/health", 8)
    finally:
        app.stop()
    assert [r.status_code for r in login] == [200, 200, 429]
    assert login[0].headers["X-RateLimit-Limit"] == "2"
    # the route's limit replaces the default one: "/" still has all 5
    assert index[0].headers["X-RateLimit-Remaining"] == "4"
    assert [r.status_code for r in health] == [200] * 8
    assert health[0].json() == {"storage": True}


def test_same_answers_as_limits_own_redis_storage(server: RedisServer, db: redis.Redis) -> None:
    """Moving window: the status codes and remaining counts match limits' redis:// storage,
    and the reset times agree to the second."""
    answers = {}
    for scheme in ("redis", "redis+tb"):
        db.flushall()
        app = app_on(server, scheme, "moving-window")
        try:
            answers[scheme] = run(app, "/", 7)
        finally:
            app.stop()
    ours, theirs = answers["redis+tb"], answers["redis"]
    assert [r.status_code for r in ours] == [r.status_code for r in theirs]
    assert [r.headers["X-RateLimit-Remaining"] for r in ours] == [
        r.headers["X-RateLimit-Remaining"] for r in theirs
    ]
    def reset_in(r: httpx.Response) -> float:
        sent = parsedate_to_datetime(r.headers["Date"]).timestamp()
        return int(r.headers["X-RateLimit-Reset"]) - sent

    for a, b in zip(ours, theirs):
        assert abs(reset_in(a) - reset_in(b)) <= 2, (a.headers, b.headers)


def test_health_is_false_without_the_module() -> None:
    # SPEC E1: forced to the module (auto serves such a server on the scripts, below)
    plain = RedisServer(module=False).start()
    try:
        env = {"STORAGE_URI": f"redis+tb://127.0.0.1:{plain.port}/0", "REDIS_TB_BACKEND": "module"}
        app = Gunicorn("app:app", HERE, env).start()
        try:
            assert run(app, "/health", 1)[0].json() == {"storage": False}
        finally:
            app.stop()
    finally:
        plain.stop()


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter"])
def test_auto_serves_a_redis_without_the_module_on_the_scripts(strategy: str) -> None:
    """SPEC E1: REDIS_TB_BACKEND unset (auto): the script library, the same limit."""
    plain = RedisServer(module=False).start()
    try:
        env = {"STORAGE_URI": f"redis+tb://127.0.0.1:{plain.port}/0", "STRATEGY": strategy}
        app = Gunicorn("app:app", HERE, env).start()
        try:
            assert run(app, "/health", 1)[0].json() == {"storage": True}
            assert [r.status_code for r in run(app, "/", 6)] == [200] * 5 + [429]
        finally:
            app.stop()
    finally:
        plain.stop()


def test_a_bad_backend_exits_2_in_one_line() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", "import app"], cwd=HERE, capture_output=True, text=True, timeout=60,
        env={**__import__("os").environ, "REDIS_TB_BACKEND": "lua"},
    )
    assert out.returncode == 2 and out.stderr.strip() == "REDIS_TB_BACKEND: backend must be auto, module or scripts, got 'lua'", out
