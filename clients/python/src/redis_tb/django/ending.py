"""How a Django response ends when it holds a lease or holds to renew (SPEC N4, N7,
G5): after its last chunk for a streamed response, or when its server closes it (a
client gone mid-stream); and at the lease's max_duration, whatever its client does."""

from __future__ import annotations

import asyncio
import socket
from typing import Any, Callable, Protocol, Sized

from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse

__all__ = ["end_with_response", "ender"]


class _Ending(Protocol):
    """What ending a response uses of ``request.rate_limit`` (runtime's
    RequestDecision): a protocol, so that this module imports nothing of runtime
    (runtime imports it)."""

    @property
    def lease(self) -> Any: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def _renewers(self) -> Sized: ...
    def finish(self) -> None: ...
    async def afinish(self) -> None: ...


def ender(request: HttpRequest, is_async: bool) -> Callable[[], object]:
    """SPEC N7: how the adapter ends a request at its lease's max_duration. On the
    async path the request's task is cancelled (Django's ASGI handler then sends
    nothing more, and the server closes a response it saw start); under gunicorn the
    connection is shut down (a write to a client that reads nothing fails at once,
    a response not yet started is never sent); elsewhere a streamed body stops at its
    next chunk."""
    if is_async:
        task = asyncio.current_task()  # the request's own task
        assert task is not None
        return task.cancel
    sock = request.META.get("gunicorn.socket")

    def shut() -> None:
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # gone already

    return shut


def end_with_response(response: HttpResponseBase, rd: _Ending) -> bool:
    """SPEC N4, G5 for a response that has a lease or holds to renew: a streamed
    response ends them after its last chunk (or when it is closed: a client gone
    mid-stream, or its max_duration reached, N7); True when the caller is to end
    them now (the whole body is there)."""
    if rd.lease is None and not rd._renewers:
        return False
    response._resource_closers.append(rd.finish)  # type: ignore[attr-defined]  # the server closes every response
    if not isinstance(response, StreamingHttpResponse):
        return True
    # the view's own iterator (streaming_content is a mapping over it), so that a
    # client gone mid-stream closes the view's generator too (its finally runs)
    content: Any = response._iterator  # type: ignore[attr-defined]
    if response.is_async:

        async def aiter_then_end() -> Any:
            try:
                async for chunk in content:
                    if rd.timed_out:  # SPEC N7: the response ends
                        return
                    yield chunk
            finally:
                try:
                    if hasattr(content, "aclose"):
                        await content.aclose()
                finally:
                    await rd.afinish()

        response.streaming_content = aiter_then_end()
    else:

        def iter_then_end() -> Any:
            try:
                for chunk in content:
                    if rd.timed_out:  # SPEC N7: the response ends
                        return
                    yield chunk
            finally:
                try:
                    if hasattr(content, "close"):
                        content.close()  # the view's generator (its finally settles its holds)
                finally:
                    rd.finish()

        response.streaming_content = iter_then_end()
    return False
