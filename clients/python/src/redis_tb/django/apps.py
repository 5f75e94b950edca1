"""``INSTALLED_APPS += ["redis_tb.django"]``: the module check at startup."""

from __future__ import annotations

from django.apps import AppConfig

from .runtime import get_rate_limit


class RedisTbConfig(AppConfig):
    name = "redis_tb.django"
    label = "redis_tb"
    verbose_name = "redis-tb rate limiting"

    def ready(self) -> None:
        """SPEC U1, U2: fail at startup, in one line (:class:`StartupError`), when Redis
        answers without the module ("redis-tb module not loaded on <host:port>: load
        libredis_tb.so with loadmodule"), refuses COMMAND INFO (NOPERM), or is
        unreachable; with ``"START_DEGRADED": True`` an unreachable Redis is only
        logged. ``"CHECK_MODULE": False`` skips the check."""
        rl = get_rate_limit()
        if rl.config.check_module:
            rl.startup()
