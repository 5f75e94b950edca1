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

import time
from typing import Any, cast

import redis

try:
    from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
    from limits.storage.base import TimestampedSlidingWindow
except ImportError as exc:  # pragma: no cover - the extra is not installed
    raise ImportError(
        "redis_tb.limits needs the limits library: install redis_tb with its limits extra "
        "(pip install './clients/python[limits]' from a checkout, or the wheel of dist/ with [limits])"
    ) from exc

# re-exported: they were this module's before limits_common.py held them
from .client import Client
from .limits_common import (
    PREFIX as PREFIX,
    SLIDING_FIELDS as SLIDING_FIELDS,
    StorageBasics as StorageBasics,
    allowed_from_reply as allowed_from_reply,
    glob_escape as glob_escape,
    log_cutoff as log_cutoff,
    module_loaded as module_loaded,
    moving_window_from_replies as moving_window_from_replies,
    prefixed as prefixed,
    raise_not_a_counter as raise_not_a_counter,
    redis_url as redis_url,
    reset_scan_pattern as reset_scan_pattern,
    sliding_window_from_hash as sliding_window_from_hash,
    window_args as window_args,
)

__all__ = [
    "PREFIX",
    "RedisTBStorage",
    "window_args",
    "moving_window_from_replies",
    "sliding_window_from_hash",
]

# limits' schemes -> the redis-py URL scheme they stand for
SYNC_SCHEMES = {"redis+tb": "redis", "rediss+tb": "rediss", "redis+tb+unix": "unix"}


class RedisTBStorage(StorageBasics, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow):
    """``limits`` storage on redis-tb's TB.WINDOW (``redis+tb://``, ``rediss+tb://``,
    ``redis+tb+unix://``).

    :param uri: ``redis+tb://[[user]:password@]host:port[/db][?options]``: everything
     after the scheme goes to :func:`redis.Redis.from_url` (``db``, ``password``,
     ``socket_timeout``, ``ssl_cert_reqs``, ... as query options).
    :param connection_pool: a :class:`redis.ConnectionPool` to use instead of the URL's.
    :param key_prefix: prefix of every key (``LIMITS_TB``).
    :param wrap_exceptions: wrap Redis errors in :exc:`limits.errors.StorageError`.
    :param backend: the store's backend (SPEC E1): ``auto`` (the module where ``COMMAND
     INFO tb.take`` finds it, else the script library of clients/lua, chosen at the first
     call), ``module`` or ``scripts``.
    :param options: passed to :class:`redis.Redis` (``max_connections``, timeouts, ...).
    """

    STORAGE_SCHEME = list(SYNC_SCHEMES)

    def __init__(
        self,
        uri: str,
        connection_pool: redis.ConnectionPool | None = None,
        key_prefix: str = PREFIX,
        wrap_exceptions: bool = False,
        backend: str = "auto",
        **options: Any,
    ) -> None:
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.key_prefix = key_prefix
        self.storage: redis.Redis
        if connection_pool is not None:
            self.storage = redis.Redis(connection_pool=connection_pool, **options)
        else:
            self.storage = redis.Redis.from_url(redis_url(uri, SYNC_SCHEMES), **options)
        self._use_backend(Client(self.storage), backend)  # SPEC E1

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
        """True when the server answers TB.WINDOW (the module, or the scripts: SPEC E)."""
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
        if cast(Client, self._tb)._scripts() is not None:  # SPEC E3 retries a call alone: no pipeline
            reply = self._cmd.execute_command(*window_args(name, limit, expiry, 0, now, "LOG"))
            oldest = self.storage.zrangebyscore(name, log_cutoff(now, expiry), "+inf", start=0, num=1, withscores=True)
            return moving_window_from_replies(reply, oldest, limit, now)
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
