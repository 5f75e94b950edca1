"""The Django project test_django_leases.py and test_django_max_duration.py serve with
gunicorn (WSGI) and uvicorn (ASGI): an in-flight policy 'conc' (1 per client address,
lease TB_LEASE seconds, max_duration TB_MAX_DURATION seconds, default 300) on every view
but /open, /close and /stats, and a settle_later policy 'tokens' on /hold and
/hold-stream."""

from __future__ import annotations

import os

SECRET_KEY = "redis-tb-lease-tests"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1"]
ROOT_URLCONF = "djangolease.urls"
USE_TZ = True
DATABASES: dict[str, dict[str, str]] = {}
INSTALLED_APPS: list[str] = []
MIDDLEWARE = ["redis_tb.django.RateLimitMiddleware"]
REDIS_TB = {
    "URL": os.environ["TB_REDIS_URL"],
    "TIMEOUT": 2,
    "EXCLUDE": ["open", "close", "stats"],
    "POLICIES": [
        {"NAME": "conc", "IN_FLIGHT": {
            "LIMIT": 1, "LEASE": float(os.environ.get("TB_LEASE", "30")),
            "MAX_DURATION": float(os.environ.get("TB_MAX_DURATION", "300")),
        }},
        {"NAME": "tokens", "CAPACITY": 1000, "RATE": 1e-9, "URL_NAMES": ["hold", "hold-stream"], "SETTLE_LATER": True},
    ],
}
