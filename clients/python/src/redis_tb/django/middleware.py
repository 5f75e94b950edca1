"""``redis_tb.django.RateLimitMiddleware``: every resolved request checked against
``settings.REDIS_TB["POLICIES"]`` in one TB.MTAKE, under WSGI and ASGI alike.

Why ``process_view`` and not ``__call__``: Django resolves the URL after every
middleware's ``__call__`` has started (``BaseHandler._get_response``), with the
``urlconf`` a middleware may have set on the request; ``process_view`` runs right
after that resolution and before the view, with ``request.resolver_match`` set, and
a response it returns replaces the view. So the route template, the URL name and
the view are all known, nothing is resolved twice, a per-request URLconf is
honoured, and a refused request never reaches the view. ``__call__`` then adds the
headers to the response and makes the automatic refunds.

Sync and async: the middleware is ``sync_capable`` and ``async_capable``. With an
async ``get_response`` (ASGI, no sync-only middleware below it) it is a coroutine
function (``markcoroutinefunction``) and its ``process_view`` is a coroutine using
``redis.asyncio``; otherwise both are plain functions using ``redis``. No thread
hop either way.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from ..policy import Policy
from .ending import end_with_response
from .runtime import (
    ATTR,
    CHECKED,
    SEEN,
    VIEW_ATTR,
    DjangoRateLimit,
    RequestDecision,
    ViewLimit,
    get_rate_limit,
)

__all__ = ["RateLimitMiddleware"]

GetResponse = Callable[[HttpRequest], Any]


class RateLimitMiddleware:
    """Add ``"redis_tb.django.RateLimitMiddleware"`` to ``MIDDLEWARE`` (after the
    middleware that sets what your key functions read, e.g. authentication).

    - A refused request gets 429 (``application/problem+json``, ``Retry-After``,
      ``RateLimit-Policy`` / ``RateLimit``); the view is not called.
    - Redis failing: FAIL_OPEN (default) lets the request through without headers;
      ``"FAIL_OPEN": False`` answers 503 with ``Retry-After: 1``.
    - ``request.rate_limit`` is the decision (``not_limited`` when no policy applied,
      the view is excluded or the URL matched no pattern): ``request.rate_limit.refund()`` (sync
      views) / ``await request.rate_limit.arefund()`` (async views) gives the tokens
      back; ``"REFUND_ON": range(500, 600)`` does it for the app's own 5xx.
    - Requests that resolve to no URL pattern are not limited unless
      ``"LIMIT_UNMATCHED": True`` (then they are charged after the 404 is made, and
      a refused one gets the 429 instead). ``EXCLUDE`` (routes or URL names) and the
      ``@rate_limit_exempt`` decorator leave views out.
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        get_rate_limit()  # settings.REDIS_TB checked when Django loads the middleware
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        # process_view is an instance attribute so its kind matches the middleware's:
        # Django calls (or awaits) it as it is, with no sync_to_async thread hop.
        self.process_view: Callable[..., Any]
        if self.is_async:
            markcoroutinefunction(self)
            self.process_view = self._process_view_async
        else:
            self.process_view = self._process_view_sync

    # -- the check (after URL resolution, before the view) -----------------------

    def _process_view_sync(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponseBase | None:
        selected = self._selected(request, view)
        if selected is None:
            return None
        rl, route, policies, fail_open = selected
        limiter, decision = rl.check_sync(request, policies, route, fail_open)
        return rl.record(request, limiter, decision, is_async=False)

    async def _process_view_async(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: Any
    ) -> HttpResponseBase | None:
        selected = self._selected(request, view)
        if selected is None:
            return None
        rl, route, policies, fail_open = selected
        limiter, decision = await rl.check_async(request, policies, route, fail_open)
        return rl.record(request, limiter, decision, is_async=True)

    @staticmethod
    def _selected(
        request: HttpRequest, view: Callable[..., Any]
    ) -> tuple[DjangoRateLimit, str | None, tuple[Policy, ...], bool | None] | None:
        """What ``process_view`` checks (both kinds): the runtime, the route, the
        policies and the view's own FAIL_OPEN; None when the middleware leaves the
        request alone."""
        rl = get_rate_limit()
        own: ViewLimit | None = getattr(view, VIEW_ATTR, None)
        if getattr(view, "rate_limit_exempt", False):
            return None  # a @rate_limit on it then checks its own policies alone
        if own is not None and (own.limiter is not None or any(p.kind == "window" for p in own.policies)):
            # a limiter of its own (SPEC C10: a window policy always is one): the view's
            # @rate_limit checks its policies after this call of the configured ones
            own = None
        selected = rl.select(request, own)
        if selected is None:
            return None  # a @rate_limit view then checks its own policies
        route, policies = selected
        if own is not None:
            setattr(request, CHECKED, own)
        return rl, route, policies, None if own is None else own.fail_open

    # -- around the view ---------------------------------------------------------

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self.__acall__(request)
        setattr(request, SEEN, True)
        setattr(request, ATTR, RequestDecision.not_limited())  # always there for views
        try:
            response: HttpResponseBase = self.get_response(request)
        except BaseException:
            try:
                self._refund_after_error_sync(request)
            finally:
                self._finish_sync(request)  # SPEC N4: the handler raised
            raise
        rl = get_rate_limit()
        if self._unmatched(request):
            # LIMIT_UNMATCHED: no pattern matched, so process_view never ran
            limiter, decision = rl.check_sync(request, rl.policies_unmatched(), None)
            refused = rl.record(request, limiter, decision, is_async=False)
            if refused is not None:
                return refused
        current = getattr(request, ATTR, None)
        if isinstance(current, RequestDecision):
            rl.add_headers(response, current, rl.sync_limiter())
            if rl.config.scope.refunds(response.status_code):
                current.refund()
            if end_with_response(response, current):  # SPEC N4: the whole body is there
                current.finish()
        return response

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        setattr(request, SEEN, True)
        setattr(request, ATTR, RequestDecision.not_limited())  # always there for views
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        try:
            response = await get_response(request)
        except BaseException:  # the handler raised, or the client went away (cancelled)
            try:
                await self._refund_after_error_async(request)
            finally:
                current = getattr(request, ATTR, None)
                if isinstance(current, RequestDecision):
                    await current.afinish()  # SPEC N4
            raise
        rl = get_rate_limit()
        if self._unmatched(request):
            limiter, decision = await rl.check_async(request, rl.policies_unmatched(), None)
            refused = rl.record(request, limiter, decision, is_async=True)
            if refused is not None:
                return refused
        current = getattr(request, ATTR, None)
        if isinstance(current, RequestDecision):
            rl.add_headers(response, current, rl.async_limiter())
            if rl.config.scope.refunds(response.status_code):
                await current.arefund()
            if end_with_response(response, current):  # SPEC N4: the whole body is there
                await current.afinish()
        return response

    @staticmethod
    def _unmatched(request: HttpRequest) -> bool:
        return get_rate_limit().config.scope.limit_unmatched and getattr(request, "resolver_match", None) is None

    @staticmethod
    def _finish_sync(request: HttpRequest) -> None:
        current = getattr(request, ATTR, None)
        if isinstance(current, RequestDecision):
            current.finish()

    # With DEBUG_PROPAGATE_EXCEPTIONS (or a middleware below that re-raises) the view's
    # error reaches here instead of becoming a 500 response: treat it as a 500.
    @staticmethod
    def _refund_after_error_sync(request: HttpRequest) -> None:
        decision = getattr(request, ATTR, None)
        if isinstance(decision, RequestDecision) and get_rate_limit().config.scope.refunds(500):
            decision.refund()

    @staticmethod
    async def _refund_after_error_async(request: HttpRequest) -> None:
        decision = getattr(request, ATTR, None)
        if isinstance(decision, RequestDecision) and get_rate_limit().config.scope.refunds(500):
            await decision.arefund()
