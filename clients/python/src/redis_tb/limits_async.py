"""The asyncio storage for :pypi:`limits` on redis-tb (``async+redis+tb://``).

Registered by importing :mod:`redis_tb.limits` (or this module). Same commands, keys and
URL options as :class:`redis_tb.limits.RedisTBStorage`, on :mod:`redis.asyncio`.
"""

from __future__ import annotations

import time
from typing import Any, cast

import redis
import redis.asyncio
from limits.aio.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.errors import ConfigurationError
from limits.storage.base import TimestampedSlidingWindow

from .client import AsyncClient
from .limits_common import (
    PREFIX,
    SLIDING_FIELDS,
    StorageBasics,
    allowed_from_reply,
    log_cutoff,
    module_loaded,
    moving_window_from_replies,
    raise_not_a_counter,
    redis_url,
    reset_scan_pattern,
    sliding_window_from_hash,
    window_args,
)

__all__ = ["AsyncRedisTBStorage"]

ASYNC_SCHEMES = {
    "async+redis+tb": "redis",
    "async+rediss+tb": "rediss",
    "async+redis+tb+unix": "unix",
}


class AsyncRedisTBStorage(StorageBasics, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """``limits.aio`` storage on redis-tb's TB.WINDOW (``async+redis+tb://``,
    ``async+rediss+tb://``, ``async+redis+tb+unix://``).

    :param uri: everything after ``async+redis+tb`` goes to
     :meth:`redis.asyncio.Redis.from_url`.
    :param connection_pool: a :class:`redis.asyncio.ConnectionPool` instead of the URL's.
    :param key_prefix: prefix of every key (``LIMITS_TB``).
    :param implementation: ``"redispy"`` only (``limits``' own async Redis storage also
     offers coredis and valkey; the redis-tb storage runs on redis-py's asyncio client).
    :param backend: the store's backend (SPEC E1): ``auto`` (the module where ``COMMAND
     INFO tb.take`` finds it, else the script library of clients/lua, chosen at the first
     call), ``module`` or ``scripts``.
    :param options: passed to :class:`redis.asyncio.Redis`.
    """

    STORAGE_SCHEME = list(ASYNC_SCHEMES)

    def __init__(
        self,
        uri: str,
        wrap_exceptions: bool = False,
        implementation: str = "redispy",
        key_prefix: str = PREFIX,
        connection_pool: redis.asyncio.ConnectionPool | None = None,
        backend: str = "auto",
        **options: Any,
    ) -> None:
        if implementation != "redispy":
            raise ConfigurationError(
                f"async+redis+tb runs on redis-py's asyncio client: implementation={implementation!r}"
                " is not supported (use 'redispy')"
            )
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.key_prefix = key_prefix
        self.storage: redis.asyncio.Redis
        if connection_pool is not None:
            self.storage = redis.asyncio.Redis(connection_pool=connection_pool, **options)
        else:
            self.storage = redis.asyncio.Redis.from_url(redis_url(uri, ASYNC_SCHEMES), **options)
        self._use_backend(AsyncClient(self.storage), backend)  # SPEC E1

    async def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        pipe = self.storage.pipeline(transaction=True)
        pipe.incrby(self._key(key), amount)
        cast(Any, pipe).execute_command("EXPIRE", self._key(key), expiry, "NX")
        count, _ = await pipe.execute()
        return int(count)

    async def get(self, key: str) -> int:
        try:
            return int(await self.storage.get(self._key(key)) or 0)
        except redis.exceptions.ResponseError as exc:
            raise_not_a_counter(exc, key)

    async def get_expiry(self, key: str) -> float:
        ms = int(await self.storage.pttl(self._key(key)))
        return max(ms, 0) / 1000 + time.time()

    async def check(self) -> bool:
        try:
            return module_loaded(await self._cmd.execute_command(*self._check_args()))
        except Exception:  # noqa: BLE001
            return False

    async def reset(self) -> int | None:
        deleted = 0
        batch: list[Any] = []
        async for name in self.storage.scan_iter(match=reset_scan_pattern(self.key_prefix), count=1000):
            batch.append(name)
            if len(batch) >= 1000:
                deleted += int(await self.storage.unlink(*batch))
                batch = []
        if batch:
            deleted += int(await self.storage.unlink(*batch))
        return deleted

    async def clear(self, key: str) -> None:
        await self.storage.delete(self._key(key))

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        reply = await self._cmd.execute_command(
            *window_args(self._key(key), limit, expiry, amount, time.time(), "LOG")
        )
        return allowed_from_reply(reply)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        now = time.time()
        name = self._key(key)
        if await cast(AsyncClient, self._tb)._scripts() is not None:  # SPEC E3 retries a call alone: no pipeline
            reply = await self._cmd.execute_command(*window_args(name, limit, expiry, 0, now, "LOG"))
            oldest = await self.storage.zrangebyscore(name, log_cutoff(now, expiry), "+inf", start=0, num=1, withscores=True)
            return moving_window_from_replies(reply, oldest, limit, now)
        pipe = self.storage.pipeline(transaction=False)
        cast(Any, pipe).execute_command(*window_args(name, limit, expiry, 0, now, "LOG"))
        pipe.zrangebyscore(name, log_cutoff(now, expiry), "+inf", start=0, num=1, withscores=True)
        reply, oldest = await pipe.execute()
        return moving_window_from_replies(reply, oldest, limit, now)

    async def acquire_sliding_window_entry(
        self, key: str, limit: int, expiry: int, amount: int = 1
    ) -> bool:
        reply = await self._cmd.execute_command(
            *window_args(self._key(key), limit, expiry, amount, time.time(), "SLIDING")
        )
        return allowed_from_reply(reply)

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        now = time.time()
        values = await self.storage.hmget(self._key(key), list(SLIDING_FIELDS))
        return sliding_window_from_hash(values, expiry, now)

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        await self.storage.delete(self._key(key))
