"""SPEC N5, N7, G5: the timers of one request, for the adapters. While the request runs
its lease is renewed every ``lease / 2`` and each hold taken on its decision every
``ttl / 2``; the lease's timer also fires at its ``max_duration`` (N7) when no tick comes
sooner, and that tick releases the lease instead and tells the adapter to end the
response (``on_timeout``). The adapter stops the timers when the response ends (N4).

The timers run beside the response, never inside its writes: a client that reads
nothing (or went away) holds up its own response only, never another request's
renewals. :class:`AsyncTimers` are tasks on the event loop (ASGI, Django's async
path); :class:`ThreadTimers` is one thread per request (WSGI, Django's sync path)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Coroutine

from .decision import Decision
from .hold import Hold

__all__ = ["AsyncTimers", "ThreadTimers"]

#: what ends the response at the lease's max_duration (N7): e.g. a task's cancel
OnTimeout = Callable[[], object]


def _next_lease_wait(d: Decision) -> float | None:
    """Seconds until the lease's next tick: half the lease, or its max_duration when
    that comes sooner (N7); None when no lease is held any more."""
    left = d.lease_time_left()
    if left is None:
        return None
    return max(0.0, min(d.lease_seconds / 2, left))


class AsyncTimers:
    """The renewals of one request's decision as tasks: the lease's (from
    :meth:`start`) and one per hold taken on the decision (SPEC G5)."""

    __slots__ = ("decision", "on_timeout", "_tasks", "_stopped", "_loop")

    def __init__(self, decision: Decision, on_timeout: OnTimeout | None = None) -> None:
        self.decision = decision
        self.on_timeout = on_timeout
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        decision.watch_holds(self._hold_taken)

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        loop = self._loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(job))

    def start(self) -> AsyncTimers:
        if self.decision.lease_active:
            self._spawn(self._lease())
        return self

    def _hold_taken(self, hold: Hold) -> None:
        if not self._stopped:
            self._spawn(self._hold(hold))

    async def _lease(self) -> None:
        d = self.decision
        while True:
            wait = _next_lease_wait(d)
            if wait is None:
                return
            await asyncio.sleep(wait)
            if not d.lease_active:
                return
            # shielded: a release made at the deadline (N7) completes even when the
            # response ends meanwhile and the timers are stopped
            await asyncio.shield(d.renew())
            if d.timed_out:
                if self.on_timeout is not None:
                    self.on_timeout()
                return

    async def _hold(self, hold: Hold) -> None:
        period = hold.renew_seconds
        while True:
            await asyncio.sleep(period)
            if not hold.renewing:
                return
            await hold.renew()  # a failure is a store error: the next tick tries again

    def stop(self) -> None:
        """The response is over (N4): no more renewals of the lease or the holds
        (from any thread: a sync response's close may come from a worker thread)."""
        self._stopped = True
        self.decision.end_holds()
        loop = self._loop
        if loop is None:
            return
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if here is loop:
            self._cancel()
        else:
            loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()


class ThreadTimers:
    """The renewals of one request's decision on one thread of their own (the sync
    path: a blocking Redis client), started when there is something to renew."""

    __slots__ = ("decision", "on_timeout", "_cond", "_holds", "_stopped", "_thread")

    def __init__(self, decision: Decision, on_timeout: OnTimeout | None = None) -> None:
        self.decision = decision
        self.on_timeout = on_timeout
        self._cond = threading.Condition()
        self._holds: list[tuple[Hold, float]] = []  # each hold and when it is next due
        self._stopped = False
        self._thread: threading.Thread | None = None
        decision.watch_holds(self._hold_taken)

    def start(self) -> ThreadTimers:
        if self.decision.lease_active:
            self._run()
        return self

    def _run(self) -> None:
        with self._cond:
            if self._thread is not None or self._stopped:
                return
            self._thread = thread = threading.Thread(target=self._loop, daemon=True, name="redis-tb-renew")
        thread.start()

    def _hold_taken(self, hold: Hold) -> None:
        with self._cond:
            if self._stopped:
                return
            self._holds.append((hold, time.monotonic() + hold.renew_seconds))
            self._cond.notify()
        self._run()

    def _loop(self) -> None:
        d = self.decision
        wait = _next_lease_wait(d)
        lease_due = None if wait is None else time.monotonic() + wait
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    due = [t for _, t in self._holds]
                    if lease_due is not None:
                        due.append(lease_due)
                    if not due:
                        self._thread = None  # nothing to renew until a hold is taken
                        return
                    if min(due) <= now:
                        break
                    self._cond.wait(min(due) - now)
                holds = [h for h, t in self._holds if t <= now]
                self._holds = [(h, t if t > now else now + h.renew_seconds) for h, t in self._holds if h.renewing]
            for hold in holds:
                hold.renew_sync()
            if lease_due is not None and lease_due <= now:
                if d.lease_active:
                    d.renew_sync()
                if d.timed_out:
                    lease_due = None
                    if self.on_timeout is not None:
                        self.on_timeout()
                else:
                    wait = _next_lease_wait(d)
                    lease_due = None if wait is None else time.monotonic() + wait

    def stop(self) -> None:
        """The response is over (N4): no more renewals of the lease or the holds."""
        with self._cond:
            self._stopped = True
            self._holds.clear()
            self._cond.notify()
        self.decision.end_holds()
