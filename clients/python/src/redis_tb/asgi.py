"""A pure-ASGI rate-limit middleware for Starlette and FastAPI apps.

Pure ASGI rather than ``BaseHTTPMiddleware``: responses stream through untouched
(the headers are added to ``http.response.start``), background tasks and
contextvars behave, and there is no extra task per request (but for a request with a
lease or a settle_later policy: its app runs in a task of its own beside the timers that
renew the lease and the holds, so that max_duration can end it, SPEC N7).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Collection, Sequence

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .client import StartupError
from .decision import Decision, Hold
from .keys import ClientIpKey, FixedKey, HeaderKey
from .limiter import BaseLimiter, RateLimiter
from .policy import InFlightLimit, Limit, Policy, WindowLimit
from .renewal import AsyncTimers

__all__ = ["HoldRefused", "RateLimitMiddleware", "hold_rejection", "route_template"]


def hold_rejection(limiter: BaseLimiter, hold: Hold) -> Response | None:
    """SPEC G2: the ready 429 of a refused hold (H1-H3's headers of its policy, P1's
    body), or None when the hold was taken. ``return`` it from the handler."""
    if hold.allowed:
        return None
    status, headers, body = limiter.hold_response(hold)
    plain = {k: v for k, v in headers if k.lower() != "content-type"}
    return Response(body, status_code=status, headers=plain, media_type="application/problem+json")


class HoldRefused(Exception):
    """Raise ``HoldRefused(limiter, hold)`` from a handler for a refused hold:
    :class:`RateLimitMiddleware` answers it with the hold's 429 (SPEC G2) when the
    response has not started."""

    def __init__(self, limiter: BaseLimiter, hold: Hold) -> None:
        super().__init__(f"hold refused by policy {hold.policy!r}")
        self.limiter = limiter
        self.hold = hold


async def _end(decision: Decision, timers: AsyncTimers) -> None:
    """SPEC N4, G5: stop the renewals (the lease's and the holds') and release the
    lease once (shielded: a cancelled request still releases)."""
    timers.stop()
    if decision.lease is not None:
        await asyncio.shield(decision.finish())


async def _app_with_timers(app: Awaitable[None], decision: Decision, timers: AsyncTimers) -> None:
    """The app in a task of its own, beside the request's timers: at the lease's
    max_duration (SPEC N7) the task is cancelled, so a streamed body stops (a write a
    client that reads nothing holds up included) and nothing more is sent. The ASGI
    server then closes the connection of a response it saw start and not end; a
    response not yet started is never sent (the server answers the request itself,
    uvicorn with a bare 500)."""
    task = asyncio.ensure_future(app)
    timers.on_timeout = task.cancel
    timers.start()
    try:
        await task
    except asyncio.CancelledError:
        if not decision.timed_out or not task.cancelled():
            raise  # the request itself was cancelled (the client went away, shutdown)


def _match(routes: Sequence[Any], scope: Scope, prefix: str) -> str | None:
    for route in routes:
        try:
            match, child = route.matches(scope)
        except Exception:  # a custom route type that cannot judge this scope
            continue
        if match is not Match.FULL:
            continue  # PARTIAL (wrong method) is not this route: the router answers 405
        sub = getattr(route, "routes", None)
        if sub:
            inner = _match(sub, {**scope, **child}, prefix + getattr(route, "path", ""))
            if inner is not None:
                return inner
            continue
        fmt = getattr(route, "path_format", None)
        if fmt is None:
            return None
        if isinstance(route, Mount):
            return prefix + route.path + "/{path}"
        return prefix + str(fmt)
    return None


def route_template(scope: Scope) -> str | None:
    """``"METHOD /template"`` of the route that will serve ``scope``, matched the
    way Starlette's router will, or None when no route fully matches."""
    app = scope.get("app")
    routes = getattr(app, "routes", None)
    if not routes:
        return None
    path = _match(routes, scope, "")
    return None if path is None else f"{scope['method']} {path}"


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]


class RateLimitMiddleware:
    """Checks every HTTP request against the limiter's policies in one call (TB.TAKE
    for one applicable policy, TB.MTAKE for several; SPEC L4)::

        limiter = RateLimiter(client, policies=[...], exclude=["GET /healthz"])
        app.add_middleware(RateLimitMiddleware, limiter=limiter)

    - Policies with ``routes`` apply to those route templates only; the others to
      every route. Requests that match no route pass unlimited unless the limiter's
      ``limit_unmatched`` (then ``route`` is None and only route-less policies apply).
      Routes in its ``exclude`` (``"GET /healthz"``) are never limited (SPEC L1: the
      limiter's scope; the middleware only asks :meth:`RateLimiter.limits`).
    - ``policies`` (and ``exclude``, ``limit_unmatched``, ``refund_on``) given here
      instead: the middleware checks them with ``limiter.with_policies(...)`` (the
      same connection, breaker and stats).
    - Allowed: the response gets ``RateLimit-Policy`` / ``RateLimit`` (and legacy
      headers if the limiter says so). Refused: 429 with ``Retry-After`` and an RFC
      9457 body naming the violated policies; the app is not called.
    - Redis failing: fail-open passes the request without rate-limit headers;
      fail-closed answers 503 with ``Retry-After: 1``.
    - The decision is ``request.state.rate_limit``; ``await
      request.state.rate_limit.refund()`` gives the tokens back. ``refund_on``
      (status codes, or a predicate) refunds automatically after the response,
      e.g. ``refund_on=range(500, 600)``. Default: no automatic refund.
    """

    def __init__(
        self,
        app: ASGIApp,
        limiter: RateLimiter,
        policies: Sequence[Policy] | None = None,
        *,
        limit_unmatched: bool = False,
        exclude: Collection[str] = (),
        refund_on: Collection[int] | Callable[[int], bool] = (),
    ) -> None:
        self.app = app
        if policies is not None:
            limiter = limiter.with_policies(policies, exclude=exclude, limit_unmatched=limit_unmatched, refund_on=refund_on)
        elif not limiter.policies:
            raise TypeError("RateLimitMiddleware needs a limiter with its policies: RateLimiter(client, policies=[...])")
        elif exclude or limit_unmatched or refund_on:
            raise TypeError("exclude, limit_unmatched and refund_on belong to the limiter that owns the policies")
        self.limiter = limiter
        self.policies = limiter.policies
        #: SPEC L1, F2: the limiter's scope (which requests, which answers refund)
        self.limit_scope = limiter.scope
        # A Starlette Request is built only for user functions (key/limit/cost/tier,
        # hash_tag); the default identity reads the peer and headers off the scope.
        self._needs_request = limiter.hash_tag is not None or any(
            (p.key is not None and not isinstance(p.key, (ClientIpKey, HeaderKey, FixedKey)))
            or not isinstance(p.limit, (Limit, WindowLimit, InFlightLimit))
            or callable(p.cost)
            for p in self.policies
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await _lifespan(self.app, scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        route = route_template(scope)
        if not self.limiter.limits(route):  # SPEC L1: unmatched (unless limit_unmatched) or excluded
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        peer = client[0] if client else None

        def header_values(name: str) -> list[str]:
            key = name.encode("latin-1")
            return [v.decode("latin-1") for k, v in scope["headers"] if k == key]

        # No receive: key functions see headers and the peer, never the body.
        request = Request(scope) if self._needs_request else scope
        decision = await self.limiter.check(request, route=route, peer=peer, headers=header_values)
        scope.setdefault("state", {})["rate_limit"] = decision
        status, headers, body = self.limiter.response(decision)
        if body is not None:  # 429, 503 (failing closed), 400 (I2), 500 (L3)
            raw = _raw(headers) + [(b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": status, "headers": raw})
            await send({"type": "http.response.body", "body": body})
            return
        await self._serve(scope, receive, send, decision, _raw(headers))

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        decision: Decision,
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        status = 500
        started = False
        # SPEC N5, N7, G5: a lease, and the holds the handler takes, are renewed while
        # the request runs; at its max_duration the lease is released and the response
        # ended (the app's task cancelled). No lease and no settle_later policy (the
        # hot path): nothing to renew or release, no task made for it.
        timers = AsyncTimers(decision) if decision.lease is not None or decision._holdable else None

        async def send_with_headers(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
                if extra:  # first, so the middleware's items lead any the app adds
                    own = message.get("headers", ())
                    # a 429 with its own rate-limit headers (a refused hold's, SPEC G2)
                    # keeps them alone
                    if status != 429 or not any(k.lower() == b"ratelimit-policy" for k, _ in own):
                        message["headers"] = [*extra, *own]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                # Settle an automatic refund before the response completes: a client
                # that has the response sees the bucket as refunded.
                if self.limit_scope.refunds(status):
                    await decision.refund()
                # SPEC N4: the body is sent (a streamed body's last chunk included):
                # the lease ends before the final message, so a client that has the
                # whole response finds its slot free.
                if timers is not None:
                    await _end(decision, timers)
            await send(message)

        try:
            if timers is None:
                await self.app(scope, receive, send_with_headers)
            else:
                await _app_with_timers(self.app(scope, receive, send_with_headers), decision, timers)
        except HoldRefused as refused:
            if started:
                raise
            status, headers, body = refused.limiter.hold_response(refused.hold)
            raw = _raw(headers) + [(b"content-length", str(len(body or b"")).encode())]
            if timers is not None:
                await _end(decision, timers)
            await send({"type": "http.response.start", "status": status, "headers": raw})
            await send({"type": "http.response.body", "body": body or b""})
        finally:
            # The app failed before finishing its response (or never sent one), the
            # client went away mid-response, the task was cancelled, or the request
            # reached its max_duration (SPEC N4, N7).
            try:
                if self.limit_scope.refunds(status):
                    await decision.refund()
            finally:
                if timers is not None:
                    await _end(decision, timers)


async def _lifespan(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """SPEC U1/U2: a failed startup check is one line in the server's log, not a
    traceback. The framework reports an exception raised in its lifespan as
    ``lifespan.startup.failed`` with the whole traceback as the message, then raises it
    again; a :class:`StartupError` is reported with its own one-line message instead."""
    held: list[Message] = []

    async def hold_failure(message: Message) -> None:
        if message["type"] == "lifespan.startup.failed":
            held.append(message)
            return
        await send(message)

    try:
        await app(scope, receive, hold_failure)
    except StartupError as exc:
        await send({"type": "lifespan.startup.failed", "message": str(exc)})
        return
    except BaseException:
        for message in held:
            await send(message)
        raise
    for message in held:
        await send(message)
