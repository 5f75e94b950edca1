"""What the limiter decided for one request, as handlers see it on
``request.state.rate_limit``."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, NamedTuple

from .hold import Hold, HoldError, Holds, Settlement, StoreError

if TYPE_CHECKING:
    from .limiter import BaseLimiter
    from .scope import Scope

__all__ = ["Decision", "Hold", "HoldError", "Lease", "Outcome", "PolicyResult", "Settlement", "StoreError"]


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
    #: tokens per second; a window's ``limit / seconds`` (SPEC W2); None for an
    #: in-flight policy (N3)
    rate: float | None
    cost: float
    #: this bucket alone had ``cost`` tokens
    allowed: bool
    remaining: float
    #: 0 when this bucket had enough, -1 when it never will (cost > capacity)
    retry_after: float
    reset_after: float
    #: an observed (shadow) policy: never refuses by itself, left out of the headers
    shadow: bool = False
    #: ``"bucket"``, ``"window"`` (SPEC W2) or ``"in_flight"`` (N3)
    kind: str = "bucket"
    #: a window policy's window in seconds (its header's ``w``, W2)
    window: float | None = None

    @property
    def never(self) -> bool:
        return self.retry_after < 0


@dataclass(frozen=True, slots=True)
class Lease:
    """SPEC N6: one request's lease on an in-flight policy's key."""

    key: str
    id: str
    policy: str


Refunder = Callable[["Decision"], Awaitable[bool]]
SyncRefunder = Callable[["Decision"], bool]


#: the settle_later policies of a decision without any (shared: never mutated, only replaced)
_NO_HOLDS: dict[str, tuple[str, float, float]] = {}


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
    ``bad_request`` one; ``error`` is a :class:`~redis_tb.cluster.CrossSlot` for the
    ``invalid_input`` of a call Redis Cluster refused (SPEC K6). The aggregates (``remaining``, ``reset_after``,
    ``retry_after``) are over enforced policies only (SPEC D3).
    """

    __slots__ = (
        "outcome", "allowed", "results", "error", "refunded", "shadow_limited", "from_cache",
        "culprit", "_refunder", "_sync_refunder", "lease", "_limiter", "_holdable", "_lease_state",
        "_lease_owner", "_lease_ms", "_lease_deadline", "_holds", "_scope",
    )
    #: set with a granted lease (SPEC N7): the limiter's monotonic seconds at which the
    #: request reaches its max_duration
    _lease_deadline: float

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
        #: SPEC N6: the lease this request holds on its in-flight policy, or None
        self.lease: Lease | None = None
        self._limiter: BaseLimiter | None = None
        #: SPEC G1: each settle_later policy's (key, capacity, rate) for this request
        self._holdable: dict[str, tuple[str, float, float]] = _NO_HOLDS
        #: the lease: 0 none, 1 held, 2 lost (a renewal answered 0), 3 ended (N4),
        #: 4 ended by its max_duration (N7); with 1, ``_lease_deadline`` is set (the
        #: limiter's monotonic seconds at which N7 ends the request)
        self._lease_state = 0
        self._lease_ms = 0
        self._lease_owner: Decision | None = None
        #: SPEC G5: the holds taken on this decision (None until one is, or an adapter
        #: watches for them)
        self._holds: Holds | None = None
        #: SPEC F2: the scope of the check, when its ``refund_on`` lists a status
        self._scope: Scope | None = None

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

    # -- leases (SPEC N4, N5) -------------------------------------------------

    @property
    def lease_active(self) -> bool:
        """A lease is held and has not ended (renewals are due, N5)."""
        owner = self._lease_owner or self
        return owner._lease_state == 1

    @property
    def lease_seconds(self) -> float:
        """The lease's length in seconds (renew every half of it, SPEC N5); 0 without one."""
        owner = self._lease_owner or self
        return owner._lease_ms / 1000

    @property
    def timed_out(self) -> bool:
        """SPEC N7: the request was ended at its in-flight policy's ``max_duration``
        (its lease released then): the adapter ends the response."""
        owner = self._lease_owner or self
        return owner._lease_state == 4

    def lease_time_left(self) -> float | None:
        """Seconds until the lease's ``max_duration`` ends the request (N7; at most 0
        once it has passed), on the limiter's clock; None when no lease is held."""
        owner = self._lease_owner or self
        if owner._lease_state != 1 or owner._limiter is None:
            return None
        left: float = owner._lease_deadline - owner._limiter._mono()
        return left

    async def finish(self, status: int | None = None) -> None:
        """SPEC N4: the response is over (sent, disconnected, raised or cancelled):
        the renewals of its holds stop (G5) and the lease is released, exactly once
        (later calls do nothing). ``status``: the handler's answer, when it gave one:
        a status the check's scope lists in ``refund_on`` refunds the request first
        (F2)."""
        if status is not None and self._scope is not None and self._scope.refunds(status):
            await self.refund()
        self.end_holds()
        owner = self._lease_owner or self
        if owner._lease_state in (1, 2) and owner._limiter is not None:
            await owner._limiter._release(owner)  # type: ignore[attr-defined]

    def finish_sync(self, status: int | None = None) -> None:
        """:meth:`finish` for a decision of the synchronous path."""
        if status is not None and self._scope is not None and self._scope.refunds(status):
            self.refund_sync()  # SPEC F2
        self.end_holds()
        owner = self._lease_owner or self
        if owner._lease_state in (1, 2) and owner._limiter is not None:
            owner._limiter._release_sync(owner)  # type: ignore[attr-defined]

    async def renew(self) -> bool:
        """SPEC N5: extend the lease (TB.RENEW) now; True when renewed, False when
        nothing was sent (no lease, ended, lost) or it was lost or failed. At or past
        the lease's ``max_duration`` (N7) it sends no TB.RENEW: the lease is released
        instead, once, and :attr:`timed_out` becomes True."""
        owner = self._lease_owner or self
        if owner._lease_state != 1 or owner._limiter is None:
            return False
        done: bool = await owner._limiter._renew(owner)  # type: ignore[attr-defined]
        return done

    def renew_sync(self) -> bool:
        """:meth:`renew` for a decision of the synchronous path."""
        owner = self._lease_owner or self
        if owner._lease_state != 1 or owner._limiter is None:
            return False
        done: bool = owner._limiter._renew_sync(owner)  # type: ignore[attr-defined]
        return done

    # -- holds (SPEC G1-G6) ----------------------------------------------------

    def watch_holds(self, on_take: Callable[[Hold], None]) -> None:
        """For an adapter (SPEC G5): ``on_take(hold)`` is called for each hold taken on
        this decision from now on, so that it renews it while the request runs;
        :meth:`finish` (or :meth:`end_holds`) stops those renewals."""
        self._hold_book().on_take = on_take

    def end_holds(self) -> None:
        """SPEC G5: the response is over: the holds taken on this decision are no
        longer renewed (they can still be settled)."""
        if self._holds is not None:
            self._holds.stop()

    @property
    def holds(self) -> tuple[Hold, ...]:
        """The holds taken on this decision (refused ones left out)."""
        return () if self._holds is None else tuple(self._holds.taken)

    def _hold_book(self) -> Holds:
        book = self._holds
        if book is None:
            book = self._holds = Holds()
        return book

    async def hold(self, policy: str, estimate: float, ttl: float = 60) -> Hold:
        """SPEC G1: take ``estimate`` now from the ``settle_later`` policy ``policy``'s
        bucket for this request (TB.HOLD), settled later with ``hold.settle(actual)``.
        Raises :class:`HoldError` (nothing sent) for an invalid estimate or ttl or a
        policy that is not a settle_later policy of this check, :class:`StoreError`
        when the call fails. A full hold table is a refused hold (G6), never an
        error. The hold is renewed while the request runs (G5) by the adapter that
        watches this decision."""
        key, capacity, rate, ttl_ms = self._hold_args(policy, estimate, ttl)
        assert self._limiter is not None
        out: Hold = await self._limiter._hold(policy, key, capacity, rate, estimate, ttl_ms)  # type: ignore[attr-defined]
        self._hold_book().add(out)
        return out

    def hold_sync(self, policy: str, estimate: float, ttl: float = 60) -> Hold:
        """:meth:`hold` for a decision of the synchronous path."""
        key, capacity, rate, ttl_ms = self._hold_args(policy, estimate, ttl)
        assert self._limiter is not None
        out: Hold = self._limiter._hold_sync(policy, key, capacity, rate, estimate, ttl_ms)  # type: ignore[attr-defined]
        self._hold_book().add(out)
        return out

    def _hold_args(self, policy: str, estimate: float, ttl: float) -> tuple[str, float, float, int]:
        from .policy import _is_number, _whole_ms, cost_ok

        got = self._holdable.get(policy)
        if got is None or self._limiter is None:
            raise HoldError(f"policy {policy!r} is not a settle_later policy of this request's check")
        if not cost_ok(estimate) or not estimate > 0:  # SPEC G1: a cost (C3), > 0
            raise HoldError(f"policy {policy!r}: a hold's estimate must be > 0 and <= 2^53, got {estimate!r}")
        if not _is_number(ttl) or not ttl > 0:
            raise HoldError(f"a hold's ttl must be > 0 seconds, got {ttl!r}")
        ttl_ms = _whole_ms(ttl)
        if not 1 <= ttl_ms <= 31536000000:
            raise HoldError(f"a hold's ttl must be >= 0.001 and <= 31536000 seconds, got {ttl!r}")
        return got[0], got[1], got[2], ttl_ms

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
        out._limiter = self._limiter or other._limiter
        out._holdable = {**other._holdable, **self._holdable}
        # SPEC G5: one book of holds for the parts and the merged decision, so that the
        # adapter that watches a part renews (and stops) holds taken on any of them
        if self._holds is not None or other._holds is not None:
            book = self._hold_book()
            if other._holds is not None and other._holds is not book:
                book.taken.extend(other._holds.taken)
                if book.on_take is None:
                    book.on_take = other._holds.on_take
            other._holds = out._holds = book
        owner = self if (self._lease_owner or self).lease is not None else other
        out.lease = owner.lease
        out._lease_owner = owner._lease_owner or owner
        return out

    def __repr__(self) -> str:
        names = ", ".join(f"{r.name}:{r.remaining:g}" for r in self.results)
        extra = f", shadow_limited={list(self.shadow_limited)}" if self.shadow_limited else ""
        extra += ", from_cache" if self.from_cache else ""
        return f"Decision({self.outcome.value}, allowed={self.allowed}, [{names}]{extra})"
