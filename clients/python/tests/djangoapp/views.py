"""Views that report what the limiter decided, for test_django.py."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from redis_tb import per_minute
from redis_tb.django import RequestDecision, rate_limit, rate_limit_exempt


def _report(request: HttpRequest, status: int = 200, **extra: object) -> JsonResponse:
    d = getattr(request, "rate_limit", None)
    body: dict[str, object] = {"outcome": None, "keys": [], **extra}
    if isinstance(d, RequestDecision):
        body.update(
            outcome=d.outcome.value,
            keys=[r.key for r in d.results],
            shadow_limited=list(d.shadow_limited),
            route=request.resolver_match.route if request.resolver_match else None,
        )
    return JsonResponse(body, status=status)


def item(request: HttpRequest, item_id: int) -> JsonResponse:
    return _report(request)


async def async_item(request: HttpRequest, item_id: int) -> JsonResponse:
    return _report(request)


def order(request: HttpRequest, order_id: int) -> JsonResponse:
    return _report(request)


def fail(request: HttpRequest) -> JsonResponse:
    return _report(request, status=503)


def boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view failed")


def refund(request: HttpRequest) -> JsonResponse:
    d = getattr(request, "rate_limit")
    first = d.refund()
    again = d.refund()
    return _report(request, refunded=[first, again])


async def arefund(request: HttpRequest) -> JsonResponse:
    d = getattr(request, "rate_limit")
    first = await d.arefund()
    again = await d.arefund()
    return _report(request, refunded=[first, again])


@rate_limit("deco", per_hour=2)
def deco(request: HttpRequest) -> JsonResponse:
    return _report(request)


@rate_limit("adeco", per_hour=2)
async def adeco(request: HttpRequest) -> JsonResponse:
    return _report(request)


@rate_limit(per_minute("pair-a", 3), per_minute("pair-b", 1), fail_open=False)
def closed(request: HttpRequest) -> JsonResponse:
    return _report(request)


@rate_limit("decofail", per_hour=5)
def decofail(request: HttpRequest) -> JsonResponse:
    return _report(request, status=500)


@rate_limit_exempt
def exempt(request: HttpRequest) -> JsonResponse:
    return _report(request)


@rate_limit_exempt
@rate_limit("own", per_hour=1)
def exempt_own(request: HttpRequest) -> JsonResponse:
    return _report(request)


def sync_only_middleware(get_response: Any) -> Any:
    """A plain function middleware: sync only (Django's default)."""

    def middleware(request: HttpRequest) -> Any:
        return get_response(request)

    return middleware
