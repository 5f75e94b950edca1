"""flask-limiter on redis-tb: one storage URI, native windows.

    import redis_tb.limits  # registers redis+tb:// with limits
    Limiter(get_remote_address, storage_uri="redis+tb://localhost:6379/0", ...)

Configuration (environment):
    STORAGE_URI   the limits storage (default redis+tb://127.0.0.1:6379/0); any
                  limits URI works, e.g. redis://... for limits' own Redis storage
    STRATEGY      moving-window (default) or sliding-window-counter or fixed-window
    DEFAULT_LIMIT the app-wide limit per client address (default "5 per minute")
    REDIS_TB_BACKEND  auto (default: the module where it is loaded, else the script
                  library clients/lua, e.g. on managed Redis), module or scripts
                  (SPEC E1); any other value exits with 2 and one line

Run: gunicorn --bind 127.0.0.1:8000 app:app  (or python app.py)
"""

from __future__ import annotations

import os
import sys

from flask import Flask, jsonify
from flask.typing import ResponseReturnValue
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

import redis_tb.limits  # noqa: F401  registers redis+tb:// and async+redis+tb://
from redis_tb.backend import backend_setting

STORAGE_URI = os.environ.get("STORAGE_URI", "redis+tb://127.0.0.1:6379/0")
try:  # SPEC E1: the store's backend of the redis+tb:// storages (auto, module or scripts)
    BACKEND = backend_setting(os.environ.get("REDIS_TB_BACKEND", "auto"))
except ValueError as exc:
    print(f"REDIS_TB_BACKEND: {exc}", file=sys.stderr)
    sys.exit(2)
# limits' own storages (redis://...) take no backend
STORAGE_OPTIONS: dict[str, str | int] = {"backend": BACKEND} if "+tb" in STORAGE_URI.split("://", 1)[0] else {}

app = Flask(__name__)
limiter = Limiter(
    get_remote_address,
    app=app,
    storage_uri=STORAGE_URI,
    storage_options=STORAGE_OPTIONS,
    strategy=os.environ.get("STRATEGY", "moving-window"),
    default_limits=[os.environ.get("DEFAULT_LIMIT", "5 per minute")],
    headers_enabled=True,  # X-RateLimit-Limit/-Remaining/-Reset, Retry-After on 429
)


@app.get("/")
def index() -> ResponseReturnValue:
    return jsonify(ok=True)


@app.get("/login")
@limiter.limit("2 per minute")  # per route, on top of nothing else: overrides the default
def login() -> ResponseReturnValue:
    return jsonify(login="form")


@app.get("/health")
@limiter.exempt
def health() -> ResponseReturnValue:
    return jsonify(storage=limiter.storage.check() if limiter.storage else False)


if __name__ == "__main__":
    app.run(host="127.0.0.1", port=int(os.environ.get("PORT", "8000")), threaded=True)
