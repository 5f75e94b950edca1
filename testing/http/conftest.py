"""Fixtures of the HTTP suite: the manifest, one redis-server (with the module, or without
it under HTTP_BACKEND=scripts, tbhttp/procs.py) and one example app per example (session scope: every check of one example, in every test file,
runs against one stack, started once), fresh buckets before each check, and the manifest's deviations turned into
xfail(strict=True) marks on the checks they break."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tbhttp import http
from tbhttp.procs import REPO, App, RedisServer

MANIFEST_PATH = Path(os.environ.get("HTTP_MANIFEST", REPO / "examples" / "manifest.json"))
MANIFEST: dict[str, Any] = json.loads(MANIFEST_PATH.read_text())
PROXY = "127.0.0.2"  # the apps trust it; the suite's requests come from it with X-Forwarded-For
DIRECT = "127.0.0.1"  # not trusted: its X-Forwarded-For must be ignored


def selected() -> list[str]:
    """HTTP_EXAMPLES=fastapi,axum runs a subset; default: every example in the manifest."""
    names = list(MANIFEST["examples"])
    want = [n for n in os.environ.get("HTTP_EXAMPLES", "").split(",") if n]
    unknown = set(want) - set(names)
    if unknown:
        raise pytest.UsageError(f"HTTP_EXAMPLES names {sorted(unknown)}, not in {MANIFEST_PATH}")
    return want or names


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "case(name): the manifest's name of this check (deviations cite it)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "example" in metafunc.fixturenames:
        # session scope: pytest orders the checks by example, so each example's stack is
        # started once for test_examples.py and test_streams.py together
        metafunc.parametrize("example", selected(), scope="session")
    if "route" in metafunc.fixturenames:
        routes = MANIFEST["demo"]["routes"]
        metafunc.parametrize("route", routes, ids=[r["id"] for r in routes])


def cases_of(item: pytest.Item) -> list[str]:
    names = [m.args[0] for m in item.iter_markers("case")]
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "route" in callspec.params:
        names.append("route:" + callspec.params["route"]["id"])
    return names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None or "example" not in callspec.params:
            continue
        example = callspec.params["example"]
        mine = set(cases_of(item))
        reasons = [
            f"{d['id']}: {d['what']}"
            for d in MANIFEST["examples"][example]["deviations"]
            if mine & set(d["cases"])
        ]
        if reasons:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"{example} deviates (to converge): " + " | ".join(reasons)))


class Stack:
    """One example app against its own redis-server (the module loaded or not by
    HTTP_BACKEND; the app started with its default backend, auto, unless HTTP_APP_BACKEND
    says otherwise)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.entry = MANIFEST["examples"][name]
        self.redis = RedisServer().start()
        self.app = App(name, self.entry, self.redis.url, f"{PROXY}/32", sys.executable)
        self._ips = itertools.count(1)

    def start(self) -> None:
        self.app.start().wait_ready()

    def close(self) -> None:
        self.app.close()
        self.redis.close()

    def fresh_ip(self) -> str:
        """A client address of its own (its own ip bucket, and nothing cached for it)."""
        n = next(self._ips)
        return f"198.51.{100 + n // 250}.{n % 250 + 1}"

    def call(self, method: str, path: str, *, ip: str | None = None, key: str | None = None,
             json_body: object = None, headers: dict[str, str] | None = None,
             source: str = PROXY) -> http.Response:
        send = dict(headers or {})
        if ip is not None:
            send["x-forwarded-for"] = ip
        if key is not None:
            send[MANIFEST["demo"]["identities"]["header"]] = key
        return http.request(self.app.base, method, path, headers=send, json_body=json_body, source=source)


@pytest.fixture(scope="session")
def stack(example: str) -> Iterator[Stack]:
    s = Stack(example)
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def fresh_buckets(request: pytest.FixtureRequest) -> None:
    """Each check starts from empty Redis (the user buckets are shared across addresses)."""
    if "stack" in request.fixturenames:
        s: Stack = request.getfixturevalue("stack")
        if not s.redis.alive():
            s.redis.start()
        s.redis.flushall()
