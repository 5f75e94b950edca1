"""The RESP2 replies the suite reads from its own redis-servers (TB.PEEK, TB.HOLD, INFO,
CLUSTER INFO): simple strings, errors, integers, bulk strings (nil included) and arrays,
nested. A reply is read whole from a buffered stream; an error reply is returned as an
`Error` value, not raised, so a check can assert on its text."""

from __future__ import annotations

from typing import BinaryIO, Union


class Error(str):
    """An error reply's text (`ERR ...`, `WRONGTYPE ...`)."""


Reply = Union[None, int, bytes, str, Error, list["Reply"]]


def encode(*args: str | bytes | int | float) -> bytes:
    """A command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def read(f: BinaryIO) -> Reply:
    """One reply from `f` (a socket's makefile('rb'), or any buffered reader)."""
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"RESP: connection closed mid-reply ({line!r})")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return Error(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        if len(data) != n + 2 or not data.endswith(b"\r\n"):
            raise ConnectionError("RESP: connection closed mid-bulk-string")
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read(f) for _ in range(n)]
    raise ValueError(f"RESP: unknown reply type {line!r}")
