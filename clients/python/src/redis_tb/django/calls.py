"""SPEC U3 for Django: the policies the project's limiter sends in its calls. The
configured policies (``REDIS_TB["POLICIES"]``) and, from the URLconf, those of every
``@rate_limit`` view that joins the middleware's call; each view's own come right
after the configured policies its calls start with (a view's call is the configured
policies that apply to it, then its own), so the startup's cluster check names them
in the order the calls send them."""

from __future__ import annotations

from typing import Any, Iterator

from django.urls import URLPattern, URLResolver, get_resolver

from ..policy import Policy
from .conf import Config, DjangoPolicy
from .runtime import VIEW_ATTR, ViewLimit

__all__ = ["call_policies"]


def _views(
    patterns: Any, prefix: str = "", namespace: str | None = None,
) -> Iterator[tuple[str, str | None, str | None, ViewLimit, bool]]:
    """(route, url name, namespaced name, ViewLimit, exempt) of each decorated view."""
    for p in patterns:
        if isinstance(p, URLResolver):
            ns = p.namespace if p.namespace is None or namespace is None else f"{namespace}:{p.namespace}"
            yield from _views(p.url_patterns, prefix + str(p.pattern), ns or namespace)
        elif isinstance(p, URLPattern):
            own = getattr(p.callback, VIEW_ATTR, None)
            if isinstance(own, ViewLimit):
                view_name = p.name if namespace is None or p.name is None else f"{namespace}:{p.name}"
                yield prefix + str(p.pattern), p.name, view_name, own, bool(getattr(p.callback, "rate_limit_exempt", False))


def _applies(dp: DjangoPolicy, route: str, url_name: str | None, view_name: str | None) -> bool:
    """Whether a configured policy applies to a view, by any method."""
    if dp.routes is None and dp.url_names is None:
        return True
    if dp.routes is not None and any(r.partition(" ")[2] == "/" + route for r in dp.routes):
        return True
    return dp.url_names is not None and (url_name in dp.url_names or view_name in dp.url_names)


def call_policies(config: Config) -> tuple[Policy, ...]:
    """The configured policies, with each joining ``@rate_limit`` view's own inserted
    after the last configured policy of that view's call."""
    out = [dp.policy for dp in config.policies]
    try:
        views = list(_views(get_resolver().url_patterns))
    except Exception:  # noqa: BLE001 - a URLconf that cannot load yet: Django reports it when serving
        return tuple(out)
    inserted: set[str] = set()
    for route, url_name, view_name, own, exempt in views:
        if exempt or own.limiter is not None or any(p.kind == "window" for p in own.policies):
            continue  # checked in a call of its own (SPEC C10), made at its first request
        applying = [dp.policy for dp in config.policies if _applies(dp, route, url_name, view_name)]
        at = out.index(applying[-1]) + 1 if applying else len(out)
        while at < len(out) and out[at].name in inserted:
            at += 1  # after other views' own policies inserted there (URLconf order)
        for p in own.policies:
            if all(q.name != p.name for q in out):
                out.insert(at, p)
                inserted.add(p.name)
                at += 1
    return tuple(out)
