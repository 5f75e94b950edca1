"""Typed clients for the module's commands: :class:`TbClient` over ``redis.asyncio``
and its synchronous twin :class:`SyncTbClient` over ``redis``.

Both wrap a connection you own (``redis.asyncio.Redis`` / ``redis.Redis``). Use
:meth:`TbClient.from_url` for one set up the way a request path wants it:
tight timeouts and no retries (a TB.TAKE retried after a timeout may be charged
twice, and retries pile load on a Redis that is already struggling).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Sequence, TypeVar, cast

import redis
import redis.asyncio
import redis.exceptions
from redis.backoff import NoBackoff

from .backend import Backend, Chosen, Steps, module_found
from .commands import AsyncCommands, SyncCommands
from .errors import BackendUnavailable, ModuleNotLoadedError, StartupError
from .replies import (
    Charge,
    IncompleteReply,
    MultiReply,
    Reservation,
    RespError,
    Reply,
    UnexpectedReplyError,
    mtake_args,
    packed,
    parse_multi_reply,
    parse_reply,
    parse_reservation,
    peek_args,
    refund_args,
    read_resp,
    reserve_args,
    take_args,
)

__all__ = ["AsyncClient", "Client", "ModuleNotLoadedError", "StartupError", "SyncTbClient", "TbClient", "DEFAULT_TIMEOUT"]

#: Connect and per-call timeout, seconds, of connections made by ``from_url``.
DEFAULT_TIMEOUT = 0.05

_PROBE = ("COMMAND", "INFO", "tb.take")  # SPEC U1

T = TypeVar("T")


async def run_steps(steps: Steps[T], send: Callable[[list[Any], bool], Awaitable[Any]]) -> T:
    """SPEC E: a backend's steps (:mod:`redis_tb.backend`) over ``send``: each command's
    reply is sent back in, an error reply thrown in; anything else ends them."""
    try:
        step = next(steps)
        while True:
            try:
                got = await send(*step)
            except redis.exceptions.ResponseError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(got)
    except StopIteration as stop:
        return cast(T, stop.value)


def run_steps_sync(steps: Steps[T], send: Callable[[list[Any], bool], Any]) -> T:
    """:func:`run_steps`, blocking."""
    try:
        step = next(steps)
        while True:
            try:
                got = send(*step)
            except redis.exceptions.ResponseError as exc:
                step = steps.throw(exc)
            else:
                step = steps.send(got)
    except StopIteration as stop:
        return cast(T, stop.value)


def _unpacked(command: bytes) -> list[Any]:
    """A pre-encoded command's arguments (bytes), for the scripts' translation (SPEC E2)."""
    args = read_resp(command)
    if not isinstance(args, list):
        raise UnexpectedReplyError("not a command")
    return args


def _unavailable(exc: StartupError) -> BackendUnavailable:
    """SPEC E1: a degraded start's choice that failed on a call: a store error."""
    error = BackendUnavailable(str(exc))
    error.__cause__ = exc
    return error


def describe_server(kwargs: dict[str, Any]) -> str:
    """host:port (or the socket path) of a connection pool's settings, for messages."""
    if kwargs.get("path"):
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def _repack(value: Any) -> bytes:
    """A reply redis-py parsed, written back as RESP (the rare fallback path only)."""
    if isinstance(value, list):
        return b"*%d\r\n" % len(value) + b"".join(_repack(v) for v in value)
    if isinstance(value, bool):
        return b":1\r\n" if value else b":0\r\n"
    if isinstance(value, int):
        return b":%d\r\n" % value
    if isinstance(value, float):
        return b",%s\r\n" % repr(value).encode()
    if isinstance(value, str):
        value = value.encode()
    if isinstance(value, bytes):
        return b"$%d\r\n%s\r\n" % (len(value), value)
    if value is None:
        return b"_\r\n"
    raise UnexpectedReplyError(f"unexpected value in a reply: {value!r}")


async def _reconnected(conn: Any) -> None:
    """``conn`` connected afresh (what redis-py's pool checks on checkout, which the
    request path's kept connections skip)."""
    if conn._writer is not None:
        await conn.disconnect(nowait=True)
    await conn.connect()


def _error(conn: Any, message: str) -> BaseException:
    """An error reply as redis-py's own exception class for it."""
    parser = getattr(conn, "_parser", None)
    parse_error = getattr(parser, "parse_error", None)
    if parse_error is not None:
        return cast(BaseException, parse_error(message))
    return redis.exceptions.ResponseError(message.removeprefix("ERR "))


class TbClient(AsyncCommands):
    """The module's twelve commands over ``redis.asyncio`` (SPEC "Names": ``TbClient``;
    ``AsyncClient`` is its earlier name); every method is one round trip."""

    #: SPEC E: the backend TB.* calls go through; None (the module's commands as they
    #: are) until a limiter's startup chooses one, or :meth:`use_backend` sets it
    backend: Backend | None = None

    def __init__(self, redis_client: redis.asyncio.Redis) -> None:
        self.redis = redis_client
        # Connections the request path keeps for itself (taken from redis-py's pool
        # once, given back by aclose): no pool lock, health probe or callbacks per call.
        self._idle: list[Any] = []
        self._raw = True

    async def call_packed(self, packed: bytes, read: Callable[[bytes], Any] = read_resp) -> Any:
        """Send one pre-encoded command and read its one reply: ``read(bytes)`` parses it
        (default :func:`read_resp`: lists, ints, floats, bytes) and raises
        :class:`IncompleteReply` until all of it is there. The limiter's hot path.

        An error reply raises redis-py's exception for it; a broken or cancelled
        exchange (timeout) disconnects the connection, which reconnects on next use.
        """
        if not self._raw:
            return await self._call_packed_slow(packed, read)
        idle = self._idle
        if idle:
            conn = idle.pop()
        else:
            pool: Any = self.redis.connection_pool
            conn = await pool.get_connection()
            if not (hasattr(conn, "_writer") and hasattr(conn, "_reader")):
                # A connection class without asyncio streams: redis-py's own path from now on.
                self._raw = False
                await pool.release(conn)
                return await self._call_packed_slow(packed, read)
        try:
            writer = conn._writer
            reader = conn._reader
            if writer is None or reader.at_eof():
                # never connected, or closed by the server while it sat idle (a restart, a
                # failover, a client timeout): a fresh connection before anything is sent,
                # so nothing can be charged twice and no call fails on a dead socket
                await _reconnected(conn)
                writer, reader = conn._writer, conn._reader
            writer.write(packed)
            data = await reader.read(65536)
            while True:
                if not data:
                    raise redis.exceptions.ConnectionError("Connection closed by server.")
                try:
                    value = read(data)
                    break
                except IncompleteReply:
                    more = await reader.read(65536)
                    if not more:
                        raise redis.exceptions.ConnectionError("Connection closed by server.") from None
                    data += more
        except BaseException:
            await conn.disconnect(nowait=True)
            idle.append(conn)
            raise
        idle.append(conn)
        if type(value) is RespError:
            raise _error(conn, value)
        return value

    async def _call_packed_slow(self, packed: bytes, read: Callable[[bytes], Any]) -> Any:
        pool: Any = self.redis.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_packed_command([packed])
            value = await conn.read_response()
            if read is not read_resp:  # redis-py parsed it: the reader wants bytes
                value = read(_repack(value))
            return value
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    def use_backend(self, backend: Backend) -> None:
        """SPEC E: send the TB.* calls through ``backend`` (chosen, or chosen before the first call)."""
        self.backend = backend

    async def choose(self, backend: Backend) -> Chosen:
        """SPEC E1: the choice's calls (a start's, or a degraded start's first call's)."""
        return backend.choose(await run_steps(backend.choose_steps(), lambda args, tb: self.command(*args)))

    async def _scripts(self) -> Backend | None:
        """The backend when it is the scripts (chosen now if a degraded start has not yet)."""
        b = self.backend
        if b is None:
            return None
        chosen = b.chosen
        if chosen is None:
            try:
                chosen = await self.choose(b)
            except StartupError as exc:
                raise _unavailable(exc) from exc
        return b if chosen.name == "scripts" else None

    async def call_tb(self, command: bytes, read: Callable[[bytes], Any] = read_resp) -> Any:
        """One pre-encoded TB.* command through the backend (SPEC E): as it is to the
        module, translated to the scripts (E2-E5); read as :meth:`call_packed` reads."""
        b = self.backend
        if b is None or (b.chosen is not None and b.chosen.name == "module"):
            return await self.call_packed(command, read)
        scripts = await self._scripts()
        if scripts is None:
            return await self.call_packed(command, read)
        return await run_steps(
            scripts.call_steps(_unpacked(command)), lambda args, tb: self.call_packed(packed(*args), read if tb else read_resp)
        )

    async def _call(self, args: list[Any]) -> Any:
        # redis-py's execute_command is untyped; the reply is parsed right after.
        if self.backend is not None:
            scripts = await self._scripts()
            if scripts is not None:
                return await run_steps(scripts.call_steps(args), lambda a, tb: self.command(*a))
        return await cast(Any, self.redis).execute_command(*args)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> TbClient:
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

    async def mtake(self, buckets: Sequence[Charge], *, now: float | None = None) -> MultiReply:
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
    ) -> Reservation:
        args = reserve_args(key, capacity, rate, n, max_wait, now)
        return parse_reservation(await self._call(args))

    async def peek(
        self, key: str, capacity: float, rate: float, *, now: float | None = None
    ) -> Reply:
        return parse_reply(await self._call(peek_args(key, capacity, rate, now)))

    async def refund(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        args = refund_args(key, capacity, rate, n, now)
        return parse_reply(await self._call(args))

    async def refund_many(self, buckets: Sequence[Charge], *, now: float | None = None) -> list[Reply]:
        """TB.REFUND on each bucket, pipelined in one round trip (no transaction); through
        the scripts, one call each, sent together (SPEC E3 retries each alone)."""
        if self.backend is not None and await self._scripts() is not None:
            calls = [self._call(refund_args(b.key, b.capacity, b.rate, b.n, now)) for b in buckets]
            return [parse_reply(r) for r in await asyncio.gather(*calls)]
        pipe = self.redis.pipeline(transaction=False)
        for b in buckets:
            pipe.execute_command(*refund_args(b.key, b.capacity, b.rate, b.n, now))
        return [parse_reply(r) for r in await pipe.execute()]

    async def command(self, *args: Any) -> Any:
        """One command's raw reply, without redis-py's reply callbacks (startup's
        COMMAND INFO, whose nil entry for an unknown command they refuse, and HELLO).
        An error reply raises redis-py's exception for it."""
        pool: Any = self.redis.connection_pool
        conn = await pool.get_connection()
        try:
            await conn.send_command(*args)
            return await conn.read_response()
        except BaseException as exc:
            if not isinstance(exc, redis.exceptions.ResponseError):
                await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def check_module(self) -> None:
        """Raise :class:`ModuleNotLoadedError` unless TB.TAKE exists on the server
        (SPEC U1: COMMAND INFO tb.take)."""
        if not module_found(await self.command(*_PROBE)):
            raise ModuleNotLoadedError(self.server)

    async def aclose(self) -> None:
        pool: Any = self.redis.connection_pool
        while self._idle:
            await pool.release(self._idle.pop())
        await self.redis.aclose()


class SyncTbClient(SyncCommands):
    """The synchronous twin of :class:`TbClient` (scripts, workers, cron jobs); ``Client``
    is its earlier name."""

    #: SPEC E: :attr:`TbClient.backend`
    backend: Backend | None = None

    def __init__(self, redis_client: redis.Redis) -> None:
        self.redis = redis_client

    def use_backend(self, backend: Backend) -> None:
        """:meth:`TbClient.use_backend`."""
        self.backend = backend

    def choose(self, backend: Backend) -> Chosen:
        """:meth:`TbClient.choose`, blocking."""
        return backend.choose(run_steps_sync(backend.choose_steps(), lambda args, tb: self.command(*args)))

    def _scripts(self) -> Backend | None:
        b = self.backend
        if b is None:
            return None
        chosen = b.chosen
        if chosen is None:
            try:
                chosen = self.choose(b)
            except StartupError as exc:
                raise _unavailable(exc) from exc
        return b if chosen.name == "scripts" else None

    def call_tb(self, command: bytes) -> Any:
        """:meth:`TbClient.call_tb`, blocking (redis-py reads the reply)."""
        b = self.backend
        if b is None or (b.chosen is not None and b.chosen.name == "module"):
            return self.call_packed(command)
        scripts = self._scripts()
        if scripts is None:
            return self.call_packed(command)
        return run_steps_sync(scripts.call_steps(_unpacked(command)), lambda args, tb: self.call_packed(packed(*args)))

    def _call(self, args: list[Any]) -> Any:
        if self.backend is not None:
            scripts = self._scripts()
            if scripts is not None:
                return run_steps_sync(scripts.call_steps(args), lambda a, tb: self.command(*a))
        return cast(Any, self.redis).execute_command(*args)

    def call_packed(self, packed: bytes) -> Any:
        """Send one pre-encoded command and read its reply (redis-py's parser)."""
        pool: Any = self.redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command([packed])
            return conn.read_response()
        except BaseException as exc:
            if not isinstance(exc, redis.exceptions.ResponseError):
                conn.disconnect()
            raise
        finally:
            pool.release(conn)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> SyncTbClient:
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

    def mtake(self, buckets: Sequence[Charge], *, now: float | None = None) -> MultiReply:
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
    ) -> Reservation:
        return parse_reservation(self._call(reserve_args(key, capacity, rate, n, max_wait, now)))

    def peek(self, key: str, capacity: float, rate: float, *, now: float | None = None) -> Reply:
        return parse_reply(self._call(peek_args(key, capacity, rate, now)))

    def refund(
        self, key: str, capacity: float, rate: float, n: float = 1, *, now: float | None = None
    ) -> Reply:
        return parse_reply(self._call(refund_args(key, capacity, rate, n, now)))

    def refund_many(self, buckets: Sequence[Charge], *, now: float | None = None) -> list[Reply]:
        if self.backend is not None and self._scripts() is not None:
            return [parse_reply(self._call(refund_args(b.key, b.capacity, b.rate, b.n, now))) for b in buckets]
        pipe: Any = self.redis.pipeline(transaction=False)
        for b in buckets:
            pipe.execute_command(*refund_args(b.key, b.capacity, b.rate, b.n, now))
        return [parse_reply(r) for r in pipe.execute()]

    def command(self, *args: Any) -> Any:
        """:meth:`TbClient.command`, blocking."""
        pool: Any = self.redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_command(*args)
            return conn.read_response()
        except BaseException as exc:
            if not isinstance(exc, redis.exceptions.ResponseError):
                conn.disconnect()
            raise
        finally:
            pool.release(conn)

    def check_module(self) -> None:
        if not module_found(self.command(*_PROBE)):
            raise ModuleNotLoadedError(self.server)

    def close(self) -> None:
        self.redis.close()


#: the earlier names of :class:`TbClient` and :class:`SyncTbClient`, kept
AsyncClient = TbClient
Client = SyncTbClient
