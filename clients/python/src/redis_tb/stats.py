"""The limiter's counters (SPEC B5, M2) and its backend (E6): what an app exports, e.g. to Prometheus."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LimiterStats"]


@dataclass
class LimiterStats:
    """Counters an app can export (e.g. to Prometheus)."""

    #: requests checked against Redis (or meant to be)
    checks: int = 0
    #: requests Redis admitted (their tokens were taken); a request that only shadow
    #: policies refused goes on uncharged and is counted in ``shadow_limited`` instead
    allowed: int = 0
    #: requests refused (429) by Redis or by the deny cache
    limited: int = 0
    #: Redis calls that failed: connection errors, timeouts, error replies
    store_errors: int = 0
    #: requests decided by the failure mode (store errors + cool-down skips)
    degraded: int = 0
    refunds: int = 0
    refund_errors: int = 0
    #: requests that a shadow policy refused (they went on, uncharged, unless an enforced
    #: one refused too)
    shadow_limited: int = 0
    #: requests refused by the local deny cache (also counted in ``limited``)
    deny_cache_hits: int = 0
    #: requests whose cost or limit function gave a value out of range (SPEC L3)
    invalid_inputs: int = 0
    #: leases this process holds now (SPEC M2: up at a grant, down when it ends, N4)
    leases_in_flight: int = 0
    #: leases that ended without a release (a TB.RELEASE or TB.RENEW answered 0, M2)
    leases_expired: int = 0
    #: requests ended at their in-flight policy's max_duration (SPEC N7, M2)
    leases_timed_out: int = 0
    #: holds taken (TB.HOLD granted, SPEC G1)
    holds: int = 0
    #: holds whose renewal answered 0 (SPEC G5, M2)
    holds_lost: int = 0
    #: holds settled (TB.SETTLE answered 1, G3)
    settlements: int = 0
    #: the store's backend in use, ``module`` or ``scripts`` (SPEC E6); None until it is
    #: chosen (before startup, or a degraded start before its first call reaches Redis)
    backend: str | None = None
