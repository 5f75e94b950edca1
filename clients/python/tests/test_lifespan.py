"""SPEC U1/U2 under ASGI servers: a failed startup check reaches the server's log as the
StartupError's one line, not as the framework's traceback; other lifespan errors and a
good startup pass through unchanged."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from starlette.applications import Starlette

from redis_tb import RateLimiter
from redis_tb.asgi import RateLimitMiddleware
from redis_tb.client import AsyncClient, StartupError

LINE = "redis-tb: cannot reach Redis at 127.0.0.1:1 (refused): start it, or set start_degraded to start failing open"


def app_raising(exc: BaseException | None) -> Any:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if exc is not None:
            raise exc
        yield

    app = Starlette(lifespan=lifespan)
    limiter = RateLimiter(AsyncClient.from_url("redis://127.0.0.1:1/0"))
    return RateLimitMiddleware(app, limiter=limiter, policies=[])


async def run_lifespan(app: Any) -> tuple[list[dict[str, Any]], BaseException | None]:
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "lifespan.startup"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "lifespan.shutdown"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
    except BaseException as exc:  # noqa: BLE001 - the test inspects what escaped
        return sent, exc
    return sent, None


async def test_a_startup_error_is_one_line() -> None:
    sent, escaped = await run_lifespan(app_raising(StartupError(LINE)))
    assert sent == [{"type": "lifespan.startup.failed", "message": LINE}]
    assert escaped is None


async def test_another_error_keeps_the_framework_report() -> None:
    sent, escaped = await run_lifespan(app_raising(ValueError("boom")))
    assert isinstance(escaped, ValueError)
    assert [m["type"] for m in sent] == ["lifespan.startup.failed"]
    assert "Traceback" in sent[0]["message"] and "boom" in sent[0]["message"]


async def test_a_good_startup_passes_through() -> None:
    sent, escaped = await run_lifespan(app_raising(None))
    assert escaped is None
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
