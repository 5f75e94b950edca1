"""Django integration: ``RateLimitMiddleware`` (WSGI and ASGI), ``@rate_limit`` for
single views, settings in ``settings.REDIS_TB`` (see :mod:`redis_tb.django.conf`).

::

    INSTALLED_APPS = [..., "redis_tb.django"]         # the module check at startup
    MIDDLEWARE = [..., "redis_tb.django.RateLimitMiddleware"]
    REDIS_TB = {"URL": "redis://127.0.0.1:6379/0", "POLICIES": [{"NAME": "ip", "PER_SECOND": 10}]}

Needs Django (the ``django`` extra: ``pip install './clients/python[django]'`` from a
checkout, or the wheel of ``dist/`` with it).
"""

from .conf import Config, DjangoPolicy, normalise_route, parse_config
from .decorators import rate_limit, rate_limit_exempt
from .middleware import RateLimitMiddleware
from .runtime import DjangoRateLimit, RequestDecision, ViewLimit, get_rate_limit, hold_rejection, reset, route_of

__all__ = [
    "Config",
    "DjangoPolicy",
    "DjangoRateLimit",
    "RateLimitMiddleware",
    "RequestDecision",
    "ViewLimit",
    "get_rate_limit",
    "hold_rejection",
    "normalise_route",
    "parse_config",
    "rate_limit",
    "rate_limit_exempt",
    "reset",
    "route_of",
]
