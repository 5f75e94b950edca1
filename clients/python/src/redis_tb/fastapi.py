"""A per-route FastAPI dependency, and the handler that turns its refusals into
RFC 9457 problem responses.

::

    orders = RateLimit(limiter, [per_minute("orders", 5, key=user_id)])

    @app.post("/orders")
    async def create(decision: Decision = Depends(orders)): ...

    install_problem_handler(app)

The dependency costs its own round trip; policies on the middleware (with
``routes=``) are checked in the middleware's single TB.MTAKE. When both check a
request and the dependency refuses, the middleware's tokens are refunded, so a
refusal burns nothing either way.
"""

# No ``from __future__ import annotations`` here: FastAPI reads these signatures'
# annotations at runtime to inject the request and the response.

from typing import Any, Sequence

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .decision import Decision, Outcome
from .headers import PROBLEM_TYPE, problem, store_error_problem
from .limiter import RateLimiter
from .policy import Policy

__all__ = ["RateLimit", "RateLimitExceeded", "install_problem_handler", "problem_handler"]


class RateLimitExceeded(HTTPException):
    """A 429 (limited) or 503 (store error, failing closed) with its problem body.

    A subclass of Starlette's HTTPException, so without
    :func:`install_problem_handler` it still answers with the right status and
    headers (and FastAPI's usual ``{"detail": ...}`` body).
    """

    def __init__(self, decision: Decision, status_code: int, body: dict[str, object], headers: dict[str, str]) -> None:
        super().__init__(status_code=status_code, detail=str(body.get("detail", "")), headers=headers)
        self.decision = decision
        self.body = body


async def problem_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RateLimitExceeded):  # pragma: no cover - registered for it only
        raise exc
    return JSONResponse(exc.body, status_code=exc.status_code, headers=exc.headers, media_type=PROBLEM_TYPE)


def install_problem_handler(app: Any) -> None:
    """Answer :class:`RateLimitExceeded` with ``application/problem+json``."""
    app.add_exception_handler(RateLimitExceeded, problem_handler)


def _route_of(request: Request) -> str | None:
    route = request.scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return None if path is None else f"{request.method} {path}"


class RateLimit:
    """A dependency checking ``policies`` for the route it is attached to.

    Returns the :class:`Decision` (also on ``request.state.rate_limit``, merged
    with the middleware's if there is one). Sets the rate-limit headers on the
    response (kept when the handler returns data; a handler returning its own
    ``Response`` must copy them: ``decision_headers(decision)``).
    """

    def __init__(self, limiter: RateLimiter, policies: Sequence[Policy]) -> None:
        names = [p.name for p in policies]
        if len(set(names)) != len(names):
            raise ValueError(f"policy names must be distinct: {names}")
        self.limiter = limiter
        self.policies = tuple(policies)

    async def __call__(self, request: Request, response: Response) -> Decision:
        decision = await self.limiter.check(request, self.policies, _route_of(request))
        earlier = getattr(request.state, "rate_limit", None)
        headers = self.limiter.headers(decision)
        if decision.outcome is Outcome.LIMITED:
            if isinstance(earlier, Decision):
                await earlier.refund()  # the middleware charged; a refusal burns nothing
            raise RateLimitExceeded(decision, 429, problem(decision), dict(headers))
        if not decision.allowed:
            if isinstance(earlier, Decision):
                await earlier.refund()
            raise RateLimitExceeded(decision, 503, store_error_problem(), {"Retry-After": "1"})
        request.state.rate_limit = earlier.merged(decision) if isinstance(earlier, Decision) else decision
        for name, value in headers:
            response.headers.append(name, value)
        return decision
