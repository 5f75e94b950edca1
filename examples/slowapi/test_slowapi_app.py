"""The slowapi snippet end to end: uvicorn on a free port, redis-server with the module."""

from __future__ import annotations

from pathlib import Path

import httpx
import redis
from redis_tb_testing.servers import RedisServer, Uvicorn

HERE = Path(__file__).resolve().parent


def test_slowapi_moving_window_on_redis_tb() -> None:
    server = RedisServer().start()
    try:
        app = Uvicorn("app:app", HERE, {"STORAGE_URI": f"redis+tb://127.0.0.1:{server.port}/0"}).start()
        try:
            with httpx.Client(base_url=app.url, timeout=10) as c:
                got = [c.get("/hello") for _ in range(4)]
        finally:
            app.stop()
        assert [r.status_code for r in got] == [200, 200, 200, 429]
        assert [r.headers["X-RateLimit-Remaining"] for r in got[:3]] == ["2", "1", "0"]
        assert got[0].json() == {"hello": "world"}
        db = redis.Redis(port=server.port, decode_responses=True)
        keys = db.keys("LIMITS_TB:*")
        assert len(keys) == 1 and db.type(keys[0]) == "zset" and db.zcard(keys[0]) == 3
    finally:
        server.stop()


def test_slowapi_on_a_redis_without_the_module() -> None:
    """SPEC E1: auto serves it on the script library (async+... not needed: slowapi's
    storage is the sync one), the same moving window."""
    server = RedisServer(module=False).start()
    try:
        app = Uvicorn("app:app", HERE, {"STORAGE_URI": f"redis+tb://127.0.0.1:{server.port}/0"}).start()
        try:
            with httpx.Client(base_url=app.url, timeout=10) as c:
                got = [c.get("/hello") for _ in range(4)]
        finally:
            app.stop()
        assert [r.status_code for r in got] == [200, 200, 200, 429]
        db = redis.Redis(port=server.port, decode_responses=True)
        keys = db.keys("LIMITS_TB:*")
        assert len(keys) == 1 and db.type(keys[0]) == "zset" and db.zcard(keys[0]) == 3
    finally:
        server.stop()
