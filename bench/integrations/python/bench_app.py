"""The app bench_overhead.py measures: FastAPI ``GET /items/{item_id}``, in one of
several variants chosen by ``BENCH_VARIANT`` (one uvicorn process each):

- ``none``: no limiter at all;
- ``ping``: one bare ``await redis.ping()`` per request (a pure ASGI middleware): the
  floor of any limiter that makes one Redis round trip per request through redis-py;
- ``rawping``: one pre-encoded ``*1\\r\\n$4\\r\\nPING\\r\\n`` per request written on a raw
  asyncio stream, ``+PONG\\r\\n`` read back (persistent connections, one per request in
  flight, no client library): the floor of one round trip with no client's own cost;
- ``one``: redis-tb's middleware with one policy (``ip``), with Prometheus metrics
  and the local deny cache on;
- ``three``: the same with three policies (``ip``, a per-route ``endpoint`` policy,
  a ``tenant`` policy keyed by the ``X-API-Key`` header), still one TB.MTAKE;
- ``one-scripts`` / ``three-scripts``: ``one`` / ``three`` with the limiter forced to the
  script backend (``backend="scripts"``, SPEC E; Functions where the server takes
  FUNCTION LOAD), started in the app's lifespan (``limiter.startup``, which chooses the
  backend: without it the client would send the module's commands as they are). The
  ``redis_tb`` logger writes INFO to stderr, so the log has the backend's line (SPEC E6),
  and the lifespan prints ``bench_app: stats.backend <name>`` after the start, which
  bench_overhead.py checks;
- ``slowapi`` / ``slowapi3``: slowapi on the ``limits`` library's Redis storage
  (moving window), one limit / three stacked limits;
- ``one-refuse`` / ``one-refuse-nocache`` / ``slowapi-refuse``: every request refused
  (one client over a limit of one request, refilled over years): redis-tb with and
  without the deny cache, slowapi (``1/year``);
- ``flood`` / ``flood-nocache`` (bench_flood.py): redis-tb with one ``ip`` policy of
  capacity ``BENCH_CAPACITY`` (default 10) refilled at ``BENCH_RATE`` per second
  (default 1), with and without the deny cache, and ``GET /_stats`` (not limited): the
  limiter's counters.

Configuration: ``REDIS_URL``, ``TRUSTED_PROXIES`` (the load generator's address, so
``X-Forwarded-For`` carries the client; slowapi's key function reads the same header),
``BENCH_TIMEOUT`` (redis-tb's per-call timeout, default 1 s: on a busy machine the 50 ms
default would turn slow calls into fail-open passes, which are not what is measured).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
import urllib.parse
from typing import Any, AsyncIterator

import redis.asyncio
from fastapi import FastAPI, Request
from prometheus_client import CollectorRegistry

from redis_tb import AsyncClient, ClientIP, DenyCache, Limit, Policy, RateLimiter, RateLimitMiddleware, per_minute
from redis_tb.metrics import PrometheusMetrics

VARIANT = os.environ.get("BENCH_VARIANT", "none")
#: ``one-scripts`` is ``one`` on the script backend (likewise ``three-scripts``)
SCRIPTS = VARIANT in ("one-scripts", "three-scripts")
KIND = VARIANT.removesuffix("-scripts") if SCRIPTS else VARIANT
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TRUSTED = [c for c in os.environ.get("TRUSTED_PROXIES", "").split(",") if c]
BIG = 1_000_000_000  # never refuses during a run
TIMEOUT = float(os.environ.get("BENCH_TIMEOUT", "1"))


@contextlib.asynccontextmanager
async def start_limiter(app: FastAPI) -> AsyncIterator[None]:
    """The scripts variants' lifespan: the limiter's start chooses the forced backend
    (and loads the library), then its ``stats.backend`` goes to the log."""
    await limiter.startup(policies)
    print(f"bench_app: stats.backend {limiter.stats.backend}", file=sys.stderr, flush=True)
    yield


if SCRIPTS:
    log = logging.getLogger("redis_tb")
    log.addHandler(logging.StreamHandler(sys.stderr))
    log.setLevel(logging.INFO)
    log.propagate = False

app = FastAPI(lifespan=start_limiter) if SCRIPTS else FastAPI()


def client_key(request: Request) -> str:
    """slowapi's key: the forwarded client (the load generator is the proxy)."""
    return request.headers.get("x-forwarded-for") or (request.client.host if request.client else "-")


def tenant(request: Request) -> str | None:
    return request.headers.get("x-api-key")


if VARIANT.startswith("slowapi"):
    from slowapi import Limiter, _rate_limit_exceeded_handler
    from slowapi.errors import RateLimitExceeded

    slow = Limiter(key_func=client_key, storage_uri=REDIS_URL, strategy="moving-window")
    app.state.limiter = slow
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]
    limit = {
        "slowapi": f"{BIG}/minute",
        "slowapi3": f"{BIG}/minute;{BIG}/hour;{BIG}/day",
        "slowapi-refuse": "1/year",
    }[VARIANT]

    @app.get("/items/{item_id}")
    @slow.limit(limit)
    async def get_item_slowapi(item_id: int, request: Request) -> dict[str, object]:
        return {"id": item_id, "name": f"item {item_id}"}

else:

    @app.get("/items/{item_id}")
    async def get_item(item_id: int, request: Request) -> dict[str, object]:
        return {"id": item_id, "name": f"item {item_id}"}


class PingEveryRequest:
    """One bare PING per HTTP request, then the app: the one-round-trip floor."""

    def __init__(self, app: Any, url: str) -> None:
        self.app = app
        self.redis = redis.asyncio.Redis.from_url(url)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.redis.ping()
        await self.app(scope, receive, send)


PING = b"*1\r\n$4\r\nPING\r\n"
PONG = b"+PONG\r\n"


class RawPingEveryRequest:
    """One pre-encoded PING per HTTP request on a raw socket, then the app: the round trip
    with no client library. Connections persist: a request takes an idle one (or opens
    one), so there are as many as requests in flight, as in redis-py's pool."""

    def __init__(self, app: Any, url: str) -> None:
        self.app = app
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def ping(self) -> None:
        conn = self.idle.pop() if self.idle else await asyncio.open_connection(self.host, self.port)
        reader, writer = conn
        writer.write(PING)
        reply = await reader.readexactly(len(PONG))
        if reply != PONG:
            writer.close()
            raise RuntimeError(f"PING answered {reply!r}")
        self.idle.append(conn)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self.ping()
        await self.app(scope, receive, send)


if VARIANT == "ping":
    app.add_middleware(PingEveryRequest, url=REDIS_URL)
elif VARIANT == "rawping":
    app.add_middleware(RawPingEveryRequest, url=REDIS_URL)
elif KIND in ("one", "three", "one-refuse", "one-refuse-nocache", "flood", "flood-nocache"):
    registry = CollectorRegistry()
    limiter = RateLimiter(
        AsyncClient.from_url(REDIS_URL, timeout=TIMEOUT),
        timeout=TIMEOUT,
        client_ip=ClientIP(TRUSTED),
        metrics=PrometheusMetrics(registry, limiter="bench"),
        deny_cache=None if VARIANT.endswith("-nocache") else DenyCache(max_entries=10_000),
        backend="scripts" if SCRIPTS else "auto",
    )
    exclude: tuple[str, ...] = ()
    policies: list[Policy]
    if KIND == "three":
        policies = [
            per_minute("ip", BIG),
            per_minute("endpoint", BIG, per_route=True),
            per_minute("tenant", BIG, key=tenant),
        ]
    elif KIND == "one":
        policies = [per_minute("ip", BIG)]
    elif VARIANT.startswith("flood"):
        capacity = float(os.environ.get("BENCH_CAPACITY", "10"))
        policies = [Policy("ip", Limit(capacity, float(os.environ.get("BENCH_RATE", "1"))))]
        exclude = ("GET /_stats",)

        @app.get("/_stats")
        async def stats() -> dict[str, int]:
            return dataclasses.asdict(limiter.stats)

    else:
        # one token that never comes back within a run, whatever the clock does
        policies = [Policy("ip", Limit(1, 1e-9))]
    app.add_middleware(RateLimitMiddleware, limiter=limiter, policies=policies, exclude=exclude)
elif VARIANT != "none" and not VARIANT.startswith("slowapi"):
    raise SystemExit(f"unknown BENCH_VARIANT {VARIANT!r}")
