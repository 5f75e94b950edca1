"""One call to the store and what its failure does (SPEC L4, L5, B1-B5, K6): the command
a plan is, RESP-encoded (TB.TAKE, TB.MTAKE, TB.WINDOW, TB.ACQUIRE), the bound on its
time, the errors that are store errors, and the failure mode: the breaker, the log line
and the counters. :class:`StoreCall` is a mixin of
:class:`~redis_tb.limiter.BaseLimiter`; the limiters send the calls."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

import redis.exceptions

from .breaker import CALL, PROBE, SKIP
from .cluster import CrossSlot, is_crossslot
from .decision import Decision, Outcome
from .plan import _Plan
from .replies import UnexpectedReplyError, encode_arg, packed

if TYPE_CHECKING:
    import logging

    from .backend import Chosen
    from .breaker import Breaker
    from .client import AsyncClient, Client
    from .metrics import Metrics
    from .stats import LimiterStats

__all__ = ["StoreCall"]

T = TypeVar("T")

# what the breaker lets a call do (SPEC B2, B3)
_SKIP, _CALL, _PROBE = SKIP, CALL, PROBE


if sys.version_info >= (3, 11):  # the version checked once, not on every call

    async def _bounded(call: Awaitable[T], seconds: float) -> T:
        """``call``, cancelled after ``seconds`` (asyncio.TimeoutError)."""
        async with asyncio.timeout(seconds):  # no extra task per call, unlike wait_for
            return await call

else:  # pragma: no cover

    async def _bounded(call: Awaitable[T], seconds: float) -> T:
        """``call``, cancelled after ``seconds`` (asyncio.TimeoutError)."""
        return await asyncio.wait_for(call, seconds)


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    asyncio.TimeoutError,
    OSError,
)
_STORE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.RedisError,
    UnexpectedReplyError,
    *_CONNECTION_ERRORS,
)


def _as_is(reply: Any) -> Any:
    """A reply the guarded call's caller reads itself (TB.REFUND's)."""
    return reply


class StoreCall:
    """The call rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin: the command,
    the breaker, the failure mode and its log line)."""

    if TYPE_CHECKING:
        client: AsyncClient | Client
        stats: LimiterStats
        metrics: Metrics | None
        breaker: Breaker
        log: logging.Logger
        name: str
        timeout: float
        cooldown: float
        fail_open: bool
        redis_now: Callable[[], float] | None
        _mono: Callable[[], float]
        _shapes: dict[tuple[float, float, float], bytes]
        _last_log: float
        _unlogged: int
        _cluster_log: dict[str, tuple[float, int]]

        def _special(self, plans: list[_Plan]) -> tuple[str, _Plan | None]: ...

    def on_backend(self, chosen: Chosen, *, log: bool = True) -> None:
        """SPEC E6: the backend chosen (at startup, or at a degraded start's first call):
        its one line (INFO; ``log=False``: another limiter logged it), ``stats.backend``
        and the gauge ``redis_tb_backend``."""
        self.stats.backend = chosen.name
        metrics = self.metrics
        if metrics is not None and hasattr(metrics, "backend"):  # an older Metrics has none
            metrics.backend(chosen.name)
        if log:
            self.log.info("%s", chosen.line)

    def _acquire(self) -> int:
        return self.breaker.acquire()

    def _probe_over(self) -> None:
        self.breaker.probe_over()

    def _command(self, plans: list[_Plan], special_call: tuple[str, _Plan | None] | None = None) -> bytes:
        """SPEC L4: TB.TAKE for one plan, else TB.MTAKE in policy order, RESP-encoded;
        each shape's numbers encoded once. A window plan is TB.WINDOW (W2); an
        in-flight plan makes it TB.ACQUIRE, with TAKE and the buckets in policy order
        when there are any (N2). ``special_call``: :meth:`_special`'s answer when the
        caller has it (None: worked out here)."""
        what, special = self._special(plans) if special_call is None else special_call
        if special is not None:
            if what == "TB.WINDOW":
                now = None if self.redis_now is None else self.redis_now()
                assert special.window is not None
                args: list[Any] = ["TB.WINDOW", special.key, special.capacity, special.window, special.cost]
                if now is not None:
                    args.append(now)
                args.append("FIXED" if special.mode == "fixed" else "SLIDING")
                return packed(*args)
            buckets = [pl for pl in plans if pl is not special]
            args = ["TB.ACQUIRE", special.key, int(special.capacity), special.lease_ms]
            if buckets:  # no now: TB.ACQUIRE is on the server's clock
                args += ["TAKE", len(buckets)]
                args += [pl.key for pl in buckets]
                for pl in buckets:
                    assert pl.rate is not None
                    args += [pl.capacity, pl.rate, pl.cost]
            return packed(*args)
        now = None if self.redis_now is None else self.redis_now()
        n = len(plans)
        shapes = self._shapes
        if n == 1:
            parts = [b"*%d\r\n$7\r\nTB.TAKE\r\n" % (5 + (now is not None))]
        else:
            parts = [b"*%d\r\n$8\r\nTB.MTAKE\r\n" % (2 + 4 * n + (now is not None)), encode_arg(n)]
        for pl in plans:
            key = pl.key.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(key), key))
        for pl in plans:
            assert pl.rate is not None  # buckets only here
            shape = (pl.capacity, pl.rate, pl.cost)
            enc = shapes.get(shape)
            if enc is None:
                if len(shapes) >= 4096:  # per-request limits or costs: keep it bounded
                    shapes.clear()
                enc = shapes[shape] = encode_arg(pl.capacity) + encode_arg(pl.rate) + encode_arg(pl.cost)
            parts.append(enc)
        if now is not None:
            parts.append(encode_arg(now))
        return b"".join(parts)

    def _after_error(
        self, exc: BaseException, started: float | None, n: int = 2, what: str = "", plans: Sequence[_Plan] = (),
    ) -> Decision:
        if self.metrics is not None and started is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        if plans and is_crossslot(exc):  # SPEC K6, L5: a configuration error, not a store error
            return self._misrouted(exc, plans)
        self._failed(exc, what or ("TB.TAKE" if n == 1 else "TB.MTAKE"))
        return self._degraded(exc)

    def _misrouted(self, exc: BaseException, plans: Sequence[_Plan]) -> Decision:
        """SPEC K6: Redis Cluster refused the call (CROSSSLOT): a 500 naming its
        policies, nothing admitted (never the failure mode), counted in
        ``invalid_inputs`` (not ``store_errors``), the breaker untouched, one line a
        second per limiter."""
        names = tuple(pl.policy.name for pl in plans)
        self.stats.invalid_inputs += 1
        if self.metrics is not None:
            for name in names:
                self.metrics.invalid_input(name)
        self._log_once(
            self._cluster_log, self.name,
            "redis-tb: limiter '%s': Redis Cluster refused a call of policies " + ", ".join(f"'{n}'" for n in names)
            + " (CROSSSLOT: their keys are in different slots); answered 500: give the limiter a hash tag "
            "(%d since the last line)",
        )
        error = CrossSlot(names)
        error.__cause__ = exc
        return Decision(Outcome.INVALID_INPUT, False, error=error)

    def _degraded(self, error: BaseException | None) -> Decision:
        self.stats.degraded += 1
        if self.metrics is not None:
            self.metrics.degraded()
        return Decision(Outcome.STORE_ERROR, self.fail_open, error=error)

    def _failed(self, exc: BaseException, what: str = "TB.MTAKE") -> None:
        self.stats.store_errors += 1
        if self.metrics is not None:
            self.metrics.store_error()
        unknown = isinstance(exc, redis.exceptions.ResponseError) and "unknown command" in str(exc).lower()
        server_wide = unknown or not isinstance(exc, (redis.exceptions.ResponseError, UnexpectedReplyError))
        now = self._mono()
        if server_wide:  # SPEC B1: a connection error or a timeout opens the breaker
            self.breaker.open()
        if now - self._last_log < 1.0:  # SPEC B5
            self._unlogged += 1
            return
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, (asyncio.TimeoutError, redis.exceptions.TimeoutError)):
            reason = f"no answer within {self.timeout * 1000:g} ms"
        if unknown:
            reason += " (is the redis-tb module loaded?)"
        self.log.warning(
            "redis-tb: %s on %s failed (%s); failing %s%s; store errors so far: %d%s",
            what,
            self.client.server,
            reason,
            "open: requests pass unlimited" if self.fail_open else "closed: requests get 503",
            f", Redis skipped for {self.cooldown:g} s" if server_wide else "",
            self.stats.store_errors,
            f" ({self._unlogged} not logged)" if self._unlogged else "",
        )
        self._last_log = now
        self._unlogged = 0

    def _log_once(self, book: dict[str, tuple[float, int]], name: str, message: str) -> None:
        """``message % (name, count)`` at most once a second per name (SPEC L3, S2)."""
        now = self._mono()
        last, unlogged = book.get(name, (float("-inf"), 0))
        if now - last < 1.0:
            book[name] = (last, unlogged + 1)
            return
        self.log.warning(message, name, unlogged + 1)
        book[name] = (now, 0)
