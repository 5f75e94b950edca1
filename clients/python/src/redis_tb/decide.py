"""From a plan and the store's reply to a :class:`~redis_tb.decision.Decision` (SPEC D1-D4,
N3, S2, R1-R10, L3, I2): the requests decided without a call (nothing applies, an early
refusal, the deny cache, the open breaker), the results of a reply in policy order, the
counters and metrics of each outcome, the deny cache's entries, and the decision owned
by its limiter (its leases, holds and scope's refunds). :class:`Deciding` is a mixin of :class:`~redis_tb.limiter.BaseLimiter`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from .decision import Decision, Lease, Outcome, PolicyResult
from .deny_cache import DenyCache, DenyEntry
from .plan import _BUCKET, _IN_FLIGHT, _Early, _Plan
from .replies import AcquireValues
from .store_call import _CALL, _SKIP, StoreCall

if TYPE_CHECKING:
    from .decision import Hold
    from .scope import Scope

__all__ = ["Deciding"]

#: ``tuple.__new__``: ``_new_tuple(PolicyResult, fields)`` is ``PolicyResult(*fields)``
#: without the named tuple's Python-level ``__new__`` (which calls just this)
_new_tuple = tuple.__new__


class Deciding(StoreCall):
    """The decision rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin)."""

    if TYPE_CHECKING:
        deny_cache: DenyCache | None
        shadow: bool
        _cache_now: Callable[[], float]
        _invalid_log: dict[str, tuple[float, int]]
        _shadow_log: dict[str, tuple[float, int]]

        def _lease_granted(self, d: Decision, lease_ms: int, max_duration_ms: int) -> None: ...
        def _check_actual(self, actual: object) -> None: ...
        def hold_response(self, hold: Hold) -> tuple[int, list[tuple[str, str]], bytes | None]: ...

    def _early(self, early: _Early) -> Decision:
        """A request decided while planning (SPEC I2, L3): nothing sent to Redis,
        never admitted."""
        self.stats.checks += 1
        if early.outcome is Outcome.INVALID_INPUT:
            self.stats.invalid_inputs += 1
            if self.metrics is not None:
                self.metrics.invalid_input(early.culprit)
            self._log_once(
                self._invalid_log, early.culprit,
                "redis-tb: policy '%s' got an invalid cost or limit from the application; "
                "answered 500 (%d since the last line)",
            )
        return Decision(early.outcome, False, culprit=early.culprit)

    def _before_call(
        self, plans: list[_Plan], probes: list[tuple[str, DenyEntry]]
    ) -> tuple[Decision | None, int]:
        """A decision made without Redis (nothing applies, a cached refusal, the
        breaker open), or None and what the breaker allows (a call or the probe). The
        deny-cache entries this request probes are appended to ``probes``: pass them
        to :meth:`_probes_done` once it is over."""
        if not plans:
            return Decision(Outcome.NOT_LIMITED, True), _SKIP  # SPEC L4
        self.stats.checks += 1
        if self.deny_cache is not None:
            hit = self._cached_refusal(plans, self.deny_cache, probes)
            if hit is not None:
                return hit, _SKIP
        breaker = self.breaker  # SPEC B2, B3: a closed breaker (the hot path) allows the call
        way = _CALL if breaker.open_until == 0.0 else breaker.acquire()
        if way == _SKIP:
            self._probes_done(probes, keep=True)  # SPEC R6: the claim is given back
            return self._degraded(None), _SKIP
        return None, way

    def _cached_refusal(
        self, plans: list[_Plan], cache: DenyCache, probes: list[tuple[str, DenyEntry]]
    ) -> Decision | None:
        if self.shadow:
            return None
        now = self._cache_now()
        stale_after = 2 * self.timeout
        hits: list[PolicyResult] = []
        for pl in plans:
            if pl.shadow or pl.kind == _IN_FLIGHT:  # SPEC R10: in-flight refusals are never cached
                continue
            assert pl.rate is not None
            e, probe = cache.claim(pl.key, pl.capacity, pl.rate, pl.cost, now, stale_after)
            if probe is not None:
                probes.append((pl.key, probe))
            elif e is not None:
                # while another request probes Redis, deny-until has passed: retry_after 0
                hits.append(pl.result(False, 0.0, max(0.0, e.deny_until - now), max(0.0, e.reset_at - now)))
        if not hits:
            return None
        # refused locally after all: the entries claimed above were not probed
        self._probes_done(probes, keep=True)
        self.stats.limited += 1
        self.stats.deny_cache_hits += 1
        m = self.metrics
        if m is not None:
            for r in hits:
                m.limited(r.name)
                m.deny_cache_hit(r.name)
        return Decision(Outcome.LIMITED, False, tuple(hits), from_cache=True)

    def _probes_done(self, probes: list[tuple[str, DenyEntry]], *, keep: bool = False) -> None:
        """The probes of one request are over: the entries a refusal renewed stay,
        the others go (admitted, store error, cancelled), or with ``keep`` (never
        sent) go back unmarked."""
        cache = self.deny_cache
        if cache is not None:
            for key, marked in probes:
                cache.end_probe(key, marked, keep=keep)
        probes.clear()

    def _acquired(self, plans: list[_Plan], v: AcquireValues) -> Decision:
        """SPEC N3: TB.ACQUIRE's reply as the policies' results, in policy order, and
        the lease when granted."""
        per_key: list[tuple[bool, float, float, float]] = []
        buckets = iter(v.buckets)
        slot: _Plan | None = None
        for pl in plans:
            if pl.kind == _IN_FLIGHT:
                slot = pl
                free = v.granted or v.in_flight < pl.capacity  # refused by a bucket only: the slot was free
                wait = 0.0 if v.granted else v.ms / 1000
                per_key.append((free, max(0.0, pl.capacity - v.in_flight), wait, wait))
            else:
                per_key.append(next(buckets))
        d = self._decision(plans, v.granted, per_key)
        if v.granted and v.id is not None and slot is not None:
            d.lease = Lease(slot.key, v.id, slot.policy.name)
            self._lease_granted(d, slot.lease_ms, slot.max_duration_ms)  # SPEC N6, N7, M2
        return d

    def _decision(
        self, plans: list[_Plan], allowed: bool, per_key: list[tuple[bool, float, float, float]]
    ) -> Decision:
        # _Plan.result, inline, each result made as the named tuple's own __new__ makes
        # it (all its fields given): two Python calls fewer per policy on every request
        results = tuple([
            _new_tuple(PolicyResult, (
                pl.policy.name, pl.key, pl.capacity, pl.rate, pl.cost, r[0], r[1], r[2], r[3], pl.shadow,
                pl.kind, pl.window,
            ))
            for pl, r in zip(plans, per_key)
        ])
        m = self.metrics
        if allowed:
            self.stats.allowed += 1
            if m is not None:
                for r in results:
                    m.allowed(r.name)
            cache = self.deny_cache
            if cache is not None:
                self._cache_spent(cache, results)
            return self._charged(results)
        shadowed = tuple(r.name for r in results if not r.allowed and r.shadow)
        if shadowed:
            self._shadow_refused(shadowed)
        violated = [r for r in results if not r.allowed and not r.shadow]
        if violated:
            self.stats.limited += 1
            if m is not None:
                for r in violated:
                    m.limited(r.name)
            cache = self.deny_cache
            if cache is not None:  # SPEC R1 (never an in-flight refusal, R10)
                now = self._cache_now()
                for r in violated:
                    if r.rate is not None and r.kind != _IN_FLIGHT:
                        cache.add(r.key, r.capacity, r.rate, r.cost, r.retry_after, r.reset_after, now)
            return Decision(Outcome.LIMITED, False, results, shadow_limited=shadowed)
        # SPEC S2: only shadow policies refused: the request goes on, uncharged (all or
        # nothing), so it is not counted in ``allowed``: nothing was taken.
        return Decision(Outcome.ALLOWED, True, results, shadow_limited=shadowed)

    def _cache_spent(self, cache: DenyCache, results: tuple[PolicyResult, ...]) -> None:
        """SPEC R5: Redis admitted (and charged) this request: each enforced bucket it
        left with fewer tokens than this request's cost refuses that cost for
        ``(cost - remaining) / rate`` s, exactly what Redis would answer until then
        (absent refunds)."""
        now = self._cache_now()
        for r in results:  # buckets only (SPEC R10, W3); most have tokens left: that test first
            if r.remaining < r.cost and not r.shadow and r.kind == _BUCKET and r.cost > 0 and r.rate:
                cache.add(r.key, r.capacity, r.rate, r.cost, (r.cost - r.remaining) / r.rate, r.reset_after, now)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        raise NotImplementedError

    def _shadow_refused(self, names: tuple[str, ...]) -> None:
        self.stats.shadow_limited += 1
        if self.metrics is not None:
            for name in names:
                self.metrics.shadow_limited(name)
        for name in names:  # SPEC S2: logged at most once a second per policy
            self._log_once(
                self._shadow_log, name,
                "redis-tb: shadow policy '%s' would have limited a request (%d since the last line)",
            )

    # -- a decision owned by its limiter (leases N4, N5; holds G1-G3; refunds F2) ----

    def _after_reply(
        self, plans: list[_Plan], values: Any, started: float, holdable: dict[str, tuple[str, float, float]]
    ) -> Decision:
        """The decision of a reply, owned (:meth:`_own`, inline: one call fewer a request)."""
        if self.metrics is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        breaker = self.breaker
        if breaker.open_until:  # SPEC B3: success closes the breaker
            breaker.succeeded()
        if type(values) is AcquireValues:
            d = self._acquired(plans, values)
        else:
            d = self._decision(plans, values[0], values[1])
        d._limiter = self
        if holdable:
            d._holdable = holdable
        return d

    def _own(
        self, d: Decision, holdable: dict[str, tuple[str, float, float]], scope: Scope | None = None
    ) -> Decision:
        d._limiter = self
        if scope is not None and scope.refunding:  # SPEC F2: finish(status) refunds
            d._scope = scope
        if holdable:
            d._holdable = holdable
        return d
