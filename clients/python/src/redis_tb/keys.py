"""Who is calling: the client address behind trusted proxies, grouped by prefix.

The rules (shared with the Rust integration):

- The TCP peer is the client unless it is inside a trusted CIDR. A spoofed
  ``X-Forwarded-For`` from an untrusted peer is ignored entirely.
- From a trusted peer, the forwarding header is walked from RIGHT to LEFT (each
  proxy appends the address it received from), skipping trusted addresses; the
  first untrusted address is the client. If every entry is trusted, the leftmost
  is used. The leftmost entry is otherwise never believed: anyone can write it.
- A malformed entry stops the walk: the last good address seen (the peer or the
  previous trusted hop) is the client. A garbled header never picks the identity.
- IPv4-mapped IPv6 (``::ffff:1.2.3.4``) is IPv4. IPv6 is grouped by prefix (/64
  by default: one subscriber's LAN), IPv4 by /32.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from typing import Any, Callable, Iterable, Literal, Sequence

__all__ = ["ClientIP", "HeaderGetter", "IPAddress", "IPNetwork", "parse_address"]

#: lower-case header name -> every value of that header in the request, in order
#: (what a framework adapter supplies so :class:`ClientIP` can walk the proxies).
HeaderGetter = Callable[[str], Sequence[str]]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Header = Literal["x-forwarded-for", "forwarded"]


def _unmap(addr: IPAddress) -> IPAddress:
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


@functools.lru_cache(maxsize=4096)  # the same few addresses arrive again and again
def parse_address(text: str) -> IPAddress | None:
    """An address as proxies write it: ``1.2.3.4``, ``1.2.3.4:80``, ``2001:db8::1``,
    ``[2001:db8::1]`` or ``[2001:db8::1]:443``. Anything else (``unknown``,
    obfuscated ``_node`` names, garbage) is None."""
    text = text.strip()
    if not text:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        rest = text[end + 1 :]
        if rest and not (rest.startswith(":") and rest[1:].isdigit()):
            return None
        text = text[1:end]
        if ":" not in text:  # brackets are for IPv6 only
            return None
    elif text.count(":") == 1:  # IPv4 with a port
        host, _, port = text.partition(":")
        if not port.isdigit():
            return None
        text = host
    if "%" in text:  # a zone id names a local interface, not a client
        return None
    try:
        return _unmap(ipaddress.ip_address(text))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _network(addr: IPAddress, prefix: int) -> str:
    return str(ipaddress.ip_network(f"{addr}/{prefix}", strict=False))


def _split_list(value: str) -> list[str]:
    """Split a comma-separated header, keeping commas inside double quotes."""
    out: list[str] = []
    cur: list[str] = []
    quoted = False
    escaped = False
    for ch in value:
        if escaped:
            cur.append(ch)
            escaped = False
        elif quoted and ch == "\\":
            cur.append(ch)
            escaped = True
        elif ch == '"':
            cur.append(ch)
            quoted = not quoted
        elif ch == "," and not quoted:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _forwarded_for(element: str) -> str | None:
    """The ``for=`` value of one RFC 7239 element, unquoted; None when absent."""
    for pair in element.split(";"):
        name, sep, value = pair.strip().partition("=")
        if sep and name.strip().lower() == "for":
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
            return value
    return None


def _v4(text: str) -> int | None:
    """A plain dotted-quad IPv4 address as an int (inet_pton is strict: no leading
    zeros, no ports, no spaces), else None (the general parser decides)."""
    try:
        return int.from_bytes(socket.inet_pton(socket.AF_INET, text), "big")
    except (OSError, ValueError, TypeError):
        return None


class ClientIP:
    """A key function: the client's address, grouped (``"203.0.113.7"``,
    ``"2001:db8:1:2::/64"``), or None when the peer address is unknown (a Unix socket
    without trusted proxies in front: the policy is then skipped).

    ``trusted_proxies``: CIDRs (or addresses) of your load balancers and reverse
    proxies; empty (the default) means the headers are never read.
    ``header``: ``"x-forwarded-for"`` (default) or ``"forwarded"`` (RFC 7239 ``for=``).
    """

    def __init__(
        self,
        trusted_proxies: Iterable[str | IPNetwork] = (),
        *,
        header: Header = "x-forwarded-for",
        ipv4_prefix: int = 32,
        ipv6_prefix: int = 64,
    ) -> None:
        if header not in ("x-forwarded-for", "forwarded"):
            raise ValueError(f"header must be 'x-forwarded-for' or 'forwarded', got {header!r}")
        if not 0 <= ipv4_prefix <= 32:
            raise ValueError(f"ipv4_prefix must be 0..32, got {ipv4_prefix}")
        if not 0 <= ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be 0..128, got {ipv6_prefix}")
        self.trusted: tuple[IPNetwork, ...] = tuple(
            n if isinstance(n, (ipaddress.IPv4Network, ipaddress.IPv6Network))
            else ipaddress.ip_network(n.strip(), strict=False)
            for n in trusted_proxies
        )
        self.header: Header = header
        self.ipv4_prefix = ipv4_prefix
        self.ipv6_prefix = ipv6_prefix
        # The fast path of :meth:`of`: trusted IPv4 networks as (network, mask) ints.
        self._v4_nets = tuple(
            (int(n.network_address), int(n.netmask)) for n in self.trusted if n.version == 4
        )

    def is_trusted(self, addr: IPAddress) -> bool:
        return any(addr in net for net in self.trusted)

    def _entries(self, values: Sequence[str]) -> list[str]:
        entries: list[str] = []
        for v in values:  # several header lines form one list, in order
            entries.extend(_split_list(v))
        return entries

    def client_address(self, peer: str | None, header_values: Sequence[str]) -> IPAddress | None:
        """The client's address given the peer and the forwarding header's lines."""
        addr = parse_address(peer) if peer else None
        if addr is None or not self.is_trusted(addr):
            return addr
        for entry in reversed(self._entries(header_values)):
            hop = (
                parse_address(entry)
                if self.header == "x-forwarded-for"
                else parse_address(_forwarded_for(entry) or "")
            )
            if hop is None:
                return addr  # malformed: keep the last good address
            addr = hop
            if not self.is_trusted(hop):
                return hop
        return addr  # every hop trusted: the leftmost

    def group(self, addr: IPAddress) -> str:
        """The identity of an address: itself at /32 (/128), else its network."""
        if isinstance(addr, ipaddress.IPv4Address):
            prefix, full = self.ipv4_prefix, 32
        else:
            prefix, full = self.ipv6_prefix, 128
        if prefix == full:
            return str(addr)
        return _network(addr, prefix)

    def identity(self, peer: str | None, header_values: Sequence[str]) -> str | None:
        addr = self.client_address(peer, header_values)
        return None if addr is None else self.group(addr)

    def _v4_trusted(self, x: int) -> bool:
        for net, mask in self._v4_nets:
            if x & mask == net:
                return True
        return False

    def of(self, peer: str | None, headers: HeaderGetter) -> str | None:
        """The identity from what a framework adapter supplies: the TCP peer address
        and a getter of header values (read only when the peer is a trusted proxy).

        The same answer as :meth:`identity`; plain IPv4 addresses (the peer, and the
        entries of a one-line ``X-Forwarded-For``) take a fast path of integer
        compares, anything else the general parser."""
        x = None if peer is None else _v4(peer)
        if x is not None and peer is not None:
            if not self._v4_trusted(x):
                return peer if self.ipv4_prefix == 32 else self.group(ipaddress.IPv4Address(x))
            values = headers(self.header)
            if self.header == "x-forwarded-for" and len(values) == 1 and '"' not in values[0]:
                hop: str = peer
                for entry in reversed(values[0].split(",")):
                    entry = entry.strip()
                    h = _v4(entry)
                    if h is None:
                        break  # not a plain IPv4 entry: the general walk decides
                    hop = entry
                    if not self._v4_trusted(h):
                        return hop if self.ipv4_prefix == 32 else self.group(ipaddress.IPv4Address(h))
                else:  # every hop trusted: the leftmost
                    return self.group(ipaddress.IPv4Address(_v4(hop) or 0)) if self.ipv4_prefix != 32 else hop
            return self.identity(peer, values)
        if self.trusted:
            addr = parse_address(peer) if peer else None
            if addr is not None and self.is_trusted(addr):
                return self.identity(peer, headers(self.header))
        return self.identity(peer, ())

    def __call__(self, request: Any) -> str | None:
        """As a key function of a Starlette request (``request.client``) or a Django
        one (``request.META``). The limiter itself calls :meth:`of` with what its
        adapter supplies."""
        client = getattr(request, "client", None)
        if client is not None or hasattr(request, "headers") and hasattr(request.headers, "getlist"):
            peer = client.host if client else None
            values = request.headers.getlist(self.header) if self.trusted else []
            return self.identity(peer, values)
        meta = request.META
        value = meta.get("HTTP_" + self.header.upper().replace("-", "_")) if self.trusted else None
        return self.identity(meta.get("REMOTE_ADDR") or None, [value] if value else [])
