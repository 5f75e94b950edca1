"""What the limiter decided for one request, as handlers see it on
``request.state.rate_limit``."""

from __future__ import annotations

import enum
from typing import Awaitable, Callable, NamedTuple

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
    #: A cost or limit function gave a value out of range (SPEC L3): a 500, never an
    #: admission, nothing sent to Redis.
    INVALID_INPUT = "invalid_input"
    #: A header identity held a control byte (SPEC I2): a 400, nothing sent to Redis.
    BAD_REQUEST = "bad_request"


class PolicyResult(NamedTuple):
    """One policy's bucket after this request (allowed), or as it stands (refused).
    Immutable (a named tuple: cheap to build on every request)."""

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
    #: an observed (shadow) policy: never refuses by itself, left out of the headers
    shadow: bool = False

    @property
    def never(self) -> bool:
        return self.retry_after < 0


Refunder = Callable[["Decision"], Awaitable[bool]]
SyncRefunder = Callable[["Decision"], bool]


class Decision:
    """The typed decision for one request.

    ``allowed`` says whether the request goes on (for a store error: the failure
    mode). ``results`` has one :class:`PolicyResult` per applied policy, in order
    (empty for a store error or when no policy applied; for a refusal answered by
    the local deny cache, the cached violated policies only).
    ``shadow_limited`` names the shadow policies that refused (the request was not
    charged then, and went on unless an enforced policy refused too). ``from_cache``
    is True for a refusal answered by the local deny cache without calling Redis.
    ``culprit`` names the policy of an ``invalid_input`` decision, or the header of a
    ``bad_request`` one. The aggregates (``remaining``, ``reset_after``,
    ``retry_after``) are over enforced policies only (SPEC D3).
    """

    __slots__ = (
        "outcome", "allowed", "results", "error", "refunded", "shadow_limited", "from_cache",
        "culprit", "_refunder", "_sync_refunder",
    )

    def __init__(
        self,
        outcome: Outcome,
        allowed: bool,
        results: tuple[PolicyResult, ...] = (),
        *,
        error: BaseException | None = None,
        refunder: Refunder | None = None,
        sync_refunder: SyncRefunder | None = None,
        shadow_limited: tuple[str, ...] = (),
        from_cache: bool = False,
        culprit: str | None = None,
    ) -> None:
        self.outcome = outcome
        self.allowed = allowed
        self.results = results
        #: the Redis error behind a STORE_ERROR (None during the cool-down after one)
        self.error = error
        self.refunded = False
        self.shadow_limited = shadow_limited
        self.from_cache = from_cache
        self.culprit = culprit
        self._refunder = refunder
        self._sync_refunder = sync_refunder

    @classmethod
    def of(cls, results: tuple[PolicyResult, ...]) -> Decision:
        """The decision of per-policy results (SPEC D1, D4, S2, S3), uncharged: limited
        when an enforced policy refused, else allowed (shadow refusals listed)."""
        shadowed = tuple(r.name for r in results if not r.allowed and r.shadow)
        if any(not r.allowed and not r.shadow for r in results):
            return cls(Outcome.LIMITED, False, results, shadow_limited=shadowed)
        return cls(Outcome.ALLOWED, True, results, shadow_limited=shadowed)

    @property
    def cached(self) -> bool:
        """Deprecated name of :attr:`from_cache`."""
        return self.from_cache

    @property
    def limited(self) -> bool:
        return self.outcome is Outcome.LIMITED

    @property
    def store_error(self) -> bool:
        return self.outcome is Outcome.STORE_ERROR

    @property
    def violated(self) -> tuple[str, ...]:
        """Names of the enforced policies that refused this request."""
        if self.outcome is not Outcome.LIMITED:
            return ()
        return tuple(r.name for r in self.results if not r.allowed and not r.shadow)

    @property
    def enforced(self) -> tuple[PolicyResult, ...]:
        """The results of the enforced (not shadow) policies: what the headers show."""
        return tuple(r for r in self.results if not r.shadow)

    @property
    def remaining(self) -> float | None:
        """SPEC D3: the smallest remaining of the enforced policies (None if none applied)."""
        return min((r.remaining for r in self.results if not r.shadow), default=None)

    @property
    def retry_after(self) -> float | None:
        """SPEC D3: the largest ``retry_after`` of the enforced violated policies; None
        when one of them can never pass, or none refused."""
        if self.outcome is not Outcome.LIMITED:
            return None
        wait: float | None = None
        for r in self.results:
            if not r.allowed and not r.shadow:
                if r.retry_after < 0:
                    return None
                if wait is None or r.retry_after > wait:
                    wait = r.retry_after
        return wait

    @property
    def reset_after(self) -> float | None:
        """SPEC D3: the largest reset of the enforced policies (None if none applied)."""
        return max((r.reset_after for r in self.results if not r.shadow), default=None)

    async def refund(self) -> bool:
        """SPEC F1: give this request's tokens back now (TB.REFUND on every bucket it
        was charged on). True when every refund succeeded; False, sending nothing, when
        nothing was charged or it was already refunded; False for a failed refund
        (counted in ``refund_errors``, never retried, never raised)."""
        if self._refunder is None and self._sync_refunder is not None:
            return self.refund_sync()  # a decision of the sync path, refunded from async code
        if self.refunded or self.outcome is not Outcome.ALLOWED or self._refunder is None:
            return False
        self.refunded = True
        return await self._refunder(self)

    def refund_sync(self) -> bool:
        """:meth:`refund` for a decision of the synchronous path (:class:`SyncRateLimiter`)."""
        if self._sync_refunder is None and self._refunder is not None and not self.refunded:
            raise TypeError("a decision of the asyncio limiter: use `await decision.refund()`")
        if self.refunded or self.outcome is not Outcome.ALLOWED or self._sync_refunder is None:
            return False
        self.refunded = True
        return self._sync_refunder(self)

    def merged(self, other: Decision) -> Decision:
        """One decision for two checks of the same request (middleware + dependency)."""
        order = [
            Outcome.BAD_REQUEST, Outcome.INVALID_INPUT, Outcome.STORE_ERROR, Outcome.LIMITED,
            Outcome.ALLOWED, Outcome.NOT_LIMITED,
        ]
        worst = min(self.outcome, other.outcome, key=order.index)
        parts = (self, other)

        def charged(p: Decision) -> bool:
            return p.outcome is Outcome.ALLOWED and not p.refunded and (
                p._refunder is not None or p._sync_refunder is not None
            )

        async def refund_both(_: Decision) -> bool:
            done = [await p.refund() for p in parts if charged(p)]
            return bool(done) and all(done)

        def refund_both_sync(_: Decision) -> bool:
            done = [p.refund_sync() for p in parts if charged(p)]
            return bool(done) and all(done)

        sync_parts = all(p._refunder is None for p in parts)
        out = Decision(
            worst,
            self.allowed and other.allowed,
            self.results + other.results,
            error=self.error or other.error,
            refunder=None if sync_parts else refund_both,
            sync_refunder=refund_both_sync if sync_parts else None,
            shadow_limited=self.shadow_limited + other.shadow_limited,
            from_cache=self.from_cache or other.from_cache,
            culprit=self.culprit or other.culprit,
        )
        out.refunded = self.refunded and other.refunded
        return out

    def __repr__(self) -> str:
        names = ", ".join(f"{r.name}:{r.remaining:g}" for r in self.results)
        extra = f", shadow_limited={list(self.shadow_limited)}" if self.shadow_limited else ""
        extra += ", from_cache" if self.from_cache else ""
        return f"Decision({self.outcome.value}, allowed={self.allowed}, [{names}]{extra})"
