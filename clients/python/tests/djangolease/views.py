"""The views of the lease tests. The gate is a file (TB_GATE): both servers' workers
see it, sync and async views alike."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from redis_tb import Hold
from redis_tb.django import RequestDecision, get_rate_limit, hold_rejection

GATE = Path(os.environ["TB_GATE"])
#: the settlements of /hold-stream, one JSON line each (both servers' workers append)
SETTLED = GATE.with_name("settled")


# async views: under ASGI a sync view runs in the one thread of sync views, which a
# waiting /slow would block; under WSGI each runs in its request's thread.
async def open_gate(request: HttpRequest) -> JsonResponse:
    GATE.touch()
    return JsonResponse({"open": True})


async def close_gate(request: HttpRequest) -> JsonResponse:
    GATE.unlink(missing_ok=True)
    return JsonResponse({"open": False})


def _wait() -> None:  # in a WSGI worker thread
    while not GATE.exists():
        time.sleep(0.01)


async def _await() -> None:
    while not GATE.exists():
        await asyncio.sleep(0.01)


def stream(request: HttpRequest) -> StreamingHttpResponse:
    """chunk-0, then (after /open) chunk-1; ?ticks=1: a chunk every 20 ms instead."""
    ticks = request.GET.get("ticks") == "1"

    def body() -> Iterator[bytes]:
        yield b"chunk-0\n"
        if ticks:
            for i in range(1, 200):
                time.sleep(0.02)
                yield b"tick-%d\n" % i
        else:
            _wait()
            yield b"chunk-1\n"

    async def abody() -> AsyncIterator[bytes]:
        yield b"chunk-0\n"
        if ticks:
            for i in range(1, 200):
                await asyncio.sleep(0.02)
                yield b"tick-%d\n" % i
        else:
            await _await()
            yield b"chunk-1\n"

    if "wsgi.input" in request.META:
        return StreamingHttpResponse(body(), content_type="text/plain")
    return StreamingHttpResponse(abody(), content_type="text/plain")


async def slow(request: HttpRequest) -> JsonResponse:
    await _await()
    return JsonResponse({"done": True})


async def boom(request: HttpRequest) -> JsonResponse:
    raise RuntimeError("the view failed")


def hold(request: HttpRequest) -> HttpResponseBase:
    rd: RequestDecision = getattr(request, "rate_limit")
    got = rd.hold("tokens", float(request.GET["estimate"]))
    refused = hold_rejection(got)
    if refused is not None:
        return refused
    if "wsgi.input" in request.META:
        settled = got.settle_sync(float(request.GET["actual"]))
    else:
        from asgiref.sync import async_to_sync

        settled = async_to_sync(got.settle)(float(request.GET["actual"]))
    return JsonResponse({"settled": settled.settled, "charged": settled.charged, "held_remaining": got.remaining})


def flood(request: HttpRequest) -> StreamingHttpResponse:
    """64 KiB chunks for ever: a client that reads nothing holds the writer up."""
    chunk = b"x" * 65536

    def body() -> Iterator[bytes]:
        while True:
            yield chunk
            time.sleep(0.001)

    async def abody() -> AsyncIterator[bytes]:
        while True:
            yield chunk
            await asyncio.sleep(0.001)

    if "wsgi.input" in request.META:
        return StreamingHttpResponse(body(), content_type="application/octet-stream")
    return StreamingHttpResponse(abody(), content_type="application/octet-stream")


def _settled(settlement: Any) -> None:
    with SETTLED.open("a") as f:
        f.write(json.dumps(dataclasses.asdict(settlement)) + "\n")


def hold_stream(request: HttpRequest) -> HttpResponseBase:
    """Holds ``estimate`` for ``ttl`` seconds, streams a line every 50 ms for
    ``seconds``, then settles ``actual`` (appended to the SETTLED file)."""
    rd: RequestDecision = getattr(request, "rate_limit")
    q = request.GET
    got = rd.hold("tokens", float(q["estimate"]), float(q["ttl"]))
    refused = hold_rejection(got)
    if refused is not None:
        return refused
    ticks, actual = int(float(q["seconds"]) / 0.05), float(q["actual"])

    def body(hold: Hold = got) -> Iterator[bytes]:
        try:
            for _ in range(ticks):
                yield b"tick\n"
                time.sleep(0.05)
        finally:
            if "wsgi.input" in request.META:
                _settled(hold.settle_sync(actual))
            else:
                from asgiref.sync import async_to_sync

                _settled(async_to_sync(hold.settle)(actual))

    return StreamingHttpResponse(body(), content_type="text/plain")


def stats(request: HttpRequest) -> JsonResponse:
    """This worker's limiters' counters (the sync path's, then the async path's)."""
    rl = get_rate_limit()
    lims: list[Any] = list(rl._sync.values())
    for _, found in rl._async.values():
        lims += list(found.values())
    total: dict[str, int] = {}
    for lim in lims:
        for k, v in dataclasses.asdict(lim.stats).items():
            if isinstance(v, int):  # the counters (not backend, SPEC E6's word)
                total[k] = total.get(k, 0) + v
    return JsonResponse(total)
