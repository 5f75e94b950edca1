"""``INSTALLED_APPS += ["redis_tb.django"]``: the module check at startup."""

from __future__ import annotations

import sys

from django.apps import AppConfig

from ..client import StartupError
from .calls import call_policies
from .runtime import get_rate_limit

#: The exit status of a failed start: gunicorn's "worker failed to boot" (its master then
#: stops instead of starting the worker again and again); any other runner just exits.
STARTUP_EXIT_STATUS = 3


class RedisTbConfig(AppConfig):
    name = "redis_tb.django"
    label = "redis_tb"
    verbose_name = "redis-tb rate limiting"

    def ready(self) -> None:
        """SPEC U1-U3: fail at startup, in one line (:class:`StartupError`), when Redis
        answers without the module ("redis-tb module not loaded on <host:port>: load
        libredis_tb.so with loadmodule"), refuses COMMAND INFO (NOPERM), or is
        unreachable; with ``"START_DEGRADED": True`` an unreachable Redis is only
        logged. On a Redis Cluster, a project whose calls send several keys (the
        configured policies, and the ``@rate_limit`` views' that join them) and that has
        no ``HASH_TAG`` fails too. ``"CHECK_MODULE": False`` skips the checks.

        The failure is that one line on stderr and ``SystemExit(3)``: Django calls
        ``ready()`` while the server imports the application, and gunicorn, uvicorn and
        ``manage.py`` print the full traceback of any other exception raised there."""
        rl = get_rate_limit()
        if rl.config.check_module:
            try:
                rl.startup(call_policies(rl.config))  # U3: what each call sends, in order
            except StartupError as exc:
                print(str(exc), file=sys.stderr, flush=True)
                raise SystemExit(STARTUP_EXIT_STATUS) from None
