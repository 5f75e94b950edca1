"""SPEC G: holds settled later. A :class:`Hold` is an estimate taken now from a
``settle_later`` policy's bucket (TB.HOLD, G1); it is renewed while its request runs
(TB.RENEW every ``ttl / 2``, G5), so a request that outlives the hold's ``ttl`` still
settles its actual cost; :meth:`Hold.settle` sends TB.SETTLE with ``max_wait =
capacity / rate`` (G3), which bounds the debt an excess leaves to one bucket.

The limiter makes the calls (breaker, timeout, counters: ``holds``, ``holds_lost``,
``settlements``); this module holds their rules (command texts, replies, counters, log
lines). The hold's own state (:class:`Hold`: whether it is still to be renewed, lost
or settled) lives in :mod:`redis_tb.decision` beside the decision that takes it, so
that module needs nothing from this one; it is re-exported here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .breaker import SKIP
from .decision import Hold, Holds, Settlement
from .outcome import HoldError, StoreError
from .policy import cost_ok
from .replies import hold_values, packed, pair_values, settle_values

if TYPE_CHECKING:
    from .breaker import Breaker
    from .decision import Decision, _Limiter
    from .problem import Response
    from .stats import LimiterStats
    from .metrics import Metrics

__all__ = ["Hold", "HoldError", "HoldRules", "Holds", "Settlement", "StoreError"]



class HoldRules:
    """The hold rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin: command
    texts, replies, counters, log lines; the limiters send the calls)."""

    if TYPE_CHECKING:
        stats: LimiterStats
        metrics: Metrics | None
        breaker: Breaker
        _hold_log: dict[str, tuple[float, int]]

        def _acquire(self) -> int: ...
        def _failed(self, exc: BaseException, what: str = ...) -> None: ...
        def _log_once(self, book: dict[str, tuple[float, int]], name: str, message: str) -> None: ...
        def response(self, decision: Decision) -> Response: ...

    def _check_actual(self, actual: object) -> None:
        if not cost_ok(actual):  # SPEC G3: checked as a cost (C3)
            raise HoldError(f"a settlement's actual cost must be >= 0 and <= 2^53, got {actual!r}")

    def _store_way(self, what: str) -> int:
        """The breaker's answer for a hold or a settlement: raises StoreError when
        it is open, or while another call is the probe after the cool-down (SPEC B2,
        B3: a hold keeps the failure mode until the probe answers)."""
        way = self._acquire()
        if way == SKIP:
            raise StoreError(f"redis-tb: {what} not sent: Redis is skipped after a failure (breaker open)")
        return way

    def _hold_command(self, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int) -> bytes:
        return packed("TB.HOLD", key, capacity, rate, estimate, ttl_ms)

    def _held(
        self, policy: str, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int, raw: Any
    ) -> Hold:
        """SPEC G1, G2, G6: TB.HOLD's reply as the Hold; a refusal (a full hold table
        included) is a refused Hold, never an error."""
        self.breaker.succeeded()
        allowed, remaining, retry_after, reset_after, hold_id = hold_values(raw)
        if allowed:
            self.stats.holds += 1
        return Hold(
            cast("_Limiter", self), allowed=allowed and hold_id is not None, remaining=remaining,
            retry_after=retry_after, reset_after=reset_after, id=hold_id if allowed else None, key=key,
            policy=policy, capacity=capacity, rate=rate, estimate=estimate, ttl_ms=ttl_ms,
        )

    def _settle_command(self, hold: Hold, actual: float) -> bytes:
        """SPEC G3: TB.SETTLE key capacity rate id actual max_wait, ``max_wait =
        capacity / rate``: an excess leaves at most one bucket of debt, repaid within
        one full refill."""
        assert hold.id is not None
        return packed("TB.SETTLE", hold.key, hold.capacity, hold.rate, hold.id, actual, hold.capacity / hold.rate)

    def _settled(self, hold: Hold, raw: Any) -> Settlement:
        self.breaker.succeeded()
        settled, remaining, charged, reset_after = settle_values(raw)
        if settled:
            self.stats.settlements += 1
        out = Settlement(settled, remaining, charged, reset_after)
        hold.settlement = out
        return out

    def _store_failed(self, exc: BaseException, what: str) -> StoreError:
        """The StoreError of a hold or settlement that failed (counted and logged by
        the guarded call, ``_failed``)."""
        err = StoreError(f"redis-tb: {what} failed: {exc or type(exc).__name__}")
        err.__cause__ = exc
        return err

    def _hold_renew_command(self, hold: Hold) -> bytes:
        """SPEC G5: TB.RENEW key id ttl_ms on the hold's bucket."""
        assert hold.id is not None
        return packed("TB.RENEW", hold.key, hold.id, hold.ttl_ms)

    def _hold_renewed(self, hold: Hold, raw: Any) -> bool:
        """SPEC G5: TB.RENEW's reply; ``[0, ...]``: the hold was lost (counted in
        ``holds_lost``, one line a second per policy); its renewals stop and its
        settle sends nothing."""
        self.breaker.succeeded()
        if pair_values(raw, "TB.RENEW", 3)[0] == 1:
            return True
        if hold._renewal_lost():
            self.stats.holds_lost += 1
            metrics: Any = self.metrics
            if metrics is not None and hasattr(metrics, "hold_lost"):  # an older Metrics has none
                metrics.hold_lost(hold.policy)
            self._log_once(
                self._hold_log, hold.policy,
                "redis-tb: a hold of policy '%s' was lost before its renewal (it expired, or a failover "
                "lost it): its settlement sends nothing (%d since the last line)",
            )
        return False

    def hold_response(self, hold: Hold) -> Response:
        """SPEC G2: ``(status, headers, body)`` of a hold: 429 with H1-H3's headers of
        its policy and P1's body when refused; 200 with its headers when taken."""
        return self.response(hold.decision)
