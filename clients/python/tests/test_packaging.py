"""The package installs and imports without starlette for Django and `limits` users
(starlette is the `asgi` / `fastapi` extra): a subprocess in which importing starlette
or fastapi fails, as in a venv without them, imports redis_tb, redis_tb.django and
redis_tb.limits and checks a request with the sync limiter."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = r'''
import importlib.abc, sys

class NoStarlette(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "fastapi"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoStarlette())
import redis_tb, redis_tb.limits, redis_tb.limits_async
from django.conf import settings
settings.configure(REDIS_TB={"URL": "redis://127.0.0.1:1", "POLICIES": []})
import redis_tb.django, redis_tb.django.middleware, redis_tb.django.decorators
from redis_tb import Key, Limit, Policy, SyncRateLimiter, Client
lim = SyncRateLimiter(Client.from_url("redis://127.0.0.1:1"), cooldown=60)
d = lim.check(None, [Policy("k", Limit(1, 1), key=Key.header("x-api-key"))], peer="203.0.113.9",
              headers=lambda name: ["a\x01b"])
assert d.outcome.value == "bad_request", d
assert not any(m.split(".")[0] in ("starlette", "fastapi") for m in sys.modules), sorted(sys.modules)
try:
    redis_tb.RateLimitMiddleware
except ModuleNotFoundError as exc:
    assert "starlette" in str(exc)
else:
    raise AssertionError("the ASGI middleware imported without starlette")
print("ok")
'''


def test_imports_without_starlette() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_starlette_is_an_extra_not_a_dependency() -> None:
    meta = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("starlette", "fastapi")) for d in meta["dependencies"])
    assert any(d.startswith("starlette") for d in meta["optional-dependencies"]["asgi"])
