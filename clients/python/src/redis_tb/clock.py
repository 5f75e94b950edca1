"""The limiter's time source (SPEC T1): one object for both clocks a limiter reads."""

from __future__ import annotations

import time

__all__ = ["Clock", "SystemClock"]


class Clock:
    """The limiter's time source (SPEC T1): ``monotonic()`` seconds for the deny cache
    (R) and the breaker (B), ``time()`` epoch seconds for ``X-RateLimit-Reset`` (H4).
    Tests pass their own."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()


#: the default clock
SystemClock = Clock
