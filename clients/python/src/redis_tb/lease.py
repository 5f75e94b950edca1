"""SPEC N4, N5, N7, M2: the life of one request's lease, shared by the asyncio and the
synchronous limiter (which make the calls): it ends exactly once (released when the
response ends, N4), is renewed every ``lease / 2`` while the request runs (N5), is lost
when a renewal answers 0, and is ended at its policy's ``max_duration`` after its grant
(N7: released instead of renewed, counted in ``leases_timed_out``, and the adapter ends
the response), whatever its client does.

A decision's lease state (``Decision._lease_state``): 0 none, 1 held, 2 lost, 3 ended,
4 ended by its max_duration."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .replies import packed, pair_values

if TYPE_CHECKING:
    from .breaker import Breaker
    from .decision import Decision
    from .stats import LimiterStats
    from .metrics import Metrics

__all__ = ["HELD", "LOST", "ENDED", "TIMED_OUT", "LeaseRules"]

HELD, LOST, ENDED, TIMED_OUT = 1, 2, 3, 4

#: a tick this close before the deadline is at it: the limiter's clock is float seconds,
#: and a grant at 0.3 s with a 300 s max_duration must end at 300.3 s, not 1 ulp later
_AT = 1e-9


class LeaseRules:
    """The lease rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin: counters,
    metrics, log lines and command texts; the limiters send the calls)."""

    if TYPE_CHECKING:
        stats: LimiterStats
        metrics: Metrics | None
        breaker: Breaker
        _mono: Callable[[], float]
        _lease_log: dict[str, tuple[float, int]]
        _timeout_log: dict[str, tuple[float, int]]

        def _log_once(self, book: dict[str, tuple[float, int]], name: str, message: str) -> None: ...

    def _lease_granted(self, d: Decision, lease_ms: int, max_duration_ms: int) -> None:
        """SPEC N6, N7, M2: a lease was granted now; its max_duration counts from here."""
        d._lease_state = HELD
        d._lease_ms = lease_ms
        d._lease_deadline = self._mono() + max_duration_ms / 1000
        self.stats.leases_in_flight += 1
        if self.metrics is not None and d.lease is not None:
            self.metrics.lease_started(d.lease.policy)

    def _lease_ended(self, d: Decision) -> bool:
        """SPEC N4, M2: the lease ends now (once); True when a release is to be sent
        (it was not lost)."""
        held = d._lease_state == HELD
        d._lease_state = ENDED
        self.stats.leases_in_flight -= 1
        if self.metrics is not None and d.lease is not None:
            self.metrics.lease_ended(d.lease.policy)
        return held

    def _past_deadline(self, d: Decision) -> bool:
        """SPEC N7: a renewal tick at or after the lease's max_duration sends no TB.RENEW."""
        now: float = self._mono()
        return now >= d._lease_deadline - _AT

    def _timed_out(self, d: Decision) -> None:
        """SPEC N7: the request reached its max_duration: the lease ends now (its one
        release is sent by the caller; the response's end later sends nothing),
        ``leases_timed_out`` counts it, one line a second per policy."""
        self._lease_ended(d)
        d._lease_state = TIMED_OUT
        self.stats.leases_timed_out += 1
        policy = d.lease.policy if d.lease is not None else ""
        metrics: Any = self.metrics
        if metrics is not None and hasattr(metrics, "lease_timed_out"):  # an older Metrics has none
            metrics.lease_timed_out(policy)
        self._log_once(
            self._timeout_log, policy,
            "redis-tb: a request of in-flight policy '%s' reached its max_duration: its lease was "
            "released and its response ended (%d since the last line)",
        )

    def _lease_gone(self, d: Decision, what: str) -> None:
        """SPEC N4, N5, M2: a TB.RELEASE or TB.RENEW answered 0: the lease had expired."""
        self.stats.leases_expired += 1
        policy = d.lease.policy if d.lease is not None else ""
        if self.metrics is not None:
            self.metrics.lease_expired(policy)
        self._log_once(
            self._lease_log, policy,
            "redis-tb: a lease of in-flight policy '%s' had expired before its " + what
            + " (%d since the last line): renew it within its lease",
        )

    def _release_command(self, d: Decision) -> bytes:
        assert d.lease is not None
        return packed("TB.RELEASE", d.lease.key, d.lease.id)

    def _renew_command(self, d: Decision) -> bytes:
        assert d.lease is not None
        return packed("TB.RENEW", d.lease.key, d.lease.id, d._lease_ms)

    def _released(self, d: Decision, raw: Any) -> None:
        self.breaker.succeeded()
        if pair_values(raw, "TB.RELEASE", 2)[0] != 1:
            self._lease_gone(d, "release")

    def _renewed(self, d: Decision, raw: Any) -> bool:
        self.breaker.succeeded()
        if pair_values(raw, "TB.RENEW", 3)[0] == 1:
            return True
        if d._lease_state == HELD:  # SPEC N5: lost: renewals stop, no release is sent
            d._lease_state = LOST
            self._lease_gone(d, "renewal")
        return False
