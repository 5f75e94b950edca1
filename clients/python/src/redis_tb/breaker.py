"""The breaker of a limiter (SPEC B1-B3): a connection error or a timeout opens it for
the cool-down; while open, checks and refunds do not reach Redis; after the cool-down
exactly one call (a check or a refund) is the probe, across threads and tasks, and the
others keep the failure mode until it answers. Time is the limiter's monotonic clock
(T1)."""

from __future__ import annotations

import threading
from typing import Callable

__all__ = ["CALL", "PROBE", "SKIP", "Breaker"]

#: what the breaker lets a call do
SKIP, CALL, PROBE = 0, 1, 2


class Breaker:
    __slots__ = ("cooldown", "open_until", "probing", "_lock", "_mono")

    def __init__(self, cooldown: float, monotonic: Callable[[], float]) -> None:
        self.cooldown = cooldown
        self._mono = monotonic
        #: monotonic seconds until which Redis is skipped; 0: closed
        self.open_until = 0.0
        self.probing = False
        self._lock = threading.Lock()  # one probe across threads (SPEC B3, D17)

    def acquire(self) -> int:
        """CALL while closed (no lock taken: the hot path); while open, SKIP until the
        cool-down is over, then PROBE for exactly one caller and SKIP for the others.
        A PROBE must be followed by :meth:`probe_over`."""
        if self.open_until == 0.0:
            return CALL
        with self._lock:
            if self.open_until == 0.0:
                return CALL
            if self.probing or self._mono() < self.open_until:
                return SKIP
            self.probing = True
            return PROBE

    def probe_over(self) -> None:
        self.probing = False

    def succeeded(self) -> None:
        """Redis answered: the breaker closes (SPEC B3)."""
        self.open_until = 0.0

    def open(self) -> None:
        """A connection error or a timeout (SPEC B1): Redis is skipped for the cool-down."""
        self.open_until = self._mono() + self.cooldown
