"""Bucket keys and the identities they are made of (SPEC I1-I3, K1-K5).

One key builder (:class:`KeyBuilder`) for every path that makes a key: the limiter,
refunds, the deny cache and helpers. A key is
``<prefix>:[{<tag>}:]<policy>[@<route>]:<identity>`` (K1), each part escaped (K2) and
long identities and tags hashed (K3), so a key is bounded and two different
(tag, policy, route, identity) never share one.

Key sources (SPEC "Names"): :meth:`Key.client_ip` (the default), :meth:`Key.header`,
:meth:`Key.fixed`, :meth:`Key.from_fn`.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Awaitable, Callable, Union

from .address import ClientIP, ClientIp, ClientIpConfig, HeaderGetter, parse_address

__all__ = [
    "BadHeader",
    "check_prefix",
    "ClientIP",
    "ClientIp",
    "ClientIpConfig",
    "FixedKey",
    "FnKey",
    "HeaderKey",
    "Key",
    "KeyBuilder",
    "ClientIpKey",
    "escape",
    "escape_route",
    "bounded",
    "header_identity",
    "HeaderGetter",
    "parse_address",
]

_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")


def check_prefix(prefix: object) -> str:
    """SPEC C4: a key prefix matches ``[A-Za-z0-9_.:-]{1,64}`` (no braces, spaces or
    control bytes)."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ValueError(f"prefix must match [A-Za-z0-9_.:-]{{1,64}}, got {prefix!r}")
    return prefix


#: an identity: a Unicode string (escaped as its UTF-8 bytes) or the bytes of a
#: header value as received (SPEC K2).
Identity = Union[str, bytes]

#: what a key function returns: an identity, or None / "" to skip the policy (I1).
KeyFuncResult = Union[Awaitable[Union[str, None]], str, None]

# SPEC K2: bytes kept as they are are 0x21..0x7E except '%', '{', '}' (and, in a
# route, ':' and '@'). The regexes find the first character that needs work; a
# string without one is returned unchanged (the hot path: no copy, no encode).
_KEPT = r"\x21-\x24\x26-\x7a\x7c\x7e"
_NEEDS = re.compile(f"[^{_KEPT}]")
_NEEDS_ROUTE = re.compile(r"[^\x21-\x24\x26-\x39\x3b-\x3f\x41-\x7a\x7c\x7e]")
_ESC = [chr(b) if 0x21 <= b <= 0x7E and chr(b) not in "%{}" else f"%{b:02X}" for b in range(256)]
_ESC_ROUTE = [c if c not in (":", "@") else f"%{ord(c):02X}" for c in _ESC]

#: SPEC K3: an escaped identity or tag longer than this is hashed.
MAX_PART = 128
#: SPEC K2 + K3 in one call for inline hot paths: a match (not None) when a non-empty
#: identity of at most MAX_PART characters needs no escaping, so it is its own key part.
is_plain = re.compile(f"[{_KEPT}]{{1,{MAX_PART}}}").fullmatch


def _escape_bytes(data: bytes, table: list[str]) -> str:
    return "".join([table[b] for b in data])


def escape(value: Identity) -> str:
    """SPEC K2 for a tag or an identity: every byte outside 0x21..0x7E and each of
    ``%``, ``{``, ``}`` written ``%XX``; a str as its UTF-8 bytes, bytes as they are."""
    if isinstance(value, str):
        if _NEEDS.search(value) is None:
            return value
        return _escape_bytes(value.encode("utf-8", "surrogatepass"), _ESC)
    return _escape_bytes(value, _ESC)


def escape_route(route: str) -> str:
    """SPEC K2 for a route: the identity's escaping, plus ``:`` and ``@``."""
    if _NEEDS_ROUTE.search(route) is None:
        return route
    return _escape_bytes(route.encode("utf-8", "surrogatepass"), _ESC_ROUTE)


def bounded(value: Identity) -> str:
    """SPEC K2 + K3: the escaped part, or ``%h`` and the first 32 hex digits of the
    SHA-256 of its unescaped bytes when the escaped form is longer than 128 bytes."""
    if type(value) is str and is_plain(value) is not None:
        return value  # the hot path: nothing to escape, no copy
    if len(value) <= MAX_PART:  # str length <= its escaped length: maybe short enough
        out = escape(value)
        if len(out) <= MAX_PART:
            return out
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return "%h" + hashlib.sha256(raw).hexdigest()[:32]


class KeyBuilder:
    """The one key builder of a limiter (SPEC K1): ``prefix`` is validated (C4)."""

    __slots__ = ("prefix", "_heads", "_plain")

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._heads: dict[tuple[str, str | None], str] = {}
        self._plain: dict[str, str] = {}

    def head(self, policy: str, route: str | None = None) -> str:
        """``<prefix>:<policy>[@<route>]:``, cached per (policy, route)."""
        if route is None:
            got = self._plain.get(policy)
            if got is None:
                got = self._plain[policy] = f"{self.prefix}:{policy}:"
            return got
        got = self._heads.get((policy, route))
        if got is None:
            if route is None:
                got = f"{self.prefix}:{policy}:"
            else:
                got = f"{self.prefix}:{policy}@{escape_route(route)}:"
            if len(self._heads) < 4096:  # routes are configuration: a few of them
                self._heads[(policy, route)] = got
        return got

    def key(self, policy: str, identity: Identity, *, route: str | None = None, tag: Identity | None = None) -> str:
        """The bucket key of ``identity`` under ``policy`` (SPEC K1-K4). An empty
        tag is no tag (K4)."""
        ident = bounded(identity)
        if tag:
            head = f"{self.prefix}:{{{bounded(tag)}}}:{policy}"
            if route is not None:
                head += "@" + escape_route(route)
            return f"{head}:{ident}"
        return self.head(policy, route) + ident


class BadHeader(Exception):
    """A header identity holds a control byte (SPEC I2): the request is a 400."""

    def __init__(self, header: str) -> None:
        super().__init__(f"header '{header}' holds a control byte")
        self.header = header


# SPEC I2: control bytes (0x00-0x08, 0x0A-0x1F, 0x7F) make a bad request; a tab is
# kept inside (and trimmed at both ends with the spaces).
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def header_identity(name: str, lines: list[str] | tuple[str, ...] | Any) -> Identity | None:
    """The identity of header ``name`` from its lines (each a str of bytes, one
    character per byte, as ASGI and WSGI give them): joined with ``", "``, optional
    white space trimmed; None when absent or empty (the policy is skipped, I1).
    Raises :class:`BadHeader` for a control byte. Bytes >= 0x80 are kept: the result
    is then ``bytes``, escaped byte by byte (K2)."""
    if not lines:
        return None
    value = lines[0] if len(lines) == 1 else ", ".join(lines)
    if _CONTROL.search(value) is not None:
        raise BadHeader(name)
    value = value.strip(" \t")
    if not value:
        return None
    if value.isascii():
        return value
    return value.encode("latin-1", "replace")


class Key:
    """Where a policy's identity comes from (SPEC "Names": key sources)."""

    __slots__ = ()

    @staticmethod
    def client_ip(config: ClientIpConfig | None = None) -> ClientIpKey:
        """The client address (the default): the limiter's ``client_ip`` config, or
        ``config``."""
        return ClientIpKey(config)

    @staticmethod
    def header(name: str) -> HeaderKey:
        """The value of request header ``name`` (SPEC I2)."""
        return HeaderKey(name)

    @staticmethod
    def fixed(value: str) -> FixedKey:
        """The same identity for every request: one bucket for the route (SPEC I3)."""
        return FixedKey(value)

    @staticmethod
    def from_fn(fn: Callable[[Any], KeyFuncResult]) -> FnKey:
        """A function of the framework's request returning an identity or None."""
        return FnKey(fn)


class ClientIpKey(Key):
    __slots__ = ("config",)

    def __init__(self, config: ClientIpConfig | None = None) -> None:
        self.config = config

    def __repr__(self) -> str:
        return "Key.client_ip()"


class HeaderKey(Key):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            raise ValueError(f"Key.header: a header name is a token, got {name!r}")
        self.name = name.lower()

    def identity(self, headers: HeaderGetter) -> Identity | None:
        return header_identity(self.name, headers(self.name))

    def __call__(self, request: Any) -> Identity | None:
        """As a key function of a Starlette or Django request."""
        hs = getattr(request, "headers", None)
        if hs is not None and hasattr(hs, "getlist"):
            return self.identity(hs.getlist)
        meta = getattr(request, "META", {})
        value = meta.get("HTTP_" + self.name.upper().replace("-", "_"))
        return self.identity(lambda _: [value] if value is not None else [])

    def __repr__(self) -> str:
        return f"Key.header({self.name!r})"


class FixedKey(Key):
    __slots__ = ("value",)

    def __init__(self, value: str) -> None:
        if not isinstance(value, str) or not value:
            raise ValueError(f"Key.fixed: the value must be a non-empty string, got {value!r}")  # SPEC I3
        self.value = value

    def __call__(self, request: Any) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Key.fixed({self.value!r})"


class FnKey(Key):
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], KeyFuncResult]) -> None:
        if not callable(fn):
            raise TypeError(f"Key.from_fn needs a function, got {fn!r}")
        self.fn = fn

    def __call__(self, request: Any) -> KeyFuncResult:
        return self.fn(request)

    def __repr__(self) -> str:
        return f"Key.from_fn({self.fn!r})"
