"""SPEC U1-U4, E1: what a limiter checks before it serves, on both paths.

1. The backend is chosen (E1, :mod:`redis_tb.backend`): ``COMMAND INFO tb.take`` (U1)
   chooses the module where it is, else the script library, loaded (E2) and asked for
   TIME (E5); forced to ``module``, a server without it fails the start, as does
   ``NOPERM`` (unless forced to ``scripts``: then the module is not asked for), and a
   library neither load takes (E2). An unreachable Redis fails the start too (U2), unless
   ``start_degraded``: then one line is logged, the limiter starts in its failure mode
   and chooses at its first call that reaches Redis. The choice is told to the limiter
   (E6: its line, ``stats.backend``, the gauge) once the start passes.
2. ``HELLO`` (U3, K6), only for a limiter that can send several keys in one call (two or
   more policies that are not ``settle_later``) and has no tag function: a reply whose
   ``mode`` is ``cluster`` fails the start (such calls would be refused CROSSSLOT); any
   other reply, an error reply included, passes.

Each failure is a :class:`~redis_tb.client.StartupError` whose message is the one line of
U1-U3, word for word (U4)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable, Iterable, Protocol, Sequence

import redis.exceptions

from .backend import Backend, BackendSetting, Chosen
from .errors import StartupError
from .cluster import cluster_refusal, mode_of, several_keys
from .policy import Policy

if TYPE_CHECKING:
    import logging

    from .client import AsyncClient, Client

__all__ = ["start", "start_sync"]

_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    asyncio.TimeoutError,
    OSError,
)
#: what a start turns into its one line (or re-raises, _failed)
_STARTUP_ERRORS: tuple[type[BaseException], ...] = (StartupError, redis.exceptions.ResponseError, *_CONNECTION_ERRORS)


class _Starting(Protocol):
    """What a start reads of its limiter (read only): a protocol, so that this module
    imports no limiter (the limiter imports it to start)."""

    @property
    def client(self) -> AsyncClient | Client: ...
    @property
    def hash_tag(self) -> object: ...
    @property
    def policy_sets(self) -> Sequence[Sequence[Policy]]: ...
    @property
    def name(self) -> str: ...
    @property
    def start_degraded(self) -> bool: ...
    @property
    def log(self) -> logging.Logger: ...
    @property
    def timeout(self) -> float: ...
    @property
    def backend(self) -> BackendSetting: ...
    @property
    def wall(self) -> Callable[[], float]: ...

    def on_backend(self, chosen: Chosen) -> None: ...


class _AsyncStarting(_Starting, Protocol):
    @property
    def client(self) -> AsyncClient: ...


class _SyncStarting(_Starting, Protocol):
    @property
    def client(self) -> Client: ...


def _several_keys(limiter: _Starting, policies: Sequence[Policy] | None) -> tuple[str, ...]:
    """SPEC U3: the first set of policies this limiter sends several keys of in one
    call (the adapters' sets, then ``policies``), when it has no tag function."""
    if limiter.hash_tag is not None:
        return ()
    sets: list[Iterable[Policy]] = list(limiter.policy_sets)
    if policies is not None:
        sets.append(policies)
    for found in sets:
        names = several_keys(found)
        if names:
            return names
    return ()


def _on_cluster(limiter: _Starting, names: tuple[str, ...], hello: Any) -> None:
    if mode_of(hello) == "cluster":
        raise StartupError(cluster_refusal(limiter.name, names))


def _backend(limiter: _Starting) -> Backend:
    """SPEC E1: one backend per client and setting (a second limiter on the client reuses
    the choice)."""
    client = limiter.client
    b = client.backend
    if b is None or b.setting != limiter.backend or b.server != client.server:
        b = Backend(limiter.backend, client.server, limiter.wall)
        client.use_backend(b)
    return b


def _failed(limiter: _Starting, exc: BaseException) -> None:
    """SPEC U1, U2: the one line of a start that cannot reach Redis, or is not allowed
    to ask it; with ``start_degraded`` an unreachable Redis is one logged line."""
    server = limiter.client.server
    if isinstance(exc, StartupError):
        raise exc
    if isinstance(exc, redis.exceptions.NoPermissionError) or "NOPERM" in str(exc):
        raise StartupError(
            f"redis-tb: user cannot run COMMAND INFO on {server}: grant +command|info "
            "(see docs/operations.md)"
        ) from None
    if not isinstance(exc, _CONNECTION_ERRORS):
        raise exc
    reason = "no answer" if isinstance(exc, (asyncio.TimeoutError, TimeoutError)) else (str(exc) or type(exc).__name__)
    reason = " ".join(reason.split())  # one line (U4)
    if not limiter.start_degraded:
        raise StartupError(
            f"redis-tb: cannot reach Redis at {server} ({reason}): start it, or set "
            "start_degraded to start failing open"
        ) from None
    limiter.log.warning(
        "redis-tb: Redis at %s unreachable at startup; starting degraded "
        "(the limiter's failure mode applies until it answers)",
        server,
    )


async def start(limiter: _AsyncStarting, policies: Sequence[Policy] | None = None) -> None:
    """SPEC U1-U3, E1 on the asyncio path (:meth:`RateLimiter.startup`)."""
    client = limiter.client
    bound = max(limiter.timeout, 1.0)  # a loaded machine's slow first reply is not "unreachable"
    backend = _backend(limiter)
    try:
        if backend.chosen is None:  # COMMAND INFO, and the library's load (E2) and TIME (E5)
            await asyncio.wait_for(client.choose(backend), 2 * bound)
        names = _several_keys(limiter, policies)
        if names:
            try:
                hello = await asyncio.wait_for(client.command("HELLO"), bound)
            except redis.exceptions.ResponseError:
                hello = None  # an error reply passes (U3)
            _on_cluster(limiter, names, hello)
    except _STARTUP_ERRORS as exc:
        _failed(limiter, exc)
    backend.on_chosen(limiter.on_backend)  # E6: now, or at a degraded start's first call


def start_sync(limiter: _SyncStarting, policies: Sequence[Policy] | None = None) -> None:
    """SPEC U1-U3, E1 on the synchronous path (:meth:`SyncRateLimiter.startup`); the
    client's socket timeout bounds each call."""
    client = limiter.client
    backend = _backend(limiter)
    try:
        if backend.chosen is None:
            client.choose(backend)
        names = _several_keys(limiter, policies)
        if names:
            try:
                hello = client.command("HELLO")
            except redis.exceptions.ResponseError:
                hello = None  # an error reply passes (U3)
            _on_cluster(limiter, names, hello)
    except _STARTUP_ERRORS as exc:
        _failed(limiter, exc)
    backend.on_chosen(limiter.on_backend)
