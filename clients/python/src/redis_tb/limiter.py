"""The request-path limiter: policies -> keys -> one TB.MTAKE -> a Decision, with an
explicit failure mode for when Redis is down or slow. Framework-neutral, with an
async path (ASGI: Starlette/FastAPI, Django async views) and a sync path (Django
under WSGI, any threaded server) that share every rule; only the Redis call differs.

How a framework adapter uses it
-------------------------------
:class:`BaseLimiter` holds every rule; :class:`RateLimiter` (``redis.asyncio``) and
:class:`SyncRateLimiter` (``redis``) only add the Redis call::

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
- ``peer``: the TCP peer address (``scope["client"][0]``, ``META["REMOTE_ADDR"]``),
  None when unknown. ``headers``: a function of a lower-case header name returning
  all of that header's values, in order. Both feed the default identity
  (:class:`ClientIP`: trusted proxies, IPv6 /64; also when a policy's ``key`` is a
  ``ClientIP``); ``headers`` is only called when proxies are trusted. Under
  Starlette both may be left out: they are then read from the ``Request``.
- Sync path: key/limit/cost/tier/hash_tag functions must be plain functions (an
  awaitable raises TypeError). Async path: they may be either.
- Refund: ``await decision.refund()`` (async path) / ``decision.refund_sync()``
  (sync path), by the handler, or by the adapter's ``refund_on`` after the response.
- Startup: ``await limiter.startup()`` / ``limiter.startup()`` (sync), which raise
  :class:`ModuleNotLoadedError` without the module and only log an unreachable Redis.

Failure handling (the same in the Rust integration):

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

import asyncio
import inspect
import logging
import sys
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generator, Literal, Sequence, TypeVar

import redis
import redis.asyncio
import redis.exceptions

from .client import AsyncClient, Client, ModuleNotLoadedError
from .decision import Decision, Outcome, PolicyResult
from .deny_cache import DenyCache, DenyEntry
from .headers import decision_headers, problem, problem_body, store_error_problem, PROBLEM_TYPE
from .keys import ClientIP, HeaderGetter
from .metrics import Metrics
from .policy import Limit, Policy
from .replies import Bucket, UnexpectedReplyError, encode_arg, mtake_reader, mtake_values

__all__ = ["BaseLimiter", "HashTagFunc", "LimiterStats", "RateLimiter", "Rejection", "SyncRateLimiter"]

T = TypeVar("T")
#: request -> the hash tag of this request's keys (Redis Cluster), or None.
HashTagFunc = Callable[[Any], Awaitable[str | None] | str | None]
#: (status, headers, body) of a refusal: 429 or 503 with a problem+json body.
Rejection = tuple[int, list[tuple[str, str]], bytes]

_NO_PEER: Any = object()


async def _bounded(call: Awaitable[T], seconds: float) -> T:
    """``call``, cancelled after ``seconds`` (asyncio.TimeoutError)."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):  # no extra task per call, unlike wait_for
            return await call
    return await asyncio.wait_for(call, seconds)  # pragma: no cover


_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    asyncio.TimeoutError,
    OSError,
)
_STORE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.RedisError,
    UnexpectedReplyError,
    *_CONNECTION_ERRORS,
)


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


def _route_part(route: str) -> str:
    # A '{' in a key starts a Redis Cluster hash tag: keep templates' braces out.
    return route.replace("{", "<").replace("}", ">")


class _Plan:
    """One policy's charge for one request (internal; built on every request)."""

    __slots__ = ("policy", "key", "capacity", "rate", "cost", "shadow")

    def __init__(self, policy: Policy, key: str, capacity: float, rate: float, cost: float, shadow: bool) -> None:
        self.policy = policy
        self.key = key
        self.capacity = capacity
        self.rate = rate
        self.cost = cost
        self.shadow = shadow


#: the plan builder yields awaitables it needs resolved and returns the plans
_PlanSteps = Generator[Any, Any, list[_Plan]]


async def _resolved(steps: _PlanSteps) -> list[_Plan]:
    """The plans, awaiting what the user functions returned (the async path)."""
    try:
        pending = steps.send(None)
        while True:
            pending = steps.send(await pending)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _resolved_sync(steps: _PlanSteps) -> list[_Plan]:
    """The plans on the sync path, where a user function may not return an awaitable."""
    try:
        pending = steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    steps.close()
    if inspect.iscoroutine(pending):
        pending.close()  # never awaited: no "coroutine was never awaited" warning
    raise TypeError(
        f"a key, limit, cost, tier or hash_tag function returned an awaitable ({pending!r}) "
        "on the synchronous path: make it a plain function"
    )


def _no_headers(name: str) -> Sequence[str]:
    return ()


_PLAIN = (str, int, float, Limit, type(None))


def _pending(value: object) -> bool:
    """An awaitable a user function returned (checked cheaply: plain values first)."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


class BaseLimiter:
    """Everything both paths share: configuration, plans, decisions, failure mode,
    cool-down, shadow mode, stats, headers. :class:`RateLimiter` (asyncio) and
    :class:`SyncRateLimiter` add the Redis calls.

    ``client_ip``: the default key function (peer IP; pass
    ``ClientIP(trusted_proxies=[...])`` behind proxies).
    ``prefix``: keys are ``<prefix>:<policy>:<identity>``, or
    ``<prefix>:{<tag>}:<policy>:<identity>`` with ``hash_tag`` (a function of the
    request). On Redis Cluster, layered policies need one hash tag per request
    (e.g. the user id or the client IP) so that their keys share a slot.
    ``clock``: None (default) uses the Redis server's clock, the one clock every
    app server agrees on; a function returning epoch seconds passes ``now``.
    ``shadow``: every policy of this limiter in shadow mode (observe only).
    ``metrics``: e.g. ``PrometheusMetrics(registry, limiter="api")``; None (the
    default) makes no metric calls.
    ``deny_cache``: a :class:`DenyCache` to refuse repeat offenders locally
    without calling Redis (off by default: see its docstring for what it trades).
    ``legacy_reset``: ``X-RateLimit-Reset`` as a Unix timestamp (``"unix"``, the
    default) or in delta seconds (``"delta"``), with ``legacy_headers=True``.
    """

    client: AsyncClient | Client

    def __init__(
        self,
        *,
        prefix: str = "rl",
        client_ip: ClientIP | None = None,
        hash_tag: HashTagFunc | None = None,
        fail_open: bool = True,
        timeout: float = 0.05,
        cooldown: float = 1.0,
        legacy_headers: bool = False,
        clock: Callable[[], float] | None = None,
        logger: logging.Logger | None = None,
        shadow: bool = False,
        metrics: Metrics | None = None,
        deny_cache: DenyCache | None = None,
        legacy_reset: Literal["unix", "delta"] = "unix",
    ) -> None:
        if legacy_reset not in ("unix", "delta"):
            raise ValueError(f"legacy_reset must be 'unix' or 'delta', got {legacy_reset!r}")
        self.prefix = prefix
        self.client_ip = client_ip or ClientIP()
        self.hash_tag = hash_tag
        self.fail_open = fail_open
        self.timeout = timeout
        self.cooldown = cooldown
        self.legacy_headers = legacy_headers
        self.clock = clock
        self.shadow = shadow
        self.metrics = metrics
        self.deny_cache = deny_cache
        self.legacy_reset: Literal["unix", "delta"] = legacy_reset
        self.log = logger or logging.getLogger("redis_tb")
        self.stats = LimiterStats()
        self._open_until = 0.0
        self._probing = False
        self._last_log = float("-inf")
        self._unlogged = 0
        self._shadow_log: dict[str, tuple[float, int]] = {}
        # Encoded once: "<prefix>:<policy>:" and each (capacity, rate, cost) shape.
        self._key_heads: dict[str, str] = {}
        self._shapes: dict[tuple[float, float, float], bytes] = {}

    @property
    def store_errors(self) -> int:
        return self.stats.store_errors

    def _unreachable_at_startup(self, exc: BaseException) -> None:
        self.log.warning(
            "redis-tb: cannot reach Redis at %s to check the module (%s: %s); "
            "failing %s until it answers",
            self.client.server, type(exc).__name__, exc,
            "open" if self.fail_open else "closed",
        )

    # -- keys ------------------------------------------------------------------

    def key(self, policy: str, identity: str, *, route: str | None = None, tag: str | None = None) -> str:
        """The bucket key of ``identity`` under ``policy``."""
        if route is not None:
            identity = f"{_route_part(route)}:{identity}"
        if tag is not None:
            return f"{self.prefix}:{{{tag}}}:{policy}:{identity}"
        return f"{self.prefix}:{policy}:{identity}"

    def _plan_steps(
        self,
        request: Any,
        policies: Sequence[Policy],
        route: str | None,
        peer: Any,
        headers: HeaderGetter | None,
    ) -> _PlanSteps:
        """The plans of one request, shared by both paths: a generator that yields
        each awaitable a user function returned and gets its value sent back."""
        tag: Any = None
        if self.hash_tag is not None:
            tag = self.hash_tag(request)
            if _pending(tag):
                tag = yield tag
        plans: list[_Plan] = []
        client_ip: Any = _NO_PEER  # the default identity, computed once
        identity: Any
        limit: Any
        cost: Any
        for p in policies:
            if p.routes is not None and (route is None or route not in p.routes):
                continue
            keyfunc = p.key
            if keyfunc is None or isinstance(keyfunc, ClientIP):
                cip = self.client_ip if keyfunc is None else keyfunc
                if keyfunc is None and client_ip is not _NO_PEER:
                    identity = client_ip
                else:
                    if peer is _NO_PEER:  # a Starlette request
                        c = request.client
                        peer = c.host if c else None
                        if headers is None:
                            headers = request.headers.getlist
                    elif headers is None:
                        headers = _no_headers
                    identity = cip.of(peer, headers)
                    if keyfunc is None:
                        client_ip = identity
            else:
                identity = keyfunc(request)
                if _pending(identity):
                    identity = yield identity
            if identity is None:
                continue
            limit = p.limit
            if not isinstance(limit, Limit):
                limit = limit(request)
                if _pending(limit):
                    limit = yield limit
                limit = p.checked_limit(limit)
                if limit is None:
                    continue
            cost = p.cost
            if callable(cost):
                cost = cost(request)
                if _pending(cost):
                    cost = yield cost
                cost = p.checked_cost(cost)
            if tag is None and not p.per_route:
                head = self._key_heads.get(p.name)
                if head is None:
                    head = self._key_heads[p.name] = f"{self.prefix}:{p.name}:"
                key = head + identity
            else:
                key = self.key(p.name, identity, route=route if p.per_route else None, tag=tag)
            plans.append(_Plan(p, key, limit.capacity, limit.rate, cost, self.shadow or p.shadow))
        if len(plans) > 1 and len({pl.key for pl in plans}) != len(plans):
            raise ValueError("two policies of one request map to the same key: give them distinct names")
        return plans

    # -- shared by both paths --------------------------------------------------

    def _before_call(self, plans: list[_Plan], probes: list[tuple[str, DenyEntry]]) -> Decision | None:
        """A decision made without Redis (nothing applies, cool-down, a cached
        refusal), or None: ask Redis. The deny-cache entries this request probes are
        appended to ``probes``: pass them to :meth:`_probes_done` once it is over."""
        if not plans:
            return Decision(Outcome.NOT_LIMITED, True)
        self.stats.checks += 1
        if self.deny_cache is not None:
            hit = self._cached_refusal(plans, self.deny_cache, probes)
            if hit is not None:
                return hit
        if not self._may_call():
            self._probes_done(probes, keep=True)
            return self._degraded(None)
        return None

    def _cached_refusal(
        self, plans: list[_Plan], cache: DenyCache, probes: list[tuple[str, DenyEntry]]
    ) -> Decision | None:
        if self.shadow:
            return None
        now = cache.clock()
        stale_after = 2 * self.timeout
        hits: list[PolicyResult] = []
        for pl in plans:
            if pl.shadow:
                continue
            e, probe = cache.claim(pl.key, pl.capacity, pl.rate, pl.cost, now, stale_after)
            if probe is not None:
                probes.append((pl.key, probe))
            elif e is not None:
                # while another request probes Redis, deny-until has passed: retry_after 0
                hits.append(PolicyResult(
                    pl.policy.name, pl.key, pl.capacity, pl.rate, pl.cost, False, 0.0,
                    max(0.0, e.deny_until - now), max(0.0, e.reset_at - now),
                ))
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
        return Decision(Outcome.LIMITED, False, tuple(hits), cached=True)

    def _probes_done(self, probes: list[tuple[str, DenyEntry]], *, keep: bool = False) -> None:
        """The probes of one request are over: the entries a refusal renewed stay,
        the others go (admitted, store error, cancelled), or with ``keep`` (never
        sent) go back unmarked."""
        cache = self.deny_cache
        if cache is not None:
            for key, marked in probes:
                cache.end_probe(key, marked, keep=keep)
        probes.clear()

    def _command(self, plans: list[_Plan]) -> bytes:
        """TB.MTAKE of these plans, RESP-encoded; each shape's numbers encoded once."""
        now = None if self.clock is None else self.clock()
        n = len(plans)
        parts = [b"*%d\r\n$8\r\nTB.MTAKE\r\n" % (2 + 4 * n + (now is not None)), encode_arg(n)]
        shapes = self._shapes
        for pl in plans:
            key = pl.key.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(key), key))
        for pl in plans:
            shape = (pl.capacity, pl.rate, pl.cost)
            enc = shapes.get(shape)
            if enc is None:
                if len(shapes) >= 4096:  # per-request limits or costs: keep it bounded
                    shapes.clear()
                enc = shapes[shape] = encode_arg(pl.capacity) + encode_arg(pl.rate) + encode_arg(pl.cost)
            parts.append(enc)
        if now is not None:
            parts.append(encode_arg(now))
        return b"".join(parts)

    def _probe_begin(self) -> bool:
        probe = self._open_until != 0.0
        if probe:
            self._probing = True
        return probe

    def _after_error(self, exc: BaseException, started: float | None) -> Decision:
        if self.metrics is not None and started is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        self._failed(exc)
        return self._degraded(exc)

    def _after_reply(
        self, plans: list[_Plan], values: tuple[bool, list[tuple[bool, float, float, float]]], started: float
    ) -> Decision:
        if self.metrics is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        self._open_until = 0.0
        return self._decision(plans, values[0], values[1])

    def _now(self) -> float | None:
        return None if self.clock is None else self.clock()

    def _may_call(self) -> bool:
        if self._open_until == 0.0:
            return True
        # Cooling down after a failure: skip Redis; afterwards one probe at a time.
        return time.monotonic() >= self._open_until and not self._probing

    def _decision(
        self, plans: list[_Plan], allowed: bool, per_key: list[tuple[bool, float, float, float]]
    ) -> Decision:
        results = tuple([
            PolicyResult(pl.policy.name, pl.key, pl.capacity, pl.rate, pl.cost, r[0], r[1], r[2], r[3], pl.shadow)
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
            if cache is not None:
                now = cache.clock()
                for r in violated:
                    cache.add(r.key, r.capacity, r.rate, r.cost, r.retry_after, r.reset_after, now)
            return Decision(Outcome.LIMITED, False, results, shadow_limited=shadowed)
        # Only shadow policies refused: the request goes on, uncharged (all or nothing),
        # so it is not counted in ``allowed`` (nor in redis_tb_allowed_total): nothing was
        # taken. It is in ``shadow_limited``, as in the Rust and Node integrations.
        return Decision(Outcome.ALLOWED, True, results, shadow_limited=shadowed)

    @staticmethod
    def _cache_spent(cache: DenyCache, results: tuple[PolicyResult, ...]) -> None:
        """Redis admitted (and charged) this request: each enforced bucket it left
        with fewer tokens than this request's cost now refuses that cost for
        ``(cost - remaining) / rate`` s, exactly what Redis would answer until then
        (absent refunds). Caching that refusal keeps the other in-flight requests of
        a flooding identity away from Redis; it renews an entry an admitted probe
        would otherwise remove."""
        now = cache.clock()
        for r in results:
            if not r.shadow and r.cost > 0 and r.rate > 0 and r.remaining < r.cost:
                cache.add(r.key, r.capacity, r.rate, r.cost, (r.cost - r.remaining) / r.rate, r.reset_after, now)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        raise NotImplementedError

    def _shadow_refused(self, names: tuple[str, ...]) -> None:
        self.stats.shadow_limited += 1
        if self.metrics is not None:
            for name in names:
                self.metrics.shadow_limited(name)
        now = time.monotonic()
        for name in names:
            last, unlogged = self._shadow_log.get(name, (float("-inf"), 0))
            if now - last < 1.0:
                self._shadow_log[name] = (last, unlogged + 1)
                continue
            self.log.warning(
                "redis-tb: shadow policy '%s' would have limited a request (%d since the last line)",
                name, unlogged + 1,
            )
            self._shadow_log[name] = (now, 0)

    def _degraded(self, error: BaseException | None) -> Decision:
        self.stats.degraded += 1
        if self.metrics is not None:
            self.metrics.degraded()
        return Decision(Outcome.STORE_ERROR, self.fail_open, error=error)

    def _failed(self, exc: BaseException, what: str = "TB.MTAKE") -> None:
        self.stats.store_errors += 1
        if self.metrics is not None:
            self.metrics.store_error()
        unknown = isinstance(exc, redis.exceptions.ResponseError) and "unknown command" in str(exc).lower()
        server_wide = unknown or not isinstance(exc, (redis.exceptions.ResponseError, UnexpectedReplyError))
        if server_wide:
            self._open_until = time.monotonic() + self.cooldown
        now = time.monotonic()
        if now - self._last_log < 1.0:
            self._unlogged += 1
            return
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, (asyncio.TimeoutError, redis.exceptions.TimeoutError)):
            reason = f"no answer within {self.timeout * 1000:g} ms"
        if unknown:
            reason += " (is the redis-tb module loaded?)"
        self.log.warning(
            "redis-tb: %s on %s failed (%s); failing %s%s; store errors so far: %d%s",
            what,
            self.client.server,
            reason,
            "open: requests pass unlimited" if self.fail_open else "closed: requests get 503",
            f", Redis skipped for {self.cooldown:g} s" if server_wide else "",
            self.stats.store_errors,
            f" ({self._unlogged} not logged)" if self._unlogged else "",
        )
        self._last_log = now
        self._unlogged = 0

    def _refund_buckets(self, decision: Decision) -> list[Bucket] | None:
        buckets = [Bucket(r.key, r.capacity, r.rate, r.cost) for r in decision.results if r.cost > 0]
        if not buckets:
            return None
        if not self._may_call():
            self.stats.refund_errors += 1
            return None
        return buckets

    def _refund_failed(self, exc: BaseException, started: float) -> bool:
        if self.metrics is not None:
            self.metrics.redis_call(time.perf_counter() - started)
        self.stats.refund_errors += 1
        self._failed(exc, "TB.REFUND")
        return False

    def _refunded(self, decision: Decision, started: float) -> bool:
        self.stats.refunds += 1
        m = self.metrics
        if m is not None:
            m.redis_call(time.perf_counter() - started)
        cache = self.deny_cache
        for r in decision.results:
            if r.cost > 0:
                if m is not None:
                    m.refunded(r.name)
                if cache is not None:
                    cache.discard(r.key)
        return True

    # -- answering -------------------------------------------------------------

    def headers(self, decision: Decision) -> list[tuple[str, str]]:
        """The rate-limit headers of a decision (shadow policies left out)."""
        return decision_headers(decision, legacy=self.legacy_headers, legacy_reset=self.legacy_reset)

    def rejection(self, decision: Decision) -> Rejection | None:
        """None when the request goes on; else ``(status, headers, body)`` of the 429
        (limited) or 503 (store error, failing closed), body ``application/problem+json``
        (``Content-Type`` is among the headers)."""
        if decision.allowed:
            return None
        if decision.outcome is Outcome.LIMITED:
            hs = self.headers(decision)
            body = problem_body(problem(decision))
            status = 429
        else:
            hs = [("Retry-After", "1")]
            body = problem_body(store_error_problem())
            status = 503
        hs.append(("Content-Type", PROBLEM_TYPE))
        return status, hs, body


class RateLimiter(BaseLimiter):
    """Checks a request against policies in one TB.MTAKE, all or nothing (asyncio).

    ``client``: an :class:`AsyncClient` or a ``redis.asyncio.Redis`` (prefer
    :meth:`AsyncClient.from_url`: tight socket timeouts, no retries). The other
    options (``prefix``, ``client_ip``, ``hash_tag``, ``clock``, ``shadow``,
    ``metrics``, ``deny_cache``...) are :class:`BaseLimiter`'s.
    """

    client: AsyncClient

    def __init__(self, client: AsyncClient | redis.asyncio.Redis, **options: Any) -> None:
        super().__init__(**options)
        self.client = client if isinstance(client, AsyncClient) else AsyncClient(client)
        self._readers: dict[int, Callable[[bytes], Any]] = {}

    async def startup(self) -> None:
        """Call in the app's lifespan: fail fast when the module is missing.

        Raises :class:`ModuleNotLoadedError` when the server answers without the
        module. An unreachable Redis is logged, not raised: the failure mode
        handles it per request, and the app can start before Redis does.
        """
        try:
            await asyncio.wait_for(self.client.check_module(), max(self.timeout, 1.0))
        except ModuleNotLoadedError:
            raise
        except _CONNECTION_ERRORS as exc:
            self._unreachable_at_startup(exc)

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
    ) -> Decision:
        """Charge ``request`` on every applicable policy in one TB.MTAKE.

        ``route`` is ``"METHOD /template"`` (None: matched no route). ``peer`` and
        ``headers`` feed the default identity (see the module docstring); left out,
        they are read from a Starlette ``request``.
        """
        plans = await _resolved(self._plan_steps(request, policies, route, peer, headers))
        probes: list[tuple[str, DenyEntry]] = []
        early = self._before_call(plans, probes)
        if early is not None:
            return early
        try:
            command = self._command(plans)
            probe = self._probe_begin()
            started = time.perf_counter()
            try:
                reader = self._readers.get(len(plans))
                if reader is None:
                    reader = self._readers[len(plans)] = mtake_reader(len(plans))
                values = await _bounded(self.client.call_packed(command, reader), self.timeout)
            except _STORE_ERRORS as exc:
                return self._after_error(exc, started)
            finally:
                if probe:
                    self._probing = False
            return self._after_reply(plans, values, started)
        finally:
            if probes:  # refused: the reply renewed the entries; else (or cancelled) they go
                self._probes_done(probes)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        return Decision(Outcome.ALLOWED, True, results, refunder=self._refund)

    async def _refund(self, decision: Decision) -> bool:
        buckets = self._refund_buckets(decision)
        if buckets is None:
            return False
        started = time.perf_counter()
        try:
            await _bounded(self.client.refund_many(buckets, now=self._now()), self.timeout)
        except _STORE_ERRORS as exc:
            return self._refund_failed(exc, started)
        return self._refunded(decision, started)


class SyncRateLimiter(BaseLimiter):
    """:class:`RateLimiter` for synchronous code (Django under WSGI, threaded
    servers): the same options and rules, a blocking Redis call.

    ``client``: a :class:`Client` or a ``redis.Redis``. Use :meth:`Client.from_url`:
    its socket timeout (default 50 ms) is what bounds each call on this path.
    Decisions refund with ``decision.refund_sync()``.
    """

    client: Client

    def __init__(self, client: Client | redis.Redis, **options: Any) -> None:
        super().__init__(**options)
        self.client = client if isinstance(client, Client) else Client(client)

    def startup(self) -> None:
        """Fail fast when the module is missing (e.g. in Django's ``AppConfig.ready``);
        an unreachable Redis is only logged."""
        try:
            self.client.check_module()
        except ModuleNotLoadedError:
            raise
        except _CONNECTION_ERRORS as exc:
            self._unreachable_at_startup(exc)

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
    ) -> Decision:
        """:meth:`RateLimiter.check`, blocking."""
        plans = _resolved_sync(self._plan_steps(request, policies, route, peer, headers))
        probes: list[tuple[str, DenyEntry]] = []
        early = self._before_call(plans, probes)
        if early is not None:
            return early
        try:
            command = self._command(plans)
            probe = self._probe_begin()
            started = time.perf_counter()
            try:
                values = mtake_values(self.client.call_packed(command), len(plans))
            except _STORE_ERRORS as exc:
                return self._after_error(exc, started)
            finally:
                if probe:
                    self._probing = False
            return self._after_reply(plans, values, started)
        finally:
            if probes:  # refused: the reply renewed the entries; else they go
                self._probes_done(probes)

    def _charged(self, results: tuple[PolicyResult, ...]) -> Decision:
        return Decision(Outcome.ALLOWED, True, results, sync_refunder=self._refund)

    def _refund(self, decision: Decision) -> bool:
        buckets = self._refund_buckets(decision)
        if buckets is None:
            return False
        started = time.perf_counter()
        try:
            self.client.refund_many(buckets, now=self._now())
        except _STORE_ERRORS as exc:
            return self._refund_failed(exc, started)
        return self._refunded(decision, started)
