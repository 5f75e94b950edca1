"""``settings.REDIS_TB``: parsed once into a :class:`Config`, checked at startup.

::

    REDIS_TB = {
        "URL": "redis://127.0.0.1:6379/0",
        "TRUSTED_PROXIES": ["10.0.0.0/8"],
        "FAIL_OPEN": True,
        "REFUND_ON": range(500, 600),
        "EXCLUDE": ["metrics", "GET /healthz/"],
        "POLICIES": [
            {"NAME": "ip", "PER_SECOND": 20},
            {"NAME": "user", "PER_HOUR": 1000, "KEY": "myapp.limits.user_id"},
            {"NAME": "search", "PER_MINUTE": 30, "URL_NAMES": ["search"], "COST": 2},
            "myapp.limits.more_policies",
        ],
    }

A window policy (SPEC W) is ``{"NAME": "login", "WINDOW": {"LIMIT": 20, "SECONDS": 3600,
"MODE": "sliding"}}``, an in-flight one (SPEC N) ``{"NAME": "streams", "IN_FLIGHT":
{"LIMIT": 2, "LEASE": 2, "MAX_DURATION": 60}}`` (MAX_DURATION: N7, default 300 s), a held one (SPEC G) has ``"SETTLE_LATER": True``.

Keys are case-insensitive (``"url"`` is ``"URL"``). Functions (``KEY``, ``COST``,
``LIMIT``, ``TIER``, ``HASH_TAG``, ``CLOCK``, ``REFUND_ON``) may be given as
callables or as dotted paths to them; a policy entry may be a dict, a
:class:`~redis_tb.Policy`, or a dotted path to a Policy, to a list of them, or to a
function (no arguments) returning either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, cast

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from ..keys import ClientIP
from ..metrics import Metrics, PrometheusMetrics
from ..backend import BackendSetting, backend_setting
from ..scope import Scope
from ..policy import MAX_POLICIES, InFlightLimit, Limit, Policy, WindowLimit, tiered

__all__ = ["Config", "DjangoPolicy", "normalise_route", "parse_config", "parse_policies"]

_TOP = {
    "URL", "PREFIX", "NAME", "TRUSTED_PROXIES", "FORWARDED_HEADER", "IPV4_PREFIX",
    "IPV6_PREFIX", "FAIL_OPEN", "TIMEOUT", "COOLDOWN", "LEGACY_HEADERS", "LEGACY_RESET",
    "SHADOW", "DENY_CACHE", "METRICS", "REFUND_ON", "EXCLUDE", "LIMIT_UNMATCHED",
    "HASH_TAG", "CLOCK", "CHECK_MODULE", "START_DEGRADED", "BACKEND", "POLICIES",
}
_PERIODS = {"PER_SECOND": 1, "PER_MINUTE": 60, "PER_HOUR": 3600, "PER_DAY": 86400}
_POLICY = {
    "NAME", *_PERIODS, "CAPACITY", "RATE", "LIMIT", "TIERS", "TIER", "DEFAULT_TIER",
    "KEY", "COST", "ROUTES", "URL_NAMES", "PER_ROUTE", "SHADOW", "SETTLE_LATER", "WINDOW", "IN_FLIGHT",
}


def normalise_route(route: str) -> str:
    """``"get items/<int:id>"`` -> ``"GET /items/<int:id>"``: the method upper-cased,
    the Django route given a leading ``/`` (Django routes are written without one)."""
    method, sep, path = route.strip().partition(" ")
    path = path.strip()
    if not sep or not method or not path:
        raise ImproperlyConfigured(
            f"REDIS_TB: a route is 'METHOD route' (e.g. 'GET items/<int:id>'), got {route!r}"
        )
    if not path.startswith("/"):
        path = "/" + path
    return f"{method.upper()} {path}"


def _is_route(entry: str) -> bool:
    """A ``"METHOD route"`` entry rather than a URL name (names have no spaces)."""
    return " " in entry.strip()


@dataclass(frozen=True)
class DjangoPolicy:
    """A core :class:`Policy` plus where it applies in Django terms.

    ``routes``: ``"METHOD /route"`` (the route as ``request.resolver_match.route``
    has it, with a leading ``/``); ``url_names``: URL pattern names, bare
    (``"detail"``) or namespaced (``"shop:detail"``). The policy applies when either
    matches; when both are None it applies to every resolved request.
    """

    policy: Policy
    routes: frozenset[str] | None = None
    url_names: frozenset[str] | None = None

    @property
    def name(self) -> str:
        return self.policy.name

    def applies(self, route: str | None, url_name: str | None, view_name: str | None) -> bool:
        if self.routes is None and self.url_names is None:
            return True
        if self.routes is not None and route is not None and route in self.routes:
            return True
        if self.url_names is not None:
            return (url_name is not None and url_name in self.url_names) or (
                view_name is not None and view_name in self.url_names
            )
        return False


@dataclass(frozen=True)
class Config:
    """What ``settings.REDIS_TB`` says, checked."""

    url: str
    policies: tuple[DjangoPolicy, ...]
    prefix: str = "rl"
    name: str = "default"
    client_ip: ClientIP = field(default_factory=ClientIP)
    fail_open: bool = True
    timeout: float = 0.05
    cooldown: float = 1.0
    legacy_headers: bool = False
    legacy_reset: str = "unix"
    shadow: bool = False
    deny_cache: int | None = None
    metrics: Any = None
    #: SPEC L1, F2 (EXCLUDE's routes, LIMIT_UNMATCHED, REFUND_ON): the core's rules
    scope: Scope = field(default_factory=Scope)
    #: EXCLUDE's URL names (bare, namespaced, or a view's dotted path): the one scope
    #: input the core has no word for (:meth:`names_excluded`)
    exclude_names: frozenset[str] = frozenset()
    hash_tag: Callable[[Any], Any] | None = None
    clock: Callable[[], float] | None = None
    check_module: bool = True
    #: SPEC U2: an unreachable Redis at startup logs one line instead of failing
    start_degraded: bool = False
    #: SPEC E1: the store's backend, ``auto``, ``module`` or ``scripts``
    backend: BackendSetting = "auto"

    def names_excluded(self, url_name: str | None, view_name: str | None) -> bool:
        """SPEC L1 in Django's words: EXCLUDE names this request's URL pattern (its
        bare or namespaced name, or its view's dotted path), which excludes the
        pattern for every method, as ``"* <route>"`` would in the core's
        :class:`~redis_tb.Scope`."""
        names = self.exclude_names
        return bool(names) and (url_name in names or view_name in names)


def _upper(mapping: Mapping[str, Any], what: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        raise ImproperlyConfigured(f"REDIS_TB: {what} must be a dict, got {type(mapping).__name__}")
    out = {str(k).upper(): v for k, v in mapping.items()}
    unknown = sorted(set(out) - allowed)
    if unknown:
        raise ImproperlyConfigured(
            f"REDIS_TB: unknown key(s) {', '.join(unknown)} in {what}; known: {', '.join(sorted(allowed))}"
        )
    return out


def _func(value: Any, what: str) -> Callable[..., Any]:
    """A callable, or the callable a dotted path names."""
    if isinstance(value, str):
        try:
            value = import_string(value)
        except ImportError as exc:
            raise ImproperlyConfigured(f"REDIS_TB: {what}: cannot import {value!r}: {exc}") from exc
    if not callable(value):
        raise ImproperlyConfigured(f"REDIS_TB: {what} must be a callable or a dotted path to one, got {value!r}")
    return cast(Callable[..., Any], value)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ImproperlyConfigured(f"REDIS_TB: {what} must be a number, got {value!r}")
    return value


def _strings(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, Iterable) or not all(isinstance(v, str) for v in value):
        raise ImproperlyConfigured(f"REDIS_TB: {what} must be a list of strings, got {value!r}")
    return list(value)


def _limit(spec: Any, what: str) -> Limit | None:
    """A fixed limit: a Limit, None (not limited), or a dict with one PER_* or CAPACITY+RATE."""
    if spec is None or isinstance(spec, Limit):
        return spec
    d = _upper(spec, what, {*_PERIODS, "CAPACITY", "RATE"})
    return _limit_of(d, what)


def _limit_of(d: Mapping[str, Any], what: str) -> Limit:
    periods = [k for k in _PERIODS if k in d]
    shaped = "CAPACITY" in d or "RATE" in d
    if len(periods) + shaped != 1:
        raise ImproperlyConfigured(
            f"REDIS_TB: {what} needs exactly one of PER_SECOND, PER_MINUTE, PER_HOUR, "
            "PER_DAY or CAPACITY+RATE"
        )
    try:
        if periods:
            return Limit.per_period(_number(d[periods[0]], f"{what} {periods[0]}"), _PERIODS[periods[0]])
        if "CAPACITY" not in d or "RATE" not in d:
            raise ImproperlyConfigured(f"REDIS_TB: {what} needs both CAPACITY and RATE")
        return Limit(_number(d["CAPACITY"], f"{what} CAPACITY"), _number(d["RATE"], f"{what} RATE"))
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_TB: {what}: {exc}") from exc


def _policy_from_dict(spec: Mapping[str, Any], index: int) -> DjangoPolicy:
    d = _upper(spec, f"POLICIES[{index}]", _POLICY)
    name = d.get("NAME")
    if not isinstance(name, str):
        raise ImproperlyConfigured(f"REDIS_TB: POLICIES[{index}] needs a NAME (a string)")
    what = f"policy {name!r}"
    key = None if d.get("KEY") is None else _func(d["KEY"], f"{what} KEY")
    cost_spec = d.get("COST", 1)
    cost: float | Callable[..., Any] = (
        _func(cost_spec, f"{what} COST")
        if isinstance(cost_spec, str) or callable(cost_spec)
        else _number(cost_spec, f"{what} COST")
    )
    limit: Any
    if "WINDOW" in d or "IN_FLIGHT" in d:
        # SPEC W1 {"LIMIT": n, "SECONDS": s, "MODE": "sliding"}, N1 {"LIMIT": n, "LEASE": s,
        # "MAX_DURATION": s} (N7, default 300)
        kind = "WINDOW" if "WINDOW" in d else "IN_FLIGHT"
        others = [k for k in (*_PERIODS, "CAPACITY", "RATE", "LIMIT", "TIERS", "WINDOW", "IN_FLIGHT") if k in d and k != kind]
        spec = d[kind]
        if others or not isinstance(spec, Mapping):
            raise ImproperlyConfigured(f"REDIS_TB: {what}: {kind} is a dict (LIMIT, ...) and the policy's only limit")
        sd = _upper(
            spec, f"{what} {kind}", {"LIMIT", "SECONDS", "MODE"} if kind == "WINDOW" else {"LIMIT", "LEASE", "MAX_DURATION"}
        )
        try:
            if kind == "WINDOW":
                mode = sd.get("MODE", "sliding")
                limit = Limit.window(sd.get("LIMIT", 0), sd.get("SECONDS", 0), mode.lower() if isinstance(mode, str) else mode)
            else:
                limit = Limit.in_flight(sd.get("LIMIT", 0), sd.get("LEASE", 30), sd.get("MAX_DURATION", 300))
        except (ValueError, TypeError) as exc:
            raise ImproperlyConfigured(f"REDIS_TB: {what}: {exc}") from exc
    elif "TIERS" in d:
        if "TIER" not in d or any(k in d for k in (*_PERIODS, "CAPACITY", "RATE", "LIMIT")):
            raise ImproperlyConfigured(f"REDIS_TB: {what}: TIERS needs TIER (and no other limit)")
        tiers = d["TIERS"]
        if not isinstance(tiers, Mapping):
            raise ImproperlyConfigured(f"REDIS_TB: {what} TIERS must be a dict of plan -> limit")
        table = {str(plan): _limit(lim, f"{what} tier {plan!r}") for plan, lim in tiers.items()}
        default = d.get("DEFAULT_TIER")
        try:
            built = tiered(name, table, _func(d["TIER"], f"{what} TIER"), default=default)
        except ValueError as exc:
            raise ImproperlyConfigured(f"REDIS_TB: {what}: {exc}") from exc
        limit = built.limit
    elif "LIMIT" in d:
        spec_limit = d["LIMIT"]
        if isinstance(spec_limit, (Limit, WindowLimit, InFlightLimit)):  # SPEC W1, N1
            limit = spec_limit
        elif isinstance(spec_limit, Mapping):
            fixed = _limit(spec_limit, f"{what} LIMIT")
            if fixed is None:  # pragma: no cover - a Mapping is never None
                raise ImproperlyConfigured(f"REDIS_TB: {what} LIMIT is empty")
            limit = fixed
        else:
            limit = _func(spec_limit, f"{what} LIMIT")
    else:
        limit = _limit_of(d, what)
    routes = url_names = None
    if "ROUTES" in d:
        routes = frozenset(normalise_route(r) for r in _strings(d["ROUTES"], f"{what} ROUTES"))
    if "URL_NAMES" in d:
        url_names = frozenset(_strings(d["URL_NAMES"], f"{what} URL_NAMES"))
    try:
        policy = Policy(
            name,
            limit,
            key=key,
            cost=cost,
            per_route=bool(d.get("PER_ROUTE", False)),
            shadow=bool(d.get("SHADOW", False)),
            settle_later=bool(d.get("SETTLE_LATER", False)),
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_TB: {what}: {exc}") from exc
    return DjangoPolicy(policy, routes, url_names)


def _policy_objects(value: Any, what: str) -> list[DjangoPolicy]:
    if isinstance(value, str):
        return _policy_objects(_import(value, what), what)
    if isinstance(value, Policy):
        return [DjangoPolicy(value)]
    if isinstance(value, DjangoPolicy):
        return [value]
    if isinstance(value, Mapping):
        raise ImproperlyConfigured(f"REDIS_TB: {what}: a dict policy cannot come from a dotted path")
    if callable(value):
        return _policy_objects(value(), what)
    if isinstance(value, Iterable):
        out: list[DjangoPolicy] = []
        for v in value:
            if isinstance(v, Policy):
                out.append(DjangoPolicy(v))
            elif isinstance(v, DjangoPolicy):
                out.append(v)
            else:
                raise ImproperlyConfigured(f"REDIS_TB: {what} gave {v!r}, not a Policy")
        return out
    raise ImproperlyConfigured(f"REDIS_TB: {what} gave {value!r}, not a Policy")


def _import(path: str, what: str) -> Any:
    try:
        return import_string(path)
    except ImportError as exc:
        raise ImproperlyConfigured(f"REDIS_TB: {what}: cannot import {path!r}: {exc}") from exc


def parse_policies(entries: Any) -> tuple[DjangoPolicy, ...]:
    """``POLICIES``: dicts, Policy objects, or dotted paths to them (or to functions
    returning them). Names must be distinct."""
    if isinstance(entries, (str, Mapping)) or not isinstance(entries, Iterable):
        raise ImproperlyConfigured("REDIS_TB: POLICIES must be a list")
    out: list[DjangoPolicy] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, Mapping):
            out.append(_policy_from_dict(entry, i))
        else:
            out.extend(_policy_objects(entry, f"POLICIES[{i}]"))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ImproperlyConfigured(f"REDIS_TB: policy names must be distinct: {names}")
    return tuple(out)


def _refund_on(value: Any) -> Callable[[int], bool]:
    if isinstance(value, str):
        value = _func(value, "REFUND_ON")
    if callable(value):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, Collection) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ImproperlyConfigured(
            f"REDIS_TB: REFUND_ON must be status codes (e.g. range(500, 600)) or a predicate, got {value!r}"
        )
    return frozenset(value).__contains__


def parse_config(raw: Any) -> Config:
    """Check ``settings.REDIS_TB`` and build the :class:`Config`."""
    d = _upper(raw if raw is not None else {}, "REDIS_TB", _TOP)
    url = d.get("URL")
    if not isinstance(url, str) or not url:
        raise ImproperlyConfigured('REDIS_TB needs "URL" (e.g. "redis://127.0.0.1:6379/0")')
    try:
        client_ip = ClientIP(
            _strings(d.get("TRUSTED_PROXIES", []), "TRUSTED_PROXIES"),
            header=str(d.get("FORWARDED_HEADER", "x-forwarded-for")).lower(),  # type: ignore[arg-type]
            ipv4_prefix=int(d.get("IPV4_PREFIX", 32)),
            ipv6_prefix=int(d.get("IPV6_PREFIX", 64)),
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_TB: {exc}") from exc
    legacy_reset = str(d.get("LEGACY_RESET", "unix")).lower()
    if legacy_reset not in ("unix", "delta"):
        raise ImproperlyConfigured(f"REDIS_TB: LEGACY_RESET is 'unix' or 'delta', got {legacy_reset!r}")
    deny_cache = d.get("DENY_CACHE")
    if deny_cache is not None and (isinstance(deny_cache, bool) or not isinstance(deny_cache, int) or deny_cache < 1):
        raise ImproperlyConfigured(f"REDIS_TB: DENY_CACHE is a max number of entries (>= 1) or None, got {deny_cache!r}")
    metrics = d.get("METRICS")
    if isinstance(metrics, str):
        metrics = _import(metrics, "METRICS")
    exclude = _strings(d.get("EXCLUDE", []), "EXCLUDE")
    name = d.get("NAME", "default")
    if not isinstance(name, str) or not name:
        raise ImproperlyConfigured(f"REDIS_TB: NAME must be a non-empty string, got {name!r}")
    prefix = d.get("PREFIX", "rl")
    if not isinstance(prefix, str) or not prefix:
        raise ImproperlyConfigured(f"REDIS_TB: PREFIX must be a non-empty string, got {prefix!r}")
    policies = parse_policies(d.get("POLICIES", []))
    if len(policies) > MAX_POLICIES:  # SPEC C11: the configured policies are one limiter's
        raise ImproperlyConfigured(
            f"REDIS_TB: a limiter holds at most {MAX_POLICIES} policies (the module takes at most "
            f"{MAX_POLICIES} buckets in one call), POLICIES has {len(policies)}"
        )
    return Config(
        url=url,
        policies=policies,
        prefix=prefix,
        name=name,
        client_ip=client_ip,
        fail_open=bool(d.get("FAIL_OPEN", True)),
        timeout=_number(d.get("TIMEOUT", 0.05), "TIMEOUT"),
        cooldown=_number(d.get("COOLDOWN", 1.0), "COOLDOWN"),
        legacy_headers=bool(d.get("LEGACY_HEADERS", False)),
        legacy_reset=legacy_reset,
        shadow=bool(d.get("SHADOW", False)),
        deny_cache=deny_cache,
        metrics=metrics,
        scope=Scope(
            exclude=[normalise_route(e) for e in exclude if _is_route(e)],
            limit_unmatched=bool(d.get("LIMIT_UNMATCHED", False)),
            refund_on=_refund_on(d.get("REFUND_ON", ())),
        ),
        exclude_names=frozenset(e.strip() for e in exclude if not _is_route(e)),
        hash_tag=None if d.get("HASH_TAG") is None else _func(d["HASH_TAG"], "HASH_TAG"),
        clock=None if d.get("CLOCK") is None else _func(d["CLOCK"], "CLOCK"),
        check_module=bool(d.get("CHECK_MODULE", True)),
        start_degraded=bool(d.get("START_DEGRADED", False)),
        backend=_backend(d.get("BACKEND", "auto")),
    )


def _backend(value: object) -> BackendSetting:
    try:
        return backend_setting(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDIS_TB['BACKEND']: {exc}") from None


def metrics_of(value: Any, name: str) -> Metrics | None:
    """METRICS: None/False (none), True (prometheus_client's default registry), a
    CollectorRegistry, or a Metrics object (e.g. ``PrometheusMetrics(...)``)."""
    if value is None or value is False:
        return None
    if value is True:
        return PrometheusMetrics(limiter=name)
    if all(hasattr(value, m) for m in ("allowed", "limited", "store_error", "redis_call")):
        return cast(Metrics, value)
    if hasattr(value, "register") and hasattr(value, "collect"):  # a CollectorRegistry
        return PrometheusMetrics(value, limiter=name)
    raise ImproperlyConfigured(
        f"REDIS_TB: METRICS is True, a prometheus_client CollectorRegistry or a Metrics object, got {value!r}"
    )
