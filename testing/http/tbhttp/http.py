"""A plain HTTP/1.1 client (http.client): one connection per request, from a chosen local
address (the app's trusted proxy, 127.0.0.2, or 127.0.0.1), every field line kept."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any, Mapping

from . import sf


@dataclass
class Response:
    status: int
    fields: list[tuple[str, str]]  # (lower-case name, value), in the order received
    body: bytes

    def lines(self, name: str) -> list[str]:
        """Every field line of `name`, in order (RFC 9110 5.3: one list)."""
        name = name.lower()
        return [v for k, v in self.fields if k == name]

    def header(self, name: str) -> str | None:
        lines = self.lines(name)
        return ", ".join(lines) if lines else None

    def has(self, name: str) -> bool:
        return bool(self.lines(name))

    def media_type(self) -> str:
        return (self.header("content-type") or "").split(";")[0].strip().lower()

    def json(self) -> Any:
        return json.loads(self.body)

    def policy(self) -> list[sf.Member]:
        return sf.parse_lines(self.lines("ratelimit-policy"))

    def ratelimit(self) -> list[sf.Member]:
        return sf.parse_lines(self.lines("ratelimit"))

    def names(self) -> list[str]:
        return [n for n, _ in self.ratelimit()]

    def item(self, policy: str) -> dict[str, int] | None:
        """The RateLimit item of `policy` (r, t), or None."""
        return dict(self.ratelimit()).get(policy)

    def describe(self) -> str:
        head = "\n".join(f"{k}: {v}" for k, v in self.fields)
        return f"HTTP {self.status}\n{head}\n\n{self.body[:500]!r}"


def request(
    base: tuple[str, int],
    method: str,
    path: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes | None = None,
    json_body: object = None,
    source: str | None = None,
    timeout: float = 30,
) -> Response:
    host, port = base
    conn = http.client.HTTPConnection(
        host, port, timeout=timeout, source_address=(source, 0) if source else None
    )
    try:
        send = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            send.setdefault("content-type", "application/json")
        if body is None and method in ("POST", "PUT", "PATCH"):
            body = b""
        conn.request(method, path, body=body, headers=send)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, [(k.lower(), v) for k, v in r.getheaders()], data)
    finally:
        conn.close()
