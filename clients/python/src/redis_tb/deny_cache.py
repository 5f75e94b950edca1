"""A local cache of Redis's refusals, off by default.

After Redis refuses a request, each ENFORCED violated policy with a finite wait
(``retry_after > 0``) is remembered: bucket key -> (capacity, rate, cost,
deny-until = monotonic now + retry_after, reset-at = now + reset_after). A later
request whose plan holds that key with the same capacity and rate and a cost >= the
cached one, before deny-until, is refused locally without calling Redis.

- It only short-circuits refusals, so it can never admit more than Redis would: a
  smaller cost, or another limit (a plan change), goes to Redis.
- A refund made through THIS limiter drops the refunded keys' entries. A refund (or
  a key deleted by an operator) elsewhere is not seen: this instance keeps refusing
  that key until deny-until, at most the retry_after Redis gave. That is why it is
  opt-in.
- Bounded: at most ``max_entries``; when full, expired entries go first, then the
  entry that expires soonest. O(log n) per insert (a heap with lazy deletion), O(1)
  per lookup.
- Shadow refusals are never cached: shadow policies always reach Redis.
- An admission can be cached as the refusal that follows it: when Redis admits a
  request and an enforced bucket is left with ``remaining < cost``, the limiter adds
  the entry (same capacity, rate, cost) with deny-until = now + (cost - remaining) /
  rate and reset-at = now + reset_after: exactly what Redis would answer a request
  of that cost until then, absent refunds. So a flooding identity's other in-flight
  requests do not reach Redis after each admission either.
- Single flight: when an entry's deny-until has passed, the first request that finds
  it (:meth:`DenyCache.claim`) is the probe: the entry is marked probing (with the
  monotonic time) and that request goes to Redis. Requests finding the entry while
  it is probing are refused locally (``retry_after`` 0: ``Retry-After: 1``). The
  probe's answer settles it: refused, or admitted leaving the bucket below the
  cost -> :meth:`add` renews the entry; admitted with enough left, a store error or
  a cancelled call -> :meth:`end_probe` removes it. A mark older than
  ``stale_after`` (the limiter passes 2 x its call timeout) lets the next request
  probe, so a lost probe never blocks the key for good.
"""

from __future__ import annotations

import heapq
import threading
import time
from typing import Callable, NamedTuple

__all__ = ["DenyCache", "DenyEntry"]


class DenyEntry(NamedTuple):
    capacity: float
    rate: float
    cost: float
    #: monotonic seconds until which the key is refused locally
    deny_until: float
    #: monotonic seconds at which the bucket would be full again
    reset_at: float
    #: monotonic seconds at which a probe went to Redis for this expired entry; 0: none
    probing: float = 0.0


class DenyCache:
    """``DenyCache(max_entries=10_000)``, given to a limiter as ``deny_cache=``.

    ``clock``: the monotonic clock (seconds); tests may pass their own. One cache
    per limiter (it is thread-safe, for the sync path under threaded servers).
    """

    def __init__(self, max_entries: int = 10_000, *, clock: Callable[[], float] = time.monotonic) -> None:
        if type(max_entries) is not int or max_entries < 1:  # SPEC C7
            raise ValueError(f"max_entries must be a whole number >= 1, got {max_entries!r}")
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[str, DenyEntry] = {}
        self._heap: list[tuple[float, str]] = []  # (deny_until, key); stale ones skipped
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: str, capacity: float, rate: float, cost: float, now: float) -> DenyEntry | None:
        """The entry refusing this charge at ``now``, or None (ask Redis); as
        :meth:`claim`, whose probe mark (if this lookup made one) is left to expire."""
        return self.claim(key, capacity, rate, cost, now)[0]

    def claim(
        self, key: str, capacity: float, rate: float, cost: float, now: float,
        stale_after: float = float("inf"),
    ) -> tuple[DenyEntry | None, DenyEntry | None]:
        """``(hit, probe)`` for this charge at ``now``.

        ``hit``: the entry refusing it locally (before deny-until, or while another
        request probes Redis for it), else None: ask Redis. ``probe``: when this
        request is the one that probes (the entry had expired and nobody was probing,
        or the mark is older than ``stale_after``), the marked entry to hand back to
        :meth:`end_probe` once Redis has answered; else None.
        """
        e = self._entries.get(key)
        if e is None or e.capacity != capacity or e.rate != rate or cost < e.cost:
            return None, None
        if now < e.deny_until:
            return e, None
        with self._lock:
            e = self._entries.get(key)
            if e is None or e.capacity != capacity or e.rate != rate or cost < e.cost:
                return None, None
            if now < e.deny_until:
                return e, None
            if e.probing and now - e.probing < stale_after:
                return e, None  # another request is asking Redis: refuse locally
            marked = e._replace(probing=now)
            self._entries[key] = marked
            return None, marked

    def end_probe(self, key: str, marked: DenyEntry, *, keep: bool = False) -> None:
        """The probe ``marked`` (from :meth:`claim`) is over without a refusal to
        cache (admitted, a store error, cancelled): drop the entry, unless it has been
        renewed (or re-claimed) since. ``keep``: the probe never went to Redis; put
        the entry back unmarked so that the next request probes."""
        with self._lock:
            if self._entries.get(key) is marked:
                if keep:
                    self._entries[key] = marked._replace(probing=0.0)
                else:
                    del self._entries[key]

    def add(self, key: str, capacity: float, rate: float, cost: float, retry_after: float,
            reset_after: float, now: float) -> None:
        """Remember Redis's refusal of ``cost`` tokens on ``key``."""
        if not retry_after > 0:  # -1: never admissible; 0: not a wait
            return
        entry = DenyEntry(capacity, rate, cost, now + retry_after, now + max(reset_after, 0.0))
        with self._lock:
            if key not in self._entries and len(self._entries) >= self.max_entries:
                self._evict(now)
            self._entries[key] = entry
            heapq.heappush(self._heap, (entry.deny_until, key))
            if len(self._heap) > 2 * self.max_entries + 16:
                self._compact()

    def discard(self, key: str) -> None:
        """Forget ``key`` (a refund through this limiter gave its tokens back)."""
        if key in self._entries:
            with self._lock:
                self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._heap.clear()

    def _evict(self, now: float) -> None:
        # The heap's smallest live entry is an expired one if any is expired, else the
        # one that expires soonest: either way the one to drop. Stale heap items (keys
        # overwritten or discarded since) are skipped.
        heap, entries = self._heap, self._entries
        while heap:
            until, key = heapq.heappop(heap)
            e = entries.get(key)
            if e is not None and e.deny_until == until:
                del entries[key]
                # drop the other expired entries too while they are on top
                while heap and heap[0][0] <= now:
                    until, key = heapq.heappop(heap)
                    e = entries.get(key)
                    if e is not None and e.deny_until == until:
                        del entries[key]
                return

    def _compact(self) -> None:
        self._heap = [(e.deny_until, k) for k, e in self._entries.items()]
        heapq.heapify(self._heap)
