"""Settings of the redis-tb Django example: no database, no templates, an API.

Environment: REDIS_URL (default redis://127.0.0.1:6379/0), TRUSTED_PROXIES
(comma-separated CIDRs of your load balancers; default none: X-Forwarded-For is
then never read), REDIS_TB_TIMEOUT_MS (milliseconds, default 50), RATE_LIMIT=off
(the same project without the middleware), REDIS_TB_START_DEGRADED=1 (start failing
open when Redis is unreachable at startup; by default the server refuses to start:
the one line, then exit status 3), REDIS_TB_BACKEND (SPEC E1: auto, the default, uses
the module where it is loaded and the script library clients/lua elsewhere, e.g. on
managed Redis; module or scripts forces either; any other value exits with 2 and one line).
"""

from __future__ import annotations

import os
import sys

from redis_tb.backend import backend_setting

try:  # SPEC E1: the store's backend (the gauge redis_tb_backend on /metrics says which)
    BACKEND = backend_setting(os.environ.get("REDIS_TB_BACKEND", "auto"))
except ValueError as exc:
    print(f"REDIS_TB_BACKEND: {exc}", file=sys.stderr)
    sys.exit(2)

BASE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "redis-tb-example-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]
ROOT_URLCONF = "exampleproj.urls"
WSGI_APPLICATION = "exampleproj.wsgi.application"
ASGI_APPLICATION = "exampleproj.asgi.application"
USE_TZ = True
DATABASES: dict[str, dict[str, str]] = {}

LIMITED = os.environ.get("RATE_LIMIT", "on") != "off"

INSTALLED_APPS = [
    # the startup checks (SPEC U1-U4): an unreachable Redis, a Redis without the module,
    # or a Redis Cluster (these policies go several in one call without a HASH_TAG)
    # stops the server here, in one line, with exit status 3
    "redis_tb.django",
] if LIMITED else []

MIDDLEWARE = [
    "django.middleware.common.CommonMiddleware",
    # after whatever sets what the key functions read (here: only headers)
    "redis_tb.django.RateLimitMiddleware",
] if LIMITED else ["django.middleware.common.CommonMiddleware"]

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        # its warnings, and SPEC E6's one line (INFO) of the backend chosen at startup
        "redis_tb": {"handlers": ["console"], "level": "INFO"},
        "django.request": {"handlers": ["console"], "level": "ERROR"},
    },
}

REDIS_TB = {
    "URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
    # the limiter label of the configured policies in the metrics (the login has its own)
    "NAME": "api",
    "TRUSTED_PROXIES": [c for c in os.environ.get("TRUSTED_PROXIES", "").split(",") if c],
    # Redis down: let requests through (the login view overrides this: fail closed)
    "FAIL_OPEN": True,
    # seconds a Redis call may take before the failure mode applies (default 50 ms)
    "TIMEOUT": float(os.environ.get("REDIS_TB_TIMEOUT_MS", "50")) / 1000,
    # SPEC U4: start failing open when Redis is unreachable at startup, only when asked
    "START_DEGRADED": os.environ.get("REDIS_TB_START_DEGRADED") == "1",
    # SPEC E1: auto (module where loaded, else the scripts), module or scripts
    "BACKEND": BACKEND,
    # our own 5xx do not count against callers
    "REFUND_ON": range(500, 600),
    # never limited: health checks and the Prometheus scrape (URL names)
    "EXCLUDE": ["healthz", "metrics"],
    # redis_tb_* counters in prometheus_client's default registry, served at /metrics
    "METRICS": True,
    # Checked together in ONE TB.MTAKE per request: all or nothing, so a request
    # refused by one layer spends nothing on the others.
    "POLICIES": [
        # every caller, by client address (IPv6 by /64): 10 per second
        {"NAME": "ip", "PER_SECOND": 10},
        # signed-in users, by plan: free 100 per hour, pro 5000 per hour, staff unlimited
        {
            "NAME": "user",
            "TIERS": {"free": {"PER_HOUR": 100}, "pro": {"PER_HOUR": 5000}, "staff": None},
            "TIER": "exampleproj.limits.plan",
            "DEFAULT_TIER": "free",
            "KEY": "exampleproj.limits.user_id",
        },
        # an endpoint policy by URL name: searches cost one token per 50 results asked for
        {"NAME": "search", "PER_MINUTE": 60, "URL_NAMES": ["search"], "COST": "exampleproj.limits.search_cost"},
        # a tighter search limit being tried out, in shadow mode: charged and counted like
        # an enforced one (all or nothing), never refusing, never in a header
        {
            "NAME": "search-strict", "PER_MINUTE": 20, "URL_NAMES": ["search"],
            "COST": "exampleproj.limits.search_cost", "SHADOW": True,
        },
        # at most 2 streams in progress per client address (SPEC N): a lease of 2 s,
        # renewed every second while the stream runs, released when its response ends (a
        # client gone mid-stream included), and ended 6 s after its grant whatever its
        # client does (N7); in the same call as the buckets above
        {"NAME": "streams", "IN_FLIGHT": {"LIMIT": 2, "LEASE": 2, "MAX_DURATION": 6}, "URL_NAMES": ["stream"]},
        # 1000 tokens an hour per client address, charged after the fact (SPEC G): the view
        # holds max_tokens before it streams and settles the tokens it sent
        {"NAME": "tokens", "PER_HOUR": 1000, "URL_NAMES": ["stream"], "SETTLE_LATER": True},
    ],
}
