"""The configured limiters of a Django project, and what the middleware and the
decorator share: the route of a request, the peer and headers the client
identity needs, the decision handlers see, and the Django responses.

One :class:`DjangoRateLimit` per settings (rebuilt when ``REDIS_TB`` changes, as
in tests): a sync limiter (``redis`` client) for the WSGI path and sync views, and
an async one (``redis.asyncio``) per running event loop for the ASGI path and
async views. Both take the same options and the same metrics object.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.http import HttpRequest, HttpResponse, HttpResponseBase

from ..backend import Backend
from ..client import AsyncClient, Client
from ..decision import Decision, Hold, Outcome, PolicyResult
from ..deny_cache import DenyCache
from ..limiter import BaseLimiter, RateLimiter, SyncRateLimiter
from ..metrics import Metrics, PrometheusMetrics
from ..policy import Policy, check_policy_kinds
from ..renewal import AsyncTimers, ThreadTimers
from .conf import Config, metrics_of, parse_config
from .ending import ender

C = TypeVar("C", AsyncClient, Client)
L = TypeVar("L", RateLimiter, SyncRateLimiter)

__all__ = [
    "DjangoRateLimit",
    "RequestDecision",
    "ViewLimit",
    "get_rate_limit",
    "header_getter",
    "hold_rejection",
    "peer_of",
    "reset",
    "route_of",
]

#: the attribute a request's decision lives on: ``request.rate_limit``
ATTR = "rate_limit"
#: set on requests the middleware saw (the decorator then leaves refund_on to it)
SEEN = "_redis_tb_middleware"
#: set on requests whose view's ``@rate_limit`` policies the middleware checked
CHECKED = "_redis_tb_view_checked"
#: the attribute ``@rate_limit`` sets on the view it wraps
VIEW_ATTR = "redis_tb_view_limit"


def route_of(request: HttpRequest) -> str | None:
    """``"GET /items/<int:id>"``: the method and the resolved URL pattern's route
    (``request.resolver_match.route``, with a leading ``/``), never the raw path.
    None before resolution or when nothing matched."""
    match = getattr(request, "resolver_match", None)
    if match is None or match.route is None:
        return None
    return f"{request.method} /{match.route}"


def names_of(request: HttpRequest) -> tuple[str | None, str | None]:
    """(url_name, view_name): the pattern's name and its namespaced name."""
    match = getattr(request, "resolver_match", None)
    if match is None:
        return None, None
    return match.url_name, match.view_name


def peer_of(request: HttpRequest) -> str | None:
    """The TCP peer: ``REMOTE_ADDR`` (WSGI servers, and Django's ASGI handler from the
    scope's client). Empty (Unix sockets) is unknown."""
    peer = request.META.get("REMOTE_ADDR")
    return peer if isinstance(peer, str) and peer else None


def header_getter(request: HttpRequest) -> Callable[[str], Sequence[str]]:
    """The values of a header from ``request.META`` (``HTTP_X_FORWARDED_FOR``); the
    server has already joined repeated lines with commas, which are list separators
    of ``X-Forwarded-For`` and ``Forwarded`` too."""
    meta = request.META

    def get(name: str) -> Sequence[str]:
        value = meta.get("HTTP_" + name.upper().replace("-", "_"))
        return [value] if isinstance(value, str) and value else []

    return get


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class RequestDecision:
    """``request.rate_limit``: what the limiter decided for this request.

    The core :class:`~redis_tb.Decision`'s fields (``outcome``, ``allowed``,
    ``results``, ``violated``, ``shadow_limited``, ``cached``, ``remaining``,
    ``retry_after``...) plus Django-style refunds: ``refund()`` in sync views,
    ``await arefund()`` in async views. When the middleware and a ``@rate_limit``
    view both charged the request, it is their merged decision, and a refund gives
    back both.
    """

    __slots__ = ("decision", "_parts", "_renewers")

    def __init__(self, decision: Decision, is_async: bool) -> None:
        self.decision = decision
        self._parts: tuple[tuple[Decision, bool], ...] = ((decision, is_async),)
        self._renewers: list[AsyncTimers | ThreadTimers] = []

    def merged(self, other: Decision, is_async: bool) -> RequestDecision:
        out = RequestDecision(self.decision.merged(other), is_async)
        out._parts = (*self._parts, (other, is_async))
        out._renewers = self._renewers
        return out

    # -- leases (SPEC N4, N5) ----------------------------------------------------

    @property
    def lease(self) -> Any:
        """SPEC N6: the lease of this request's in-flight policy, or None."""
        for d, _ in self._parts:
            if d.lease is not None:
                return d.lease
        return None

    @property
    def timed_out(self) -> bool:
        """SPEC N7: the request reached its in-flight policy's max_duration (its lease
        released): the response is being ended."""
        return any(d.timed_out for d, _ in self._parts)

    def start_renewing(self, on_timeout: Callable[[], object] | None = None) -> None:
        """SPEC N5, N7, G5: renew each lease every lease / 2, and each hold taken on the
        request every ttl / 2, until :meth:`finish` (a thread for a sync-path decision,
        tasks on the event loop for an async one); at a lease's max_duration
        ``on_timeout()`` ends the response."""
        for d, was_async in self._parts:
            if (d.lease is None and not d._holdable) or any(r.decision is d for r in self._renewers):
                continue
            timers = AsyncTimers(d, on_timeout) if was_async else ThreadTimers(d, on_timeout)
            self._renewers.append(timers.start())

    def _stop_renewing(self) -> None:
        for r in self._renewers:
            r.stop()

    def finish(self) -> None:
        """SPEC N4: the response is over: stop renewing (the lease and the holds) and
        release the lease once (from sync code; later calls do nothing)."""
        self._stop_renewing()
        for d, was_async in self._parts:
            d.end_holds()
            if d.lease is None:
                continue
            if was_async:
                if _in_event_loop():
                    raise RuntimeError("request.rate_limit.finish() in an event loop: use `await afinish()`")
                async_to_sync(d.finish)()
            else:
                d.finish_sync()

    async def afinish(self) -> None:
        """:meth:`finish` from async code."""
        self._stop_renewing()
        for d, was_async in self._parts:
            d.end_holds()
            if d.lease is None:
                continue
            if was_async:
                await asyncio.shield(d.finish())
            else:
                await sync_to_async(d.finish_sync)()

    # -- holds (SPEC G1-G3) ------------------------------------------------------

    def _holder(self, policy: str) -> tuple[Decision, bool]:
        for d, was_async in self._parts:
            if policy in d._holdable:
                return d, was_async
        return self._parts[0]

    def hold(self, policy: str, estimate: float, ttl: float = 60) -> Hold:
        """SPEC G1: hold ``estimate`` on the settle_later policy ``policy`` (sync
        views; ``await ahold()`` in async views). Settle it with
        ``hold.settle_sync(actual)`` (a hold of an async-path check: ``await
        hold.settle(actual)``); :func:`hold_rejection` is a refused hold's 429."""
        d, was_async = self._holder(policy)
        if was_async:
            if _in_event_loop():
                raise RuntimeError("request.rate_limit.hold() in an event loop: use `await ahold()`")
            return async_to_sync(d.hold)(policy, estimate, ttl)
        return d.hold_sync(policy, estimate, ttl)

    async def ahold(self, policy: str, estimate: float, ttl: float = 60) -> Hold:
        """:meth:`hold` for async views."""
        d, was_async = self._holder(policy)
        if was_async:
            return await d.hold(policy, estimate, ttl)
        return await sync_to_async(d.hold_sync)(policy, estimate, ttl)

    # -- the decision ------------------------------------------------------------

    @property
    def outcome(self) -> Outcome:
        return self.decision.outcome

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def limited(self) -> bool:
        return self.decision.limited

    @property
    def store_error(self) -> bool:
        return self.decision.store_error

    @property
    def results(self) -> tuple[PolicyResult, ...]:
        return self.decision.results

    @property
    def violated(self) -> tuple[str, ...]:
        return self.decision.violated

    @property
    def shadow_limited(self) -> tuple[str, ...]:
        return self.decision.shadow_limited

    @property
    def cached(self) -> bool:
        return self.decision.from_cache

    @property
    def remaining(self) -> float | None:
        return self.decision.remaining

    @property
    def retry_after(self) -> float | None:
        return self.decision.retry_after

    @property
    def reset_after(self) -> float | None:
        return self.decision.reset_after

    @property
    def refunded(self) -> bool:
        return all(d.refunded or d.outcome is not Outcome.ALLOWED for d, _ in self._parts)

    # -- refunds -----------------------------------------------------------------

    def refund(self) -> bool:
        """Give this request's tokens back (sync views and code; in async views use
        :meth:`arefund`). Idempotent; never raises for a store error (it is logged
        and counted). Returns whether tokens were given back."""
        done = False
        for d, was_async in self._parts:
            if was_async:
                if _in_event_loop():
                    raise RuntimeError(
                        "request.rate_limit.refund() called in an event loop: use "
                        "`await request.rate_limit.arefund()` in async code"
                    )
                # a sync view under ASGI: the async client lives on the server's loop
                done = async_to_sync(d.refund)() or done
            else:
                done = d.refund_sync() or done
        return done

    async def arefund(self) -> bool:
        """:meth:`refund` for async views."""
        done = False
        for d, was_async in self._parts:
            if was_async:
                done = await d.refund() or done
            else:
                done = await sync_to_async(d.refund_sync)() or done
        return done

    @classmethod
    def not_limited(cls) -> RequestDecision:
        """What ``request.rate_limit`` is before (or without) a check: no policy
        applied; ``refund()`` is a no-op returning False."""
        return cls(Decision(Outcome.NOT_LIMITED, True), False)

    def __repr__(self) -> str:
        return repr(self.decision)


def hold_rejection(hold: Hold) -> HttpResponse | None:
    """SPEC G2: the ready 429 of a refused hold (H1-H3's headers of its policy, P1's
    body), or None when it was taken: ``return`` it from the view."""
    if hold.allowed:
        return None
    status, headers, body = hold._limiter.hold_response(hold)
    return HttpResponse(body, status=status, headers=dict(headers))


@dataclass(frozen=True, eq=False)
class ViewLimit:
    """What ``@rate_limit`` put on a view: its policies and failure mode. The
    middleware checks them in the same TB.MTAKE as the configured policies."""

    policies: tuple[Policy, ...]
    fail_open: bool | None = None
    #: a limiter of its own: the view's policies are checked in a call of their own,
    #: with this ``limiter`` label in the metrics (SPEC M1)
    limiter: str | None = None


def _combined(configured: tuple[Policy, ...], own: tuple[Policy, ...]) -> tuple[Policy, ...]:
    clash = {p.name for p in configured} & {p.name for p in own}
    if clash:
        raise ImproperlyConfigured(
            f"redis-tb: @rate_limit policy name(s) {sorted(clash)} also name a REDIS_TB policy "
            "that applies to this view: give them distinct names"
        )
    return configured + own


def _problem_response(rejection: tuple[int, list[tuple[str, str]], bytes]) -> HttpResponse:
    status, headers, body = rejection
    return HttpResponse(body, status=status, headers=dict(headers))


class DjangoRateLimit:
    """The limiters of one ``settings.REDIS_TB``."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._sync: dict[tuple[bool, str | None], SyncRateLimiter] = {}
        self._sync_client: Client | None = None
        #: SPEC E1: the backend the startup chose (or chooses at a degraded start's first
        #: call), shared by every client of these limiters; None: no startup ran
        self.backend: Backend | None = None
        self._async: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[AsyncClient, dict[tuple[bool, str | None], RateLimiter]]
        ] = weakref.WeakKeyDictionary()
        self._selected: dict[
            tuple[str | None, str | None, str | None, ViewLimit | None], tuple[Policy, ...]
        ] = {}
        self.policies = tuple(p.policy for p in config.policies)
        #: one metrics object and one deny cache for every limiter of these settings
        self.metrics = metrics_of(config.metrics, config.name)
        self._labelled: dict[str, Metrics | None] = {}
        self.deny_cache = None if config.deny_cache is None else DenyCache(max_entries=config.deny_cache)

    # -- limiters ----------------------------------------------------------------

    def _metrics_for(self, label: str | None) -> Metrics | None:
        """The metrics of the limiter labelled ``label`` (None: the settings' one)."""
        if label is None or label == self.config.name or self.metrics is None:
            return self.metrics
        found = self._labelled.get(label)
        if found is None:
            registry = getattr(self.metrics, "registry", None)
            found = self._labelled[label] = (
                PrometheusMetrics(registry, limiter=label) if isinstance(self.metrics, PrometheusMetrics) else self.metrics
            )
        return found

    def options(self, fail_open: bool | None = None, label: str | None = None) -> dict[str, Any]:
        """The core limiter's options from the settings (``fail_open`` overrides;
        ``label`` names the limiter in the metrics)."""
        c = self.config
        return {
            "prefix": c.prefix,
            "client_ip": c.client_ip,
            "hash_tag": c.hash_tag,
            "fail_open": c.fail_open if fail_open is None else fail_open,
            "timeout": c.timeout,
            "cooldown": c.cooldown,
            "legacy_headers": c.legacy_headers,
            "legacy_reset": c.legacy_reset,
            "clock": c.clock,
            "shadow": c.shadow,
            "metrics": self._metrics_for(label),
            "deny_cache": self.deny_cache,
            "start_degraded": c.start_degraded,
            "name": label or c.name,
            "backend": c.backend,
        }

    def sync_limiter(self, fail_open: bool | None = None, label: str | None = None) -> SyncRateLimiter:
        """The sync-path limiter (``fail_open`` overrides the setting: the decorator's)."""
        key = (self.config.fail_open if fail_open is None else fail_open, label)
        found = self._sync.get(key)
        if found is not None:
            return found
        with self._lock:
            if key not in self._sync:
                if self._sync_client is None:
                    self._sync_client = self._adopt(Client.from_url(self.config.url, timeout=self.config.timeout))
                self._sync[key] = self._told(SyncRateLimiter(self._sync_client, **self.options(fail_open, label)))
            return self._sync[key]

    def async_limiter(self, fail_open: bool | None = None, label: str | None = None) -> RateLimiter:
        """The async-path limiter of the running event loop (``redis.asyncio``
        connections belong to one loop: an ASGI server has one for its life)."""
        key = (self.config.fail_open if fail_open is None else fail_open, label)
        loop = asyncio.get_running_loop()
        entry = self._async.get(loop)
        if entry is None:
            entry = (self._adopt(AsyncClient.from_url(self.config.url, timeout=self.config.timeout)), {})
            self._async[loop] = entry
        client, limiters = entry
        found = limiters.get(key)
        if found is None:
            found = limiters[key] = self._told(RateLimiter(client, **self.options(fail_open, label)))
        return found

    def startup(self, policies: Sequence[Policy] | None = None) -> None:
        """The startup checks (SPEC U1-U3): raises StartupError (ModuleNotLoadedError
        when Redis answers without the module) in one line; an unreachable Redis too,
        unless ``START_DEGRADED`` (then one line is logged); and on Redis Cluster when
        ``policies`` (default: the configured ones; the app passes those of its calls,
        :func:`~redis_tb.django.calls.call_policies`) go several in one call and there
        is no HASH_TAG (K6).
        On its own connection with at least 1 s to answer (as the async path's startup
        allows), so a loaded machine's slow first reply does not pass for an
        unreachable Redis."""
        client = Client.from_url(self.config.url, timeout=max(self.config.timeout, 1.0))
        try:
            SyncRateLimiter(client, **self.options()).startup(self.policies if policies is None else policies)
        finally:
            client.close()
        self.backend = client.backend  # SPEC E1: the limiters' clients use the choice

    def _adopt(self, client: C) -> C:
        if self.backend is not None:
            client.use_backend(self.backend)
        return client

    def _told(self, limiter: L) -> L:
        """SPEC E6: the limiter's stats and gauge follow the choice (its line is the startup's)."""
        if self.backend is not None:
            self.backend.on_chosen(functools.partial(limiter.on_backend, log=False))
        return limiter

    def close(self) -> None:
        if self._sync_client is not None:
            self._sync_client.close()

    # -- which policies ----------------------------------------------------------

    def select(
        self, request: HttpRequest, view: ViewLimit | None = None
    ) -> tuple[str | None, tuple[Policy, ...]] | None:
        """(route, policies) of a resolved request: the configured policies that apply
        to its route / URL name, then the view's own (``@rate_limit``). None when it
        is excluded or, unless LIMIT_UNMATCHED, did not resolve."""
        route = route_of(request)
        url_name, view_name = names_of(request)
        c = self.config
        # SPEC L1: the core's scope (EXCLUDE's routes, LIMIT_UNMATCHED), then EXCLUDE's URL names
        if c.scope.skips(route) or c.names_excluded(url_name, view_name):
            return None
        k = (route, url_name, view_name, view)
        found = self._selected.get(k)
        if found is None:
            found = tuple(p.policy for p in c.policies if p.applies(route, url_name, view_name))
            if view is not None:
                found = _combined(found, view.policies)
            try:
                check_policy_kinds(found)  # SPEC C10: the policies of one call
            except ValueError as exc:
                raise ImproperlyConfigured(f"redis-tb: {exc}") from exc
            if len(self._selected) < 10_000:  # bounded by the URLconf; a cap all the same
                self._selected[k] = found
        return route, found

    def policies_unmatched(self) -> tuple[Policy, ...]:
        """The policies for requests that resolved to no pattern (LIMIT_UNMATCHED):
        those not restricted to routes or URL names."""
        return tuple(p.policy for p in self.config.policies if p.routes is None and p.url_names is None)

    # -- checks ------------------------------------------------------------------

    def check_sync(
        self,
        request: HttpRequest,
        policies: Sequence[Policy],
        route: str | None,
        fail_open: bool | None = None,
        label: str | None = None,
    ) -> tuple[SyncRateLimiter, Decision]:
        limiter = self.sync_limiter(fail_open, label)
        decision = limiter.check(request, policies, route, peer=peer_of(request), headers=header_getter(request))
        return limiter, decision

    async def check_async(
        self,
        request: HttpRequest,
        policies: Sequence[Policy],
        route: str | None,
        fail_open: bool | None = None,
        label: str | None = None,
    ) -> tuple[RateLimiter, Decision]:
        limiter = self.async_limiter(fail_open, label)
        decision = await limiter.check(
            request, policies, route, peer=peer_of(request), headers=header_getter(request)
        )
        return limiter, decision

    def record(self, request: HttpRequest, limiter: BaseLimiter, decision: Decision, is_async: bool) -> HttpResponse | None:
        """Put the decision on ``request.rate_limit`` (merged with an earlier one) and
        answer a refusal: the 429/503 response, or None to go on."""
        earlier = getattr(request, ATTR, None)
        rejection = limiter.rejection(decision)
        if rejection is not None:
            # A refusal burns nothing: the earlier check's tokens go back (by the caller,
            # who knows the path), and the 429 shows this check's headers only.
            setattr(request, ATTR, RequestDecision(decision, is_async))
            return _problem_response(rejection)
        if isinstance(earlier, RequestDecision) and earlier.results:
            current = earlier.merged(decision, is_async)
        elif isinstance(earlier, RequestDecision) and earlier.store_error:
            current = earlier.merged(decision, is_async)
        else:  # nothing earlier, or the middleware's placeholder (no policy applied)
            current = RequestDecision(decision, is_async)
        setattr(request, ATTR, current)
        if decision.lease is not None or decision._holdable:
            current.start_renewing(ender(request, is_async))  # SPEC N5, N7, G5
        return None

    def add_headers(self, response: HttpResponseBase, decision: RequestDecision, limiter: BaseLimiter) -> None:
        """The rate-limit headers of an admitted request (none for a store error or
        when no policy applied; shadow policies are left out)."""
        if decision.outcome is not Outcome.ALLOWED:
            return
        if response.status_code == 429 and response.has_header("RateLimit-Policy"):
            return  # a 429 with its own rate-limit headers (a refused hold's, SPEC G2)
        for name, value in limiter.headers(decision.decision):
            response[name] = value

    def headers_limiter(self, is_async: bool) -> BaseLimiter:
        return self.async_limiter() if is_async else self.sync_limiter()


_current: DjangoRateLimit | None = None
_current_lock = threading.Lock()


def get_rate_limit() -> DjangoRateLimit:
    """The project's :class:`DjangoRateLimit`, built from ``settings.REDIS_TB`` on
    first use (and again after the setting changes, e.g. ``override_settings``)."""
    global _current
    found = _current
    if found is not None:
        return found
    with _current_lock:
        if _current is None:
            _current = DjangoRateLimit(parse_config(getattr(settings, "REDIS_TB", None)))
        return _current


def reset() -> None:
    """Forget the built limiters: the next request reads ``settings.REDIS_TB`` again."""
    global _current
    with _current_lock:
        old, _current = _current, None
    if old is not None:
        old.close()


def _on_setting_changed(*, setting: str, **_: Any) -> None:
    if setting == "REDIS_TB":
        reset()


setting_changed.connect(_on_setting_changed, dispatch_uid="redis_tb.django.reset")
