"""The values of a decision that every layer reads (SPEC D): its :class:`Outcome`, one
:class:`PolicyResult` per policy, the :class:`Lease` of an in-flight policy (N6), and
the two errors of holds (G1, G3). No imports from the package: the store, the plan,
the headers and the decision all read these, and this module reads none of them."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["HoldError", "Lease", "Outcome", "PolicyResult", "StoreError"]


class Outcome(str, enum.Enum):
    """Being limited is a normal outcome; a store error is a different one."""

    #: Every applicable policy had the tokens; they were taken.
    ALLOWED = "allowed"
    #: At least one policy refused; nothing was taken from any bucket.
    LIMITED = "limited"
    #: Redis failed or timed out (or is in its cool-down): decided by the failure mode.
    STORE_ERROR = "store_error"
    #: No policy applied to this request (no route match, key functions gave None).
    NOT_LIMITED = "not_limited"
    #: A cost or limit function gave a value out of range (SPEC L3): a 500, never an
    #: admission, nothing sent to Redis.
    INVALID_INPUT = "invalid_input"
    #: A header identity held a control byte (SPEC I2): a 400, nothing sent to Redis.
    BAD_REQUEST = "bad_request"


class PolicyResult(NamedTuple):
    """One policy's bucket after this request (allowed), or as it stands (refused).
    Immutable (a named tuple: cheap to build on every request)."""

    name: str
    key: str
    capacity: float
    #: tokens per second; a window's ``limit / seconds`` (SPEC W2); None for an
    #: in-flight policy (N3)
    rate: float | None
    cost: float
    #: this bucket alone had ``cost`` tokens
    allowed: bool
    remaining: float
    #: 0 when this bucket had enough, -1 when it never will (cost > capacity)
    retry_after: float
    reset_after: float
    #: an observed (shadow) policy: never refuses by itself, left out of the headers
    shadow: bool = False
    #: ``"bucket"``, ``"window"`` (SPEC W2) or ``"in_flight"`` (N3)
    kind: str = "bucket"
    #: a window policy's window in seconds (its header's ``w``, W2)
    window: float | None = None

    @property
    def never(self) -> bool:
        return self.retry_after < 0


@dataclass(frozen=True, slots=True)
class Lease:
    """SPEC N6: one request's lease on an in-flight policy's key."""

    key: str
    id: str
    policy: str


class StoreError(Exception):
    """A call to the store failed (SPEC G3: a hold or a settlement that did not reach
    Redis, or that the open breaker kept from it, B2). ``__cause__`` is the error."""


class HoldError(ValueError):
    """The application asked for a hold the check cannot take (SPEC G1): an estimate
    or actual out of range, a ttl out of range, or a policy that is not a
    ``settle_later`` policy of this check. Nothing was sent."""
