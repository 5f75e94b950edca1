"""The app the end-to-end tests serve with uvicorn, configured by environment:

TB_REDIS_URL, TB_FAIL_OPEN (1/0), TB_TIMEOUT (s), TB_COOLDOWN (s),
TB_TRUSTED (comma-separated CIDRs), TB_NOW (a fixed clock, epoch seconds).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from redis_tb import (
    AsyncClient,
    ClientIP,
    Decision,
    Key,
    Limit,
    Policy,
    RateLimiter,
    RateLimitMiddleware,
    per_hour,
    per_second,
)
from redis_tb.fastapi import RateLimit, install_problem_handler

env = os.environ
fixed_now = float(env["TB_NOW"]) if env.get("TB_NOW") else None
timeout = float(env.get("TB_TIMEOUT", "1"))

limiter = RateLimiter(
    AsyncClient.from_url(env["TB_REDIS_URL"], timeout=timeout),
    client_ip=ClientIP([t for t in env.get("TB_TRUSTED", "").split(",") if t]),
    fail_open=env.get("TB_FAIL_OPEN", "1") == "1",
    timeout=timeout,
    cooldown=float(env.get("TB_COOLDOWN", "1")),
    legacy_headers=True,
    clock=None if fixed_now is None else (lambda: fixed_now or 0.0),
    backend=env.get("TB_BACKEND", "auto"),  # checked by the limiter (SPEC E1)
)


def user(request: Request) -> str | None:
    return request.headers.get("x-user")


def cost(request: Request) -> float:
    return float(request.headers.get("x-cost", "1"))


def export_cost(request: Request) -> float:
    # whatever the application computes, out of range included (SPEC L3)
    return float(request.headers.get("x-cost", "1"))


def export_limit(request: Request) -> Limit:
    return Limit(10, float(request.headers.get("x-rate", "1")))


policies = [
    # 4 at once, one back every 4 s: exact header values under a fixed clock.
    Policy("burst", Limit(4, 0.25), routes=["GET /burst"]),
    per_hour("hourly", 5, routes=["GET /hourly"]),
    per_second("fast", 2, routes=["GET /fast"]),
    per_hour("shared", 10, routes=["GET /shared"]),
    # layered: a wide per-IP policy and a tight per-user one, all or nothing
    per_hour("ipwide", 100, routes=["GET /layered"]),
    per_hour("user", 2, key=user, routes=["GET /layered"]),
    per_hour("who", 3, routes=["GET /whoami"]),
    per_hour("costly", 5, cost=cost, routes=["GET /cost"]),
    per_hour("refunds", 2, routes=["GET /refund", "GET /boom/{code}"]),
    per_hour("comboip", 100, routes=["GET /combo"]),
    # issue 27: out-of-range costs and limits, header identities, unambiguous keys
    per_hour("invip", 100, routes=["GET /invalid"]),
    per_hour("export", 10, cost=export_cost, routes=["GET /invalid"]),
    Policy("exportlim", export_limit, routes=["GET /invalid"]),
    per_hour("apikey", 100, key=Key.header("x-api-key"), routes=["GET /hdr"]),
    per_hour("amb", 100, key=user, per_route=True, routes=["GET /amb/x", "GET /amb/x:y"]),
]


def tag_of(request: Request) -> str | None:
    return request.headers.get("x-tag")


# a limiter whose keys carry the request's hash tag (SPEC K4), checked by a dependency
tag_limiter = RateLimiter(
    AsyncClient.from_url(env["TB_REDIS_URL"], timeout=timeout), hash_tag=tag_of, timeout=timeout,
)
tagged = RateLimit(tag_limiter, [per_hour("tagged", 100, key=user)])


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await limiter.startup()
    yield
    await limiter.aclose()
    await tag_limiter.aclose()


app = FastAPI(lifespan=lifespan)
app.add_middleware(RateLimitMiddleware, limiter=limiter, policies=policies, refund_on=range(500, 600))
install_problem_handler(app)


def summary(request: Request) -> dict[str, object]:
    d = request.state.rate_limit
    return {
        "outcome": d.outcome.value,
        "keys": [r.key for r in d.results],
        "remaining": d.remaining,
    }


@app.get("/burst")
@app.get("/hourly")
@app.get("/fast")
@app.get("/shared")
@app.get("/layered")
@app.get("/whoami")
@app.get("/cost")
@app.get("/invalid")
@app.get("/hdr")
@app.get("/amb/x")
@app.get("/amb/x:y")
async def plain(request: Request) -> dict[str, object]:
    return summary(request)


@app.get("/refund")
async def refund(request: Request, skip: int = 0) -> dict[str, object]:
    if skip:
        await request.state.rate_limit.refund()
    return summary(request)


@app.get("/boom/{code}")
async def boom(code: int) -> JSONResponse:
    return JSONResponse({"code": code}, status_code=code)


combo = RateLimit(limiter, [per_hour("combodep", 1)])


@app.get("/combo")
async def with_dependency(request: Request, decision: Decision = Depends(combo)) -> dict[str, object]:
    return {**summary(request), "dependency": [r.key for r in decision.results]}


@app.get("/stats")
async def stats() -> dict[str, int]:
    s = limiter.stats
    return {"store_errors": s.store_errors, "degraded": s.degraded, "refunds": s.refunds}


@app.get("/tagged")
async def with_tag(request: Request, decision: Decision = Depends(tagged)) -> dict[str, object]:
    return {"keys": [r.key for r in decision.results]}


@app.get("/stats/invalid")
async def invalid_stats() -> dict[str, int]:
    return {"invalid_inputs": limiter.stats.invalid_inputs, "checks": limiter.stats.checks}
