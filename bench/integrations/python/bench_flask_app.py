"""The app bench/integrations/python/bench_storage.py loads: flask-limiter with headers on, one
limit per client named by the X-Client header, storage and strategy from the environment
(STORAGE_URI, STRATEGY, LIMIT)."""

from __future__ import annotations

import os

from flask import Flask, request
from flask.typing import ResponseReturnValue
from flask_limiter import Limiter

import redis_tb.limits  # noqa: F401  registers redis+tb://

app = Flask(__name__)
limiter = Limiter(
    lambda: request.headers.get("X-Client", "anonymous"),
    app=app,
    storage_uri=os.environ["STORAGE_URI"],
    strategy=os.environ["STRATEGY"],
    default_limits=[os.environ.get("LIMIT", "100 per minute")],
    headers_enabled=True,
)


@app.get("/")
def index() -> ResponseReturnValue:
    return "ok"
