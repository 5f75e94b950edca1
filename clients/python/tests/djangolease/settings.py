"""The Django project test_django_leases.py serves with gunicorn (WSGI) and uvicorn
(ASGI): an in-flight policy 'conc' (1 per client address, lease TB_LEASE seconds) on
every view but /open and /close, and a settle_later policy 'tokens' on /hold."""

from __future__ import annotations

import os

from redis_tb import Limit

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
    "EXCLUDE": ["open", "close"],
    "POLICIES": [
        {"NAME": "conc", "LIMIT": Limit.in_flight(1, lease=float(os.environ.get("TB_LEASE", "30")))},
        {"NAME": "tokens", "CAPACITY": 1000, "RATE": 1e-9, "URL_NAMES": ["hold"], "SETTLE_LATER": True},
    ],
}
