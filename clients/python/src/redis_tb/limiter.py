"""The request-path limiter: policies -> keys -> one TB.MTAKE -> a Decision, with an
explicit failure mode for when Redis is down or slow. Framework-neutral, with an
async path (ASGI: Starlette/FastAPI, Django async views) and a sync path (Django
under WSGI, any threaded server) that share every rule; only the Redis call differs.

How a framework adapter uses it
-------------------------------
:class:`BaseLimiter` holds every rule; :class:`RateLimiter` (``redis.asyncio``) and
:class:`SyncRateLimiter` (``redis``) only add the Redis call. The rules are mixins in
files named after the SPEC's sections: ``plan.py`` (L, K, I: the plan of a request),
``store_call.py`` (L4, L5, B: the call and its failure mode), ``decide.py`` (D, R, S:
the decision of a reply), ``refund.py`` (F), ``headers.py`` (H, P), ``lease.py`` (N)
and ``hold.py`` (G); ``scope.py`` is L1 and F2's :class:`Scope`::

    limiter = RateLimiter(AsyncClient.from_url(url))      # ASGI, Django async views
    limiter = SyncRateLimiter(Client.from_url(url))       # Django under WSGI, threads

    # per request; ``request`` is the framework's own request object, handed as is
    # to the policies' key/limit/cost/tier functions and to ``hash_tag``:
    decision = await limiter.check(request, policies, route, peer=peer, headers=getter)
    decision = limiter.check(request, policies, route, peer=peer, headers=getter)  # sync
    rejection = limiter.rejection(decision)
    if rejection is not None:
        status, headers, body = rejection     # 429 or 503, problem+json, Content-Type included
    else:
        ...call the view, then add limiter.headers(decision) to its response

- ``route``: ``"METHOD /template"`` of the matched route (never the raw path), or
  None when no route matched (then only policies without ``routes`` apply; an
  adapter usually skips unmatched requests altogether, as the ASGI middleware does).
- ``scope=Scope(exclude=..., limit_unmatched=..., refund_on=...)`` (SPEC L1, F2):
  excluded and unmatched requests are not limited (``not_limited``, nothing sent),
  and ``decision.finish(status)`` refunds after a listed status.
- ``peer``: the TCP peer address (``scope["client"][0]``, ``META["REMOTE_ADDR"]``),
  None when unknown. ``headers``: a function of a lower-case header name returning
  all of that header's values, in order. Both feed the default identity
  (:class:`ClientIP`: trusted proxies, IPv6 /64; also when a policy's ``key`` is a
  ``ClientIP``); ``headers`` is only called when proxies are trusted. Under
  Starlette both may be left out: they are then read from the ``Request``.
- Sync path: key/limit/cost/tier/hash_tag functions must be plain functions (an
  awaitable raises TypeError). Async path: they may be either.
- Refund: ``await decision.refund()`` (async path) / ``decision.refund_sync()``
  (sync path), by the handler, or after the response by the scope's ``refund_on``
  (``finish(status)``) or the adapter's.
- Startup: ``await limiter.startup()`` / ``limiter.startup()`` (sync), which raise
  :class:`StartupError` (one line, SPEC U1-U3) without the module, without the
  permission to run COMMAND INFO, with Redis unreachable (unless
  ``start_degraded``), or on Redis Cluster when several keys go in one call and no
  tag function is set (K6).

The rules are clients/SPEC.md's (cited by number below). Failure handling (B1-B5):

- every call is bounded by ``timeout`` (default 50 ms) and made at most once (on
  the sync path the client's socket timeout bounds it: use ``Client.from_url``,
  whose ``timeout`` defaults to 50 ms);
- after a connection error or timeout, Redis is left alone for ``cooldown``
  seconds (default 1 s) and the failure mode applies directly; then a single
  request probes it again while the others keep the failure mode;
- ``fail_open=True`` (the default) lets requests through unlimited, without
  rate-limit headers: a rate limiter must not take the API down with it. Use
  ``fail_open=False`` for abuse-sensitive endpoints (logins, signups, costly
  jobs): requests get 503 with ``Retry-After: 1``;
- one log line per second at most (``redis_tb`` logger, WARNING) and counters
  in :attr:`RateLimiter.stats`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Awaitable, Callable, Literal, Sequence, TypeVar, cast

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
from .headers import Answering, Rejection
from .keys import KeyBuilder, check_prefix
from .metrics import Metrics
from .plan import _NO_PEER, _PLAIN_CALL, HashTagFunc, Planner, _Early, _Mixed, _resolved, _resolved_sync
from .policy import Policy
from .startup import start as _start
from .startup import start_sync as _start_sync
from .refund import RefundRules
from .scope import Scope
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


class BaseLimiter(Planner, Deciding, RefundRules, Answering, LeaseRules, HoldRules):
    """Everything both paths share: configuration, plans, decisions, failure mode,
    breaker, shadow mode, stats, headers. :class:`RateLimiter` (asyncio) and
    :class:`SyncRateLimiter` add the Redis calls.

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
        #: the sets of policies checked together, as the adapters registered them (U3)
        self.policy_sets: list[tuple[Policy, ...]] = []
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

    def register_policies(self, policies: Sequence[Policy]) -> None:
        """Tell startup (SPEC U3) of a set of policies this limiter checks in one call:
        the adapters do it for theirs; code that calls :meth:`check` itself may pass
        its policies to ``startup`` instead."""
        found = tuple(policies)
        if not any(s == found for s in self.policy_sets):
            self.policy_sets.append(found)

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
        policies: Sequence[Policy],
        route: str | None = None,
        *,
        peer: str | None = _NO_PEER,
        headers: HeaderGetter | None = None,
        scope: Scope | None = None,
    ) -> Decision:
        """Charge ``request`` on every applicable policy in one call.

        ``route`` is ``"METHOD /template"`` (None: matched no route). ``peer`` and
        ``headers`` feed the default identity and header keys (see the module
        docstring); left out, they are read from a Starlette ``request``. ``scope``
        (a :class:`Scope`): the request is not limited when its route is excluded or
        matched none (SPEC L1), and :meth:`Decision.finish` with the handler's status
        refunds it as ``refund_on`` says (F2); None (the default): every request is in
        scope, a request that matched no route limited by the policies without routes.
        """
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
        policies: Sequence[Policy],
        route: str | None = None,
        *,
        peer: str | None = _NO_PEER,
        headers: HeaderGetter | None = None,
        scope: Scope | None = None,
    ) -> Decision:
        """:meth:`RateLimiter.check`, blocking."""
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
