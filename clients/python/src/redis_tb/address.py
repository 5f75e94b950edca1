"""Who is calling: the client address behind trusted proxies, grouped by prefix
(SPEC A1-A9, C5, C6).

- The TCP peer is the client unless it is a trusted proxy (A1).
- From a trusted peer, the configured header is walked right to left, trusted hops
  skipped; the first untrusted entry is the client, the leftmost if all are trusted
  (A2). Several lines are one list (A3); ``X-Forwarded-For`` entries follow A4,
  ``Forwarded`` elements A5; a malformed entry stops the walk at the last good
  address (A6).
- IPv4-mapped IPv6 is IPv4 (A7); a peer's zone id is dropped (A8); the identity is
  the address under ``ipv4_prefix`` / ``ipv6_prefix`` (A9).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from typing import Any, Callable, Iterable, Literal, NamedTuple, Sequence

__all__ = [
    "ClientIP", "ClientIp", "ClientIpConfig", "HeaderGetter", "IPAddress", "IPNetwork",
    "forwarded_node", "parse_address", "parse_peer", "trusted_network",
]

#: lower-case header name -> every value of that header in the request, in order
#: (what a framework adapter supplies so :class:`ClientIP` can walk the proxies).
HeaderGetter = Callable[[str], Sequence[str]]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Header = Literal["x-forwarded-for", "forwarded"]


def _unmap(addr: IPAddress) -> IPAddress:
    # SPEC A7: IPv4-mapped IPv6 is IPv4 everywhere.
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


_PORT = re.compile(r"[0-9]{1,5}\Z")


def _ip(text: str) -> IPAddress | None:
    if "%" in text:  # a zone id names a local interface, not a client (SPEC A4)
        return None
    try:
        return _unmap(ipaddress.ip_address(text))
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)  # the same few addresses arrive again and again
def parse_address(text: str) -> IPAddress | None:
    """An ``X-Forwarded-For`` entry (SPEC A4): ``1.2.3.4``, ``1.2.3.4:80``,
    ``2001:db8::1``, ``[2001:db8::1]`` or ``[2001:db8::1]:443`` (a port is 1 to 5
    digits and is dropped). Anything else (``unknown``, ``_hidden``, a name, a zone
    id, an empty port) is None: malformed."""
    text = text.strip(" \t")
    if not text:
        return None
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            return None
        rest = text[end + 1 :]
        if rest and not (rest[0] == ":" and _PORT.match(rest, 1)):
            return None
        inner = text[1:end]
        if ":" not in inner:  # brackets are for IPv6 only
            return None
        return _ip(inner)
    if text.count(":") == 1:  # IPv4 with a port
        host, _, port = text.partition(":")
        if not _PORT.match(port) or "." not in host:
            return None
        addr = _ip(host)
        return addr if isinstance(addr, ipaddress.IPv4Address) else None
    return _ip(text)


def parse_peer(text: str) -> IPAddress | None:
    """The TCP peer's address; a zone id (``fe80::1%eth0``) is dropped (SPEC A8)."""
    addr, _, _ = text.partition("%")
    try:
        return _unmap(ipaddress.ip_address(addr))
    except ValueError:
        return None


def trusted_network(value: str | IPNetwork) -> IPNetwork:
    """A trusted proxy, normalized (SPEC C5): host bits masked, IPv4-mapped ranges
    unmapped (``::ffff:10.0.0.0/104`` is ``10.0.0.0/8``). Raises ValueError."""
    if isinstance(value, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        net: IPNetwork = value
    else:
        if not isinstance(value, str) or "%" in value or not value.strip():
            raise ValueError(f"a trusted proxy is an IPv4/IPv6 address or CIDR, got {value!r}")
        try:
            net = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise ValueError(f"a trusted proxy is an IPv4/IPv6 address or CIDR, got {value!r}") from None
    if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 and net.subnet_of(_MAPPED):
        v4 = ipaddress.IPv4Address(int(net.network_address) & 0xFFFFFFFF)
        net = ipaddress.IPv4Network(f"{v4}/{net.prefixlen - 96}", strict=False)
    return net


_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")


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


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_BARE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z:\[\]-]+\Z")  # a token, or a bare node with a port
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"\Z', re.S)


def _split_pairs(element: str) -> list[str] | None:
    """``;``-separated pairs of one element, ``;`` inside quotes kept; None when a
    quote is not closed."""
    out: list[str] = []
    cur: list[str] = []
    quoted = escaped = False
    for ch in element:
        if escaped:
            escaped = False
        elif quoted and ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == ";" and not quoted:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if quoted:
        return None
    out.append("".join(cur))
    return out


def forwarded_node(element: str) -> IPAddress | None:
    """The ``for=`` address of one RFC 7239 element (SPEC A5), or None when the
    element is malformed: a pair without ``=``, no ``for=`` or more than one, a node
    that is not an address (``unknown``, ``_obfuscated``), or an IPv6 node that is not
    quoted and bracketed."""
    pairs = _split_pairs(element.strip(" \t"))
    if pairs is None:
        return None
    node: str | None = None
    quoted_node = False
    for pair in pairs:
        name, sep, value = pair.strip(" \t").partition("=")
        if not sep or not _TOKEN.match(name):
            return None
        m = _QUOTED.match(value)
        if m is not None:
            value = re.sub(r"\\(.)", r"\1", m.group(1))
            quoted = True
        elif _BARE.match(value):
            quoted = False
        else:
            return None
        if name.lower() == "for":
            if node is not None:
                return None  # two for= in one element
            node, quoted_node = value, quoted
    if node is None:
        return None
    if node.startswith("["):
        if not quoted_node:
            return None
        addr = parse_address(node)
        return addr if isinstance(addr, ipaddress.IPv6Address) else None
    if node.count(":") > 1:  # an IPv6 node without brackets
        return None
    addr = parse_address(node)
    return addr if isinstance(addr, ipaddress.IPv4Address) else None


def _v4(text: str) -> int | None:
    """A plain dotted-quad IPv4 address as an int (inet_pton is strict: no leading
    zeros, no ports, no spaces), else None (the general parser decides)."""
    try:
        return int.from_bytes(socket.inet_pton(socket.AF_INET, text), "big")
    except (OSError, ValueError, TypeError):
        return None


class ClientIp(NamedTuple):
    """The resolved client of one request (SPEC "Names"): its address (None for a
    peer without one) and the identity it is limited under (A9)."""

    address: IPAddress | None
    identity: str | None


class ClientIpConfig:
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
        if type(ipv4_prefix) is not int or not 0 <= ipv4_prefix <= 32:  # SPEC C6
            raise ValueError(f"ipv4_prefix must be 0..32, got {ipv4_prefix}")
        if type(ipv6_prefix) is not int or not 0 <= ipv6_prefix <= 128:
            raise ValueError(f"ipv6_prefix must be 0..128, got {ipv6_prefix}")
        if isinstance(trusted_proxies, str):
            trusted_proxies = [trusted_proxies]
        self.trusted: tuple[IPNetwork, ...] = tuple(trusted_network(n) for n in trusted_proxies)
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
        addr = parse_peer(peer) if peer else None
        if addr is None or not self.is_trusted(addr):
            return addr
        for entry in reversed(self._entries(header_values)):
            hop = (
                parse_address(entry)
                if self.header == "x-forwarded-for"
                else forwarded_node(entry)
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

    def resolve(self, peer: str | None, header_values: Sequence[str]) -> ClientIp:
        """The :class:`ClientIp` of a request from its peer and the header's lines."""
        addr = self.client_address(peer, header_values)
        return ClientIp(addr, None if addr is None else self.group(addr))

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
            addr = parse_peer(peer) if peer else None
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


#: The old name of :class:`ClientIpConfig` (deprecated; SPEC "Names": ``ClientIp`` is
#: the resolved address of one request).
ClientIP = ClientIpConfig
