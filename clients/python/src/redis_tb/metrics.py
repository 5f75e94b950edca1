"""Per-policy metrics, Prometheus naming (the same names in the Rust and Node
integrations). Labels are ``limiter`` (a configured name) and ``policy`` (a policy
name) only, never a client identity: cardinality stays bounded by configuration.

=======================================================  ===========================
``redis_tb_allowed_total{limiter,policy}``               +1 per applied policy of an
                                                         allowed (charged) request,
                                                         shadow policies included
``redis_tb_limited_total{limiter,policy}``               +1 per enforced policy that
                                                         refused a request that got a
                                                         429 (Redis or deny cache)
``redis_tb_shadow_limited_total{limiter,policy}``        +1 per shadow policy that
                                                         refused
``redis_tb_refunded_total{limiter,policy}``              +1 per policy whose tokens a
                                                         refund gave back
``redis_tb_deny_cache_hits_total{limiter,policy}``       +1 per request refused by the
                                                         local deny cache, per cached
                                                         policy that answered it
``redis_tb_store_errors_total{limiter}``                 failed Redis calls
``redis_tb_degraded_total{limiter}``                     requests decided by the
                                                         failure mode
``redis_tb_redis_call_duration_seconds{limiter}``        histogram of every Redis call
                                                         (TB.MTAKE, refunds; failed
                                                         and timed-out calls too)
``redis_tb_leases_in_flight{limiter,policy}``            leases this process holds now
                                                         (SPEC M2)
``redis_tb_leases_expired_total{limiter,policy}``        leases that ended without a
                                                         release (M2)
``redis_tb_leases_timed_out_total{limiter,policy}``      requests ended at their
                                                         max_duration (N7)
``redis_tb_holds_lost_total{limiter,policy}``            holds whose renewal answered
                                                         0 (G5)
``redis_tb_backend{limiter,backend}``                    1 for the store's backend in
                                                         use (``module`` or
                                                         ``scripts``), 0 for the other
                                                         (SPEC E6)
=======================================================  ===========================

``prometheus_client`` is an optional dependency (the ``prometheus`` extra: ``pip install
'./clients/python[prometheus]'`` from a checkout, or the wheel of ``dist/`` with it)
imported only when :class:`PrometheusMetrics` is built. Without ``metrics=`` a limiter
makes no metric calls at all.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol
from weakref import WeakKeyDictionary

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = ["BUCKETS", "LimiterMetrics", "Metrics", "PrometheusMetrics"]

#: Buckets of ``redis_tb_redis_call_duration_seconds`` (seconds).
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


class LimiterMetrics(Protocol):
    """What a limiter reports; implement it to feed another metrics system (SPEC
    "Names": ``LimiterMetrics``; ``Metrics`` is its earlier name)."""

    def allowed(self, policy: str) -> None: ...
    def limited(self, policy: str) -> None: ...
    def shadow_limited(self, policy: str) -> None: ...
    def refunded(self, policy: str) -> None: ...
    def deny_cache_hit(self, policy: str) -> None: ...
    def invalid_input(self, policy: str) -> None: ...
    def store_error(self) -> None: ...
    def degraded(self) -> None: ...
    def redis_call(self, seconds: float) -> None: ...
    # SPEC M2 (in-flight policies)
    def lease_started(self, policy: str) -> None: ...
    def lease_ended(self, policy: str) -> None: ...
    def lease_expired(self, policy: str) -> None: ...
    # SPEC N7, G5 (a Metrics without them is still accepted: those counts are skipped)
    def lease_timed_out(self, policy: str) -> None: ...
    def hold_lost(self, policy: str) -> None: ...
    # SPEC E6 (likewise optional): the backend chosen, ``module`` or ``scripts``
    def backend(self, backend: str) -> None: ...


#: the earlier name of :class:`LimiterMetrics`, kept
Metrics = LimiterMetrics


class _Families:
    """The metric families of one registry, shared by every limiter registered there
    (prometheus_client refuses a second family of the same name in one registry)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        kw: dict[str, Any] = {"registry": registry}
        per_policy = ("limiter", "policy")
        self.allowed = Counter(
            "redis_tb_allowed", "Applied policies of allowed requests (tokens taken)", per_policy, **kw
        )
        self.limited = Counter(
            "redis_tb_limited", "Enforced policies that refused a request answered 429", per_policy, **kw
        )
        self.shadow_limited = Counter(
            "redis_tb_shadow_limited", "Shadow policies that would have refused a request", per_policy, **kw
        )
        self.refunded = Counter(
            "redis_tb_refunded", "Policies whose tokens a refund gave back", per_policy, **kw
        )
        self.deny_cache_hits = Counter(
            "redis_tb_deny_cache_hits",
            "Requests refused by the local deny cache, per cached policy",
            per_policy,
            **kw,
        )
        self.invalid_inputs = Counter(
            "redis_tb_invalid_inputs",
            "Requests whose cost or limit function gave a value out of range (SPEC L3)",
            per_policy,
            **kw,
        )
        self.store_errors = Counter(
            "redis_tb_store_errors", "Failed Redis calls (errors, timeouts)", ("limiter",), **kw
        )
        self.degraded = Counter(
            "redis_tb_degraded", "Requests decided by the failure mode", ("limiter",), **kw
        )
        self.leases_in_flight = Gauge(  # SPEC M2
            "redis_tb_leases_in_flight", "Leases of in-flight policies this process holds now",
            per_policy, **kw,
        )
        self.leases_expired = Counter(
            "redis_tb_leases_expired",
            "Leases that ended without a release (a TB.RELEASE or TB.RENEW answered 0)",
            per_policy, **kw,
        )
        self.leases_timed_out = Counter(  # SPEC N7
            "redis_tb_leases_timed_out",
            "Requests of in-flight policies ended at their max_duration (their lease released)",
            per_policy, **kw,
        )
        self.holds_lost = Counter(  # SPEC G5
            "redis_tb_holds_lost",
            "Holds whose renewal answered 0 (expired or lost in a failover): their settlement sends nothing",
            per_policy, **kw,
        )
        self.backend = Gauge(  # SPEC E6
            "redis_tb_backend", "The store's backend in use: 1 for it (module or scripts)", ("limiter", "backend"), **kw,
        )
        self.duration = Histogram(
            "redis_tb_redis_call_duration_seconds",
            "Duration of the limiter's Redis calls (TB.MTAKE, refunds), failed ones included",
            ("limiter",),
            buckets=BUCKETS,
            **kw,
        )


_lock = threading.Lock()
_families: WeakKeyDictionary[Any, _Families] = WeakKeyDictionary()


def _families_of(registry: CollectorRegistry | None) -> _Families:
    with _lock:
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        got = _families.get(registry)
        if got is None:
            got = _families[registry] = _Families(registry)
        return got


class PrometheusMetrics:
    """The limiter's metrics in a ``prometheus_client`` registry.

    ``registry``: a ``CollectorRegistry`` (default: prometheus_client's global
    ``REGISTRY``); ``limiter``: the value of the ``limiter`` label (give each
    limiter of an app its own name). Several limiters may share a registry.
    Children are bound once per policy name, so a count costs one ``inc()``.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, limiter: str = "default") -> None:
        self.name = limiter
        #: the registry given (None: prometheus_client's default), for a sibling limiter's
        self.registry = registry
        self._f = _families_of(registry)
        self._store_errors = self._f.store_errors.labels(limiter)
        self._degraded = self._f.degraded.labels(limiter)
        self._duration = self._f.duration.labels(limiter)
        self._children: dict[tuple[str, str], Any] = {}

    def _child(self, family: str, policy: str) -> Any:
        key = (family, policy)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = getattr(self._f, family).labels(self.name, policy)
        return child

    def allowed(self, policy: str) -> None:
        self._child("allowed", policy).inc()

    def limited(self, policy: str) -> None:
        self._child("limited", policy).inc()

    def shadow_limited(self, policy: str) -> None:
        self._child("shadow_limited", policy).inc()

    def refunded(self, policy: str) -> None:
        self._child("refunded", policy).inc()

    def deny_cache_hit(self, policy: str) -> None:
        self._child("deny_cache_hits", policy).inc()

    def invalid_input(self, policy: str) -> None:
        self._child("invalid_inputs", policy).inc()

    def store_error(self) -> None:
        self._store_errors.inc()

    def degraded(self) -> None:
        self._degraded.inc()

    def redis_call(self, seconds: float) -> None:
        self._duration.observe(seconds)

    def lease_started(self, policy: str) -> None:
        self._child("leases_in_flight", policy).inc()

    def lease_ended(self, policy: str) -> None:
        self._child("leases_in_flight", policy).dec()

    def lease_expired(self, policy: str) -> None:
        self._child("leases_expired", policy).inc()

    def lease_timed_out(self, policy: str) -> None:
        self._child("leases_timed_out", policy).inc()

    def hold_lost(self, policy: str) -> None:
        self._child("holds_lost", policy).inc()

    def backend(self, backend: str) -> None:
        """SPEC E6: 1 for the backend in use, 0 for the other."""
        for name in ("module", "scripts"):
            self._f.backend.labels(self.name, name).set(1 if name == backend else 0)
