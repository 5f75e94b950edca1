"""gunicorn's settings for the Django example, read by the master from this folder.

Only a check: a bad REDIS_TB_BACKEND stops the master with one line and exit status 2,
before any worker starts. Without it the worker's settings exit 2, and gunicorn's master,
which stops only on a worker's 3 (a failed boot), would start the worker again forever.
settings.py keeps the same check for uvicorn and manage.py."""

from __future__ import annotations

import os
import sys
from typing import Any

from redis_tb.backend import backend_setting


def on_starting(server: Any) -> None:
    try:  # SPEC E1: auto, module or scripts
        backend_setting(os.environ.get("REDIS_TB_BACKEND", "auto"))
    except ValueError as exc:
        print(f"REDIS_TB_BACKEND: {exc}", file=sys.stderr)
        sys.exit(2)
