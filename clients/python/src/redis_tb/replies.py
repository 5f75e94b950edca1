"""The module's replies as typed values, and the argument lists of its commands.

Every TB.* command answers ``[allowed, remaining, retry_after, reset_after]``
(TB.MTAKE adds one such array per key). Doubles arrive as bulk strings under
RESP2 and as floats under RESP3: both are read with ``float()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

__all__ = ["Bucket", "MultiReply", "Reply", "UnexpectedReplyError"]


class UnexpectedReplyError(ValueError):
    """The server answered something that is not a TB.* reply."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One bucket's answer.

    ``retry_after`` is 0 when allowed, -1 when the request can never be
    admitted (``n > capacity``), else the seconds after which the same request
    is admitted. For TB.RESERVE an allowed reply's ``retry_after`` is the wait
    before going ahead (see :attr:`wait`).
    """

    allowed: bool
    remaining: float
    retry_after: float
    reset_after: float

    @property
    def never(self) -> bool:
        """True when the request can never succeed (n > capacity)."""
        return self.retry_after < 0

    @property
    def wait(self) -> float:
        """TB.RESERVE: seconds to wait before proceeding (0 when refused or not needed)."""
        return self.retry_after if self.allowed else 0.0


@dataclass(frozen=True, slots=True)
class MultiReply:
    """TB.MTAKE's answer: the aggregate, then one :class:`Reply` per key in key order."""

    allowed: bool
    remaining: float
    retry_after: float
    reset_after: float
    keys: tuple[Reply, ...]

    @property
    def never(self) -> bool:
        return self.retry_after < 0


class Bucket(NamedTuple):
    """One key of a TB.MTAKE: the key, its shape and the tokens to take."""

    key: str
    capacity: float
    rate: float
    n: float = 1


def _num(value: Any) -> float:
    if isinstance(value, bytes):
        value = value.decode("ascii")
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a TB reply: {value!r}") from exc
    if math.isnan(out):
        raise UnexpectedReplyError(f"NaN in a TB reply: {value!r}")
    return out


def parse_reply(raw: Any) -> Reply:
    """Read a four-element TB.* reply."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 4:
        raise UnexpectedReplyError(f"expected a 4-element TB reply, got {raw!r}")
    return Reply(
        allowed=_num(raw[0]) == 1,
        remaining=_num(raw[1]),
        retry_after=_num(raw[2]),
        reset_after=_num(raw[3]),
    )


def parse_multi_reply(raw: Any, numkeys: int) -> MultiReply:
    """Read TB.MTAKE's five-element reply."""
    if not isinstance(raw, (list, tuple)) or len(raw) != 5:
        raise UnexpectedReplyError(f"expected a 5-element TB.MTAKE reply, got {raw!r}")
    per_key = raw[4]
    if not isinstance(per_key, (list, tuple)) or len(per_key) != numkeys:
        raise UnexpectedReplyError(f"expected {numkeys} per-key replies, got {per_key!r}")
    return MultiReply(
        allowed=_num(raw[0]) == 1,
        remaining=_num(raw[1]),
        retry_after=_num(raw[2]),
        reset_after=_num(raw[3]),
        keys=tuple(parse_reply(k) for k in per_key),
    )


def _now_args(now: float | None) -> list[float]:
    return [] if now is None else [now]


def take_args(key: str, capacity: float, rate: float, n: float, now: float | None) -> list[Any]:
    return ["TB.TAKE", key, capacity, rate, n, *_now_args(now)]


def mtake_args(buckets: Sequence[Bucket], now: float | None) -> list[Any]:
    if not buckets:
        raise ValueError("mtake needs at least one bucket")
    args: list[Any] = ["TB.MTAKE", len(buckets)]
    args.extend(b.key for b in buckets)
    for b in buckets:
        args.extend((b.capacity, b.rate, b.n))
    args.extend(_now_args(now))
    return args


def reserve_args(
    key: str, capacity: float, rate: float, n: float, max_wait: float, now: float | None
) -> list[Any]:
    return ["TB.RESERVE", key, capacity, rate, n, max_wait, *_now_args(now)]


def peek_args(key: str, capacity: float, rate: float, now: float | None) -> list[Any]:
    return ["TB.PEEK", key, capacity, rate, *_now_args(now)]


def refund_args(key: str, capacity: float, rate: float, n: float, now: float | None) -> list[Any]:
    return ["TB.REFUND", key, capacity, rate, n, *_now_args(now)]
