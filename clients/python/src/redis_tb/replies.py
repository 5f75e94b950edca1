"""The module's replies as typed values, and the argument lists of its commands.

Every TB.* command answers ``[allowed, remaining, retry_after, reset_after]``
(TB.MTAKE adds one such array per key). Doubles arrive as bulk strings under
RESP2 and as floats under RESP3: both are read with ``float()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

__all__ = ["Bucket", "Charge", "IncompleteReply", "MultiReply", "Reply", "Reservation", "RespError", "UnexpectedReplyError", "read_resp"]


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
class Reservation(Reply):
    """TB.RESERVE's answer: a :class:`Reply` whose :attr:`wait` is the time to wait
    before going ahead (SPEC "Names": ``Reservation``)."""


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


class Charge(NamedTuple):
    """One key of an all-or-nothing call (TB.MTAKE, TB.ACQUIRE ... TAKE, refunds): the
    key, its shape and the tokens to take (SPEC "Names": ``Charge``)."""

    key: str
    capacity: float
    rate: float
    cost: float = 1

    @property
    def n(self) -> float:
        """The tokens to take: ``cost``, by the name the module's commands give it."""
        return self.cost


def Bucket(key: str, capacity: float, rate: float, n: float = 1) -> Charge:  # noqa: N802
    """The earlier name of :class:`Charge` (its ``n`` is ``cost``), kept."""
    return Charge(key, capacity, rate, n)


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


def parse_reservation(raw: Any) -> Reservation:
    """TB.RESERVE's four fields, as :class:`Reservation`."""
    r = parse_reply(raw)
    return Reservation(r.allowed, r.remaining, r.retry_after, r.reset_after)


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


def mtake_args(buckets: Sequence[Charge], now: float | None) -> list[Any]:
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


# -- the request path's own encoding and RESP reading ---------------------------------
# The limiter sends TB.MTAKE pre-encoded (the shapes of its policies are encoded once)
# and reads the reply with the reader below: one read for the whole reply instead of
# one await per line, no response callbacks. Both RESP2 (doubles as bulk strings) and
# RESP3 (doubles) are read.


class IncompleteReply(Exception):
    """The bytes so far end before the reply does: read more."""


def encode_arg(value: str | bytes | float) -> bytes:
    """One RESP bulk string, numbers written as redis-py writes them (``repr``)."""
    if isinstance(value, str):
        data = value.encode()
    elif isinstance(value, bytes):
        data = value
    else:
        data = repr(value).encode()
    return b"$%d\r\n%s\r\n" % (len(data), data)


def _walk(lines: list[bytes], i: int) -> tuple[Any, int]:
    line = lines[i]
    kind = line[:1]
    if kind == b"*":
        n = int(line[1:])
        i += 1
        if n < 0:
            return None, i
        out = []
        for _ in range(n):
            value, i = _walk(lines, i)
            out.append(value)
        return out, i
    if kind == b",":
        return float(line[1:]), i + 1
    if kind == b":":
        return int(line[1:]), i + 1
    if kind == b"$":
        n = int(line[1:])
        if n < 0:
            return None, i + 1
        payload = lines[i + 1]
        if len(payload) != n:
            raise UnexpectedReplyError("a bulk string with a line break in a TB reply")
        return payload, i + 2
    if kind == b"+":
        return line[1:], i + 1
    if kind == b"-":
        return RespError(line[1:].decode("utf-8", "replace")), i + 1
    if kind == b"_":
        return None, i + 1
    if kind == b"#":
        return line[1:] == b"t", i + 1
    raise UnexpectedReplyError(f"unexpected RESP type {line[:20]!r} in a TB reply")


class RespError(str):
    """An error reply (``-ERR ...``), as text."""


def read_resp(data: bytes) -> Any:
    """The one reply in ``data`` (raises :class:`IncompleteReply` when it is not all
    there yet, :class:`UnexpectedReplyError` for what a TB command never answers)."""
    if not data.endswith(b"\r\n"):
        raise IncompleteReply
    lines = data.split(b"\r\n")
    lines.pop()
    try:
        value, end = _walk(lines, 0)
    except IndexError:
        raise IncompleteReply from None
    except ValueError as exc:
        raise UnexpectedReplyError(f"malformed RESP in a TB reply: {exc}") from None
    if end != len(lines):
        raise UnexpectedReplyError("more than one reply where one was expected")
    return value


def mtake_values(raw: Any, numkeys: int) -> tuple[bool, list[tuple[bool, float, float, float]]]:
    """TB.MTAKE's reply (as redis-py or :func:`read_resp` returns it) as
    ``(allowed, [(allowed, remaining, retry_after, reset_after), ...])``."""
    if not isinstance(raw, list) or len(raw) != 5:
        raise UnexpectedReplyError(f"expected a 5-element TB.MTAKE reply, got {raw!r}")
    per_key = raw[4]
    if not isinstance(per_key, list) or len(per_key) != numkeys:
        raise UnexpectedReplyError(f"expected {numkeys} per-key replies, got {per_key!r}")
    try:
        out = [(float(k[0]) == 1, float(k[1]), float(k[2]), float(k[3])) for k in per_key if len(k) == 4]
        allowed = float(raw[0]) == 1
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a TB.MTAKE reply: {raw!r}") from exc
    if len(out) != numkeys:
        raise UnexpectedReplyError(f"expected 4 numbers per key in TB.MTAKE's reply, got {raw!r}")
    for k in out:
        if k[1] != k[1] or k[2] != k[2] or k[3] != k[3]:
            raise UnexpectedReplyError(f"NaN in a TB.MTAKE reply: {raw!r}")
    return allowed, out


def mtake_reader(numkeys: int) -> Callable[[bytes], Any]:
    """A reader of TB.MTAKE's reply for ``numkeys`` keys, straight from the bytes:
    ``(allowed, [(allowed, remaining, retry_after, reset_after), ...])``, or a
    :class:`RespError`. The usual shapes (RESP3 doubles, RESP2 bulk strings) are read
    by position after checking every type marker; anything else goes through
    :func:`read_resp` (which also says when the reply is incomplete)."""
    resp3_lines = 7 + 5 * numkeys  # with the empty string after the last CRLF
    resp2_lines = 10 + 8 * numkeys
    count = b"*%d" % numkeys

    def read(data: bytes) -> Any:
        lines = data.split(b"\r\n")
        n = len(lines)
        try:
            if n == resp3_lines and lines[0] == b"*5" and lines[5] == count and not lines[-1]:
                per_key = []
                for base in range(6, 6 + 5 * numkeys, 5):
                    head, a, rem, wait, reset = lines[base : base + 5]
                    if head != b"*4" or a[:1] != b":" or rem[:1] != b"," or wait[:1] != b"," or reset[:1] != b",":
                        raise UnexpectedReplyError
                    per_key.append((a == b":1", float(rem[1:]), float(wait[1:]), float(reset[1:])))
                if lines[1][:1] == b":":
                    return _checked(lines[1] == b":1", per_key)
            elif n == resp2_lines and lines[0] == b"*5" and lines[8] == count and not lines[-1]:
                per_key = []
                for base in range(9, 9 + 8 * numkeys, 8):
                    head, a, _, rem, _, wait, _, reset = lines[base : base + 8]
                    if head != b"*4" or a[:1] != b":" or lines[base + 2][:1] != b"$" or lines[base + 4][:1] != b"$" or lines[base + 6][:1] != b"$":
                        raise UnexpectedReplyError
                    per_key.append((a == b":1", float(rem), float(wait), float(reset)))
                if lines[1][:1] == b":":
                    return _checked(lines[1] == b":1", per_key)
        except (UnexpectedReplyError, ValueError):
            pass  # the general reader decides, and says what is wrong
        value = read_resp(data)
        if isinstance(value, RespError):
            return value
        return mtake_values(value, numkeys)

    return read


def _checked(
    allowed: bool, per_key: list[tuple[bool, float, float, float]]
) -> tuple[bool, list[tuple[bool, float, float, float]]]:
    for k in per_key:
        if k[1] != k[1] or k[2] != k[2] or k[3] != k[3]:
            raise UnexpectedReplyError(f"NaN in a TB.MTAKE reply: {per_key!r}")
    return allowed, per_key


def take_values(raw: Any) -> tuple[bool, list[tuple[bool, float, float, float]]]:
    """TB.TAKE's reply (as redis-py or :func:`read_resp` returns it) in the shape of
    :func:`mtake_values` for one key (SPEC L4: one policy is one TB.TAKE)."""
    if not isinstance(raw, list) or len(raw) != 4:
        raise UnexpectedReplyError(f"expected a 4-element TB.TAKE reply, got {raw!r}")
    try:
        one = (float(raw[0]) == 1, float(raw[1]), float(raw[2]), float(raw[3]))
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a TB.TAKE reply: {raw!r}") from exc
    return _checked(one[0], [one])


def take_reader(data: bytes) -> Any:
    """A reader of TB.TAKE's reply straight from the bytes (RESP3 doubles or RESP2
    bulk strings by position, anything else through :func:`read_resp`), giving
    :func:`take_values`' shape or a :class:`RespError`."""
    lines = data.split(b"\r\n")
    try:
        if len(lines) == 6 and lines[0] == b"*4" and not lines[5]:
            a, rem, wait, reset = lines[1:5]
            if a[:1] == b":" and rem[:1] == b"," and wait[:1] == b"," and reset[:1] == b",":
                return _checked(a == b":1", [(a == b":1", float(rem[1:]), float(wait[1:]), float(reset[1:]))])
        elif len(lines) == 9 and lines[0] == b"*4" and not lines[8]:
            a = lines[1]
            if a[:1] == b":" and lines[2][:1] == b"$" and lines[4][:1] == b"$" and lines[6][:1] == b"$":
                return _checked(a == b":1", [(a == b":1", float(lines[3]), float(lines[5]), float(lines[7]))])
    except ValueError:
        pass  # the general reader decides, and says what is wrong
    value = read_resp(data)
    if isinstance(value, RespError):
        return value
    return take_values(value)


# -- TB.ACQUIRE, TB.RELEASE, TB.RENEW, TB.HOLD, TB.SETTLE (SPEC N, G) -----------------


def _int_field(value: Any, what: str) -> int:
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a {what} reply: {value!r}") from exc
    if out != out:
        raise UnexpectedReplyError(f"NaN in a {what} reply")
    return int(out)


def _id_field(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise UnexpectedReplyError(f"not an id in a {what} reply: {value!r}")
    return value


class AcquireValues(NamedTuple):
    """TB.ACQUIRE's reply: the slot, then (with TAKE) the buckets in key order."""

    granted: bool
    in_flight: int
    id: str | None
    ms: int
    buckets: list[tuple[bool, float, float, float]]


def acquire_values(raw: Any, numkeys: int) -> AcquireValues:
    """``[granted, in_flight, id or nil, ms]``, with TAKE then TB.MTAKE's aggregate and
    per-bucket arrays (docs/commands.md, TB.ACQUIRE)."""
    want = 4 if numkeys == 0 else 6
    if not isinstance(raw, list) or len(raw) != want:
        raise UnexpectedReplyError(f"expected a {want}-element TB.ACQUIRE reply, got {raw!r}")
    buckets: list[tuple[bool, float, float, float]] = []
    if numkeys:
        _, buckets = mtake_values([*raw[4], raw[5]], numkeys)
    return AcquireValues(
        _int_field(raw[0], "TB.ACQUIRE") == 1, _int_field(raw[1], "TB.ACQUIRE"),
        _id_field(raw[2], "TB.ACQUIRE"), _int_field(raw[3], "TB.ACQUIRE"), buckets,
    )


def acquire_reader(numkeys: int) -> Callable[[bytes], Any]:
    """A reader of TB.ACQUIRE's reply from the bytes (an :class:`AcquireValues` or a
    :class:`RespError`)."""

    def read(data: bytes) -> Any:
        value = read_resp(data)
        if isinstance(value, RespError):
            return value
        return acquire_values(value, numkeys)

    return read


def pair_values(raw: Any, what: str, n: int) -> list[int]:
    """TB.RELEASE's ``[released, in_flight]`` or TB.RENEW's ``[renewed, in_flight, ms]``."""
    if not isinstance(raw, list) or len(raw) != n:
        raise UnexpectedReplyError(f"expected a {n}-element {what} reply, got {raw!r}")
    return [_int_field(v, what) for v in raw]


def hold_values(raw: Any) -> tuple[bool, float, float, float, str | None]:
    """TB.HOLD's reply: TB.TAKE's four fields and the hold id (or nil)."""
    if not isinstance(raw, list) or len(raw) != 5:
        raise UnexpectedReplyError(f"expected a 5-element TB.HOLD reply, got {raw!r}")
    _, (four,) = take_values(raw[:4])
    return four[0], four[1], four[2], four[3], _id_field(raw[4], "TB.HOLD")


def settle_values(raw: Any) -> tuple[bool, float, float, float]:
    """TB.SETTLE's ``[settled, remaining, charged, reset_after]``."""
    if not isinstance(raw, list) or len(raw) != 4:
        raise UnexpectedReplyError(f"expected a 4-element TB.SETTLE reply, got {raw!r}")
    try:
        out = (float(raw[0]) == 1, float(raw[1]), float(raw[2]), float(raw[3]))
    except (TypeError, ValueError) as exc:
        raise UnexpectedReplyError(f"not a number in a TB.SETTLE reply: {raw!r}") from exc
    if out[1] != out[1] or out[2] != out[2] or out[3] != out[3]:
        raise UnexpectedReplyError(f"NaN in a TB.SETTLE reply: {raw!r}")
    return out


def packed(*args: str | bytes | float) -> bytes:
    """One command, RESP-encoded."""
    return b"*%d\r\n" % len(args) + b"".join(encode_arg(a) for a in args)
