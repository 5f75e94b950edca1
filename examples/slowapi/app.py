"""slowapi (Starlette/FastAPI) on redis-tb: the README's snippet as a runnable app.

    import redis_tb.limits  # registers redis+tb:// with limits
    limiter = Limiter(key_func=get_remote_address, storage_uri="redis+tb://...")

STORAGE_URI, STRATEGY and REDIS_TB_BACKEND as in examples/flask/app.py. Run:
    uvicorn app:app --port 8000
"""

from __future__ import annotations

import os
import sys

from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_tb.limits  # noqa: F401  registers redis+tb://
from redis_tb.backend import backend_setting

STORAGE_URI = os.environ.get("STORAGE_URI", "redis+tb://127.0.0.1:6379/0")
try:  # SPEC E1: the store's backend of the redis+tb:// storages (auto, module or scripts)
    BACKEND = backend_setting(os.environ.get("REDIS_TB_BACKEND", "auto"))
except ValueError as exc:
    print(f"REDIS_TB_BACKEND: {exc}", file=sys.stderr)
    sys.exit(2)
# limits' own storages (redis://...) take no backend
STORAGE_OPTIONS: dict[str, str] = {"backend": BACKEND} if "+tb" in STORAGE_URI.split("://", 1)[0] else {}

limiter = Limiter(
    key_func=get_remote_address,
    storage_uri=STORAGE_URI,
    storage_options=STORAGE_OPTIONS,
    strategy=os.environ.get("STRATEGY", "moving-window"),
    headers_enabled=True,
)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)  # type: ignore[arg-type]


@app.get("/hello")
@limiter.limit("3/minute")
async def hello(request: Request, response: Response) -> dict[str, str]:
    # slowapi writes the X-RateLimit-* headers into `response`
    return {"hello": "world"}
