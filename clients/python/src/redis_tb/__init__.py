"""redis-tb for Python: typed clients for the module's TB.* commands, the HTTP
header mapping, and rate limiting for ASGI (Starlette/FastAPI) apps.

The FastAPI dependency lives in :mod:`redis_tb.fastapi`.
"""

from .asgi import RateLimitMiddleware, route_template
from .client import DEFAULT_TIMEOUT, AsyncClient, Client, ModuleNotLoadedError
from .decision import Decision, Outcome, PolicyResult
from .deny_cache import DenyCache
from .headers import decision_headers
from .keys import ClientIP
from .limiter import BaseLimiter, LimiterStats, RateLimiter, SyncRateLimiter
from .policy import Limit, Policy, per_day, per_hour, per_minute, per_second, tiered
from .replies import Bucket, MultiReply, Reply, UnexpectedReplyError

__all__ = [
    "DEFAULT_TIMEOUT",
    "AsyncClient",
    "BaseLimiter",
    "Bucket",
    "Client",
    "ClientIP",
    "Decision",
    "DenyCache",
    "Limit",
    "LimiterStats",
    "ModuleNotLoadedError",
    "MultiReply",
    "Outcome",
    "Policy",
    "PolicyResult",
    "RateLimitMiddleware",
    "RateLimiter",
    "SyncRateLimiter",
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
