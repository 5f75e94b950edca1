"""``@rate_limit`` for single views, and ``@rate_limit_exempt``.

::

    @rate_limit("orders", per_minute=5, key=user_id)
    def create_order(request): ...

    @rate_limit(per_minute("login", 5), per_hour("login-h", 20), fail_open=False)
    async def login(request): ...

With the middleware installed, a decorated view's policies are checked in the
middleware's own TB.MTAKE together with the configured ones (one round trip, all
or nothing). Without it (or when the view is excluded, exempt, or wrapped by
something the middleware cannot see through, such as ``method_decorator``), the
decorator checks them itself before calling the view.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar, cast

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase

from ..limiter import BaseLimiter
from ..policy import CostFunc, KeyFunc, Limit, Policy
from .conf import _func
from .ending import end_with_response
from .runtime import ATTR, CHECKED, SEEN, VIEW_ATTR, RequestDecision, ViewLimit, get_rate_limit, route_of

__all__ = ["rate_limit", "rate_limit_exempt"]

V = TypeVar("V", bound=Callable[..., Any])

_PERIODS = {"per_second": 1.0, "per_minute": 60.0, "per_hour": 3600.0, "per_day": 86400.0}


def _build(
    policies: tuple[str | Policy, ...],
    shape: dict[str, float | None],
    capacity: float | None,
    rate: float | None,
    key: KeyFunc | str | None,
    cost: float | CostFunc | str,
    per_route: bool,
    shadow: bool,
) -> tuple[Policy, ...]:
    given = {k: v for k, v in shape.items() if v is not None}
    if not policies:
        raise TypeError("@rate_limit needs a policy name (with a limit) or Policy objects")
    if isinstance(policies[0], str):
        if len(policies) != 1:
            raise TypeError("@rate_limit takes one policy name, or Policy objects")
        if len(given) + (capacity is not None or rate is not None) != 1:
            raise TypeError(
                "@rate_limit(name, ...) needs exactly one of per_second, per_minute, "
                "per_hour, per_day or capacity+rate"
            )
        if given:
            ((period, n),) = given.items()
            limit = Limit.per_period(n, _PERIODS[period])
        else:
            if capacity is None or rate is None:
                raise TypeError("@rate_limit(name, capacity=..., rate=...) needs both")
            limit = Limit(capacity, rate)
        keyfunc = _func(key, "@rate_limit key") if isinstance(key, str) else key
        costval: float | CostFunc = _func(cost, "@rate_limit cost") if isinstance(cost, str) else cost
        return (Policy(policies[0], limit, key=keyfunc, cost=costval, per_route=per_route, shadow=shadow),)
    if given or capacity is not None or rate is not None or key is not None or cost != 1 or per_route or shadow:
        raise TypeError("@rate_limit(Policy, ...): put limits, keys and costs in the Policy objects")
    if not all(isinstance(p, Policy) for p in policies):
        raise TypeError("@rate_limit takes one policy name, or Policy objects")
    out = cast(tuple[Policy, ...], policies)
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be distinct: {names}")
    return out


def rate_limit(
    *policies: str | Policy,
    per_second: float | None = None,
    per_minute: float | None = None,
    per_hour: float | None = None,
    per_day: float | None = None,
    capacity: float | None = None,
    rate: float | None = None,
    key: KeyFunc | str | None = None,
    cost: float | CostFunc | str = 1,
    per_route: bool = False,
    shadow: bool = False,
    fail_open: bool | None = None,
    limiter: str | None = None,
) -> Callable[[V], V]:
    """Limit one view (sync or async).

    ``rate_limit("name", per_minute=5, key=..., cost=...)`` builds one policy
    (``key``/``cost`` may be dotted paths); ``rate_limit(policy, policy2, ...)``
    takes :class:`~redis_tb.Policy` objects (``per_minute("name", 5, ...)``,
    ``tiered(...)``). ``fail_open`` overrides ``REDIS_TB["FAIL_OPEN"]`` for this
    view's requests (``False`` for logins: 503 when Redis is down). ``limiter``
    makes the view's policies a limiter of their own: checked in a call of their own
    after the middleware's, labelled so in the metrics (a window policy is always
    checked on its own, SPEC C10).
    """
    view_limit = ViewLimit(
        _build(
            policies,
            {"per_second": per_second, "per_minute": per_minute, "per_hour": per_hour, "per_day": per_day},
            capacity, rate, key, cost, per_route, shadow,
        ),
        fail_open,
        limiter,
    )

    def decorate(view: V) -> V:
        if iscoroutinefunction(view):

            @functools.wraps(view)
            async def async_wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                if getattr(request, CHECKED, None) is view_limit:
                    return await view(request, *args, **kwargs)
                rl = get_rate_limit()
                earlier = getattr(request, ATTR, None)
                checker: BaseLimiter
                if "wsgi.input" in request.META:
                    # An async view under WSGI runs in a short-lived event loop of its
                    # own (async_to_sync): redis.asyncio connections would not outlive
                    # it, so the check takes the sync path, in the request's thread.
                    checker, decision = await sync_to_async(rl.check_sync)(
                        request, view_limit.policies, route_of(request), fail_open, view_limit.limiter
                    )
                    on_loop = False
                else:
                    checker, decision = await rl.check_async(
                        request, view_limit.policies, route_of(request), fail_open, view_limit.limiter
                    )
                    on_loop = True
                refused = rl.record(request, checker, decision, is_async=on_loop)
                if refused is not None:
                    if isinstance(earlier, RequestDecision):
                        await earlier.arefund()  # a refusal burns nothing
                    return refused
                alone = not getattr(request, SEEN, False)
                current: RequestDecision = getattr(request, ATTR)
                try:
                    response: HttpResponseBase = await view(request, *args, **kwargs)
                except BaseException:
                    if alone and rl.config.scope.refunds(500):
                        await current.arefund()
                    if alone:
                        await current.afinish()  # SPEC N4: the view raised
                    raise
                rl.add_headers(response, current, checker)
                if alone and rl.config.scope.refunds(response.status_code):
                    await current.arefund()
                if alone and end_with_response(response, current):  # SPEC N4
                    await current.afinish()
                return response

            setattr(async_wrapper, VIEW_ATTR, view_limit)
            return cast(V, async_wrapper)

        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            if getattr(request, CHECKED, None) is view_limit:
                return view(request, *args, **kwargs)
            rl = get_rate_limit()
            earlier = getattr(request, ATTR, None)
            checker, decision = rl.check_sync(
                request, view_limit.policies, route_of(request), fail_open, view_limit.limiter
            )
            refused = rl.record(request, checker, decision, is_async=False)
            if refused is not None:
                if isinstance(earlier, RequestDecision):
                    earlier.refund()  # a refusal burns nothing
                return refused
            alone = not getattr(request, SEEN, False)
            current: RequestDecision = getattr(request, ATTR)
            try:
                response: HttpResponseBase = view(request, *args, **kwargs)
            except BaseException:
                if alone and rl.config.scope.refunds(500):
                    current.refund()
                if alone:
                    current.finish()  # SPEC N4: the view raised
                raise
            rl.add_headers(response, current, checker)
            if alone and rl.config.scope.refunds(response.status_code):
                current.refund()
            if alone and end_with_response(response, current):  # SPEC N4
                current.finish()
            return response

        setattr(wrapper, VIEW_ATTR, view_limit)
        return cast(V, wrapper)

    return decorate


def rate_limit_exempt(view: V) -> V:
    """Leave a view out of the middleware's configured policies (a ``@rate_limit``
    on it still applies, checked by the decorator). Put it outside ``@rate_limit``."""

    setattr(view, "rate_limit_exempt", True)
    return view
