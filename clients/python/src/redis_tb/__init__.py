"""redis-tb for Python: typed clients for the module's TB.* commands, the HTTP
header mapping, and a framework-neutral rate limiter (clients/SPEC.md) with thin
adapters: ASGI (:mod:`redis_tb.asgi`, needs the ``asgi`` extra: starlette), FastAPI
(:mod:`redis_tb.fastapi`), Django (:mod:`redis_tb.django`) and ``limits``
(:mod:`redis_tb.limits`). Importing this package never imports starlette.
"""

from typing import Any

from .address import ClientIP, ClientIp, ClientIpConfig
from .backend import Backend, BackendSetting, Chosen
from .client import DEFAULT_TIMEOUT, AsyncClient, Client, ModuleNotLoadedError, StartupError, SyncTbClient, TbClient
from .cluster import CrossSlot
from .command_replies import Acquired, HoldReply, HoldsPeek, LeaseReply, LeasesPeek, SettleReply, Throttle, WindowMode
from .errors import BackendUnavailable, ScriptLoadError
from .decision import Decision, Hold, HoldError, Lease, Outcome, PolicyResult, Settlement, StoreError
from .deny_cache import DenyCache
from .headers import decision_headers
from .problem import respond
from .keys import Key
from .limiter import BaseLimiter, Clock, LimiterStats, RateLimiter, SyncRateLimiter
from .policy import InFlightLimit, Limit, Policy, WindowLimit, check_policy_kinds, per_day, per_hour, per_minute, per_second, tiered
from .metrics import LimiterMetrics, PrometheusMetrics
from .replies import Bucket, Charge, MultiReply, Reply, Reservation, UnexpectedReplyError
from .scope import Scope

__all__ = [
    "DEFAULT_TIMEOUT",
    "Acquired",
    "AsyncClient",
    "Backend",
    "BackendSetting",
    "BackendUnavailable",
    "Chosen",
    "ScriptLoadError",
    "BaseLimiter",
    "Bucket",
    "Charge",
    "Client",
    "ClientIP",
    "ClientIp",
    "ClientIpConfig",
    "Clock",
    "CrossSlot",
    "Key",
    "StartupError",
    "respond",
    "Decision",
    "DenyCache",
    "Hold",
    "HoldError",
    "HoldReply",
    "HoldsPeek",
    "InFlightLimit",
    "Lease",
    "LeaseReply",
    "LeasesPeek",
    "Settlement",
    "SettleReply",
    "StoreError",
    "WindowLimit",
    "WindowMode",
    "check_policy_kinds",
    "Limit",
    "LimiterMetrics",
    "LimiterStats",
    "ModuleNotLoadedError",
    "MultiReply",
    "Outcome",
    "Policy",
    "PolicyResult",
    "PrometheusMetrics",
    "RateLimitMiddleware",
    "RateLimiter",
    "Reservation",
    "Scope",
    "SyncRateLimiter",
    "SyncTbClient",
    "TbClient",
    "Throttle",
    "Reply",
    "UnexpectedReplyError",
    "decision_headers",
    "per_day",
    "per_hour",
    "per_minute",
    "per_second",
    "route_template",
    "tiered",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # The ASGI middleware needs starlette (the `asgi` extra): imported on first use,
    # so Django and `limits` users install and import redis_tb without it.
    if name in ("RateLimitMiddleware", "route_template"):
        from . import asgi

        return getattr(asgi, name)
    raise AttributeError(f"module 'redis_tb' has no attribute {name!r}")
