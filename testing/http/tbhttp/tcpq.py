"""The kernel's queues of one loopback TCP connection, from /proc/net/tcp: how many bytes
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


def queues(local: tuple[str, int], remote: tuple[str, int], table: str | None = None) -> tuple[int, int]:
    """(tx_queue, rx_queue) of the socket bound to `local` and connected to `remote`."""
    text = table if table is not None else Path("/proc/net/tcp").read_text()
    want = (_hex(local), _hex(remote))
    for line in text.splitlines()[1:]:
        fields = line.split()
        if (fields[1], fields[2]) == want:
            tx, rx = fields[4].split(":")
            return int(tx, 16), int(rx, 16)
    raise LookupError(f"no TCP socket {local} -> {remote} in /proc/net/tcp")
