"""The typed replies and argument lists of TB.WINDOW, TB.THROTTLE, TB.ACQUIRE (with and
without TAKE), TB.RELEASE, TB.RENEW, TB.PEEK key LEASES / HOLDS, TB.HOLD and TB.SETTLE
(docs/commands.md), for :mod:`redis_tb.commands`. TB.WINDOW answers TB.TAKE's shape and
is read as a :class:`~redis_tb.replies.Reply`.

The readers reuse :mod:`redis_tb.replies`' (``acquire_values``, ``pair_values``,
``hold_values``, ``settle_values``): the limiter's request path and these typed calls
read the same bytes the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Sequence

from .replies import (
    Charge,
    MultiReply,
    UnexpectedReplyError,
    acquire_values,
    hold_values,
    pair_values,
    parse_multi_reply,
    settle_values,
)

__all__ = [
    "Acquired",
    "HoldReply",
    "HoldsPeek",
    "LeaseReply",
    "LeasesPeek",
    "SettleReply",
    "Throttle",
    "WindowMode",
]

#: TB.WINDOW's counting mode; ``None`` sends none (the module's default, SLIDING).
WindowMode = Literal["FIXED", "SLIDING", "LOG"]


@dataclass(frozen=True, slots=True)
class Throttle:
    """TB.THROTTLE's reply, redis-cell's ``CL.THROTTLE`` five integers in their order:
    ``[limited, limit, remaining, retry_after, reset_after]``."""

    limited: bool
    #: ``max_burst + 1``
    limit: int
    remaining: int
    #: -1 when allowed, else whole seconds until a retry is admitted
    retry_after: int
    #: whole seconds until the limit is whole again
    reset_after: int

    @property
    def allowed(self) -> bool:
        return not self.limited


@dataclass(frozen=True, slots=True)
class Acquired:
    """TB.ACQUIRE's reply: ``[granted, in_flight, lease id or nil, ms]``, and with TAKE
    the buckets' aggregate and one reply per bucket (``take``, ``None`` without TAKE)."""

    granted: bool
    #: live leases after the call (the new one included)
    in_flight: int
    #: the lease id (16 hex digits), ``None`` when refused
    id: str | None
    #: granted: ms until the lease expires; refused: ms until a slot frees (an upper
    #: bound), 0 when a bucket refused
    ms: int
    take: MultiReply | None = None


@dataclass(frozen=True, slots=True)
class LeaseReply:
    """TB.RELEASE ``[released, in_flight]`` (``ms`` 0) and TB.RENEW ``[renewed, count, ms]``."""

    ok: bool
    #: live leases (or, renewing a hold, holds) left
    in_flight: int
    #: TB.RENEW: ms left on the renewed lease or hold (0 when not held)
    ms: int = 0


@dataclass(frozen=True, slots=True)
class LeasesPeek:
    """TB.PEEK key LEASES: the live leases and the ms until the earliest expires (0 when none)."""

    in_flight: int
    ms: int


@dataclass(frozen=True, slots=True)
class HoldsPeek:
    """TB.PEEK key HOLDS: the live holds, the sum they charged, and the ms until the
    earliest expires (0 when none)."""

    holds: int
    amount: float
    ms: int


@dataclass(frozen=True, slots=True)
class HoldReply:
    """TB.HOLD: TB.TAKE's four fields and the hold id (``None`` when refused)."""

    allowed: bool
    remaining: float
    retry_after: float
    reset_after: float
    id: str | None


@dataclass(frozen=True, slots=True)
class SettleReply:
    """TB.SETTLE ``[settled, remaining, charged, reset_after]``: ``charged`` is what the
    settlement changed the bucket by (negative when tokens came back)."""

    settled: bool
    remaining: float
    charged: float
    reset_after: float


# -- readers ----------------------------------------------------------------------------


def _whole(value: Any, what: str) -> int:
    try:
        out = float(value.decode("ascii") if isinstance(value, bytes) else value)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise UnexpectedReplyError(f"not a number in a {what} reply: {value!r}") from exc
    if out != out or out != int(out):
        raise UnexpectedReplyError(f"not a whole number in a {what} reply: {value!r}")
    return int(out)


def parse_throttle(raw: Any) -> Throttle:
    if not isinstance(raw, (list, tuple)) or len(raw) != 5:
        raise UnexpectedReplyError(f"expected a 5-element TB.THROTTLE reply, got {raw!r}")
    limited, limit, remaining, retry_after, reset_after = (_whole(v, "TB.THROTTLE") for v in raw)
    return Throttle(limited == 1, limit, remaining, retry_after, reset_after)


def parse_acquire(raw: Any, numkeys: int) -> Acquired:
    granted, in_flight, lease_id, ms, _ = acquire_values(raw, numkeys)
    if granted and lease_id is None:
        raise UnexpectedReplyError("TB.ACQUIRE granted a lease without an id")
    take = parse_multi_reply([*raw[4], raw[5]], numkeys) if numkeys else None
    return Acquired(granted, in_flight, lease_id, ms, take)


def parse_release(raw: Any) -> LeaseReply:
    released, in_flight = pair_values(raw, "TB.RELEASE", 2)
    return LeaseReply(released == 1, in_flight)


def parse_renew(raw: Any) -> LeaseReply:
    renewed, in_flight, ms = pair_values(raw, "TB.RENEW", 3)
    return LeaseReply(renewed == 1, in_flight, ms)


def parse_peek_leases(raw: Any) -> LeasesPeek:
    in_flight, ms = pair_values(raw, "TB.PEEK LEASES", 2)
    return LeasesPeek(in_flight, ms)


def parse_peek_holds(raw: Any) -> HoldsPeek:
    if not isinstance(raw, list) or len(raw) != 3:
        raise UnexpectedReplyError(f"expected a 3-element TB.PEEK HOLDS reply, got {raw!r}")
    try:
        amount = float(raw[1])
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a TB.PEEK HOLDS reply: {raw!r}") from exc
    if amount != amount:
        raise UnexpectedReplyError(f"NaN in a TB.PEEK HOLDS reply: {raw!r}")
    return HoldsPeek(_whole(raw[0], "TB.PEEK HOLDS"), amount, _whole(raw[2], "TB.PEEK HOLDS"))


def parse_hold(raw: Any) -> HoldReply:
    allowed, remaining, retry_after, reset_after, hold_id = hold_values(raw)
    if allowed and hold_id is None:
        raise UnexpectedReplyError("TB.HOLD took a hold without an id")
    return HoldReply(allowed, remaining, retry_after, reset_after, hold_id if allowed else None)


def parse_settle(raw: Any) -> SettleReply:
    return SettleReply(*settle_values(raw))


# -- argument lists (numbers as redis-py writes them; the module checks them) ------------


def window_args(
    key: str, limit: float, window: float, n: float, now: float | None, mode: WindowMode | None
) -> list[Any]:
    args: list[Any] = ["TB.WINDOW", key, limit, window, n]
    if now is not None:
        args.append(now)
    if mode is not None:
        args.append(mode)
    return args


def throttle_args(
    key: str, max_burst: int, count_per_period: float, period: float, quantity: int
) -> list[Any]:
    return ["TB.THROTTLE", key, max_burst, count_per_period, period, quantity]


def acquire_args(key: str, limit: int, lease_ms: int, buckets: Sequence[Charge]) -> list[Any]:
    args: list[Any] = ["TB.ACQUIRE", key, limit, lease_ms]
    if buckets:
        args.extend(("TAKE", len(buckets)))
        args.extend(b.key for b in buckets)
        for b in buckets:
            args.extend((b.capacity, b.rate, b.n))
    return args


def hold_args(key: str, capacity: float, rate: float, estimate: float, ttl_ms: int) -> list[Any]:
    return ["TB.HOLD", key, capacity, rate, estimate, ttl_ms]


def settle_args(
    key: str, capacity: float, rate: float, hold_id: str, actual: float, max_wait: float | None
) -> list[Any]:
    args: list[Any] = ["TB.SETTLE", key, capacity, rate, hold_id, actual]
    if max_wait is not None:
        args.append(max_wait)
    return args
