"""SPEC G: holds settled later. A :class:`Hold` is an estimate taken now from a
``settle_later`` policy's bucket (TB.HOLD, G1); it is renewed while its request runs
(TB.RENEW every ``ttl / 2``, G5), so a request that outlives the hold's ``ttl`` still
settles its actual cost; :meth:`Hold.settle` sends TB.SETTLE with ``max_wait =
capacity / rate`` (G3), which bounds the debt an excess leaves to one bucket.

The limiter makes the calls (breaker, timeout, counters: ``holds``, ``holds_lost``,
``settlements``); this module holds the hold's own state: whether it is still to be
renewed, lost (a renewal answered 0) or settled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, cast

from .breaker import SKIP
from .policy import cost_ok
from .replies import hold_values, packed, pair_values, settle_values

if TYPE_CHECKING:
    from .breaker import Breaker
    from .decision import Decision, PolicyResult
    from .headers import Response
    from .limiter import BaseLimiter
    from .stats import LimiterStats
    from .metrics import Metrics

__all__ = ["Hold", "HoldError", "HoldRules", "Holds", "Settlement", "StoreError"]

# a hold's renewals (G5): due while the request runs; lost (a renewal answered 0: its
# settle sends nothing, G3); stopped (settled, refused, or its response ended)
_RENEWING, _LOST, _STOPPED = 1, 2, 3


class StoreError(Exception):
    """A call to the store failed (SPEC G3: a hold or a settlement that did not reach
    Redis, or that the open breaker kept from it, B2). ``__cause__`` is the error."""


class HoldError(ValueError):
    """The application asked for a hold the check cannot take (SPEC G1): an estimate
    or actual out of range, a ttl out of range, or a policy that is not a
    ``settle_later`` policy of this check. Nothing was sent."""


@dataclass(frozen=True, slots=True)
class Settlement:
    """SPEC G3: what ``hold.settle(actual)`` changed. ``settled`` is False for a hold
    settled already, expired, lost (G5) or refused (nothing changed); ``charged`` is
    what the bucket changed by (``actual`` minus what the hold charged, as the module
    bounded it)."""

    settled: bool
    remaining: float
    charged: float
    reset_after: float


class Hold:
    """SPEC G2: an estimate taken now from a ``settle_later`` policy's bucket (``id``
    None when refused: nothing charged). Settle it once with :meth:`settle` (async)
    or :meth:`settle_sync`; a hold never settled keeps its estimate charged until its
    record expires, ``ttl`` after its last renewal (G4).

    While its request runs the adapter renews it every :attr:`renew_seconds` (G5:
    :meth:`renew` / :meth:`renew_sync`, TB.RENEW ``key id ttl_ms``); renewals stop
    when it is settled or the response ends."""

    __slots__ = (
        "allowed", "remaining", "retry_after", "reset_after", "id", "key", "policy",
        "capacity", "rate", "estimate", "ttl_ms", "settlement", "_limiter", "_renewal",
    )

    def __init__(
        self,
        limiter: BaseLimiter,
        *,
        allowed: bool,
        remaining: float,
        retry_after: float,
        reset_after: float,
        id: str | None,
        key: str,
        policy: str,
        capacity: float,
        rate: float,
        estimate: float,
        ttl_ms: int = 60000,
    ) -> None:
        self.allowed = allowed
        self.remaining = remaining
        self.retry_after = retry_after
        self.reset_after = reset_after
        self.id = id
        self.key = key
        self.policy = policy
        self.capacity = capacity
        self.rate = rate
        self.estimate = estimate
        #: the hold's ttl in milliseconds (each renewal extends it by this much, G5)
        self.ttl_ms = ttl_ms
        #: the settlement once settled (None before)
        self.settlement: Settlement | None = None
        self._limiter = limiter
        self._renewal = _RENEWING if id is not None else _STOPPED

    # -- what the adapter's helpers show (G2) -----------------------------------------

    @property
    def result(self) -> PolicyResult:
        """The hold as its policy's result (what a refused hold's 429 shows, G2)."""
        from .decision import PolicyResult

        return PolicyResult(
            self.policy, self.key, self.capacity, self.rate, self.estimate, self.allowed,
            self.remaining, self.retry_after, self.reset_after,
        )

    @property
    def decision(self) -> Decision:
        """A one-policy decision of the hold: limited when refused (SPEC G2), so
        ``limiter.response(hold.decision)`` is its 429 (H1-H3, P1)."""
        from .decision import Decision

        return Decision.of((self.result,))

    # -- renewals (G5) --------------------------------------------------------------

    @property
    def renewing(self) -> bool:
        """Renewals are due: taken, not settled, not lost, its response not over."""
        return self._renewal == _RENEWING

    @property
    def lost(self) -> bool:
        """A renewal answered 0 (SPEC G5): the hold expired or a failover lost it; its
        settle sends nothing."""
        return self._renewal == _LOST

    @property
    def renew_seconds(self) -> float:
        """How often the hold is renewed: half its ttl (SPEC G5)."""
        return self.ttl_ms / 2000

    async def renew(self) -> bool:
        """SPEC G5: extend the hold by its ttl now (TB.RENEW); True when renewed, False
        when nothing was sent (settled, lost, refused, its response ended, or the
        breaker open) or the renewal failed (a store error: the next tick tries
        again) or found it lost."""
        if self._renewal != _RENEWING:
            return False
        done: bool = await self._limiter._renew_hold(self)  # type: ignore[attr-defined]
        return done

    def renew_sync(self) -> bool:
        """:meth:`renew` for a hold of the synchronous path."""
        if self._renewal != _RENEWING:
            return False
        done: bool = self._limiter._renew_hold_sync(self)  # type: ignore[attr-defined]
        return done

    def stop_renewing(self) -> None:
        """The response is over (SPEC G5, N4): no more renewals; settling stays possible."""
        if self._renewal == _RENEWING:
            self._renewal = _STOPPED

    def _renewal_lost(self) -> bool:
        """A renewal answered 0: True the first time (count it), while still renewing."""
        if self._renewal != _RENEWING:
            return False
        self._renewal = _LOST
        return True

    # -- settling (G3) --------------------------------------------------------------

    def _unsettled(self) -> Settlement | None:
        """The answer without a call: a refused hold, one settled already (G3), or one
        lost (G5); else None, and renewals stop (the settlement ends the hold)."""
        if self.id is None or self.settlement is not None or self._renewal == _LOST:
            return Settlement(False, self.remaining, 0.0, self.reset_after)
        self._renewal = _STOPPED
        return None

    async def settle(self, actual: float) -> Settlement:
        """SPEC G3: TB.SETTLE with the actual cost (checked as a cost, C3) and
        ``max_wait = capacity / rate``."""
        self._limiter._check_actual(actual)
        done = self._unsettled()
        if done is not None:
            return done
        out: Settlement = await self._limiter._settle(self, actual)  # type: ignore[attr-defined]
        return out

    def settle_sync(self, actual: float) -> Settlement:
        """:meth:`settle` for a hold of the synchronous path."""
        self._limiter._check_actual(actual)
        done = self._unsettled()
        if done is not None:
            return done
        out: Settlement = self._limiter._settle_sync(self, actual)  # type: ignore[attr-defined]
        return out

    def __repr__(self) -> str:
        return f"Hold({self.policy}, allowed={self.allowed}, id={self.id}, remaining={self.remaining:g})"


class Holds:
    """The holds taken on one request's decision (SPEC G5): the adapter that serves
    the request renews them (``on_take`` is told of each) and stops their renewals
    when the response ends (N4's event, N7's included)."""

    __slots__ = ("taken", "on_take")

    def __init__(self) -> None:
        self.taken: list[Hold] = []
        #: the adapter's: called with each hold taken (it starts the hold's renewals)
        self.on_take: Callable[[Hold], None] | None = None

    def add(self, hold: Hold) -> None:
        if hold._renewal != _RENEWING:
            return  # refused: nothing to renew
        self.taken.append(hold)
        if self.on_take is not None:
            self.on_take(hold)

    def stop(self) -> None:
        for hold in self.taken:
            hold.stop_renewing()


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
            cast("BaseLimiter", self), allowed=allowed and hold_id is not None, remaining=remaining,
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
        self._failed(exc, what)
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
