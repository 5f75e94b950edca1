"""The example API: sync and async views, an endpoint decorator, a refund, a
fail-closed login."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from redis_tb.django import RequestDecision, rate_limit

from .limits import user_id


def decision(request: HttpRequest) -> RequestDecision | None:
    found = getattr(request, "rate_limit", None)
    return found if isinstance(found, RequestDecision) else None


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@require_GET
def item(request: HttpRequest, item_id: int) -> JsonResponse:
    d = decision(request)
    # The decision in a view: tell a client running low to slow down.
    low = d is not None and d.remaining is not None and d.remaining < 2
    return JsonResponse({"id": item_id, "name": f"item {item_id}", "slow_down": low})


@require_GET
async def async_item(request: HttpRequest, item_id: int) -> JsonResponse:
    """An async view: under ASGI the whole path is async (redis.asyncio)."""
    return JsonResponse({"id": item_id, "async": True})


@require_GET
def quota(request: HttpRequest) -> JsonResponse:
    """This request's view of every bucket it was charged on."""
    d = decision(request)
    if d is None:
        return JsonResponse({"outcome": "not_limited", "policies": []})
    return JsonResponse({
        "outcome": d.outcome.value,
        "policies": [
            {"name": r.name, "key": r.key, "remaining": r.remaining, "capacity": r.capacity}
            for r in d.results
        ],
    })


@require_GET
def search(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"q": request.GET.get("q", ""), "results": []})


@csrf_exempt
@require_POST
@rate_limit("orders", per_minute=5, key=user_id)  # checked in the middleware's TB.MTAKE
def orders(request: HttpRequest) -> JsonResponse:
    try:
        body = json.loads(request.body or b"{}")
        quantity = int(body.get("quantity", 0))
    except (ValueError, TypeError, AttributeError):
        quantity = 0
    if quantity <= 0:
        # Not the caller's fault to count: give the tokens back (every policy charged).
        d = decision(request)
        refunded = d.refund() if d is not None else False
        return JsonResponse({"error": "quantity must be > 0", "refunded": refunded}, status=400)
    return JsonResponse({"ordered": quantity}, status=201)


@csrf_exempt
@require_POST
def exports(request: HttpRequest) -> JsonResponse:
    d = decision(request)
    return JsonResponse({"started": True, "shadow_limited": list(d.shadow_limited) if d else []}, status=202)


@require_GET
def flaky(request: HttpRequest) -> HttpResponse:
    """Our own failure: REFUND_ON gives the caller's tokens back."""
    return JsonResponse({"error": "upstream unavailable"}, status=503)


@csrf_exempt
@require_POST
# Logins fail CLOSED: if Redis is down, refuse (503) rather than allow guessing.
@rate_limit("login", per_hour=20, fail_open=False)
async def login(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"token": "not-a-real-token"})
