"""SPEC K6, U3, P4: a limiter on Redis Cluster. The keys of one call share a slot only
through the limiter's tag function (K4: a client can never choose a slot, K2), so:

- a call the server answers ``CROSSSLOT`` is a configuration error, never the failure
  mode (an unlimited API by configuration): outcome ``invalid_input``, a 500 naming the
  policies of the call (P4), counted in ``invalid_inputs``, the breaker untouched;
- at startup, a limiter that can send several keys in one call and has no tag function
  asks ``HELLO`` (no argument) and refuses to start on a cluster (U3).

Pure: the limiters call these."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import redis.exceptions

from .policy import Policy

__all__ = [
    "CrossSlot", "cluster_refusal", "crossslot_detail", "is_crossslot", "mode_of", "several_keys",
]


class CrossSlot(Exception):
    """SPEC K6: Redis Cluster refused a call because its keys are in different slots.
    The ``error`` of such a decision (outcome ``invalid_input``); ``policies`` are the
    policies of the call, in policy order; ``__cause__`` is the error reply."""

    def __init__(self, policies: Sequence[str]) -> None:
        self.policies = tuple(policies)
        super().__init__(crossslot_detail(self.policies))


def is_crossslot(exc: BaseException) -> bool:
    """A ``CROSSSLOT`` error reply (SPEC L5: not a store error): redis-py's parser
    makes it a ``ClusterCrossSlotError`` (without the code in its text); a client that
    keeps the code in the message is read too."""
    return isinstance(exc, redis.exceptions.ClusterCrossSlotError) or (
        isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("CROSSSLOT")
    )


def _names(policies: Iterable[str]) -> str:
    return ", ".join(f"'{p}'" for p in policies)


def crossslot_detail(policies: Sequence[str]) -> str:
    """SPEC P4: the detail of a CROSSSLOT call's 500."""
    return f"rate limit policies {_names(policies)} have keys in different cluster slots: give the limiter a hash tag"


def several_keys(policies: Iterable[Policy]) -> tuple[str, ...]:
    """SPEC K6, U3: the policies a limiter sends in one call (those that are not
    ``settle_later``) when they are two or more; else ``()`` (one key a call)."""
    names = tuple(p.name for p in policies if not p.settle_later)
    return names if len(names) >= 2 else ()


def cluster_refusal(limiter: str, policies: Sequence[str]) -> str:
    """SPEC U3: the one line a start on Redis Cluster fails with."""
    return (
        f"redis-tb: limiter '{limiter}' sends several keys in one call (policies {_names(policies)}), "
        "which a Redis Cluster refuses unless they share a hash slot: set a tag function (SPEC K6)"
    )


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def mode_of(hello: Any) -> str | None:
    """The ``mode`` of a HELLO reply, as the client returns it: a map (RESP3) or
    RESP2's flat list of names and values; None when it has none."""
    if isinstance(hello, dict):
        for k, v in hello.items():
            if _text(k) == "mode":
                return str(_text(v))
        return None
    if isinstance(hello, (list, tuple)):
        for i in range(0, len(hello) - 1, 2):
            if _text(hello[i]) == "mode":
                return str(_text(hello[i + 1]))
    return None
