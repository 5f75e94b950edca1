"""Refunds (SPEC F1, F3, R8): which buckets a decision gives back, and what the answer
does (the breaker, the counters, the deny cache). :class:`RefundRules` is a mixin of
:class:`~redis_tb.limiter.BaseLimiter`; the limiters send TB.REFUND."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from .decision import Decision
from .plan import _BUCKET
from .replies import Charge
from .store_call import _SKIP, StoreCall

__all__ = ["RefundRules"]

if TYPE_CHECKING:
    from .deny_cache import DenyCache


class RefundRules(StoreCall):
    """The refund rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin)."""

    if TYPE_CHECKING:
        deny_cache: DenyCache | None

    def _refund_buckets(self, decision: Decision) -> tuple[list[Charge], int] | None:
        """SPEC F1, B2, B3: the buckets to refund and the breaker's answer, or None
        (nothing charged, or the breaker open: counted in ``refund_errors``)."""
        # SPEC F3: the bucket policies only (never a window or an in-flight policy)
        buckets = [
            Charge(r.key, r.capacity, r.rate, r.cost)
            for r in decision.results if r.cost > 0 and r.kind == _BUCKET and r.rate is not None
        ]
        if not buckets:
            return None
        way = self._acquire()
        if way == _SKIP:
            self.stats.refund_errors += 1
            return None
        return buckets, way

    def _refund_failed(self, started: float) -> bool:
        """A refund's store error, counted and logged by the guarded call (``_failed``)."""
        if self.metrics is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        self.stats.refund_errors += 1
        return False

    def _refunded(self, decision: Decision, started: float) -> bool:
        self.breaker.succeeded()  # SPEC B3: a refund may be the probe; success closes
        self.stats.refunds += 1
        m = self.metrics
        if m is not None:
            m.redis_call(time.perf_counter() - started)
        cache = self.deny_cache
        for r in decision.results:
            if r.cost > 0 and r.kind == _BUCKET:
                if m is not None:
                    m.refunded(r.name)
                if cache is not None:  # SPEC R8
                    cache.discard(r.key)
        return True
