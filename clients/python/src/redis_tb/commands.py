"""The module's other commands on the typed clients (issue 40: each language's client
covers the same twelve): TB.WINDOW, TB.THROTTLE, TB.ACQUIRE (with TAKE when buckets are
given), TB.RELEASE, TB.RENEW, TB.PEEK key LEASES / HOLDS, TB.HOLD and TB.SETTLE.

:class:`AsyncCommands` and :class:`SyncCommands` are mixins of
:class:`~redis_tb.client.AsyncClient` and :class:`~redis_tb.client.Client`: every method
is one round trip through the client's ``_call`` (redis-py's ``execute_command``), so an
error reply raises redis-py's ``ResponseError`` with the module's message, as
TB.TAKE's does. Arguments are not checked here: the module refuses bad ones and says why.
"""

from __future__ import annotations

from typing import Any, Sequence

from .command_replies import (
    Acquired,
    HoldReply,
    HoldsPeek,
    LeaseReply,
    LeasesPeek,
    SettleReply,
    Throttle,
    WindowMode,
    acquire_args,
    hold_args,
    parse_acquire,
    parse_hold,
    parse_peek_holds,
    parse_peek_leases,
    parse_release,
    parse_renew,
    parse_settle,
    parse_throttle,
    settle_args,
    throttle_args,
    window_args,
)
from .replies import Charge, Reply, parse_reply

__all__ = ["AsyncCommands", "SyncCommands"]


class AsyncCommands:
    """TB.WINDOW ... TB.SETTLE over ``redis.asyncio`` (a mixin of :class:`AsyncClient`)."""

    async def _call(self, args: list[Any]) -> Any:
        raise NotImplementedError  # the client's

    async def window(
        self,
        key: str,
        limit: float,
        window: float,
        n: float = 1,
        *,
        now: float | None = None,
        mode: WindowMode | None = None,
    ) -> Reply:
        """``TB.WINDOW key limit window n [now] [mode]``: at most ``limit`` per ``window``
        seconds; TB.TAKE's reply shape."""
        return parse_reply(await self._call(window_args(key, limit, window, n, now, mode)))

    async def throttle(
        self, key: str, max_burst: int, count_per_period: float, period: float, quantity: int = 1
    ) -> Throttle:
        """``TB.THROTTLE`` (redis-cell's ``CL.THROTTLE``), on the server's clock."""
        args = throttle_args(key, max_burst, count_per_period, period, quantity)
        return parse_throttle(await self._call(args))

    async def acquire(
        self, key: str, limit: int, lease_ms: int, buckets: Sequence[Charge] = ()
    ) -> Acquired:
        """``TB.ACQUIRE key limit lease_ms``, with ``TAKE`` when ``buckets`` are given: the
        slot and every bucket's tokens, or nothing."""
        raw = await self._call(acquire_args(key, limit, lease_ms, buckets))
        return parse_acquire(raw, len(buckets))

    async def release(self, key: str, lease_id: str) -> LeaseReply:
        """``TB.RELEASE key lease_id``: ``ok`` False when the lease is not held (safe twice)."""
        return parse_release(await self._call(["TB.RELEASE", key, lease_id]))

    async def renew(self, key: str, id: str, ms: int) -> LeaseReply:
        """``TB.RENEW key id ms``: a lease on an in-flight key, a hold on a bucket."""
        return parse_renew(await self._call(["TB.RENEW", key, id, ms]))

    async def peek_leases(self, key: str) -> LeasesPeek:
        """``TB.PEEK key LEASES``: read-only, runs on replicas."""
        return parse_peek_leases(await self._call(["TB.PEEK", key, "LEASES"]))

    async def peek_holds(self, key: str) -> HoldsPeek:
        """``TB.PEEK key HOLDS``: read-only, runs on replicas."""
        return parse_peek_holds(await self._call(["TB.PEEK", key, "HOLDS"]))

    async def hold(
        self, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int
    ) -> HoldReply:
        """``TB.HOLD key capacity rate estimate ttl_ms``: take an estimate now, settle later."""
        return parse_hold(await self._call(hold_args(key, capacity, rate, estimate, ttl_ms)))

    async def settle(
        self,
        key: str,
        capacity: float,
        rate: float,
        hold_id: str,
        actual: float,
        *,
        max_wait: float | None = None,
    ) -> SettleReply:
        """``TB.SETTLE key capacity rate hold_id actual [max_wait]``: ``max_wait`` bounds the
        debt an excess may leave to ``max_wait x rate``."""
        args = settle_args(key, capacity, rate, hold_id, actual, max_wait)
        return parse_settle(await self._call(args))


class SyncCommands:
    """:class:`AsyncCommands`, blocking (a mixin of :class:`Client`)."""

    def _call(self, args: list[Any]) -> Any:
        raise NotImplementedError  # the client's

    def window(
        self,
        key: str,
        limit: float,
        window: float,
        n: float = 1,
        *,
        now: float | None = None,
        mode: WindowMode | None = None,
    ) -> Reply:
        return parse_reply(self._call(window_args(key, limit, window, n, now, mode)))

    def throttle(
        self, key: str, max_burst: int, count_per_period: float, period: float, quantity: int = 1
    ) -> Throttle:
        args = throttle_args(key, max_burst, count_per_period, period, quantity)
        return parse_throttle(self._call(args))

    def acquire(
        self, key: str, limit: int, lease_ms: int, buckets: Sequence[Charge] = ()
    ) -> Acquired:
        raw = self._call(acquire_args(key, limit, lease_ms, buckets))
        return parse_acquire(raw, len(buckets))

    def release(self, key: str, lease_id: str) -> LeaseReply:
        return parse_release(self._call(["TB.RELEASE", key, lease_id]))

    def renew(self, key: str, id: str, ms: int) -> LeaseReply:
        return parse_renew(self._call(["TB.RENEW", key, id, ms]))

    def peek_leases(self, key: str) -> LeasesPeek:
        return parse_peek_leases(self._call(["TB.PEEK", key, "LEASES"]))

    def peek_holds(self, key: str) -> HoldsPeek:
        return parse_peek_holds(self._call(["TB.PEEK", key, "HOLDS"]))

    def hold(
        self, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int
    ) -> HoldReply:
        return parse_hold(self._call(hold_args(key, capacity, rate, estimate, ttl_ms)))

    def settle(
        self,
        key: str,
        capacity: float,
        rate: float,
        hold_id: str,
        actual: float,
        *,
        max_wait: float | None = None,
    ) -> SettleReply:
        return parse_settle(self._call(settle_args(key, capacity, rate, hold_id, actual, max_wait)))
