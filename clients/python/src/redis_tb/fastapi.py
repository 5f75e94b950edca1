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

import json
from typing import Any, Sequence

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .decision import Decision, Hold
from .limiter import BaseLimiter, RateLimiter
from .policy import Policy

__all__ = ["RateLimit", "RateLimitExceeded", "install_problem_handler", "problem_handler"]


class RateLimitExceeded(HTTPException):
    """A 429 (limited) or 503 (store error, failing closed) with its problem body.

    A subclass of Starlette's HTTPException, so without
    :func:`install_problem_handler` it still answers with the right status and
    headers (and FastAPI's usual ``{"detail": ...}`` body).
    """

    def __init__(self, decision: Decision, status_code: int, body: bytes, headers: list[tuple[str, str]]) -> None:
        detail = json.loads(body).get("detail", "")
        plain = {k: v for k, v in headers if k.lower() != "content-type"}
        super().__init__(status_code=status_code, detail=str(detail), headers=plain)
        self.decision = decision
        self.body = body
        self.media_type = next((v for k, v in headers if k.lower() == "content-type"), "application/problem+json")

    @classmethod
    def for_hold(cls, limiter: BaseLimiter, hold: Hold) -> "RateLimitExceeded":
        """SPEC G2: the 429 of a refused hold (``raise RateLimitExceeded.for_hold(
        limiter, hold)``): H1-H3's headers of the hold's policy and P1's body."""
        status, headers, body = limiter.hold_response(hold)
        return cls(hold.decision, status, body or b"", headers)


async def problem_handler(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, RateLimitExceeded):  # pragma: no cover - registered for it only
        raise exc
    # the exact body of SPEC P1-P6, not re-serialized
    return Response(exc.body, status_code=exc.status_code, headers=exc.headers, media_type=exc.media_type)


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

    def __init__(self, limiter: RateLimiter, policies: Sequence[Policy] | None = None) -> None:
        # its own policies on the limiter's connection (the route always matched: L1's
        # unmatched case is not the dependency's), or the limiter's
        self.limiter = limiter if policies is None else limiter.with_policies(policies, limit_unmatched=True)
        self.policies = self.limiter.policies
        if not self.policies:
            raise TypeError("RateLimit needs policies, or a limiter with its policies")
        if any(p.kind == "in_flight" for p in self.policies):
            # SPEC N4: a lease ends when the response is finished, which only the
            # middleware sees; a dependency returns before the response exists.
            raise ValueError(
                "an in-flight policy belongs on RateLimitMiddleware (its lease ends with the "
                "response), not on a RateLimit dependency"
            )

    async def __call__(self, request: Request, response: Response) -> Decision:
        decision = await self.limiter.check(request, route=_route_of(request))
        earlier = getattr(request.state, "rate_limit", None)
        status, headers, body = self.limiter.response(decision)
        if body is not None:  # 429, 503, 400 (SPEC I2) or 500 (L3)
            if isinstance(earlier, Decision):
                await earlier.refund()  # the middleware charged; a refusal burns nothing
            raise RateLimitExceeded(decision, status, body, headers)
        request.state.rate_limit = earlier.merged(decision) if isinstance(earlier, Decision) else decision
        for name, value in headers:
            response.headers.append(name, value)
        return decision
