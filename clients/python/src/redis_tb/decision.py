"""What the limiter decided for one request, as handlers see it on
``request.state.rate_limit``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Awaitable, Callable, Protocol

from .outcome import HoldError, Lease, Outcome, PolicyResult, StoreError

if TYPE_CHECKING:
    from .scope import Scope

__all__ = ["Decision", "Hold", "HoldError", "Lease", "Outcome", "PolicyResult", "Settlement", "StoreError"]


class _Limiter(Protocol):
    """What a decision and its holds use of the limiter that made them: its clock (a
    lease's deadline, N7), the settlement's check (G3) and a hold's answer (G2). The lease and hold calls
    (``_release``, ``_renew``, ``_hold``, ``_settle``, ``_renew_hold`` and their sync
    twins) are one limiter class's or the other's. A protocol, so that this module
    imports no limiter (the limiter imports it)."""

    _mono: Callable[[], float]

    def _check_actual(self, actual: object) -> None: ...

    # SPEC G2: a hold's answer, (status, headers, body): headers.Response
    def hold_response(self, hold: Hold) -> tuple[int, list[tuple[str, str]], bytes | None]: ...


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
        self._limiter: _Limiter | None = None
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


# a hold's renewals (G5): due while the request runs; lost (a renewal answered 0: its
# settle sends nothing, G3); stopped (settled, refused, or its response ended)
_RENEWING, _LOST, _STOPPED = 1, 2, 3


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
        limiter: _Limiter,
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
        return PolicyResult(
            self.policy, self.key, self.capacity, self.rate, self.estimate, self.allowed,
            self.remaining, self.retry_after, self.reset_after,
        )

    @property
    def decision(self) -> Decision:
        """A one-policy decision of the hold: limited when refused (SPEC G2), so
        ``limiter.response(hold.decision)`` is its 429 (H1-H3, P1)."""
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
