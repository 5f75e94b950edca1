"""Which requests a limiter limits (SPEC L1) and after which answers it refunds (F2):
one :class:`Scope`, owned by a limiter with its policies (:class:`PolicyOwner`), so
the rules live in one place and the adapters only ask.

Framework-neutral: a route is ``"METHOD /template"`` (K1), ``None`` when the request
matched no route; a status is the handler's HTTP status.
"""

from __future__ import annotations

import copy
from typing import Callable, Collection, Sequence, TypeVar, final

from .policy import Policy, check_policy_kinds, check_policy_names, route_set

__all__ = ["PolicyOwner", "Scope"]

OwnerT = TypeVar("OwnerT", bound="PolicyOwner")


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


class PolicyOwner:
    """The limiter's part that owns its policies and their scope (SPEC C1, C10, C11,
    L1, F2): the adapters hand a request's route to :meth:`limits` and the check
    applies the rest."""

    policies: tuple[Policy, ...]
    scope: Scope
    #: the sets of policies checked together: its own and those registered (U3)
    policy_sets: list[tuple[Policy, ...]]

    def register_policies(self, policies: Sequence[Policy]) -> None:
        """Tell startup (SPEC U3) of a set of policies this limiter checks in one call:
        the adapters do it for theirs; code that calls :meth:`check` itself may pass
        its policies to ``startup`` instead."""
        found = tuple(policies)
        if not any(s == found for s in self.policy_sets):
            self.policy_sets.append(found)

    def with_policies(
        self: OwnerT,
        policies: Sequence[Policy],
        *,
        exclude: Collection[str] = (),
        limit_unmatched: bool = False,
        refund_on: Collection[int] | Callable[[int], bool] = (),
    ) -> OwnerT:
        """A limiter owning ``policies`` (and this scope) on this one's connection,
        breaker, stats, metrics, deny cache and settings: a second set of policies
        (a route's dependency, a view's decorator) without a second connection.
        Its startup is this one's (the set is registered here, U3); only the gate of
        its failure log lines (one a second, B5) is its own."""
        other = copy.copy(self)
        other.policies = check_policy_kinds(check_policy_names(policies))  # SPEC C1, C10, C11
        other.scope = Scope(exclude=exclude, limit_unmatched=limit_unmatched, refund_on=refund_on)
        self.register_policies(other.policies)
        return other

    def limits(self, route: str | None) -> bool:
        """SPEC L1: whether a request on ``route`` (None: it matched no route) is limited
        at all; an adapter asks before it builds anything for the check."""
        return not self.scope.skips(route)

    def _own_policies(self, policies: Sequence[Policy] | None, scope: Scope | None) -> tuple[Sequence[Policy], Scope | None]:
        """The policies and scope of a check: those given with the call (the scope
        then as given), else the limiter's own with its scope."""
        if policies is not None:
            return policies, scope
        if not self.policies:
            raise TypeError("this limiter owns no policies: RateLimiter(client, policies=[...]), or pass them to check")
        return self.policies, scope or self.scope
