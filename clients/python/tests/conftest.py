"""Shared fixtures: one redis-server with the module per test module."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from redis_tb_testing.servers import RedisServer

# this folder's own modules by name (djangoapp, e2e_app, the dotted paths of test_django's
# settings); the shared harness comes from testing/python (pyproject's pythonpath)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()
