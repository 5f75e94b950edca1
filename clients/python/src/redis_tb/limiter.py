"""The request-path limiter: policies -> keys -> one TB.MTAKE -> a Decision, with an
explicit failure mode for when Redis is down or slow.

Failure handling (the same in the Rust integration):

- every call is bounded by ``timeout`` (default 50 ms) and made at most once;
- after a connection error or timeout, Redis is left alone for ``cooldown``
  seconds (default 1 s) and the failure mode applies directly; then a single
  request probes it again while the others keep the failure mode;
- ``fail_open=True`` (the default) lets requests through unlimited, without
  rate-limit headers: a rate limiter must not take the API down with it. Use
  ``fail_open=False`` for abuse-sensitive endpoints (logins, signups, costly
  jobs): requests get 503 with ``Retry-After: 1``;
- one log line per second at most (``redis_tb`` logger, WARNING) and counters
  in :attr:`RateLimiter.stats`.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Sequence, TypeVar

import redis.asyncio
import redis.exceptions
from starlette.requests import Request

from .client import AsyncClient, ModuleNotLoadedError
from .decision import Decision, Outcome, PolicyResult
from .keys import ClientIP
from .policy import Policy, resolve
from .replies import Bucket, MultiReply, UnexpectedReplyError

__all__ = ["HashTagFunc", "LimiterStats", "RateLimiter"]

T = TypeVar("T")
HashTagFunc = Callable[[Request], Awaitable[str | None] | str | None]

async def _bounded(call: Awaitable[T], seconds: float) -> T:
    """``call``, cancelled after ``seconds`` (asyncio.TimeoutError)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):  # no extra task per call, unlike wait_for
            return await call
    return await asyncio.wait_for(call, seconds)  # pragma: no cover


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


@dataclass
class LimiterStats:
    """Counters an app can export (e.g. to Prometheus)."""

    #: requests checked against Redis (or meant to be)
    checks: int = 0
    allowed: int = 0
    limited: int = 0
    #: Redis calls that failed: connection errors, timeouts, error replies
    store_errors: int = 0
    #: requests decided by the failure mode (store errors + cool-down skips)
    degraded: int = 0
    refunds: int = 0
    refund_errors: int = 0


def _route_part(route: str) -> str:
    # A '{' in a key starts a Redis Cluster hash tag: keep templates' braces out.
    return route.replace("{", "<").replace("}", ">")


@dataclass(frozen=True, slots=True)
class _Plan:
    policy: Policy
    key: str
    capacity: float
    rate: float
    cost: float


class RateLimiter:
    """Checks a request against policies in one TB.MTAKE, all or nothing.

    ``client``: an :class:`AsyncClient` or a ``redis.asyncio.Redis`` (prefer
    :meth:`AsyncClient.from_url`: tight socket timeouts, no retries).
    ``client_ip``: the default key function (peer IP; pass
    ``ClientIP(trusted_proxies=[...])`` behind proxies).
    ``prefix``: keys are ``<prefix>:<policy>:<identity>``, or
    ``<prefix>:{<tag>}:<policy>:<identity>`` with ``hash_tag`` (a function of the
    request). On Redis Cluster, layered policies need one hash tag per request
    (e.g. the user id or the client IP) so that their keys share a slot.
    ``clock``: None (default) uses the Redis server's clock, the one clock every
    app server agrees on; a function returning epoch seconds passes ``now``.
    """

    def __init__(
        self,
        client: AsyncClient | redis.asyncio.Redis,
        *,
        prefix: str = "rl",
        client_ip: ClientIP | None = None,
        hash_tag: HashTagFunc | None = None,
        fail_open: bool = True,
        timeout: float = 0.05,
        cooldown: float = 1.0,
        legacy_headers: bool = False,
        clock: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.client = client if isinstance(client, AsyncClient) else AsyncClient(client)
        self.prefix = prefix
        self.client_ip = client_ip or ClientIP()
        self.hash_tag = hash_tag
        self.fail_open = fail_open
        self.timeout = timeout
        self.cooldown = cooldown
        self.legacy_headers = legacy_headers
        self.clock = clock
        self.log = logger or logging.getLogger("redis_tb")
        self.stats = LimiterStats()
        self._open_until = 0.0
        self._probing = False
        self._last_log = float("-inf")
        self._unlogged = 0

    @property
    def store_errors(self) -> int:
        return self.stats.store_errors

    # -- lifecycle -------------------------------------------------------------

    async def startup(self) -> None:
        """Call in the app's lifespan: fail fast when the module is missing.

        Raises :class:`ModuleNotLoadedError` when the server answers without the
        module. An unreachable Redis is logged, not raised: the failure mode
        handles it per request, and the app can start before Redis does.
        """
        try:
            await asyncio.wait_for(self.client.check_module(), max(self.timeout, 1.0))
        except ModuleNotLoadedError:
            raise
        except _CONNECTION_ERRORS as exc:
            self.log.warning(
                "redis-tb: cannot reach Redis at %s to check the module (%s: %s); "
                "failing %s until it answers",
                self.client.server, type(exc).__name__, exc,
                "open" if self.fail_open else "closed",
            )

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- keys ------------------------------------------------------------------

    def key(self, policy: str, identity: str, *, route: str | None = None, tag: str | None = None) -> str:
        """The bucket key of ``identity`` under ``policy``."""
        if route is not None:
            identity = f"{_route_part(route)}:{identity}"
        if tag is not None:
            return f"{self.prefix}:{{{tag}}}:{policy}:{identity}"
        return f"{self.prefix}:{policy}:{identity}"

    async def _plans(self, request: Request, policies: Sequence[Policy], route: str | None) -> list[_Plan]:
        tag = None if self.hash_tag is None else await resolve(self.hash_tag(request))
        plans: list[_Plan] = []
        for p in policies:
            if not p.applies_to(route):
                continue
            keyfunc = p.key if p.key is not None else self.client_ip
            identity = await resolve(keyfunc(request))
            if identity is None:
                continue
            limit = await p.limit_for(request)
            if limit is None:
                continue
            cost = await p.cost_for(request)
            key = self.key(p.name, identity, route=route if p.per_route else None, tag=tag)
            plans.append(_Plan(p, key, limit.capacity, limit.rate, cost))
        if len({pl.key for pl in plans}) != len(plans):
            raise ValueError("two policies of one request map to the same key: give them distinct names")
        return plans

    # -- the request path ------------------------------------------------------

    async def check(self, request: Request, policies: Sequence[Policy], route: str | None = None) -> Decision:
        """Charge ``request`` on every applicable policy in one TB.MTAKE.

        ``route`` is ``"METHOD /template"`` (None: matched no route).
        """
        plans = await self._plans(request, policies, route)
        if not plans:
            return Decision(Outcome.NOT_LIMITED, True)
        self.stats.checks += 1
        if not self._may_call():
            return self._degraded(None)
        probe = self._open_until != 0.0
        if probe:
            self._probing = True
        try:
            buckets = [Bucket(pl.key, pl.capacity, pl.rate, pl.cost) for pl in plans]
            reply = await _bounded(self.client.mtake(buckets, now=self._now()), self.timeout)
        except _STORE_ERRORS as exc:
            self._failed(exc)
            return self._degraded(exc)
        finally:
            if probe:
                self._probing = False
        self._open_until = 0.0
        return self._decision(plans, reply)

    def _now(self) -> float | None:
        return None if self.clock is None else self.clock()

    def _may_call(self) -> bool:
        if self._open_until == 0.0:
            return True
        # Cooling down after a failure: skip Redis; afterwards one probe at a time.
        return time.monotonic() >= self._open_until and not self._probing

    def _decision(self, plans: list[_Plan], reply: MultiReply) -> Decision:
        results = tuple(
            PolicyResult(
                name=pl.policy.name,
                key=pl.key,
                capacity=pl.capacity,
                rate=pl.rate,
                cost=pl.cost,
                allowed=r.allowed,
                remaining=r.remaining,
                retry_after=r.retry_after,
                reset_after=r.reset_after,
            )
            for pl, r in zip(plans, reply.keys)
        )
        if reply.allowed:
            self.stats.allowed += 1
            return Decision(Outcome.ALLOWED, True, results, refunder=self._refund)
        self.stats.limited += 1
        return Decision(Outcome.LIMITED, False, results)

    def _degraded(self, error: BaseException | None) -> Decision:
        self.stats.degraded += 1
        return Decision(Outcome.STORE_ERROR, self.fail_open, error=error)

    def _failed(self, exc: BaseException, what: str = "TB.MTAKE") -> None:
        self.stats.store_errors += 1
        unknown = isinstance(exc, redis.exceptions.ResponseError) and "unknown command" in str(exc).lower()
        server_wide = unknown or not isinstance(exc, (redis.exceptions.ResponseError, UnexpectedReplyError))
        if server_wide:
            self._open_until = time.monotonic() + self.cooldown
        now = time.monotonic()
        if now - self._last_log < 1.0:
            self._unlogged += 1
            return
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, asyncio.TimeoutError):
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

    async def _refund(self, decision: Decision) -> bool:
        buckets = [Bucket(r.key, r.capacity, r.rate, r.cost) for r in decision.results if r.cost > 0]
        if not buckets:
            return False
        if not self._may_call():
            self.stats.refund_errors += 1
            return False
        try:
            await _bounded(self.client.refund_many(buckets, now=self._now()), self.timeout)
        except _STORE_ERRORS as exc:
            self.stats.refund_errors += 1
            self._failed(exc, "TB.REFUND")
            return False
        self.stats.refunds += 1
        return True
