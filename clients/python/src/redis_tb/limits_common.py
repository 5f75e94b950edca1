"""What the :pypi:`limits` storages of redis-tb share, sync and asyncio alike
(:mod:`redis_tb.limits`, :mod:`redis_tb.limits_async`): the key prefix, the URL
schemes, TB.WINDOW's arguments and the reading of its replies, and
:class:`StorageBasics`. Both storages import it; it imports neither."""

from __future__ import annotations

import math
import time
from typing import Any, NoReturn, Sequence

import redis

try:
    from limits.errors import ConfigurationError
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "redis_tb.limits needs the limits library: install redis_tb with its limits extra "
        "(pip install './clients/python[limits]' from a checkout, or the wheel of dist/ with [limits])"
    ) from exc

from .backend import Backend, backend_setting  # noqa: E402
from .client import AsyncClient, Client  # noqa: E402

PREFIX = "LIMITS_TB"
"""The default key prefix (``limits``' own Redis storage uses ``LIMITS``)."""


SLIDING_FIELDS = ("start", "counts", "count", "previous")


def redis_url(uri: str, schemes: dict[str, str]) -> str:
    """``redis+tb://host:port/0`` -> ``redis://host:port/0`` (the rest as given)."""
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme not in schemes:
        raise ConfigurationError(f"not a redis-tb storage uri: {uri!r} (schemes: {sorted(schemes)})")
    return f"{schemes[scheme]}://{rest}"


def prefixed(prefix: str, key: str) -> str:
    return f"{prefix}:{key}"


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def window_args(key: str, limit: int, expiry: int, n: int, now: float, mode: str) -> list[Any]:
    """``TB.WINDOW key limit window n now MODE`` as an argument list."""
    return ["TB.WINDOW", key, limit, expiry, n, repr(now), mode]


def _num(value: Any) -> float:
    if isinstance(value, bytes):
        value = value.decode("ascii")
    out = float(value)
    if math.isnan(out):
        raise redis.exceptions.ResponseError(f"NaN in a TB.WINDOW reply: {value!r}")
    return out


def allowed_from_reply(reply: Any) -> bool:
    """First element of ``[allowed, remaining, retry_after, reset_after]``."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 4:
        raise redis.exceptions.ResponseError(f"expected a 4-element TB.WINDOW reply, got {reply!r}")
    return _num(reply[0]) == 1


def moving_window_from_replies(
    reply: Any, oldest: Any, limit: int, now: float
) -> tuple[float, int]:
    """``get_moving_window``'s ``(start, count)`` from ``TB.WINDOW ... 0 now LOG`` and
    ``ZRANGEBYSCORE key (cutoff +inf WITHSCORES LIMIT 0 1`` (scores in microseconds).

    ``count`` is ``limit - remaining`` of the module's reply; ``start`` the oldest entry
    in the window, or ``now`` when the window is empty (what ``limits`` answers then).
    """
    if not isinstance(reply, (list, tuple)) or len(reply) != 4:
        raise redis.exceptions.ResponseError(f"expected a 4-element TB.WINDOW reply, got {reply!r}")
    count = max(0, limit - int(_num(reply[1])))
    if count == 0:
        return now, 0
    if oldest:
        return _num(oldest[0][1]) / 1e6, count
    # written between the two reads (the pipeline is not a transaction): the entries the
    # module counted are as old as now at the oldest
    return now, count


def sliding_window_from_hash(
    values: Sequence[Any], expiry: int, now: float
) -> tuple[int, float, int, float]:
    """``get_sliding_window``'s ``(previous, previous_ttl, current, current_ttl)`` from
    the module's SLIDING hash (HMGET ``start counts count previous``).

    The module's windows are aligned to multiples of ``expiry`` since the epoch; the TTLs
    are what ``limits``' timestamp-keyed storages answer: the previous count weighs
    ``previous_ttl / expiry``, the time left in the current window, and the current
    count lasts one window more.
    """
    start_raw, counts_raw, count_raw, previous_raw = values
    window_start = math.floor(now / expiry) * expiry
    left = window_start + expiry - now
    if start_raw is None:
        return 0, 0.0, 0, left + expiry
    start = _num(start_raw)
    if counts_raw is not None:
        text = counts_raw.decode("ascii") if isinstance(counts_raw, bytes) else str(counts_raw)
        parts = text.split()
        if len(parts) != 2:
            raise redis.exceptions.ResponseError(f"corrupt SLIDING counts: {text!r}")
        count, previous = _num(parts[0]), _num(parts[1])
    else:  # written by a module build before "counts"
        count = _num(count_raw) if count_raw is not None else 0.0
        previous = _num(previous_raw) if previous_raw is not None else 0.0
    if start >= window_start:
        # the stored window is the current one (or ahead of this clock: the module counts
        # in the stored window and weighs the previous one in full)
        left = max(0.0, min(float(expiry), start + expiry - now))
        cur, prev = count, previous
    elif start >= window_start - expiry:
        cur, prev = 0.0, count
    else:
        cur, prev = 0.0, 0.0
    prev_ttl = left if prev > 0 else 0.0
    return _whole(prev), prev_ttl, _whole(cur), left + expiry


def _whole(x: float) -> int:
    # limits speaks whole hits; the module stores what it was given (whole here)
    return int(math.ceil(x)) if x > 0 else 0


def log_cutoff(now: float, expiry: int) -> str:
    """Exclusive lower score bound of the LOG window ending at ``now`` (microseconds)."""
    return f"({round(now * 1e6) - round(expiry * 1e6)}"


def reset_scan_pattern(prefix: str) -> str:
    return glob_escape(prefix) + ":*"


def raise_not_a_counter(exc: redis.exceptions.ResponseError, key: str) -> NoReturn:
    """``get()`` reads the fixed window's counters; a moving or sliding window's key holds
    the module's sorted set or hash, which only TB.WINDOW (and ``get_*_window``) read."""
    if str(exc).startswith("WRONGTYPE"):
        raise redis.exceptions.ResponseError(
            f"{key!r} holds a TB.WINDOW moving or sliding window, not a fixed-window counter:"
            " read it with get_moving_window() or get_sliding_window()"
        ) from exc
    raise exc


def module_loaded(reply: Any) -> bool:
    """A TB.WINDOW reply (the module is loaded and answers)."""
    try:
        allowed_from_reply(reply)
    except (redis.exceptions.ResponseError, ValueError):
        return False
    return True


class StorageBasics:
    """What the sync and the asyncio storage share whatever their client: the errors
    ``limits`` wraps, the key prefix, the module check's command, the untyped command
    handle. Listed before ``limits``' ``Storage`` base so that it provides
    ``base_exceptions``."""

    key_prefix: str
    storage: Any  # redis.Redis or redis.asyncio.Redis

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return redis.exceptions.RedisError

    def _key(self, key: str) -> str:
        return prefixed(self.key_prefix, key)

    def _check_args(self) -> list[Any]:
        # n = 0 reads and writes nothing: an answer means the server is up with TB.WINDOW
        return window_args(self._key("redis-tb:check"), 1, 1, 0, time.time(), "SLIDING")

    #: SPEC E: the typed client over ``storage`` whose backend TB.WINDOW goes through
    #: (the module, or the script library of clients/lua; ``backend=`` of the storage)
    _tb: Client | AsyncClient

    def _use_backend(self, client: Client | AsyncClient, setting: str) -> None:
        """SPEC E1: ``setting`` (auto|module|scripts, a ConfigurationError otherwise),
        chosen at the first call (``auto``: by ``COMMAND INFO tb.take``)."""
        try:
            chosen = backend_setting(setting)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        client.use_backend(Backend(chosen, client.server))
        self._tb = client

    @property
    def _cmd(self) -> Any:
        # TB.WINDOW through the backend (redis-py's replies as they were: untyped, every
        # one checked where it is read)
        return _Commands(self._tb)


class _Commands:
    """``execute_command`` of a TB.* call through the client's backend (SPEC E)."""

    __slots__ = ("_client",)

    def __init__(self, client: Client | AsyncClient) -> None:
        self._client = client

    def execute_command(self, *args: Any) -> Any:
        return self._client._call(list(args))
