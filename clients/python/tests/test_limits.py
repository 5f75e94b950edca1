"""redis_tb.limits: the limits storages on a real redis-server with the module."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import redis
from limits import RateLimitItemPerMinute
from limits.errors import ConfigurationError, StorageError
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter
from redis_tb_testing.servers import RedisServer

from redis_tb.limits import (
    RedisTBStorage,
    moving_window_from_replies,
    redis_url,
    sliding_window_from_hash,
)
from redis_tb.limits_async import AsyncRedisTBStorage


def test_urls_map_to_redis_py_schemes() -> None:
    schemes = {"redis+tb": "redis", "rediss+tb": "rediss", "redis+tb+unix": "unix"}
    assert redis_url("redis+tb://:pw@h:1/2?socket_timeout=1", schemes) == "redis://:pw@h:1/2?socket_timeout=1"
    assert redis_url("rediss+tb://h:1", schemes) == "rediss://h:1"
    assert redis_url("redis+tb+unix:///tmp/s.sock?db=1", schemes) == "unix:///tmp/s.sock?db=1"
    with pytest.raises(ConfigurationError):
        redis_url("redis://h:1", schemes)


def test_sliding_hash_read_as_limits_windows() -> None:
    now = 1000.25  # window 10: current [1000, 1010), 9.75 s left
    prev, prev_ttl, cur, cur_ttl = sliding_window_from_hash([b"1000", b"3 4", None, None], 10, now)
    assert (prev, cur) == (4, 3)
    assert prev_ttl == pytest.approx(9.75) and cur_ttl == pytest.approx(19.75)
    # stored window is the previous one: its count is now the previous count
    prev, prev_ttl, cur, _ = sliding_window_from_hash([b"990", b"3 4", None, None], 10, now)
    assert (prev, cur) == (3, 0) and prev_ttl == pytest.approx(9.75)
    # older: nothing counts
    assert sliding_window_from_hash([b"980", b"3 4", None, None], 10, now)[:3] == (0, 0.0, 0)
    # empty key, and a key written by a build before "counts"
    assert sliding_window_from_hash([None, None, None, None], 10, now)[:3] == (0, 0.0, 0)
    prev, prev_ttl, cur, _ = sliding_window_from_hash([b"1000", None, b"2", b"5"], 10, now)
    assert (prev, cur) == (5, 2) and prev_ttl == pytest.approx(9.75)
    with pytest.raises(redis.exceptions.ResponseError):
        sliding_window_from_hash([b"1000", b"3", None, None], 10, now)


def test_moving_window_from_replies() -> None:
    assert moving_window_from_replies([1, b"7", b"0", b"5"], [(b"m", 1.5e15)], 10, 2e9) == (1.5e9, 3)
    assert moving_window_from_replies([1, b"10", b"0", b"0"], [], 10, 2e9) == (2e9, 0)
    with pytest.raises(redis.exceptions.ResponseError):
        moving_window_from_replies([1, b"7"], [], 10, 2e9)


@pytest.fixture
def db(redis_server: RedisServer) -> Iterator[redis.Redis]:
    r = redis.Redis(port=redis_server.port, decode_responses=True)
    r.flushall()
    yield r
    r.close()


def test_scheme_options_prefix_and_fixed_window_counter(redis_server: RedisServer, db: redis.Redis) -> None:
    storage = storage_from_string(f"redis+tb://127.0.0.1:{redis_server.port}/3", key_prefix="p")
    assert isinstance(storage, RedisTBStorage)
    assert storage.check()
    assert storage.incr("k", 60) == 1
    assert storage.incr("k", 60, amount=10) == 11
    assert storage.get("k") == 11
    assert time.time() + 58 < storage.get_expiry("k") <= time.time() + 60
    other = redis.Redis(port=redis_server.port, db=3, decode_responses=True)
    assert other.get("p:k") == "11" and 0 < other.ttl("p:k") <= 60
    assert db.dbsize() == 0  # db 3 from the URL
    storage.clear("k")
    assert storage.get("k") == 0
    for i in range(3):
        storage.incr(f"r{i}", 60)
    other.set("not-ours", 1)
    assert storage.reset() == 3
    assert other.keys() == ["not-ours"]
    other.close()


def test_moving_window_is_a_tb_window_log(redis_server: RedisServer, db: redis.Redis) -> None:
    storage = storage_from_string(f"redis+tb://127.0.0.1:{redis_server.port}")
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(3)
    t0 = time.time()
    assert [limiter.hit(item, "u") for _ in range(4)] == [True, True, True, False]
    key = "LIMITS_TB:" + item.key_for("u")
    assert db.type(key) == "zset" and db.zcard(key) == 3
    stats = limiter.get_window_stats(item, "u")
    assert stats.remaining == 0
    assert t0 + 60 - 0.01 <= stats.reset_time <= time.time() + 60
    assert not limiter.test(item, "u")
    # a cost over the limit is refused, not an error; a limit over LOG's cap (10,000 entries
    # per key, the module's memory bound) is an error, never a silent other strategy
    assert not limiter.hit(RateLimitItemPerMinute(5), "v", cost=6)
    with pytest.raises(redis.exceptions.ResponseError, match="10000"):
        limiter.hit(RateLimitItemPerMinute(1_000_000), "w", cost=1)
    # get() reads counters: on a window's key it says so
    with pytest.raises(redis.exceptions.ResponseError, match="not a fixed-window counter"):
        storage.get(item.key_for("u"))
    wrapped = storage_from_string(f"redis+tb://127.0.0.1:{redis_server.port}", wrap_exceptions=True)
    with pytest.raises(StorageError):
        wrapped.get(item.key_for("u"))
    limiter.clear(item, "u")
    assert limiter.get_window_stats(item, "u").remaining == 3


def test_sliding_window_counter_is_a_tb_window_sliding(redis_server: RedisServer, db: redis.Redis) -> None:
    storage = storage_from_string(f"redis+tb://127.0.0.1:{redis_server.port}")
    limiter = SlidingWindowCounterRateLimiter(storage)
    item = RateLimitItemPerMinute(100)
    assert limiter.hit(item, "u", cost=40)
    key = "LIMITS_TB:" + item.key_for("u")
    assert db.type(key) == "hash" and db.hget(key, "counts") == "40 0"
    assert int(db.hget(key, "start") or 0) % 60 == 0  # aligned to the epoch
    assert limiter.get_window_stats(item, "u").remaining == 60
    assert not limiter.hit(item, "u", cost=61)
    limiter.clear(item, "u")
    assert db.exists(key) == 0


def test_check_is_false_without_the_module() -> None:
    # SPEC E1: forced to the module (auto takes the scripts, below)
    plain = RedisServer(module=False).start()
    try:
        storage = storage_from_string(f"redis+tb://127.0.0.1:{plain.port}", backend="module")
        assert storage.check() is False
        with pytest.raises(redis.exceptions.RedisError):
            MovingWindowRateLimiter(storage).hit(RateLimitItemPerMinute(1))
    finally:
        plain.stop()


def test_the_scripts_serve_a_redis_without_the_module() -> None:
    """SPEC E1: auto (the default) chooses the script library: the same windows."""
    plain = RedisServer(module=False).start()
    try:
        storage = storage_from_string(f"redis+tb://127.0.0.1:{plain.port}")
        assert storage.check() is True
        item = RateLimitItemPerMinute(2)
        moving = MovingWindowRateLimiter(storage)
        assert [moving.hit(item, "a") for _ in range(3)] == [True, True, False]
        assert moving.get_window_stats(item, "a").remaining == 0
        sliding = SlidingWindowCounterRateLimiter(storage)
        assert [sliding.hit(item, "b") for _ in range(3)] == [True, True, False]
    finally:
        plain.stop()


async def test_the_async_storage_on_the_scripts() -> None:
    from limits.aio.strategies import MovingWindowRateLimiter as AsyncMoving

    plain = RedisServer(module=False).start()
    try:
        storage = storage_from_string(f"async+redis+tb://127.0.0.1:{plain.port}", backend="scripts")
        item = RateLimitItemPerMinute(2)
        moving = AsyncMoving(storage)
        assert [await moving.hit(item, "a") for _ in range(3)] == [True, True, False]
        assert (await moving.get_window_stats(item, "a")).remaining == 0
    finally:
        plain.stop()


def test_connection_pool_option(redis_server: RedisServer, db: redis.Redis) -> None:
    pool = redis.ConnectionPool(port=redis_server.port, db=2)
    storage = RedisTBStorage("redis+tb://", connection_pool=pool)
    assert storage.acquire_entry("k", 1, 60)
    assert redis.Redis(connection_pool=pool).type("LIMITS_TB:k") == b"zset"
    pool.disconnect()


async def test_async_storage(redis_server: RedisServer, db: redis.Redis) -> None:
    storage = storage_from_string(f"async+redis+tb://127.0.0.1:{redis_server.port}/0")
    assert isinstance(storage, AsyncRedisTBStorage)
    assert await storage.check()
    assert await storage.acquire_entry("m", 2, 60, 2)
    assert not await storage.acquire_entry("m", 2, 60)
    start, count = await storage.get_moving_window("m", 2, 60)
    assert count == 2 and start <= time.time()
    assert await storage.acquire_sliding_window_entry("s", 2, 60)
    prev, _, cur, _ = await storage.get_sliding_window("s", 60)
    assert (prev, cur) == (0, 1)
    assert await storage.incr("f", 60) == 1
    assert await storage.reset() == 3
    await storage.storage.aclose()
    with pytest.raises(ConfigurationError, match="redispy"):
        storage_from_string(f"async+redis+tb://127.0.0.1:{redis_server.port}", implementation="coredis")
