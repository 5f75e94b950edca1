"""A small blocking RESP2 client (no third-party packages on this machine): enough for
setup, checks, population and INFO."""

from __future__ import annotations

import socket


class RedisError(Exception):
    """An error reply from the server."""


class RespClient:
    """A blocking RESP2 connection."""

    def __init__(self, port: int, timeout: float = 60.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()

    def __enter__(self) -> "RespClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def encode(args) -> bytes:
        """One command as a RESP array of bulk strings."""
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(parts)

    def _read(self):
        line = self.rfile.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.rfile.read(size + 2)
            return data[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._read() for _ in range(size)]
        raise ConnectionError(f"unexpected RESP line {line!r}")

    def call(self, *args):
        """Sends one command; raises RedisError on an error reply."""
        self.sock.sendall(self.encode(args))
        reply = self._read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def send_batches(self, batches: list[tuple[bytes, int]]) -> list[RedisError]:
        """Sends pre-encoded batches (bytes, command count), reading each batch's replies
        before the next so neither side's buffers grow without bound. Returns the errors."""
        errors = []
        for payload, count in batches:
            self.sock.sendall(payload)
            for _ in range(count):
                reply = self._read()
                if isinstance(reply, RedisError):
                    errors.append(reply)
        return errors

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section)
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def has_command(self, name: str) -> bool:
        """Whether the server knows the command (COMMAND INFO answers nil otherwise)."""
        reply = self.call("COMMAND", "INFO", name)
        return bool(reply) and reply[0] is not None


def encode_batches(commands, batch: int = 1000) -> list[tuple[bytes, int]]:
    """Pre-encodes an iterable of commands into pipeline batches."""
    out, buf, n = [], [], 0
    for cmd in commands:
        buf.append(RespClient.encode(cmd))
        n += 1
        if n == batch:
            out.append((b"".join(buf), n))
            buf, n = [], 0
    if n:
        out.append((b"".join(buf), n))
    return out
