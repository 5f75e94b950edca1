"""The request-path limiter: it owns its policies and tells the story of one check,
policies -> scope -> plan -> one TB.MTAKE -> a Decision, with an explicit failure
mode for when Redis is down or slow. Framework-neutral, with an async path (ASGI:
Starlette/FastAPI, Django async views) and a sync path (Django under WSGI, threaded
servers) that share every rule; only the Redis call differs.

The steps of :meth:`RateLimiter.check`, each a mixin in a file named after the
SPEC's section:

1. scope      the request's route excluded, or unmatched (L1)      ``scope.py``
2. plan       which policies apply (K5), keys, costs, limits (K, I) ``plan.py``
3. before     the deny cache (R) and the breaker (B)                ``store_call.py``
4. call       one bounded call, TB.TAKE / MTAKE / ACQUIRE / WINDOW  ``store_call.py``
5. decide     the reply as a Decision (D, S, R, N)                  ``decide.py``

then ``headers.py`` (H, P) answers it, ``refund.py`` (F), ``lease.py`` (N) and
``hold.py`` (G) act on it later; ``startup.py`` is U::

    limiter = RateLimiter(AsyncClient.from_url(url), policies=[...], exclude=["GET /healthz"])
    decision = await limiter.check(request, route="GET /items/{id}", peer=peer, headers=getter)
    status, headers, body = limiter.response(decision)   # body None: serve the request

- ``route``: ``"METHOD /template"`` of the matched route (never the raw path), or
  None when no route matched (not limited unless ``limit_unmatched``, L1).
- ``peer``: the TCP peer address, None when unknown; ``headers``: a function of a
  lower-case header name returning all of that header's values. Both feed the
  default identity (:class:`ClientIP`); under Starlette both may be left out.
- Sync path: key/limit/cost/tier/hash_tag functions must be plain functions.
- Failure (B1-B5): every call bounded by ``timeout`` (50 ms) and made once; after a
  connection error or timeout Redis is left alone for ``cooldown`` (1 s), then one
  request probes it; ``fail_open=True`` (default) passes requests without headers,
  ``fail_open=False`` answers 503 with ``Retry-After: 1``; one log line a second at
  most (``redis_tb`` logger) and counters in :attr:`RateLimiter.stats`.
- Several policy sets on one connection: :meth:`BaseLimiter.with_policies`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Awaitable, Callable, Collection, Literal, Sequence, TypeVar, cast

import redis
import redis.asyncio
import redis.exceptions

from .address import ClientIpConfig, HeaderGetter
from .backend import BackendSetting, backend_setting
from .breaker import Breaker
from .client import AsyncClient, Client
from .clock import Clock, SystemClock
from .decide import Deciding
from .decision import _NO_HOLDS, Decision, Outcome, PolicyResult
from .hold import Hold, HoldRules, Settlement
from .lease import LeaseRules
from .deny_cache import DenyCache, DenyEntry
from .problem import Answering, Rejection
from .keys import KeyBuilder, check_prefix
from .metrics import Metrics
from .plan import _NO_PEER, _PLAIN_CALL, HashTagFunc, Planner, _Early, _Mixed, _resolved, _resolved_sync
from .policy import Policy, check_policy_kinds, check_policy_names
from .startup import start as _start
from .startup import start_sync as _start_sync
from .refund import RefundRules
from .scope import PolicyOwner, Scope
from .store_call import _PROBE, _SKIP, _STORE_ERRORS, _as_is, _bounded
from .stats import LimiterStats
from .replies import (
    acquire_reader,
    acquire_values,
    read_resp,
    mtake_reader,
    mtake_values,
    take_reader,
    take_values,
)

__all__ = [
    "BaseLimiter", "Clock", "HashTagFunc", "LimiterStats", "RateLimiter", "Rejection", "SyncRateLimiter",
    "SystemClock", "check_prefix",
]

T = TypeVar("T")


class BaseLimiter(PolicyOwner, Planner, Deciding, RefundRules, Answering, LeaseRules, HoldRules):
    """Everything both paths share: configuration, plans, decisions, failure mode,
    breaker, shadow mode, stats, headers. :class:`RateLimiter` (asyncio) and
    :class:`SyncRateLimiter` add the Redis calls.

    ``policies``: the policies this limiter checks together, in one call (SPEC C1,
    C10, C11 checked here); ``exclude``, ``limit_unmatched``: which requests are not
    limited at all (L1); ``refund_on``: the statuses after which a request's tokens go
    back (F2). See :class:`Scope`.
    ``client_ip``: the default identity (a :class:`ClientIpConfig`: peer address,
    trusted proxies, prefixes).
    ``prefix``: keys are ``<prefix>:[{<tag>}:]<policy>[@<route>]:<identity>`` (SPEC
    C4, K1), with ``hash_tag`` a function of the request giving the tag (K4). On Redis
    Cluster, layered policies need one hash tag per request so their keys share a slot.
    ``clock``: a :class:`Clock` (SPEC T1); tests pass their own.
    ``redis_now``: None (default) uses the Redis server's clock for the buckets, the
    one clock every app server agrees on; a function returning epoch seconds sends
    that ``now`` with each command instead. (A plain function given as ``clock`` is
    taken as ``redis_now``, its old meaning; deprecated.)
    ``shadow``: every policy of this limiter in shadow mode (observe only, S1).
    ``metrics``: e.g. ``PrometheusMetrics(registry, limiter="api")`` (M1).
    ``deny_cache``: a :class:`DenyCache` (R1-R9, off by default).
    ``legacy_reset``: ``X-RateLimit-Reset`` as a Unix timestamp (``"unix"``, the
    default) or in delta seconds (``"delta"``), with ``legacy_headers=True`` (H4).
    ``start_degraded``: an unreachable Redis at startup logs one line and starts in
    the failure mode instead of failing the start (U2).
    ``name``: the limiter's name in its log lines and startup errors (U3); default its
    metrics' ``limiter`` label, else ``default``.
    ``backend``: the store's backend (SPEC E1): ``auto`` (the module where ``COMMAND INFO
    tb.take`` finds it, else the script library of clients/lua), ``module`` or ``scripts``.
    """

    client: AsyncClient | Client

    def __init__(
        self,
        *,
        policies: Sequence[Policy] = (),
        exclude: Collection[str] = (),
        limit_unmatched: bool = False,
        refund_on: Collection[int] | Callable[[int], bool] = (),
        prefix: str = "rl",
        client_ip: ClientIpConfig | None = None,
        hash_tag: HashTagFunc | None = None,
        fail_open: bool = True,
        timeout: float = 0.05,
        cooldown: float = 1.0,
        legacy_headers: bool = False,
        clock: Clock | Callable[[], float] | None = None,
        redis_now: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
        shadow: bool = False,
        metrics: Metrics | None = None,
        deny_cache: DenyCache | None = None,
        legacy_reset: Literal["unix", "delta"] = "unix",
        start_degraded: bool = False,
        name: str | None = None,
        backend: BackendSetting = "auto",
    ) -> None:
        if legacy_reset not in ("unix", "delta"):
            raise ValueError(f"legacy_reset must be 'unix' or 'delta', got {legacy_reset!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):  # SPEC C7
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if not (isinstance(cooldown, (int, float)) and cooldown >= 0):
            raise ValueError(f"cooldown must be >= 0 seconds, got {cooldown!r}")
        self.prefix = check_prefix(prefix)
        self.keys = KeyBuilder(prefix)
        self.client_ip = client_ip or ClientIpConfig()
        self.hash_tag = hash_tag
        self.fail_open = fail_open
        self.timeout = timeout
        self.cooldown = cooldown
        self.legacy_headers = legacy_headers
        given: Clock | None = None
        if isinstance(clock, Clock) or hasattr(clock, "monotonic"):
            given = cast(Clock, clock)
        elif clock is not None:  # the old meaning of `clock` (deprecated)
            redis_now = redis_now or clock
        self.clock: Clock | None = given
        self.redis_now = redis_now
        self._mono: Callable[[], float] = given.monotonic if given is not None else time.monotonic
        self._wall: Callable[[], float] = given.time if given is not None else time.time
        self.wall = self._wall  # SPEC E5: the scripts' now where TIME is refused
        self.backend: BackendSetting = backend_setting(backend)  # SPEC E1
        self.shadow = shadow
        self.metrics = metrics
        self.deny_cache = deny_cache
        # The deny cache reads the limiter's clock (SPEC T1), or its own when the
        # limiter has the system clock (a cache built with a test clock).
        self._cache_now: Callable[[], float] = (
            self._mono if given is not None or deny_cache is None else deny_cache.clock
        )
        self.legacy_reset: Literal["unix", "delta"] = legacy_reset
        self.start_degraded = start_degraded
        #: the limiter's name in log lines and startup errors: ``name``, else its
        #: metrics' ``limiter`` label (M1), else ``default``
        self.name: str = name or getattr(metrics, "name", None) or "default"
        self.log = logger or logging.getLogger("redis_tb")
        self.stats = LimiterStats()
        #: the sets of policies checked together: its own and those registered (U3)
        self.policy_sets: list[tuple[Policy, ...]] = []
        #: SPEC C1, C10, C11: the limiter's own policies, checked together
        self.policies: tuple[Policy, ...] = check_policy_kinds(check_policy_names(policies))
        if self.policies:
            self.policy_sets.append(self.policies)
        #: SPEC L1, F2: which requests its policies limit, and which answers refund them
        self.scope = Scope(exclude=exclude, limit_unmatched=limit_unmatched, refund_on=refund_on)
        self.breaker = Breaker(cooldown, self._mono)
        self._last_log = float("-inf")
        self._unlogged = 0
        self._shadow_log: dict[str, tuple[float, int]] = {}
        self._invalid_log: dict[str, tuple[float, int]] = {}
        self._lease_log: dict[str, tuple[float, int]] = {}
        self._timeout_log: dict[str, tuple[float, int]] = {}
        self._cluster_log: dict[str, tuple[float, int]] = {}
        self._hold_log: dict[str, tuple[float, int]] = {}
        # Encoded once: each (capacity, rate, cost) shape.
        self._shapes: dict[tuple[float, float, float], bytes] = {}

    @property
    def store_errors(self) -> int:
        return self.stats.store_errors

    # -- startup (SPEC U1-U4) -------------------------------------------------

    # -- keys ------------------------------------------------------------------

    def key(self, policy: str, identity: str | bytes, *, route: str | None = None, tag: str | None = None) -> str:
        """The bucket key of ``identity`` under ``policy`` (SPEC K1-K4)."""
        return self.keys.key(policy, identity, route=route, tag=tag)


class RateLimiter(BaseLimiter):
    """Checks a request against policies in one call (TB.TAKE or TB.MTAKE), all or
    nothing (asyncio).

    ``client``: an :class:`AsyncClient` or a ``redis.asyncio.Redis`` (prefer
    :meth:`AsyncClient.from_url`: tight socket timeouts, no retries). The other
    options are :class:`BaseLimiter`'s.
    """

    client: AsyncClient

    def __init__(self, client: AsyncClient | redis.asyncio.Redis, **options: Any) -> None:
        super().__init__(**options)
        self.client = client if isinstance(client, AsyncClient) else AsyncClient(client)
        self._readers: dict[int, Callable[[bytes], Any]] = {1: take_reader}

    async def startup(self, policies: Sequence[Policy] | None = None) -> None:
        """Call in the app's lifespan (SPEC U1-U3): raises :class:`StartupError` (one
        line) when the module is missing, COMMAND INFO is not permitted, Redis is
        unreachable (unless ``start_degraded``: then one line is logged), or Redis is a
        cluster and the limiter sends several keys in one call without a tag function
        (K6). ``policies``: a set checked together besides those the adapters
        registered (:meth:`register_policies`)."""
        await _start(self, policies)

    async def aclose(self) -> None:
        await self.client.aclose()

    async def check(
        self,
        request: Any,
        policies: Sequence[Policy] | None = None,
        route: str | None = None,
        *,
        peer: str | None = _NO_PEER,
        headers: HeaderGetter | None = None,
        scope: Scope | None = None,
    ) -> Decision:
        """Charge ``request`` on every applicable policy of the limiter in one call.

        ``route`` is ``"METHOD /template"`` (None: matched no route). ``peer`` and
        ``headers`` feed the default identity and header keys (see the module
        docstring); left out, they are read from a Starlette ``request``. The
        limiter's scope applies: not limited when the route is excluded or matched
        none (SPEC L1); :meth:`Decision.finish` with the handler's status refunds as
        ``refund_on`` says (F2).

        ``policies`` given with the call are checked instead of the limiter's own,
        with ``scope`` (None: every request in scope, a request that matched no route
        limited by the policies without routes).
        """
        policies, scope = self._own_policies(policies, scope)
        if scope is not None and scope.skips(route):  # SPEC L1
            return self._own(Decision(Outcome.NOT_LIMITED, True), _NO_HOLDS)
        plans = await _resolved(self._plan_steps(request, policies, route, peer, headers))
        if type(plans) is _Early:  # SPEC I2, L3: decided while planning
            return self._own(self._early(plans), _NO_HOLDS, scope)
        holdable = _NO_HOLDS
        call = _PLAIN_CALL  # a plain list: buckets only (TB.TAKE / TB.MTAKE)
        if type(plans) is _Mixed:
            plans, holdable, call = self._split(plans)
        probes: list[tuple[str, DenyEntry]] = []
        early, way = self._before_call(plans, probes)
        if early is not None:
            return self._own(early, holdable, scope)
        try:
            command = self._command(plans, call)
            what = call[0]
            started = time.perf_counter()
            try:
                if what == "TB.ACQUIRE":
                    reader = acquire_reader(len(plans) - 1)
                elif what == "TB.WINDOW":
                    reader = take_reader
                else:
                    reader = self._readers.get(len(plans))  # type: ignore[assignment]
                    if reader is None:
                        reader = self._readers[len(plans)] = mtake_reader(len(plans))
                values = await _bounded(self.client.call_tb(command, reader), self.timeout)
            except _STORE_ERRORS as exc:
                return self._own(self._after_error(exc, started, len(plans), what, plans), holdable, scope)
            finally:
                if way == _PROBE:
                    self._probe_over()
            d = self._after_reply(plans, values, started, holdable)
            if scope is not None and scope.refunding:  # SPEC F2: finish(status) refunds
                d._scope = scope
            return d
        finally:
            if probes:  # refused: the reply renewed the entries; else (or cancelled) they go
                self._probes_done(probes)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        return Decision(Outcome.ALLOWED, True, results, refunder=self._refund)

    async def _refund(self, decision: Decision) -> bool:
        got = self._refund_buckets(decision)
        if got is None:
            return False
        buckets, way = got
        started = time.perf_counter()
        try:
            await self._guarded(lambda: self.client.refund_many(buckets, now=self._redis_now()), "TB.REFUND", way, _as_is)
        except _STORE_ERRORS:
            return self._refund_failed(started)
        return self._refunded(decision, started)

    def _redis_now(self) -> float | None:
        return None if self.redis_now is None else self.redis_now()

    async def _guarded(self, call: Callable[[], Awaitable[Any]], what: str, way: int, then: Callable[[Any], T]) -> T:
        """SPEC L5, B1-B5: the one guarded call of a refund, a lease's release and
        renewal, a hold, its settlement and renewal (a check's own call takes the same
        steps inline in :meth:`check`, its hot path). The caller asked the breaker
        (``way``); the call is sent once within the timeout and its reply read by
        ``then``; a store error is counted and logged once a second (``_failed``) and
        raised again for the caller's failure mode; a probe ends whatever it answered."""
        try:
            return then(await _bounded(call(), self.timeout))
        except _STORE_ERRORS as exc:
            self._failed(exc, what)
            raise
        finally:
            if way == _PROBE:
                self._probe_over()

    def _packed(self, command: bytes) -> Awaitable[Any]:
        return self.client.call_tb(command, read_resp)

    async def _release(self, d: Decision) -> None:
        """SPEC N4: TB.RELEASE once, with the timeout, never retried, not while the
        breaker is open (B2); a failure is a store error (the lease expires)."""
        if self._lease_ended(d):
            await self._send_release(d)

    async def _send_release(self, d: Decision) -> None:
        way = self._acquire()
        if way == _SKIP:
            return
        try:
            await self._guarded(lambda: self._packed(self._release_command(d)), "TB.RELEASE", way, lambda raw: self._released(d, raw))
        except _STORE_ERRORS:
            pass  # a store error (N4): the lease expires

    async def _renew(self, d: Decision) -> bool:
        """SPEC N5: TB.RENEW; a lost lease stops renewals; a failure is a store error.
        N7: at or past the max_duration, the release instead."""
        if self._past_deadline(d):
            self._timed_out(d)
            await self._send_release(d)
            return False
        way = self._acquire()
        if way == _SKIP:
            return False
        try:
            return await self._guarded(lambda: self._packed(self._renew_command(d)), "TB.RENEW", way, lambda raw: self._renewed(d, raw))
        except _STORE_ERRORS:
            return False

    async def _hold(self, policy: str, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int) -> Hold:
        way = self._store_way("TB.HOLD")
        try:
            return await self._guarded(
                lambda: self._packed(self._hold_command(key, capacity, rate, estimate, ttl_ms)), "TB.HOLD", way,
                lambda raw: self._held(policy, key, capacity, rate, estimate, ttl_ms, raw),
            )
        except _STORE_ERRORS as exc:
            raise self._store_failed(exc, "TB.HOLD") from exc

    async def _settle(self, hold: Hold, actual: float) -> Settlement:
        hold.settlement = Settlement(False, hold.remaining, 0.0, hold.reset_after)  # never twice (G3)
        way = self._store_way("TB.SETTLE")
        try:
            return await self._guarded(
                lambda: self._packed(self._settle_command(hold, actual)), "TB.SETTLE", way, lambda raw: self._settled(hold, raw)
            )
        except _STORE_ERRORS as exc:
            raise self._store_failed(exc, "TB.SETTLE") from exc

    async def _renew_hold(self, hold: Hold) -> bool:
        """SPEC G5: TB.RENEW on the hold's bucket; a failure is a store error (B1-B3:
        it may be the probe; the next tick tries again)."""
        way = self._acquire()
        if way == _SKIP:
            return False
        try:
            return await self._guarded(
                lambda: self._packed(self._hold_renew_command(hold)), "TB.RENEW", way, lambda raw: self._hold_renewed(hold, raw)
            )
        except _STORE_ERRORS:
            return False


class SyncRateLimiter(BaseLimiter):
    """:class:`RateLimiter` for synchronous code (Django under WSGI, threaded
    servers): the same options and rules, a blocking Redis call; the breaker's probe
    is one across threads (SPEC B3).

    ``client``: a :class:`Client` or a ``redis.Redis``. Use :meth:`Client.from_url`:
    its socket timeout (default 50 ms) is what bounds each call on this path.
    Decisions refund with ``decision.refund_sync()``.
    """

    client: Client

    def __init__(self, client: Client | redis.Redis, **options: Any) -> None:
        super().__init__(**options)
        self.client = client if isinstance(client, Client) else Client(client)
        self._lease_lock = threading.Lock()

    def startup(self, policies: Sequence[Policy] | None = None) -> None:
        """:meth:`RateLimiter.startup`, blocking (e.g. in Django's ``AppConfig.ready``)."""
        _start_sync(self, policies)

    def close(self) -> None:
        self.client.close()

    def check(
        self,
        request: Any,
        policies: Sequence[Policy] | None = None,
        route: str | None = None,
        *,
        peer: str | None = _NO_PEER,
        headers: HeaderGetter | None = None,
        scope: Scope | None = None,
    ) -> Decision:
        """:meth:`RateLimiter.check`, blocking."""
        policies, scope = self._own_policies(policies, scope)
        if scope is not None and scope.skips(route):  # SPEC L1
            return self._own(Decision(Outcome.NOT_LIMITED, True), _NO_HOLDS)
        plans = _resolved_sync(self._plan_steps(request, policies, route, peer, headers))
        if type(plans) is _Early:  # SPEC I2, L3: decided while planning
            return self._own(self._early(plans), _NO_HOLDS, scope)
        holdable = _NO_HOLDS
        call = _PLAIN_CALL  # a plain list: buckets only (TB.TAKE / TB.MTAKE)
        if type(plans) is _Mixed:
            plans, holdable, call = self._split(plans)
        probes: list[tuple[str, DenyEntry]] = []
        early, way = self._before_call(plans, probes)
        if early is not None:
            return self._own(early, holdable, scope)
        try:
            command = self._command(plans, call)
            what = call[0]
            started = time.perf_counter()
            try:
                raw = self.client.call_tb(command)
                values: Any
                if what == "TB.ACQUIRE":
                    values = acquire_values(raw, len(plans) - 1)
                else:
                    values = take_values(raw) if len(plans) == 1 else mtake_values(raw, len(plans))
            except _STORE_ERRORS as exc:
                return self._own(self._after_error(exc, started, len(plans), what, plans), holdable, scope)
            finally:
                if way == _PROBE:
                    self._probe_over()
            d = self._after_reply(plans, values, started, holdable)
            if scope is not None and scope.refunding:  # SPEC F2: finish(status) refunds
                d._scope = scope
            return d
        finally:
            if probes:  # refused: the reply renewed the entries; else they go
                self._probes_done(probes)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        return Decision(Outcome.ALLOWED, True, results, sync_refunder=self._refund)

    def _refund(self, decision: Decision) -> bool:
        got = self._refund_buckets(decision)
        if got is None:
            return False
        buckets, way = got
        started = time.perf_counter()
        try:
            self._guarded(
                lambda: self.client.refund_many(buckets, now=None if self.redis_now is None else self.redis_now()),
                "TB.REFUND", way, _as_is,
            )
        except _STORE_ERRORS:
            return self._refund_failed(started)
        return self._refunded(decision, started)

    def _guarded(self, call: Callable[[], Any], what: str, way: int, then: Callable[[Any], T]) -> T:
        """:meth:`RateLimiter._guarded`, blocking: the client's socket timeout bounds
        the call (SPEC L5)."""
        try:
            return then(call())
        except _STORE_ERRORS as exc:
            self._failed(exc, what)
            raise
        finally:
            if way == _PROBE:
                self._probe_over()

    def _packed(self, command: bytes) -> Any:
        return self.client.call_tb(command)

    def _release_sync(self, d: Decision) -> None:
        """:meth:`RateLimiter._release`, blocking; once across threads (SPEC N4)."""
        with self._lease_lock:
            if d._lease_state not in (1, 2):
                return
            send = self._lease_ended(d)
        if send:
            self._send_release_sync(d)

    def _send_release_sync(self, d: Decision) -> None:
        way = self._acquire()
        if way == _SKIP:
            return
        try:
            self._guarded(lambda: self._packed(self._release_command(d)), "TB.RELEASE", way, lambda raw: self._released(d, raw))
        except _STORE_ERRORS:
            pass  # a store error (N4): the lease expires

    def _renew_sync(self, d: Decision) -> bool:
        """:meth:`RateLimiter._renew`, blocking (SPEC N5, N7)."""
        with self._lease_lock:
            if d._lease_state != 1:
                return False
            ended = self._past_deadline(d)
            if ended:
                self._timed_out(d)
        if ended:
            self._send_release_sync(d)
            return False
        way = self._acquire()
        if way == _SKIP:
            return False
        try:
            return self._guarded(lambda: self._packed(self._renew_command(d)), "TB.RENEW", way, lambda raw: self._locked(self._renewed, d, raw))
        except _STORE_ERRORS:
            return False

    def _hold_sync(self, policy: str, key: str, capacity: float, rate: float, estimate: float, ttl_ms: int) -> Hold:
        way = self._store_way("TB.HOLD")
        try:
            return self._guarded(
                lambda: self._packed(self._hold_command(key, capacity, rate, estimate, ttl_ms)), "TB.HOLD", way,
                lambda raw: self._held(policy, key, capacity, rate, estimate, ttl_ms, raw),
            )
        except _STORE_ERRORS as exc:
            raise self._store_failed(exc, "TB.HOLD") from exc

    def _settle_sync(self, hold: Hold, actual: float) -> Settlement:
        hold.settlement = Settlement(False, hold.remaining, 0.0, hold.reset_after)  # never twice (G3)
        way = self._store_way("TB.SETTLE")
        try:
            return self._guarded(lambda: self._packed(self._settle_command(hold, actual)), "TB.SETTLE", way, lambda raw: self._settled(hold, raw))
        except _STORE_ERRORS as exc:
            raise self._store_failed(exc, "TB.SETTLE") from exc

    def _renew_hold_sync(self, hold: Hold) -> bool:
        """:meth:`RateLimiter._renew_hold`, blocking."""
        way = self._acquire()
        if way == _SKIP:
            return False
        try:
            return self._guarded(
                lambda: self._packed(self._hold_renew_command(hold)), "TB.RENEW", way, lambda raw: self._locked(self._hold_renewed, hold, raw)
            )
        except _STORE_ERRORS:
            return False

    def _locked(self, read: Callable[[Any, Any], bool], owner: Any, raw: Any) -> bool:
        with self._lease_lock:  # a reply read under the lock the lease's end takes (N4, G5)
            return read(owner, raw)
