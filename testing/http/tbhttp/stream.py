"""A streamed response read as it arrives (SSE events one at a time), from a chosen local
address, that the caller may close mid-body: what a client that goes away does."""

from __future__ import annotations

import http.client
from typing import Mapping

from .http import Response


class Stream:
    def __init__(self, base: tuple[str, int], path: str, *, headers: Mapping[str, str], source: str,
                 timeout: float = 30) -> None:
        host, port = base
        self.conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0))
        self.conn.request("GET", path, headers=dict(headers))
        self.r = self.conn.getresponse()
        # the status and fields, with the body still unread
        self.head = Response(self.r.status, [(k.lower(), v) for k, v in self.r.getheaders()], b"")

    def event(self) -> str | None:
        """The next event's data line ('data: ...'), or None at the end of the body."""
        while True:
            line = self.r.readline()
            if not line:
                return None
            text = line.decode().rstrip("\r\n")
            if text.startswith("data:"):
                return text

    def rest(self) -> bytes:
        return self.r.read()

    def close(self) -> None:
        """Drop the connection, read or not (a client that went away)."""
        if self.conn.sock is not None:
            self.conn.sock.close()
        self.conn.close()
