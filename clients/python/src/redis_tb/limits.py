"""Storages for the :pypi:`limits` library (and so flask-limiter and slowapi) on redis-tb.

Importing this module registers the storage schemes with ``limits``' registry (its
:class:`limits.storage.Storage` metaclass registers every subclass that names a
``STORAGE_SCHEME``)::

    import redis_tb.limits  # noqa: F401  (registers redis+tb:// and async+redis+tb://)
    from limits.storage import storage_from_string

    storage = storage_from_string("redis+tb://localhost:6379/0")

Schemes (the URL after the scheme is the one :func:`redis.Redis.from_url` reads):

- ``redis+tb://[[user]:password@]host:port[/db][?options]`` (sync), ``rediss+tb://``
  (TLS), ``redis+tb+unix:///path/to.sock[?db=0]``;
- ``async+redis+tb://``, ``async+rediss+tb://``, ``async+redis+tb+unix://`` (asyncio,
  :mod:`redis.asyncio`; see :mod:`redis_tb.limits_async`).

What runs where:

- **moving window** -> ``TB.WINDOW key limit expiry cost now LOG`` (one call decides and
  records); :meth:`RedisTBStorage.get_moving_window` is ``TB.WINDOW ... 0 now LOG`` (reads,
  writes nothing: the count) pipelined with the oldest entry of the log (its start).
- **sliding window counter** -> ``TB.WINDOW key limit expiry cost now SLIDING``: windows
  aligned to multiples of ``expiry`` since the epoch (like ``limits``' in-memory and
  memcached storages, so the class is a :class:`~limits.storage.base.TimestampedSlidingWindow`);
  :meth:`RedisTBStorage.get_sliding_window` reads the module's hash (``start``,
  ``counts``) with one HMGET, because ``limits`` asks for the two counts without a limit.
- **fixed window** -> ``limits``' own counter (``INCRBY`` and ``EXPIRE NX`` in one
  MULTI): ``limits`` defines a fixed window as starting at the first hit and counting
  every hit, refused ones included (``incr`` carries no limit); TB.WINDOW FIXED aligns
  windows to the epoch and counts admitted hits only, which is another strategy.

Keys are ``<key_prefix>:<limits key>``, ``key_prefix`` ``LIMITS_TB`` by default, so keys
of ``limits``' own Redis storage (``LIMITS:``, lists and strings) never meet the module's
hashes and sorted sets under one name.
"""

from __future__ import annotations

import math
import time
from typing import Any, NoReturn, Sequence, cast

import redis

try:
    from limits.errors import ConfigurationError
    from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
    from limits.storage.base import TimestampedSlidingWindow
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "redis_tb.limits needs the limits library: install redis_tb with its limits extra "
        "(pip install './clients/python[limits]' from a checkout, or the wheel of dist/ with [limits])"
    ) from exc

__all__ = [
    "PREFIX",
    "RedisTBStorage",
    "window_args",
    "moving_window_from_replies",
    "sliding_window_from_hash",
]

PREFIX = "LIMITS_TB"
"""The default key prefix (``limits``' own Redis storage uses ``LIMITS``)."""

# limits' schemes -> the redis-py URL scheme they stand for
SYNC_SCHEMES = {"redis+tb": "redis", "rediss+tb": "rediss", "redis+tb+unix": "unix"}

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

    @property
    def _cmd(self) -> Any:
        # redis-py's execute_command is untyped; every reply is checked where it is read
        return self.storage


class RedisTBStorage(StorageBasics, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """``limits`` storage on redis-tb's TB.WINDOW (``redis+tb://``, ``rediss+tb://``,
    ``redis+tb+unix://``).

    :param uri: ``redis+tb://[[user]:password@]host:port[/db][?options]``: everything
     after the scheme goes to :func:`redis.Redis.from_url` (``db``, ``password``,
     ``socket_timeout``, ``ssl_cert_reqs``, ... as query options).
    :param connection_pool: a :class:`redis.ConnectionPool` to use instead of the URL's.
    :param key_prefix: prefix of every key (``LIMITS_TB``).
    :param wrap_exceptions: wrap Redis errors in :exc:`limits.errors.StorageError`.
    :param options: passed to :class:`redis.Redis` (``max_connections``, timeouts, ...).
    """

    STORAGE_SCHEME = list(SYNC_SCHEMES)

    def __init__(
        self,
        uri: str,
        connection_pool: redis.ConnectionPool | None = None,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.key_prefix = key_prefix
        self.storage: redis.Redis
        if connection_pool is not None:
            self.storage = redis.Redis(connection_pool=connection_pool, **options)
        else:
            self.storage = redis.Redis.from_url(redis_url(uri, SYNC_SCHEMES), **options)

    # fixed window: limits' own counter semantics

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the counter; a new counter expires ``expiry`` seconds after
        its first hit (``limits``' fixed window)."""
        pipe = self.storage.pipeline(transaction=True)
        pipe.incrby(self._key(key), amount)
        cast(Any, pipe).execute_command("EXPIRE", self._key(key), expiry, "NX")
        count, _ = pipe.execute()
        return int(count)

    def get(self, key: str) -> int:
        try:
            return int(self.storage.get(self._key(key)) or 0)
        except redis.exceptions.ResponseError as exc:
            raise_not_a_counter(exc, key)

    def get_expiry(self, key: str) -> float:
        ms = int(self.storage.pttl(self._key(key)))
        return max(ms, 0) / 1000 + time.time()

    def check(self) -> bool:
        """True when the server answers and has TB.WINDOW (the module is loaded)."""
        try:
            return module_loaded(self._cmd.execute_command(*self._check_args()))
        except Exception:  # noqa: BLE001 (limits: "check if storage is healthy")
            return False

    def reset(self) -> int | None:
        """Delete every key under ``key_prefix`` (SCAN and UNLINK); the number deleted."""
        deleted = 0
        batch: list[Any] = []
        for name in self.storage.scan_iter(match=reset_scan_pattern(self.key_prefix), count=1000):
            batch.append(name)
            if len(batch) >= 1000:
                deleted += int(self.storage.unlink(*batch))
                batch = []
        if batch:
            deleted += int(self.storage.unlink(*batch))
        return deleted

    def clear(self, key: str) -> None:
        self.storage.delete(self._key(key))

    # moving window: TB.WINDOW LOG

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        reply = self._cmd.execute_command(
            *window_args(self._key(key), limit, expiry, amount, time.time(), "LOG")
        )
        return allowed_from_reply(reply)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        now = time.time()
        name = self._key(key)
        pipe = self.storage.pipeline(transaction=False)
        cast(Any, pipe).execute_command(*window_args(name, limit, expiry, 0, now, "LOG"))
        pipe.zrangebyscore(name, log_cutoff(now, expiry), "+inf", start=0, num=1, withscores=True)
        reply, oldest = pipe.execute()
        return moving_window_from_replies(reply, oldest, limit, now)

    # sliding window counter: TB.WINDOW SLIDING

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        reply = self._cmd.execute_command(
            *window_args(self._key(key), limit, expiry, amount, time.time(), "SLIDING")
        )
        return allowed_from_reply(reply)

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        now = time.time()
        values = self.storage.hmget(self._key(key), list(SLIDING_FIELDS))
        return sliding_window_from_hash(values, expiry, now)

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.storage.delete(self._key(key))


# the asyncio storage registers its schemes too: importing this module is all it takes
from . import limits_async as limits_async  # noqa: E402
