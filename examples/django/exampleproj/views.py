"""The example API: sync and async views, an endpoint decorator, a refund, a
fail-closed login limited by a sliding window, and an LLM-proxy-style stream."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import AsyncIterator, Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from redis_tb import Hold, Limit, Policy, StoreError
from redis_tb.django import RequestDecision, hold_rejection, rate_limit

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
        return JsonResponse({"error": "quantity must be > 0", "refunded": refunded}, status=422)
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
# Logins fail CLOSED: if Redis is down, refuse (503) rather than allow guessing. At most
# 20 an hour, a sliding window (SPEC W): a token bucket of 20 an hour would admit 40 in a
# client's first hour. A window is checked in a call of its own (C10), after the
# middleware's call of the configured policies.
@rate_limit(Policy("login", Limit.window(20, 3600)), fail_open=False, limiter="login")
async def login(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"token": "not-a-real-token"})


#: the stream's query values and their bounds (examples/manifest.json's GET /stream)
STREAM_QUERY = {"tokens": (3, 0, 10000), "delay_ms": (0, 0, 10000), "max_tokens": (100, 1, 10000)}
_WHOLE = re.compile(r"[0-9]{1,15}")


def stream_query(request: HttpRequest) -> dict[str, int] | HttpResponse:
    """The stream's query values, or the 400 naming the first out of its bounds: a
    stream as long as a client asks would hold a worker and memory for as long."""
    out: dict[str, int] = {}
    for name, (default, low, high) in STREAM_QUERY.items():
        raw = request.GET.get(name)
        value = default if raw is None else int(raw) if _WHOLE.fullmatch(raw) else -1
        if not low <= value <= high:
            body = {
                "type": "about:blank", "title": "Bad Request", "status": 400,
                "detail": f"query parameter '{name}' must be a whole number from {low} to {high}",
            }
            return HttpResponse(json.dumps(body, separators=(",", ":")), status=400, content_type="application/problem+json")
        out[name] = value
    return out


@require_GET
def stream(request: HttpRequest) -> HttpResponseBase:
    """An LLM proxy's stream (server-sent events): the middleware took one of this
    client's 2 stream slots; the view holds max_tokens on 'tokens' before it streams,
    then settles the number of tokens it sent, also when the client goes away (SPEC
    G1-G3). A refused hold (a full hold table included, G6) is a 429 naming 'tokens'
    (G2); the middleware renews the hold while the stream runs (G5) and ends the stream
    6 s after its grant whatever its client does (N7). Under WSGI the body is a
    generator (each event written whole before the next: the server's blocking write
    is the backpressure, and a client gone makes it fail), under ASGI an async
    generator (each event one ASGI send, and one turn of the event loop)."""
    query = stream_query(request)
    if isinstance(query, HttpResponse):
        return query
    tokens, delay = query["tokens"], query["delay_ms"] / 1000
    d = decision(request)
    hold: Hold | None = None
    if d is not None:
        try:
            hold = d.hold("tokens", query["max_tokens"])
        except StoreError:
            hold = None  # Redis is down: the stream fails open, as the check did
        if hold is not None:
            refused = hold_rejection(hold)
            if refused is not None:
                return refused
    if "wsgi.input" in request.META:
        return StreamingHttpResponse(_events(hold, tokens, delay), content_type="text/event-stream")
    return StreamingHttpResponse(_aevents(hold, tokens, delay), content_type="text/event-stream")


def _events(hold: Hold | None, tokens: int, delay: float) -> Iterator[bytes]:
    sent = 0
    try:
        for i in range(1, tokens + 1):
            if i > 1 and delay:
                time.sleep(delay)
            yield f"data: token-{i}\n\n".encode()  # one model token per event
            sent += 1
        yield b"data: [DONE]\n\n"
    finally:
        if hold is not None:
            try:
                hold.settle_sync(sent)  # charged what was sent, the surplus back
            except StoreError:
                pass  # the hold keeps its estimate charged until it expires (G4)


async def _aevents(hold: Hold | None, tokens: int, delay: float) -> AsyncIterator[bytes]:
    sent = 0
    try:
        for i in range(1, tokens + 1):
            # a delay, or at least one turn of the event loop: a disconnect is seen
            await asyncio.sleep(delay if i > 1 else 0)
            yield f"data: token-{i}\n\n".encode()
            sent += 1
        yield b"data: [DONE]\n\n"
    finally:
        if hold is not None:
            try:
                # shielded: settled also when the stream was cancelled (the client
                # went away, or max_duration)
                await asyncio.shield(hold.settle(sent))
            except StoreError:
                pass
