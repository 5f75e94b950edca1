"""Which requests a limiter limits (SPEC L1) and after which answers it refunds (F2):
one :class:`Scope`, given to :meth:`RateLimiter.check` with the policies, and used by
the adapters (the ASGI middleware) so the rules live in one place.

Framework-neutral: a route is ``"METHOD /template"`` (K1), ``None`` when the request
matched no route; a status is the handler's HTTP status.
"""

from __future__ import annotations

from typing import Callable, Collection, final

from .policy import route_set

__all__ = ["Scope"]


@final
class Scope:
    """``exclude``: routes never limited (``"GET /healthz"``, or ``"* /healthz"`` for
    every method); ``limit_unmatched``: limit requests that matched no route (by the
    policies that list no routes), not limited by default (L1); ``refund_on``: the
    statuses (or a predicate of the status) after which a request's tokens are given
    back automatically (F2), none by default."""

    __slots__ = ("exclude", "limit_unmatched", "refunds", "refunding")

    def __init__(
        self,
        *,
        exclude: Collection[str] = (),
        limit_unmatched: bool = False,
        refund_on: Collection[int] | Callable[[int], bool] = (),
    ) -> None:
        self.exclude: frozenset[str] = route_set(exclude) or frozenset()
        self.limit_unmatched = bool(limit_unmatched)
        #: SPEC F2: whether an answer of this status refunds the request
        self.refunds: Callable[[int], bool] = (
            refund_on if callable(refund_on) else frozenset(refund_on).__contains__
        )
        #: False when no status refunds (``refund_on`` left empty): nothing to do after
        #: a response
        self.refunding = callable(refund_on) or bool(refund_on)

    def skips(self, route: str | None) -> bool:
        """SPEC L1: a request on this route is not limited at all: it matched no route
        (unless ``limit_unmatched``) or its route is excluded (``"* <template>"``
        excludes the template for every method, as K5 matches it)."""
        if route is None:
            return not self.limit_unmatched
        exclude = self.exclude
        return bool(exclude) and (route in exclude or "* " + route.partition(" ")[2] in exclude)
