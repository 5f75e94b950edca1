"""The errors a start fails with (SPEC U1-U4, E1, E2), each one line, and the store error
of a backend that cannot be chosen on a request's call (E1: a degraded start). Imported
by :mod:`redis_tb.client` (which re-exports the first two), :mod:`redis_tb.backend` and
:mod:`redis_tb.startup`; imports nothing of the package."""

from __future__ import annotations

import redis.exceptions

__all__ = ["BackendUnavailable", "ModuleNotLoadedError", "ScriptLoadError", "StartupError"]


class StartupError(RuntimeError):
    """The limiter cannot start (SPEC U1-U3); the message is one line naming the
    address (or the limiter) and what to do."""


class ModuleNotLoadedError(StartupError):
    """The server answers, but the redis-tb module is not loaded there."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"redis-tb module not loaded on {where}: load libredis_tb.so with loadmodule"
        )
        self.where = where


class ScriptLoadError(StartupError):
    """SPEC E2: neither ``FUNCTION LOAD REPLACE`` nor ``SCRIPT LOAD`` took the script
    library; ``reason`` is the last load's error reply."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(
            f"redis-tb: cannot load the script backend on {where} ({reason}): "
            "allow FUNCTION LOAD or SCRIPT LOAD, or load the module"
        )
        self.where = where


class BackendUnavailable(redis.exceptions.RedisError):
    """SPEC E1: a degraded start's first call could not choose the backend (the module
    forced and missing, or the library refused): a store error that opens the breaker
    (B1), its message the start's line."""
