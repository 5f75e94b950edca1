"""An API rate-limited with redis-tb: layered policies in one TB.MTAKE, plan
tiers, an endpoint policy, a cost function, a refund, a fail-closed login limited
by a sliding window, the decision used in handlers, a shadow policy (observed
before it is enforced), an LLM-proxy-style stream limited by streams in progress
and by tokens settled after the fact, and Prometheus metrics on /metrics.

Run: see README.md beside this file. Configuration by environment:
REDIS_URL (default redis://127.0.0.1:6379/0), TRUSTED_PROXIES (comma-separated
CIDRs of your load balancers; default none), RATE_LIMIT=off (serve the same app
without the limiter), REDIS_TB_TIMEOUT_MS (milliseconds per Redis call, default 50;
the tests raise it so that a busy test machine does not turn into store errors),
REDIS_TB_START_DEGRADED=1 (start failing open when Redis is unreachable at startup;
by default the app refuses to start: uvicorn prints the one line and exits with 3),
REDIS_TB_BACKEND (SPEC E1: auto, the default, uses the module where it is loaded and the
script library clients/lua elsewhere, e.g. on managed Redis; module or scripts forces
either; any other value exits with 2 and one line).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel

from redis_tb import (
    AsyncClient,
    ClientIP,
    Decision,
    Hold,
    Limit,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    StoreError,
    per_minute,
    per_second,
    tiered,
)
from redis_tb.asgi import hold_rejection
from redis_tb.backend import backend_setting
from redis_tb.fastapi import RateLimit, install_problem_handler
from redis_tb.metrics import PrometheusMetrics

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
TRUSTED_PROXIES = [c for c in os.environ.get("TRUSTED_PROXIES", "").split(",") if c]
LIMITED = os.environ.get("RATE_LIMIT", "on") != "off"
TIMEOUT = float(os.environ.get("REDIS_TB_TIMEOUT_MS", "50")) / 1000
# SPEC U4: an unreachable Redis fails the start unless this says so
START_DEGRADED = os.environ.get("REDIS_TB_START_DEGRADED") == "1"
try:  # SPEC E1: the store's backend (the gauge redis_tb_backend on /metrics says which)
    BACKEND = backend_setting(os.environ.get("REDIS_TB_BACKEND", "auto"))
except ValueError as exc:
    print(f"REDIS_TB_BACKEND: {exc}", file=sys.stderr)
    sys.exit(2)
# The limiter's lines in the server's log: its warnings, and SPEC E6's one line (INFO) of the
# backend chosen at startup.
_tb_log = logging.getLogger("redis_tb")
_tb_log.setLevel(logging.INFO)
if not _tb_log.handlers:
    _tb_log.addHandler(logging.StreamHandler())
    _tb_log.propagate = False

# -- who is calling -------------------------------------------------------------
# A stand-in for your auth: API key -> (user id, plan).
API_KEYS = {
    "key-alice": ("alice", "pro"),
    "key-bob": ("bob", "free"),
}


def account(request: Request) -> tuple[str, str] | None:
    return API_KEYS.get(request.headers.get("x-api-key", ""))


async def user_id(request: Request) -> str | None:
    """Key function: the user behind the API key; None (skip) for anonymous calls."""
    acct = account(request)
    return None if acct is None else acct[0]


async def plan(request: Request) -> str | None:
    acct = account(request)
    return None if acct is None else acct[1]


def search_cost(request: Request) -> float:
    """A search costs one token per requested page of 50 results."""
    try:
        size = int(request.query_params.get("size", "50"))
    except ValueError:
        size = 50
    return max(1, -(-size // 50))


# -- policies -------------------------------------------------------------------
# Checked together in ONE TB.MTAKE per request: all or nothing, so a request refused
# by one layer spends nothing on the others.
POLICIES = [
    # every caller, by client address (IPv6 by /64): 10 per second
    per_second("ip", 10),
    # signed-in users, by plan: free 100 per hour, pro 5000 per hour
    tiered(
        "user",
        {"free": Limit.per_hour(100), "pro": Limit.per_hour(5000)},
        tier=plan,
        default="free",
        key=user_id,
    ),
    # an endpoint policy: 5 orders per minute per user
    per_minute("orders", 5, key=user_id, routes=["POST /orders"]),
    # searches cost by page size
    per_minute("search", 60, cost=search_cost, routes=["GET /search"]),
    # a tighter search limit being tried out: charged and counted like an enforced
    # one (redis_tb_shadow_limited_total), never refusing, left out of the headers.
    # Enforcing it later is removing shadow=True.
    per_minute("search-strict", 20, cost=search_cost, routes=["GET /search"], shadow=True),
    # at most 2 streams in progress per client address (SPEC N): each holds a lease of
    # 2 s, renewed every second while it streams, released when its response ends (a
    # client that goes away included), and ended 6 s after its grant whatever its client
    # does (N7: a client that reads nothing cannot keep its slot). Checked in the same
    # call as the buckets above (TB.ACQUIRE ... TAKE: the slot and the buckets, all or
    # nothing).
    Policy("streams", Limit.in_flight(2, lease=2, max_duration=6), routes=["GET /stream"]),
    # 1000 tokens an hour per client address, charged after the fact (SPEC G): the
    # handler holds its max_tokens before it streams and settles what it sent.
    Policy("tokens", Limit.per_hour(1000), settle_later=True, routes=["GET /stream"]),
]

# Metrics in a registry of the app's own, served on /metrics.
registry = CollectorRegistry()
client = AsyncClient.from_url(REDIS_URL, timeout=TIMEOUT)  # 50 ms timeouts, no retries
# The limiter owns its policies and which requests they limit (SPEC L1, F2).
limiter = RateLimiter(
    client,
    policies=POLICIES,
    exclude=["GET /healthz", "GET /stats", "GET /metrics"],
    refund_on=range(500, 600),  # our own failures do not count against callers
    timeout=TIMEOUT,
    client_ip=ClientIP(TRUSTED_PROXIES),
    metrics=PrometheusMetrics(registry, limiter="api"),
    start_degraded=START_DEGRADED,
    backend=BACKEND,
    # (The local deny cache, DenyCache(max_entries=10_000), refuses repeat offenders
    # without a Redis call; bench_app.py turns it on.)
)
# Logins fail CLOSED: if Redis is down, refuse (503) rather than allow guessing. At
# most 20 an hour, a sliding window (SPEC W): a token bucket of 20 an hour would admit
# 40 in a client's first hour. A window is the only policy of its limiter (C10).
strict = RateLimiter(
    client,
    policies=[Policy("login", Limit.window(20, 3600))],
    timeout=TIMEOUT,
    client_ip=ClientIP(TRUSTED_PROXIES),
    fail_open=False,
    metrics=PrometheusMetrics(registry, limiter="login"),
    backend=BACKEND,
)
login_limit = RateLimit(strict)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    if LIMITED:
        # SPEC U1-U4: an unreachable Redis, a missing module, or a Redis Cluster (these
        # policies go several in one call and have no tag function) stops the app here,
        # in one line (uvicorn exits with 3). The login's limiter shares this client and
        # the backend it chose (SPEC E1), its stats and gauge told of it (E6).
        await limiter.startup()
        if client.backend is not None:
            client.backend.on_chosen(strict.on_backend)
    yield
    await client.aclose()


app = FastAPI(title="redis-tb example", lifespan=lifespan)
if LIMITED:
    app.add_middleware(RateLimitMiddleware, limiter=limiter)
    install_problem_handler(app)


def decision(request: Request) -> Decision | None:
    return getattr(request.state, "rate_limit", None)


# -- handlers -------------------------------------------------------------------


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.get("/items/{item_id}")
async def get_item(item_id: int, request: Request) -> dict[str, object]:
    d = decision(request)
    # The decision in a handler: tell a client running low to slow down.
    low = d is not None and d.remaining is not None and d.remaining < 2
    return {"id": item_id, "name": f"item {item_id}", "slow_down": low}


@app.get("/quota")
async def quota(request: Request) -> dict[str, object]:
    """This request's view of every bucket it was charged on."""
    d = decision(request)
    if d is None:
        return {"outcome": "not_limited", "policies": []}
    return {
        "outcome": d.outcome.value,
        "policies": [
            {"name": r.name, "remaining": r.remaining, "capacity": r.capacity, "reset_after": r.reset_after}
            for r in d.results
        ],
    }


class Order(BaseModel):
    item_id: int
    quantity: int


@app.post("/orders", status_code=201)
async def create_order(order: Order, request: Request) -> dict[str, object]:
    if order.quantity <= 0:
        # The app decides not to count a request it rejects itself.
        d = decision(request)
        if d is not None:
            await d.refund()
        raise HTTPException(status_code=422, detail="quantity must be positive")
    return {"item_id": order.item_id, "quantity": order.quantity}


@app.get("/search")
async def search(q: str, size: int = 50) -> dict[str, object]:
    return {"q": q, "size": size, "results": []}


@app.post("/login")
async def login(d: Decision = Depends(login_limit)) -> dict[str, object]:
    return {"ok": True, "attempts_left": d.remaining}


#: the stream's query values and their bounds (examples/manifest.json's GET /stream)
STREAM_QUERY = {"tokens": (3, 0, 10000), "delay_ms": (0, 0, 10000), "max_tokens": (100, 1, 10000)}
_WHOLE = re.compile(r"[0-9]{1,15}")


def stream_query(request: Request) -> dict[str, int] | Response:
    """The stream's query values, or the 400 naming the first out of its bounds: a
    stream as long as a client asks would hold a worker and memory for as long."""
    out: dict[str, int] = {}
    for name, (default, low, high) in STREAM_QUERY.items():
        raw = request.query_params.get(name)
        value = default if raw is None else int(raw) if _WHOLE.fullmatch(raw) else -1
        if not low <= value <= high:
            body = {
                "type": "about:blank", "title": "Bad Request", "status": 400,
                "detail": f"query parameter '{name}' must be a whole number from {low} to {high}",
            }
            return Response(json.dumps(body, separators=(",", ":")), status_code=400, media_type="application/problem+json")
        out[name] = value
    return out


@app.get("/stream")
async def stream(request: Request) -> Response:
    """An LLM proxy's stream (server-sent events): the middleware took one of this
    client's 2 stream slots; the handler holds max_tokens on 'tokens' before it
    streams, then settles the number of tokens it sent, also when the client goes
    away (SPEC G1-G3). A refused hold (a full hold table included, G6) is a 429 naming
    'tokens' (G2); the middleware renews the hold while the stream runs (G5).

    Written as the client reads it: each event is one ASGI send, which waits while
    the client's socket is full; each event also yields to the event loop, so a client
    that goes away stops the stream at its next event (and the other requests' timers
    run meanwhile). At 6 s the middleware ends it whatever its client does (N7)."""
    query = stream_query(request)
    if isinstance(query, Response):
        return query
    tokens, delay = query["tokens"], query["delay_ms"] / 1000
    d = decision(request)
    hold: Hold | None = None
    if d is not None:
        try:
            hold = await d.hold("tokens", query["max_tokens"])
        except StoreError:
            hold = None  # Redis is down: the stream fails open, as the check did
        if hold is not None:
            refused = hold_rejection(limiter, hold)
            if refused is not None:
                return refused

    async def events() -> AsyncIterator[bytes]:
        sent = 0
        try:
            for i in range(1, tokens + 1):
                # a delay, or at least one turn of the event loop: a disconnect is seen
                await asyncio.sleep(delay if i > 1 else 0)
                yield f"data: token-{i}\n\n".encode()  # one model token per event
                sent += 1
            yield b"data: [DONE]\n\n"
        finally:
            if hold is not None:
                try:
                    # shielded: settled also when the stream was cancelled (the client
                    # went away, or max_duration): charged what was sent, surplus back
                    await asyncio.shield(hold.settle(sent))
                except StoreError:
                    pass  # the hold keeps its estimate charged until it expires (G4)

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/metrics")
async def metrics() -> Response:
    """The limiters' Prometheus metrics (not itself limited)."""
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@app.get("/stats")
async def stats() -> dict[str, int]:
    """The limiter's counters (export them to your metrics)."""
    s = limiter.stats
    return {
        "checks": s.checks,
        "allowed": s.allowed,
        "limited": s.limited,
        "store_errors": s.store_errors,
        "degraded": s.degraded,
        "refunds": s.refunds,
        "shadow_limited": s.shadow_limited,
        "deny_cache_hits": s.deny_cache_hits,
        "leases_in_flight": s.leases_in_flight,
        "leases_expired": s.leases_expired,
        "leases_timed_out": s.leases_timed_out,
        "holds": s.holds,
        "holds_lost": s.holds_lost,
        "settlements": s.settlements,
    }
