"""Typed clients for the module's commands: :class:`AsyncClient` over ``redis.asyncio``
and its synchronous twin :class:`Client` over ``redis``.

Both wrap a connection you own (``redis.asyncio.Redis`` / ``redis.Redis``). Use
:meth:`AsyncClient.from_url` for one set up the way a request path wants it:
tight timeouts and no retries (a TB.TAKE retried after a timeout may be charged
twice, and retries pile load on a Redis that is already struggling).
"""

from __future__ import annotations

from typing import Any, Sequence, cast

import redis
import redis.asyncio
from redis.backoff import NoBackoff

from .replies import (
    Bucket,
    MultiReply,
    Reply,
    mtake_args,
    parse_multi_reply,
    parse_reply,
    peek_args,
    refund_args,
    reserve_args,
    take_args,
)

__all__ = ["AsyncClient", "Client", "ModuleNotLoadedError", "DEFAULT_TIMEOUT"]

#: Connect and per-call timeout, seconds, of connections made by ``from_url``.
DEFAULT_TIMEOUT = 0.05

_PROBE = ("COMMAND", "INFO", "tb.mtake")


class ModuleNotLoadedError(RuntimeError):
    """The server answers, but the redis-tb module is not loaded there."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"redis-tb module not loaded on {where}: load libredis_tb.so with loadmodule"
        )
        self.where = where


def describe_server(kwargs: dict[str, Any]) -> str:
    """host:port (or the socket path) of a connection pool's settings, for messages."""
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _module_missing(info: Any) -> bool:
    # COMMAND INFO answers one entry per name asked, nil for an unknown command.
    return not isinstance(info, (list, tuple)) or not info or info[0] is None


class AsyncClient:
    """The five commands over ``redis.asyncio``; every method is one round trip."""

    def __init__(self, redis_client: redis.asyncio.Redis) -> None:
        self.redis = redis_client

    async def _call(self, args: list[Any]) -> Any:
        # redis-py's execute_command is untyped; the reply is parsed right after.
        return await cast(Any, self.redis).execute_command(*args)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> AsyncClient:
        """Connect lazily to ``url`` with ``timeout`` for connect and every call, no retries."""
        kwargs.setdefault("socket_timeout", timeout)
        kwargs.setdefault("socket_connect_timeout", timeout)
        kwargs.setdefault("retry", redis.asyncio.retry.Retry(NoBackoff(), 0))
        return cls(redis.asyncio.Redis.from_url(url, **kwargs))

    @property
    def server(self) -> str:
        return describe_server(self.redis.connection_pool.connection_kwargs)

    async def take(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        return parse_reply(await self._call(take_args(key, capacity, rate, n, now)))

    async def mtake(self, buckets: Sequence[Bucket], *, now: float | None = None) -> MultiReply:
        raw = await self._call(mtake_args(buckets, now))
        return parse_multi_reply(raw, len(buckets))

    async def reserve(
        self,
        key: str,
        capacity: float,
        rate: float,
        n: float = 1,
        *,
        max_wait: float,
        now: float | None = None,
    ) -> Reply:
        args = reserve_args(key, capacity, rate, n, max_wait, now)
        return parse_reply(await self._call(args))

    async def peek(
        self, key: str, capacity: float, rate: float, *, now: float | None = None
    ) -> Reply:
        return parse_reply(await self._call(peek_args(key, capacity, rate, now)))

    async def refund(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        args = refund_args(key, capacity, rate, n, now)
        return parse_reply(await self._call(args))

    async def refund_many(self, buckets: Sequence[Bucket], *, now: float | None = None) -> list[Reply]:
        """TB.REFUND on each bucket, pipelined in one round trip (no transaction)."""
        pipe = self.redis.pipeline(transaction=False)
        for b in buckets:
            pipe.execute_command(*refund_args(b.key, b.capacity, b.rate, b.n, now))
        return [parse_reply(r) for r in await pipe.execute()]

    async def check_module(self) -> None:
        """Raise :class:`ModuleNotLoadedError` unless TB.MTAKE exists on the server.

        Reads the raw reply: redis-py's COMMAND parser does not accept the nil
        entry an unknown command gets.
        """
        pool: Any = self.redis.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_command(*_PROBE)
            info = await conn.read_response()
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)
        if _module_missing(info):
            raise ModuleNotLoadedError(self.server)

    async def aclose(self) -> None:
        await self.redis.aclose()


class Client:
    """The synchronous twin of :class:`AsyncClient` (scripts, workers, cron jobs)."""

    def __init__(self, redis_client: redis.Redis) -> None:
        self.redis = redis_client

    def _call(self, args: list[Any]) -> Any:
        return cast(Any, self.redis).execute_command(*args)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> Client:
        kwargs.setdefault("socket_timeout", timeout)
        kwargs.setdefault("socket_connect_timeout", timeout)
        kwargs.setdefault("retry", redis.retry.Retry(NoBackoff(), 0))
        return cls(redis.Redis.from_url(url, **kwargs))

    @property
    def server(self) -> str:
        return describe_server(self.redis.connection_pool.connection_kwargs)

    def take(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        return parse_reply(self._call(take_args(key, capacity, rate, n, now)))

    def mtake(self, buckets: Sequence[Bucket], *, now: float | None = None) -> MultiReply:
        return parse_multi_reply(self._call(mtake_args(buckets, now)), len(buckets))

    def reserve(
        self,
        key: str,
        capacity: float,
        rate: float,
        n: float = 1,
        *,
        max_wait: float,
        now: float | None = None,
    ) -> Reply:
        return parse_reply(
            self._call(reserve_args(key, capacity, rate, n, max_wait, now))
        )

    def peek(self, key: str, capacity: float, rate: float, *, now: float | None = None) -> Reply:
        return parse_reply(self._call(peek_args(key, capacity, rate, now)))

    def refund(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        return parse_reply(self._call(refund_args(key, capacity, rate, n, now)))

    def refund_many(self, buckets: Sequence[Bucket], *, now: float | None = None) -> list[Reply]:
        pipe: Any = self.redis.pipeline(transaction=False)
        for b in buckets:
            pipe.execute_command(*refund_args(b.key, b.capacity, b.rate, b.n, now))
        return [parse_reply(r) for r in pipe.execute()]

    def check_module(self) -> None:
        pool: Any = self.redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command(*_PROBE)
            info = conn.read_response()
        except BaseException:
            conn.disconnect()
            raise
        finally:
            pool.release(conn)
        if _module_missing(info):
            raise ModuleNotLoadedError(self.server)

    def close(self) -> None:
        self.redis.close()
