"""A streamed response read as it arrives (SSE events one at a time), from a chosen local
address, that the caller may close mid-body: what a client that goes away does."""

from __future__ import annotations

import http.client
import socket
import struct
from typing import Mapping

from .http import Response


_TCP_CLOSE, _TCP_CLOSE_WAIT = 7, 8  # include/net/tcp_states.h


class Stream:
    def __init__(self, base: tuple[str, int], path: str, *, headers: Mapping[str, str], source: str,
                 timeout: float = 30, rcvbuf: int | None = None, mss: int | None = None) -> None:
        host, port = base
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0))
        if rcvbuf is not None or mss is not None:
            # set before the handshake: the receive window's scale and the segment size
            # announced are fixed then. A small window and an Ethernet MSS keep the
            # kernel's buffers for the connection near 100 KB (loopback's own MSS, 64 KB,
            # lets the server's send buffer grow to 4 MB), so that a client that stops
            # reading soon stops a server that waits for it
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if mss is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
            sock.settimeout(timeout)
            sock.bind((source, 0))
            sock.connect(base)
            self.conn.sock = sock
        self.sock: socket.socket | None = None
        self.r: http.client.HTTPResponse | None = None
        try:
            self.conn.request("GET", path, headers=dict(headers))
            # kept: http.client lets go of a connection whose response ends by closing it
            self.sock = self.conn.sock
            self.r = self.conn.getresponse()
        except BaseException:
            self.close()  # no head (a timeout): the connection goes, as a client that gives up
            raise
        # the status and fields, with the body still unread
        self.head = Response(self.r.status, [(k.lower(), v) for k, v in self.r.getheaders()], b"")

    def event(self) -> str | None:
        """The next event's data line ('data: ...'), or None at the end of the body."""
        assert self.r is not None
        while True:
            line = self.r.readline()
            if not line:
                return None
            text = line.decode().rstrip("\r\n")
            if text.startswith("data:"):
                return text

    def closed_by_server(self) -> bool:
        """Whether the server has closed its side (a FIN came: TCP state CLOSE_WAIT), seen
        without reading the body: a client that reads nothing still learns it (Linux's
        TCP_INFO, whose first byte is the state)."""
        assert self.sock is not None
        state = struct.unpack("B", self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0]
        return state in (_TCP_CLOSE_WAIT, _TCP_CLOSE)

    def endpoints(self) -> tuple[tuple[str, int], tuple[str, int]]:
        """(this client's address and port, the server's)."""
        assert self.sock is not None
        return self.sock.getsockname(), self.sock.getpeername()

    def rest(self) -> bytes:
        assert self.r is not None
        return self.r.read()

    def close(self) -> None:
        """Drop the connection, read or not (a client that went away): the socket and the
        response's file on it (the descriptor closes with the last of them)."""
        if self.r is not None:
            self.r.close()
        if self.sock is not None:
            self.sock.close()
        self.conn.close()
