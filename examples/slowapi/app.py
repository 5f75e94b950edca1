"""slowapi (Starlette/FastAPI) on redis-tb: the README's snippet as a runnable app.

    import redis_tb.limits  # registers redis+tb:// with limits
    limiter = Limiter(key_func=get_remote_address, storage_uri="redis+tb://...")

STORAGE_URI and STRATEGY as in examples/flask/app.py. Run:
    uvicorn app:app --port 8000
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Request, Response
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import redis_tb.limits  # noqa: F401  registers redis+tb://

limiter = Limiter(
    key_func=get_remote_address,
    storage_uri=os.environ.get("STORAGE_URI", "redis+tb://127.0.0.1:6379/0"),
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
