"""What the limiter decided for one request, as handlers see it on
``request.state.rate_limit``."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Awaitable, Callable

__all__ = ["Decision", "Outcome", "PolicyResult"]


class Outcome(str, enum.Enum):
    """Being limited is a normal outcome; a store error is a different one."""

    #: Every applicable policy had the tokens; they were taken.
    ALLOWED = "allowed"
    #: At least one policy refused; nothing was taken from any bucket.
    LIMITED = "limited"
    #: Redis failed or timed out (or is in its cool-down): decided by the failure mode.
    STORE_ERROR = "store_error"
    #: No policy applied to this request (no route match, key functions gave None).
    NOT_LIMITED = "not_limited"


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One policy's bucket after this request (allowed), or as it stands (refused)."""

    name: str
    key: str
    capacity: float
    rate: float
    cost: float
    #: this bucket alone had ``cost`` tokens
    allowed: bool
    remaining: float
    #: 0 when this bucket had enough, -1 when it never will (cost > capacity)
    retry_after: float
    reset_after: float

    @property
    def never(self) -> bool:
        return self.retry_after < 0


Refunder = Callable[["Decision"], Awaitable[bool]]


class Decision:
    """The typed decision for one request.

    ``allowed`` says whether the request goes on (for a store error: the failure
    mode). ``results`` has one :class:`PolicyResult` per applied policy, in order
    (empty for a store error or when no policy applied).
    """

    __slots__ = ("outcome", "allowed", "results", "error", "refunded", "_refunder")

    def __init__(
        self,
        outcome: Outcome,
        allowed: bool,
        results: tuple[PolicyResult, ...] = (),
        *,
        error: BaseException | None = None,
        refunder: Refunder | None = None,
    ) -> None:
        self.outcome = outcome
        self.allowed = allowed
        self.results = results
        #: the Redis error behind a STORE_ERROR (None during the cool-down after one)
        self.error = error
        self.refunded = False
        self._refunder = refunder

    @property
    def limited(self) -> bool:
        return self.outcome is Outcome.LIMITED

    @property
    def store_error(self) -> bool:
        return self.outcome is Outcome.STORE_ERROR

    @property
    def violated(self) -> tuple[str, ...]:
        """Names of the policies that refused this request."""
        if self.outcome is not Outcome.LIMITED:
            return ()
        return tuple(r.name for r in self.results if not r.allowed)

    @property
    def remaining(self) -> float | None:
        """The smallest remaining of the applied policies (None if none applied)."""
        return min((r.remaining for r in self.results), default=None)

    @property
    def retry_after(self) -> float | None:
        """0 when allowed; -1 when a violated policy can never admit the request; else
        the largest wait of the violated policies (after it, every bucket has enough).
        None when Redis was not asked."""
        if not self.results:
            return None
        if self.outcome is not Outcome.LIMITED:
            return 0.0
        waits = [r.retry_after for r in self.results if not r.allowed]
        if any(w < 0 for w in waits):
            return -1.0
        return max(waits, default=0.0)

    @property
    def reset_after(self) -> float | None:
        """The largest reset_after of the applied policies."""
        return max((r.reset_after for r in self.results), default=None)

    async def refund(self) -> bool:
        """Give this request's tokens back (TB.REFUND on every bucket it was charged on):
        for requests the app decides not to count. Idempotent; a no-op for a request
        that was not charged. Returns whether a refund was made. Never raises for a
        store error (it is logged and counted)."""
        if self.refunded or self.outcome is not Outcome.ALLOWED or self._refunder is None:
            return False
        self.refunded = True
        return await self._refunder(self)

    def merged(self, other: Decision) -> Decision:
        """One decision for two checks of the same request (middleware + dependency)."""
        order = [Outcome.STORE_ERROR, Outcome.LIMITED, Outcome.ALLOWED, Outcome.NOT_LIMITED]
        worst = min(self.outcome, other.outcome, key=order.index)
        parts = (self, other)

        async def refund_both(_: Decision) -> bool:
            done = [await p.refund() for p in parts]
            return any(done)

        out = Decision(
            worst,
            self.allowed and other.allowed,
            self.results + other.results,
            error=self.error or other.error,
            refunder=refund_both,
        )
        out.refunded = self.refunded and other.refunded
        return out

    def __repr__(self) -> str:
        names = ", ".join(f"{r.name}:{r.remaining:g}" for r in self.results)
        return f"Decision({self.outcome.value}, allowed={self.allowed}, [{names}])"
