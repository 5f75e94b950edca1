"""The plan of one request (SPEC L1-L4, K1-K5, I1-I3, W2, N2, G1): which of the
policies apply to it, each one's identity, key, limit and cost, checked against C2/C3
(L3); and which command the plan is. Shared by both paths: :class:`Planner` is a mixin
of :class:`~redis_tb.limiter.BaseLimiter`, and the plan a generator that yields each
awaitable a user function returned (resolved by :func:`_resolved` on the asyncio path;
refused by :func:`_resolved_sync` on the synchronous one)."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Generator, Sequence, final

from .address import ClientIpConfig, HeaderGetter
from .outcome import Outcome, PolicyResult
from .keys import BadHeader, ClientIpKey, FixedKey, HeaderKey, KeyBuilder, bounded, is_plain
from .policy import InFlightLimit, Limit, Policy, WindowLimit, cost_ok, limit_ok

__all__ = ["HashTagFunc", "Planner"]

#: request -> the hash tag of this request's keys (Redis Cluster), or None.
HashTagFunc = Callable[[Any], Awaitable[str | None] | str | None]

_NO_PEER: Any = object()

_BUCKET, _WINDOW, _IN_FLIGHT, _SETTLE = "bucket", "window", "in_flight", "settle_later"


class _Plan:
    """One policy's charge for one request (internal; built on every request): a
    bucket's. The other kinds are :class:`_SpecialPlan`, which sets the two class
    attributes below, so building a bucket plan sets eight fields, not ten. ``kind``
    and ``window`` are slots: they are read for every plan of every request, and a
    slot reads faster than a class attribute."""

    __slots__ = ("policy", "key", "capacity", "rate", "cost", "shadow", "kind", "window")
    mode: str = ""
    lease_ms: int = 0
    max_duration_ms: int = 0

    def __init__(
        self, policy: Policy, key: str, capacity: float, rate: float | None, cost: float, shadow: bool,
        kind: str = _BUCKET, window: float | None = None,
    ) -> None:
        self.policy = policy
        self.key = key
        self.capacity = capacity
        self.rate = rate
        self.cost = cost
        self.shadow = shadow
        self.kind = kind
        self.window = window

    def result(
        self, allowed: bool, remaining: float, retry_after: float, reset_after: float
    ) -> PolicyResult:
        return PolicyResult(
            self.policy.name, self.key, self.capacity, self.rate, self.cost, allowed, remaining,
            retry_after, reset_after, self.shadow, self.kind, self.window,
        )


class _SpecialPlan(_Plan):
    """A plan that is not a bucket's: ``kind`` a window (W2: ``window`` its seconds,
    ``mode`` its limit's), an in-flight slot (N2: ``lease_ms``, N7: ``max_duration_ms``)
    or a settle_later policy kept for a hold (G1)."""

    __slots__ = ("mode", "lease_ms", "max_duration_ms")

    def __init__(
        self, policy: Policy, key: str, capacity: float, rate: float | None, cost: float, shadow: bool,
        kind: str, *, window: float | None = None, mode: str = "", lease_ms: int = 0, max_duration_ms: int = 0,
    ) -> None:
        super().__init__(policy, key, capacity, rate, cost, shadow, kind, window)
        self.mode = mode
        self.lease_ms = lease_ms
        self.max_duration_ms = max_duration_ms


class _Mixed(list):  # type: ignore[type-arg]
    """The plans of a request that has a window, in-flight or settle_later plan (built
    by :meth:`Planner._plan_steps`): a plain ``list`` means buckets only, the hot
    path, which needs neither :meth:`Planner._split` nor a command other than
    TB.TAKE / TB.MTAKE."""

    __slots__ = ()


#: what a request's call is when it is not TB.TAKE / TB.MTAKE (see _special)
_PLAIN_CALL: tuple[str, "_Plan | None"] = ("", None)


@final
class _Early:
    """A request decided while planning (SPEC I2, L3): no Redis call."""

    __slots__ = ("outcome", "culprit")

    def __init__(self, outcome: Outcome, culprit: str) -> None:
        self.outcome = outcome
        self.culprit = culprit


#: the plan builder yields awaitables it needs resolved and returns the plans
_PlanSteps = Generator[Any, Any, "list[_Plan] | _Early"]


async def _resolved(steps: _PlanSteps) -> list[_Plan] | _Early:
    """The plans, awaiting what the user functions returned (the async path)."""
    try:
        pending = steps.send(None)
        while True:
            pending = steps.send(await pending)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def _resolved_sync(steps: _PlanSteps) -> list[_Plan] | _Early:
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


_PLAIN = (str, int, float, Limit, WindowLimit, InFlightLimit, type(None))
_LIMITS = (Limit, WindowLimit, InFlightLimit)


def _pending(value: object) -> bool:
    """An awaitable a user function returned (checked cheaply: plain values first)."""
    return type(value) not in _PLAIN and inspect.isawaitable(value)


class Planner:
    """The planning rules of :class:`~redis_tb.limiter.BaseLimiter` (a mixin: the
    limiter's key builder, default identity, hash tag and shadow switch)."""

    if TYPE_CHECKING:
        keys: KeyBuilder
        client_ip: ClientIpConfig
        hash_tag: HashTagFunc | None
        shadow: bool

    def _plan_steps(
        self,
        request: Any,
        policies: Sequence[Policy],
        route: str | None,
        peer: Any,
        headers: HeaderGetter | None,
    ) -> _PlanSteps:
        """The plans of one request, shared by both paths: a generator that yields
        each awaitable a user function returned and gets its value sent back. (Its
        locals and stack keep the generator within 512 bytes, the most CPython's small
        object allocator serves: a larger one is a malloc and a free on every request.)"""
        tag: Any = None
        if self.hash_tag is not None:
            tag = self.hash_tag(request)
            if _pending(tag):
                tag = yield tag
        plans: list[_Plan] = []
        mixed = False  # a window, in-flight or settle_later plan among them
        client_ip: Any = _NO_PEER  # the default identity, computed once
        plain: Any = _NO_PEER  # the last identity found to need no escaping (SPEC K2, K3)
        identity: Any
        limit: Any
        cost: Any
        keys = self.keys
        plain_heads, route_heads = keys._plain, keys._heads
        for p in policies:
            if p.routes is not None and (route is None or route not in p.routes):
                # SPEC K5: "* <template>" matches every method (the key names the
                # request's own: `route`)
                if not p.any_method or p.matched_route(route) is None:
                    continue
            keyfunc = p.key
            if keyfunc is None or type(keyfunc) is ClientIpKey:
                if keyfunc is None and client_ip is not _NO_PEER:
                    identity = client_ip
                else:
                    cip = self.client_ip if keyfunc is None or keyfunc.config is None else keyfunc.config
                    if peer is _NO_PEER:  # a Starlette request
                        c = request.client
                        peer = c.host if c else None
                        if headers is None:
                            headers = request.headers.getlist
                    elif headers is None:
                        headers = _no_headers
                    identity = cip.of(peer, headers)
                    if type(cip) is ClientIpConfig:  # SPEC K2, K3: an address or a network (A9) is plain
                        plain = identity
                    if keyfunc is None:
                        client_ip = identity
            elif type(keyfunc) is HeaderKey:
                if headers is None:
                    headers = request.headers.getlist if peer is _NO_PEER else _no_headers
                try:
                    identity = keyfunc.identity(headers)
                except BadHeader as exc:  # SPEC I2: a 400, the policy is not skipped
                    return _Early(Outcome.BAD_REQUEST, exc.header)
            elif type(keyfunc) is FixedKey:
                identity = keyfunc.value
            else:
                identity = keyfunc(request)  # type: ignore[operator]  # a function (no cast() call per request)
                if _pending(identity):
                    identity = yield identity
            if not identity:  # None or "": skipped (SPEC I1)
                continue
            fixed = p._fixed
            if fixed is not None:  # a fixed bucket limit and cost: nothing to resolve
                capacity, rate, cost = fixed
            else:
                limit = p.limit
                if not isinstance(limit, _LIMITS):
                    limit = limit(request)
                    if _pending(limit):
                        limit = yield limit
                    limit = p.checked_limit(limit)
                    if limit is None:
                        continue
                    if type(limit) is Limit and not limit_ok(limit.capacity, limit.rate):  # SPEC L3
                        return _Early(Outcome.INVALID_INPUT, p.name)
                if p.kind != _BUCKET or p.settle_later:
                    mixed = True
                    per_route = route if p.per_route else None
                    key = keys.key(p.name, identity, route=per_route, tag=tag or None)
                    if p.settle_later:  # SPEC G1: resolved now, charged by the handler's hold
                        plans.append(_SpecialPlan(p, key, limit.capacity, limit.rate, 0, False, _SETTLE))
                        continue
                    if p.kind == _IN_FLIGHT:  # SPEC N2, N3: cost one slot
                        plan = _SpecialPlan(
                            p, key, float(limit.limit), None, 1, self.shadow or p.shadow, _IN_FLIGHT,
                            lease_ms=limit.lease_ms, max_duration_ms=limit.max_duration_ms,
                        )
                        plans.append(plan)
                        continue
                cost = p.cost
                if callable(cost):
                    cost = cost(request)
                    if _pending(cost):
                        cost = yield cost
                    if not cost_ok(cost):  # SPEC L3
                        return _Early(Outcome.INVALID_INPUT, p.name)
                if p.kind == _WINDOW:  # SPEC W2: capacity n, rate n / seconds
                    plan = _SpecialPlan(
                        p, key, limit.capacity, limit.rate, cost, self.shadow or p.shadow, _WINDOW,
                        window=limit.seconds, mode=limit.mode,
                    )
                    plans.append(plan)
                    continue
                capacity, rate = limit.capacity, limit.rate
            per_route = route if p.per_route else None
            if tag:
                key = keys.key(p.name, identity, route=per_route, tag=tag)
            else:  # SPEC K1-K3, the head of each (policy, route) built once
                head = plain_heads.get(p.name) if per_route is None else route_heads.get((p.name, per_route))
                if head is None:
                    head = keys.head(p.name, per_route)
                if identity is plain or (type(identity) is str and is_plain(identity) is not None):
                    key = head + identity  # bounded()'s hot path, inline
                    plain = identity  # the same client address of the next policy: checked
                else:
                    key = head + bounded(identity)
            plans.append(_Plan(p, key, capacity, rate, cost, self.shadow or p.shadow))
        if len(plans) > 1 and len({pl.key for pl in plans}) != len(plans):
            raise ValueError("two policies of one request map to the same key: give them distinct names")
        return _Mixed(plans) if mixed else plans

    def _split(
        self, plans: _Mixed
    ) -> tuple[list[_Plan], dict[str, tuple[str, float, float]], tuple[str, _Plan | None]]:
        """Of plans with a window, in-flight or settle_later plan: the plans of the call,
        the settle_later policies kept for holds (G1), and the call (:meth:`_special`)."""
        holdable: dict[str, tuple[str, float, float]] = {}
        call: list[_Plan] = []
        for pl in plans:
            if pl.kind == _SETTLE:
                assert pl.rate is not None
                holdable[pl.policy.name] = (pl.key, pl.capacity, pl.rate)
            else:
                call.append(pl)
        return call, holdable, self._special(call)

    def _special(self, plans: list[_Plan]) -> tuple[str, _Plan | None]:
        """The call's command when it is not TB.TAKE / TB.MTAKE: ``("TB.ACQUIRE",
        in-flight plan)`` (N2) or ``("TB.WINDOW", plan)`` (W2); else ``("", None)``."""
        for pl in plans:
            if pl.kind == _IN_FLIGHT:
                return "TB.ACQUIRE", pl
            if pl.kind == _WINDOW:
                return "TB.WINDOW", pl
        return "", None
