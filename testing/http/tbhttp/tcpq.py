"""The kernel's queues of one loopback TCP connection, from /proc/net/tcp (and tcp6, where
a dual-stack server's end of an IPv4 connection is listed, as ``::ffff:a.b.c.d``: Java's): how many bytes
the sending side's kernel holds (tx_queue: written by the application, not yet acked by
the peer) and how many the receiving side's kernel holds (rx_queue: arrived, not yet read
by the application). With both ends on this machine, their sum is what the kernel has
taken of a stream and not handed to the reader: the part of a server's "sent" that is
not in its own buffers."""

from __future__ import annotations

import socket
from pathlib import Path


def _hex(addr: tuple[str, int]) -> str:
    """An IPv4 endpoint as /proc/net/tcp writes it: the address as a little-endian word,
    the port big-endian, both in uppercase hex (127.0.0.1:80 is 0100007F:0050)."""
    host, port = addr
    return f"{int.from_bytes(socket.inet_aton(host), 'little'):08X}:{port:04X}"


def _hex6(addr: tuple[str, int]) -> str:
    """An IPv4 endpoint as /proc/net/tcp6 writes it on a dual-stack socket: the
    IPv4-mapped address (::ffff:a.b.c.d) as four little-endian words, then the port."""
    host, port = addr
    raw = bytes(10) + b"\xff\xff" + socket.inet_aton(host)
    words = "".join(f"{int.from_bytes(raw[i:i + 4], 'little'):08X}" for i in range(0, 16, 4))
    return f"{words}:{port:04X}"


def _tables() -> str:
    texts = []
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            texts.append(Path(name).read_text())
        except FileNotFoundError:  # a kernel without IPv6
            continue
    return "".join(texts)


def queues(local: tuple[str, int], remote: tuple[str, int], table: str | None = None) -> tuple[int, int]:
    """(tx_queue, rx_queue) of the socket bound to `local` and connected to `remote`
    (IPv4 endpoints; found in either table)."""
    text = table if table is not None else _tables()
    wanted = {(_hex(local), _hex(remote)), (_hex6(local), _hex6(remote))}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 4 and (fields[1], fields[2]) in wanted:
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    raise LookupError(f"no TCP socket {local} -> {remote} in /proc/net/tcp or tcp6")
