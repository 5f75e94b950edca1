"""The app test_leases.py and test_max_duration.py serve with uvicorn (SPEC N4, N5, N7,
G1-G5), configured by environment: TB_REDIS_URL, TB_LEASE (the in-flight policy's lease,
seconds), TB_MAX_DURATION (its max_duration, seconds, default 300).

``GET /stream`` streams ``chunk-0`` then waits for ``GET /open`` before its last
chunk; ``GET /ticks`` streams a chunk every 20 ms (200 of them) so a client that
goes away is noticed at the next one; ``GET /slow`` answers after ``GET /open``;
``GET /boom`` raises; ``GET /hold`` holds ``estimate`` on the settle_later policy
``tokens`` and settles ``actual``. The in-flight policy ``conc`` (1 per client
address) applies to those routes, not to ``/open``. ``GET /flood`` streams 64 KiB
chunks for ever (a client that reads nothing holds its writer up); ``GET /hold-stream``
holds ``estimate`` with ``ttl`` seconds, streams a line every 50 ms for ``seconds``, then
settles ``actual`` (its settlement is in ``GET /stats``, with the limiter's counters).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from redis_tb import AsyncClient, Decision, Limit, Policy, RateLimiter, RateLimitMiddleware
from redis_tb.asgi import HoldRefused, hold_rejection
from redis_tb.fastapi import RateLimitExceeded, install_problem_handler

limiter = RateLimiter(AsyncClient.from_url(os.environ["TB_REDIS_URL"], timeout=2), timeout=2)
LIMITED = [
    "GET /stream", "GET /ticks", "GET /slow", "GET /boom", "GET /hold", "GET /hold-raise", "GET /flood",
    "GET /hold-stream",
]
LEASE = float(os.environ.get("TB_LEASE", "30"))
MAX_DURATION = float(os.environ.get("TB_MAX_DURATION", "300"))
policies = [
    Policy("conc", Limit.in_flight(1, lease=LEASE, max_duration=MAX_DURATION), routes=LIMITED),
    # a rate of 1e-9/s: the bucket does not visibly refill while a test runs
    Policy("tokens", Limit(1000, 1e-9), settle_later=True, routes=["GET /hold", "GET /hold-raise", "GET /hold-stream"]),
]
settlements: list[dict[str, Any]] = []

app = FastAPI()
app.add_middleware(RateLimitMiddleware, limiter=limiter, policies=policies)
install_problem_handler(app)
gate = asyncio.Event()


@app.get("/open")
async def open_gate() -> dict[str, bool]:
    gate.set()
    return {"open": True}


@app.get("/close")
async def close_gate() -> dict[str, bool]:
    gate.clear()
    return {"open": False}


@app.get("/stream")
async def stream() -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield b"chunk-0\n"
        await gate.wait()
        yield b"chunk-1\n"

    return StreamingResponse(body(), media_type="text/plain")


@app.get("/ticks")
async def ticks() -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for i in range(200):
            yield b"tick-%d\n" % i
            await asyncio.sleep(0.02)

    return StreamingResponse(body(), media_type="text/plain")


@app.get("/slow")
async def slow() -> dict[str, bool]:
    await gate.wait()
    return {"done": True}


@app.get("/boom")
async def boom() -> dict[str, bool]:
    raise RuntimeError("the handler failed")


@app.get("/hold")
async def hold(request: Request, estimate: float, actual: float) -> Response:
    decision: Decision = request.state.rate_limit
    got = await decision.hold("tokens", estimate)
    refused = hold_rejection(limiter, got)
    if refused is not None:
        return refused
    settled = await got.settle(actual)
    return JSONResponse({
        "id": got.id, "held_remaining": got.remaining, "settled": settled.settled,
        "charged": settled.charged, "remaining": settled.remaining,
    })


@app.get("/hold-raise")
async def hold_raise(request: Request, estimate: float, how: str) -> dict[str, bool]:
    """A refused hold raised: ``how=middleware`` (HoldRefused, answered by the
    middleware) or ``how=fastapi`` (RateLimitExceeded, answered by the problem handler)."""
    got = await request.state.rate_limit.hold("tokens", estimate)
    if not got.allowed:
        if how == "middleware":
            raise HoldRefused(limiter, got)
        raise RateLimitExceeded.for_hold(limiter, got)
    await got.settle(estimate)
    return {"held": True}


@app.get("/flood")
async def flood() -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        chunk = b"x" * 65536
        while True:
            yield chunk
            await asyncio.sleep(0.001)

    return StreamingResponse(body(), media_type="application/octet-stream")


@app.get("/hold-stream")
async def hold_stream(request: Request, estimate: float, actual: float, ttl: float, seconds: float) -> Response:
    got = await request.state.rate_limit.hold("tokens", estimate, ttl)
    refused = hold_rejection(limiter, got)
    if refused is not None:
        return refused

    async def body() -> AsyncIterator[bytes]:
        try:
            for _ in range(int(seconds / 0.05)):
                yield b"tick\n"
                await asyncio.sleep(0.05)
        finally:
            settled = await got.settle(actual)
            settlements.append(dataclasses.asdict(settled))

    return StreamingResponse(body(), media_type="text/plain")


@app.get("/stats")
async def stats() -> dict[str, Any]:
    return {**dataclasses.asdict(limiter.stats), "settlements": settlements}
