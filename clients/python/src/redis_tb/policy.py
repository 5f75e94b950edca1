"""Policies: a named limit (capacity and rate, fixed or chosen per request), whose
bucket a request's identity picks, charged a cost per request, on some routes.

Framework-neutral: key, cost, limit and tier functions receive whatever request
object the framework adapter passes (a Starlette ``Request`` under ASGI/FastAPI, a
Django ``HttpRequest`` under Django), and may return a value or an awaitable (the
latter only on the async path)."""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Collection, Iterable, Mapping, TypeVar, Union

from .address import ClientIpConfig
from .keys import ClientIpKey, FnKey, Key

__all__ = [
    "InFlightLimit",
    "WindowLimit",
    "check_policy_kinds",
    "CostFunc",
    "KeyFunc",
    "Limit",
    "LimitFunc",
    "Policy",
    "TierFunc",
    "check_policy_name",
    "check_policy_names",
    "cost_ok",
    "limit_ok",
    "per_day",
    "per_hour",
    "per_minute",
    "per_second",
    "tiered",
]

T = TypeVar("T")

#: request -> identity (a user id, an API key, a tenant), or None to skip the policy.
KeyFunc = Callable[[Any], Union[Awaitable[Union[str, None]], str, None]]
#: request -> tokens this request costs (>= 0).
CostFunc = Callable[[Any], Union[Awaitable[float], float]]
#: request -> the limit for this request (plan tiers), or None to skip the policy.
LimitFunc = Callable[[Any], Any]
#: request -> a plan name (tiers), or None.
TierFunc = Callable[[Any], Union[Awaitable[Union[str, None]], str, None]]

_NAME = re.compile(r"[a-z0-9_-]{1,64}\Z")
_MAX = float(2**53)


def _is_number(x: object) -> bool:
    return type(x) in (int, float) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def limit_ok(capacity: object, rate: object) -> bool:
    """SPEC C2 (NaN fails every comparison, infinities the upper bound)."""
    return (
        _is_number(capacity) and _is_number(rate)
        and 0 < capacity <= _MAX and 1e-9 <= rate <= _MAX  # type: ignore[operator]
    )


def cost_ok(cost: object) -> bool:
    """SPEC C3: finite, >= 0 and <= 2^53."""
    return _is_number(cost) and 0 <= cost <= _MAX  # type: ignore[operator]


def check_policy_name(name: object) -> str:
    """SPEC C1: ``[a-z0-9_-]{1,64}``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"a policy name matches [a-z0-9_-]{{1,64}}, got {name!r}")
    return name


def check_policy_names(policies: Iterable[Policy]) -> tuple[Policy, ...]:
    """SPEC C1: names are unique within a limiter."""
    out = tuple(policies)
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be distinct: {names}")
    return out


async def resolve(value: Awaitable[T] | T) -> T:
    """Await ``value`` if a key, cost or limit function returned an awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


def _whole_ms(seconds: float) -> int:
    """``ceil(seconds x 1000)``, a product within 1e-9 (relative) of a whole number
    being that number (SPEC C9, G1: 0.0015 s is 2 ms, 0.007 s is 7 ms)."""
    t = seconds * 1000
    m = round(t)
    if abs(t - m) <= 1e-9 * max(1.0, t):
        return int(m)
    return math.ceil(t)


def _whole(x: object) -> bool:
    return _is_number(x) and x == x and math.isfinite(x) and float(x).is_integer()  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class WindowLimit:
    """At most ``limit`` (costs) per aligned window of ``seconds`` (SPEC W1), checked
    with TB.WINDOW; ``mode`` ``"sliding"`` (default) or ``"fixed"``. Built with
    :meth:`Limit.window` and its helpers; checked when built (C8)."""

    limit: int
    seconds: float
    mode: str = "sliding"

    def __post_init__(self) -> None:
        if not _whole(self.limit) or not 1 <= self.limit <= _MAX:  # SPEC C8
            raise ValueError(f"window limit must be a whole number >= 1 and <= 2^53, got {self.limit!r}")
        if not _is_number(self.seconds) or not 0.000001 <= self.seconds <= 1e12:
            raise ValueError(f"window seconds must be >= 0.000001 and <= 1e12, got {self.seconds!r}")
        if self.mode not in ("sliding", "fixed"):
            raise ValueError(f"window mode must be 'sliding' or 'fixed', got {self.mode!r}")
        object.__setattr__(self, "limit", int(self.limit))

    @property
    def capacity(self) -> float:
        """SPEC W2: a window's ``capacity`` is its limit."""
        return float(self.limit)

    @property
    def rate(self) -> float:
        """SPEC W2: a window's ``rate`` is ``limit / seconds``."""
        return self.limit / self.seconds


@dataclass(frozen=True, slots=True)
class InFlightLimit:
    """At most ``limit`` requests in progress at once (SPEC N1), each holding a lease
    of ``lease`` seconds (whole milliseconds, rounded up: ``lease_ms``), renewed while
    it runs but for at most ``max_duration`` seconds after its grant (N7: then the
    lease is released and the response ended, whatever its client does). Built with
    :meth:`Limit.in_flight`; checked when built (C9)."""

    limit: int
    lease: float = 30.0
    max_duration: float = 300.0

    def __post_init__(self) -> None:
        if not _whole(self.limit) or not 1 <= self.limit <= 10000:  # SPEC C9
            raise ValueError(f"in-flight limit must be a whole number >= 1 and <= 10000, got {self.limit!r}")
        if not _is_number(self.lease) or not 0.001 <= self.lease <= 31536000:
            raise ValueError(f"lease must be >= 0.001 and <= 31536000 seconds, got {self.lease!r}")
        if not _is_number(self.max_duration) or not 0.001 <= self.max_duration <= 31536000:  # SPEC C9, N7
            raise ValueError(f"max_duration must be >= 0.001 and <= 31536000 seconds, got {self.max_duration!r}")
        object.__setattr__(self, "limit", int(self.limit))

    @property
    def lease_ms(self) -> int:
        """SPEC C9: ``ceil(lease x 1000)``."""
        return _whole_ms(self.lease)

    @property
    def max_duration_ms(self) -> int:
        """SPEC C9, N7: ``ceil(max_duration x 1000)``."""
        return _whole_ms(self.max_duration)


@dataclass(frozen=True, slots=True)
class Limit:
    """A bucket's shape: ``capacity`` tokens (the burst), refilled at ``rate`` per second."""

    capacity: float
    rate: float

    # Not checked here: a limit function may compute one out of range, which is the
    # application's error for that request (SPEC L3), not an exception in its code.
    # A policy checks its static limit when it is built (C2), tiers when they are.

    def valid(self) -> bool:
        """Within the module's bounds (SPEC C2): capacity finite, > 0 and <= 2^53;
        rate finite, >= 1e-9 and <= 2^53 tokens per second."""
        return limit_ok(self.capacity, self.rate)

    def checked(self) -> Limit:
        """This limit, or ValueError naming what is out of range (SPEC C2)."""
        if not _is_number(self.capacity) or not 0 < self.capacity <= _MAX:
            raise ValueError(f"capacity must be > 0 and <= 2^53, got {self.capacity!r}")
        if not _is_number(self.rate) or not 1e-9 <= self.rate <= _MAX:
            raise ValueError(f"rate must be >= 1e-9 and <= 2^53 per second, got {self.rate!r}")
        return self

    @classmethod
    def per_period(cls, n: float, seconds: float) -> Limit:
        """``n`` requests per ``seconds``: a burst of ``n``, refilled evenly over the period."""
        return cls(n, n / seconds)

    @classmethod
    def per_second(cls, n: float) -> Limit:
        return cls.per_period(n, 1)

    @classmethod
    def per_minute(cls, n: float) -> Limit:
        return cls.per_period(n, 60)

    @classmethod
    def per_hour(cls, n: float) -> Limit:
        return cls.per_period(n, 3600)

    @classmethod
    def per_day(cls, n: float) -> Limit:
        return cls.per_period(n, 86400)

    @staticmethod
    def window(n: int, seconds: float, mode: str = "sliding") -> WindowLimit:
        """At most ``n`` per aligned window of ``seconds`` (SPEC W1): unlike
        ``per_minute(n)`` (up to ``2n`` in its first minute), never more than ``n`` in
        a window. ``mode``: ``"sliding"`` (default) or ``"fixed"``."""
        return WindowLimit(n, seconds, mode)

    @staticmethod
    def window_per_second(n: int, mode: str = "sliding") -> WindowLimit:
        return WindowLimit(n, 1, mode)

    @staticmethod
    def window_per_minute(n: int, mode: str = "sliding") -> WindowLimit:
        return WindowLimit(n, 60, mode)

    @staticmethod
    def window_per_hour(n: int, mode: str = "sliding") -> WindowLimit:
        return WindowLimit(n, 3600, mode)

    @staticmethod
    def window_per_day(n: int, mode: str = "sliding") -> WindowLimit:
        return WindowLimit(n, 86400, mode)

    @staticmethod
    def in_flight(n: int, lease: float = 30, max_duration: float = 300) -> InFlightLimit:
        """At most ``n`` requests of a key in progress at once (SPEC N1), each
        holding a lease of ``lease`` seconds, renewed while it runs and released when
        its response ends, or ``max_duration`` seconds after its grant (N7: the
        response is then ended, so a client that reads nothing cannot keep its slot)."""
        return InFlightLimit(n, lease, max_duration)


#: what a policy's limit is: a bucket, a window (W) or an in-flight limit (N)
AnyLimit = Union[Limit, WindowLimit, InFlightLimit]


def limit_kind(limit: object) -> str:
    """``"bucket"``, ``"window"`` or ``"in_flight"``."""
    if isinstance(limit, WindowLimit):
        return "window"
    if isinstance(limit, InFlightLimit):
        return "in_flight"
    return "bucket"


def route_set(routes: Iterable[str] | None) -> frozenset[str] | None:
    """Normalise ``"METHOD /template"`` strings (the method upper-cased)."""
    if routes is None:
        return None
    if isinstance(routes, str):
        routes = [routes]
    out = set()
    for r in routes:
        method, sep, path = r.strip().partition(" ")
        if not sep or not path.startswith("/"):
            raise ValueError(f"a route is 'METHOD /template', got {r!r}")
        out.add(f"{method.upper()} {path.strip()}")
    return frozenset(out)


@dataclass(frozen=True)
class Policy:
    """One named limit.

    - ``name``: a token (``[a-z0-9_-]+``), used in the bucket key and in the headers.
    - ``limit``: a :class:`Limit`, or a function of the request returning one
      (plan tiers) or None (this policy does not apply to this request).
    - ``key``: the identity function; None means the limiter's client address
      (peer IP, trusted proxies, IPv6 grouping). Returning None skips the policy.
    - ``cost``: tokens per request, a number or a function of the request.
    - ``routes``: ``"METHOD /template"`` strings this policy applies to (the route
      template, e.g. ``GET /items/{item_id}``, never the raw path); None: every route.
    - ``per_route``: one bucket per route (the route is part of the key) rather than
      one bucket shared by every route the policy applies to.
    - ``shadow``: observe only. The bucket is charged exactly as when enforced (the
      same single TB.MTAKE), but a refusal by this policy alone lets the request
      through; it is counted, logged (once a second at most) and listed in
      ``decision.shadow_limited``, and the policy is left out of the headers.
      Moving a policy between shadow and enforced is this flag only.
    """

    name: str
    limit: Limit | WindowLimit | InFlightLimit | LimitFunc
    key: KeyFunc | Key | ClientIpConfig | None = None
    cost: float | CostFunc = 1
    routes: Collection[str] | None = None
    per_route: bool = False
    shadow: bool = False
    #: SPEC G1: not charged by the check; the handler holds an estimate and settles
    #: the actual cost (``decision.hold(name, estimate)``). Needs a bucket limit (C10).
    settle_later: bool = False
    #: ``"bucket"``, ``"window"`` or ``"in_flight"``: the kind of this policy's limit
    #: (a limit function's: the kind of its tiers, else ``"bucket"``); set from ``limit``
    kind: str = field(default="bucket", init=False, repr=False, compare=False)
    #: one of ``routes`` is ``"* <template>"`` (every method, SPEC K5); set from ``routes``
    any_method: bool = field(default=False, init=False, repr=False, compare=False)
    #: ``(capacity, rate, cost)`` of a bucket policy whose limit and cost are fixed (not
    #: functions) and that is charged by the check (not settle_later): the request path
    #: takes them as they are; None for every other policy
    _fixed: tuple[float, float, float] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_policy_name(self.name)
        if not callable(self.cost) and not cost_ok(self.cost):  # SPEC C3
            raise ValueError(f"policy {self.name!r}: cost must be >= 0 and <= 2^53, got {self.cost!r}")
        if isinstance(self.limit, Limit):
            try:
                self.limit.checked()  # SPEC C2
            except ValueError as exc:
                raise ValueError(f"policy {self.name!r}: {exc}") from None
        elif isinstance(self.limit, (WindowLimit, InFlightLimit)):
            pass  # checked when built (SPEC C8, C9)
        elif not callable(self.limit):
            raise TypeError(f"policy {self.name!r}: limit is a Limit or a function, got {self.limit!r}")
        kind = limit_kind(self.limit) if not callable(self.limit) else getattr(self.limit, "_redis_tb_kind", "bucket")
        object.__setattr__(self, "kind", kind)
        if kind == "in_flight" and (callable(self.cost) or self.cost != 1):  # SPEC C9
            raise ValueError(f"policy {self.name!r}: an in-flight policy has no cost (its cost is one slot)")
        if self.settle_later and kind != "bucket":  # SPEC C10
            raise ValueError(f"policy {self.name!r}: a settle_later policy needs a bucket limit, got a {kind} limit")
        key = self.key
        if isinstance(key, ClientIpConfig):
            object.__setattr__(self, "key", ClientIpKey(key))
        elif isinstance(key, FnKey):
            object.__setattr__(self, "key", key.fn)
        elif isinstance(key, ClientIpKey) and key.config is None:
            object.__setattr__(self, "key", None)
        elif key is not None and not callable(key) and not isinstance(key, Key):
            raise TypeError(f"policy {self.name!r}: key is a Key or a function, got {key!r}")
        object.__setattr__(self, "routes", route_set(self.routes))
        object.__setattr__(self, "any_method", any(r.startswith("* ") for r in self.routes or ()))
        if type(self.limit) is Limit and kind == "bucket" and not self.settle_later and not callable(self.cost):
            object.__setattr__(self, "_fixed", (self.limit.capacity, self.limit.rate, self.cost))

    def applies_to(self, route: str | None) -> bool:
        return self.matched_route(route) is not None or self.routes is None

    def matched_route(self, route: str | None) -> str | None:
        """The listed route that ``route`` (``"GET /items/{id}"``) matches: itself, or
        ``"* /items/{id}"`` for an any-method route (SPEC K5); None when none does."""
        routes = self.routes
        if routes is None or route is None:
            return None
        if route in routes:
            return route
        if self.any_method:
            wild = "* " + route.partition(" ")[2]
            if wild in routes:
                return wild
        return None

    async def limit_for(self, request: Any) -> AnyLimit | None:
        if isinstance(self.limit, (Limit, WindowLimit, InFlightLimit)):
            return self.limit
        return self.checked_limit(await resolve(self.limit(request)))

    def checked_limit(self, out: object) -> AnyLimit | None:
        """What a limit function returned: a limit of this policy's kind or None
        (anything else is a TypeError in the application's code). A bucket's range is
        checked by the limiter (SPEC L3)."""
        if out is not None and (
            not isinstance(out, (Limit, WindowLimit, InFlightLimit)) or limit_kind(out) != self.kind
        ):
            raise TypeError(f"policy {self.name!r}: the limit function returned {out!r}")
        return out


#: SPEC C11: the most policies one limiter holds (the module takes at most 64 buckets
#: in one TB.MTAKE or TB.ACQUIRE ... TAKE)
MAX_POLICIES = 64


def check_policy_kinds(policies: Iterable[Policy]) -> tuple[Policy, ...]:
    """SPEC C10: the kinds of limit of one limiter's policies mix only as one module
    call can check them: at most one in-flight policy, and a window policy alone
    (settle_later policies have bucket limits, checked by :class:`Policy`). SPEC C11:
    at most 64 policies."""
    out = tuple(policies)
    if len(out) > MAX_POLICIES:
        raise ValueError(
            f"a limiter holds at most {MAX_POLICIES} policies (the module takes at most {MAX_POLICIES} "
            f"buckets in one call), got {len(out)}: split them between limiters"
        )
    in_flight = [p.name for p in out if p.kind == "in_flight"]
    if len(in_flight) > 1:
        raise ValueError(f"at most one in-flight policy per limiter, got {in_flight}")
    windows = [p.name for p in out if p.kind == "window"]
    if windows and len(out) > 1:
        raise ValueError(
            f"window policy {windows[0]!r} must be the only policy of its limiter "
            f"(no call checks a window with other limits), got {[p.name for p in out]}: "
            "put it in a limiter of its own"
        )
    return out


def _per(
    seconds: float,
    name: str,
    n: float,
    key: KeyFunc | Key | None,
    cost: float | CostFunc,
    routes: Iterable[str] | None,
    per_route: bool,
    shadow: bool,
) -> Policy:
    return Policy(
        name,
        Limit.per_period(n, seconds),
        key=key,
        cost=cost,
        routes=None if routes is None else tuple(routes),
        per_route=per_route,
        shadow=shadow,
    )


def per_second(
    name: str,
    n: float,
    *,
    key: KeyFunc | Key | None = None,
    cost: float | CostFunc = 1,
    routes: Iterable[str] | None = None,
    per_route: bool = False,
    shadow: bool = False,
) -> Policy:
    """``n`` per second: capacity ``n``, rate ``n``/s."""
    return _per(1, name, n, key, cost, routes, per_route, shadow)


def per_minute(
    name: str,
    n: float,
    *,
    key: KeyFunc | Key | None = None,
    cost: float | CostFunc = 1,
    routes: Iterable[str] | None = None,
    per_route: bool = False,
    shadow: bool = False,
) -> Policy:
    """``n`` per minute: capacity ``n``, rate ``n``/60 per second."""
    return _per(60, name, n, key, cost, routes, per_route, shadow)


def per_hour(
    name: str,
    n: float,
    *,
    key: KeyFunc | Key | None = None,
    cost: float | CostFunc = 1,
    routes: Iterable[str] | None = None,
    per_route: bool = False,
    shadow: bool = False,
) -> Policy:
    """``n`` per hour: capacity ``n``, rate ``n``/3600 per second."""
    return _per(3600, name, n, key, cost, routes, per_route, shadow)


def per_day(
    name: str,
    n: float,
    *,
    key: KeyFunc | Key | None = None,
    cost: float | CostFunc = 1,
    routes: Iterable[str] | None = None,
    per_route: bool = False,
    shadow: bool = False,
) -> Policy:
    """``n`` per day: capacity ``n``, rate ``n``/86400 per second."""
    return _per(86400, name, n, key, cost, routes, per_route, shadow)


def tiered(
    name: str,
    tiers: Mapping[str, AnyLimit | None],
    tier: TierFunc,
    *,
    default: str | None = None,
    key: KeyFunc | Key | None = None,
    cost: float | CostFunc = 1,
    routes: Iterable[str] | None = None,
    per_route: bool = False,
    shadow: bool = False,
) -> Policy:
    """A policy whose limit depends on the caller's plan.

    ``tier(request)`` names the plan (e.g. from ``request.state`` set by auth, or a
    header your gateway sets); unknown or missing plans use ``default``. A plan
    mapped to None is not limited by this policy. The bucket key does not include
    the plan, so a client that changes plan keeps its bucket (the module clamps
    tokens above a lowered capacity).
    """
    table = dict(tiers)
    for plan_name, lim in table.items():
        if isinstance(lim, Limit):
            try:
                lim.checked()  # SPEC C2, at configuration
            except ValueError as exc:
                raise ValueError(f"policy {name!r}, tier {plan_name!r}: {exc}") from None
    kinds = {limit_kind(lim) for lim in table.values() if lim is not None}
    if len(kinds) > 1:  # SPEC C10
        raise ValueError(f"policy {name!r}: the tiers are of one kind of limit, got {sorted(kinds)}")
    if default is not None and default not in table:
        raise ValueError(f"default tier {default!r} is not in the tiers")

    def pick(plan: object) -> AnyLimit | None:
        if plan is None or plan not in table:
            plan = default
        return None if plan is None else table[plan]

    async def wait_pick(pending: Awaitable[str | None]) -> AnyLimit | None:
        return pick(await pending)

    def limit(request: Any) -> Awaitable[AnyLimit | None] | AnyLimit | None:
        # Synchronous when the tier function is (usable on the sync path too).
        plan = tier(request)
        if inspect.isawaitable(plan):
            return wait_pick(plan)
        return pick(plan)

    limit._redis_tb_kind = kinds.pop() if kinds else "bucket"  # type: ignore[attr-defined]
    return Policy(
        name,
        limit,
        key=key,
        cost=cost,
        routes=None if routes is None else tuple(routes),
        per_route=per_route,
        shadow=shadow,
    )
