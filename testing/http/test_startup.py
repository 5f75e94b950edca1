"""How every example starts, or refuses to (issue 39, rows L11 and L10; SPEC U1-U4, K6):
against an unreachable Redis, a redis-server without the module and a one-node Redis
Cluster each example exits with the manifest's status and prints the SPEC's one line
word for word; asked to start degraded (the manifest's setting, never by default) it
starts, logs U2's degraded line, and answers by each limiter's failure mode.

Each check starts the example on its own (not the shared stack): a free port, the
manifest's command, a REDIS_URL of the check's choosing. A line "word for word" is the
line's end: a logger's prefix before it (uvicorn's `ERROR:    `, a tracing timestamp and
level) is the logger's, not the message's; anything after it, or another wording, fails.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from typing import Iterator

import pytest

from conftest import MANIFEST, PROXY
from test_examples import DEMO, ITEMS, LOGIN, POLICIES, no_rate_limit_headers, problem_pairs
from tbhttp import http
from tbhttp.procs import BACKEND, START_TIMEOUT, App, RedisServer

case = pytest.mark.case
STARTUP = DEMO["startup"]
HOST = "127.0.0.1"


def option(language: str) -> str:
    """SPEC U2's option, `start_degraded`, in the language's case (SPEC Names: snake_case
    in Python and Rust, camelCase in Node, and in Java, whose builder's option is
    `startDegraded`)."""
    words = "start_degraded".split("_")
    camel = language in ("node", "java")
    return words[0] + "".join(w.title() for w in words[1:]) if camel else "_".join(words)


def ends_a_line(output: str, pattern: str) -> bool:
    """Whether a line of `output` ends with text matching `pattern` (a regular expression)."""
    return re.search(f"(?:{pattern})\r?$", output, re.MULTILINE) is not None


def no_trace(output: str) -> None:
    """U1: one line, no traceback (Python's, a Node stack, a Rust panic)."""
    for mark in ("Traceback (most recent call last)", "\n    at ", "panicked at"):
        assert mark not in output, f"a trace in the output:\n{output}"


@pytest.fixture(scope="session")
def unreachable() -> Iterator[int]:
    """A loopback port where nothing listens, and nothing can while the suite runs: bound,
    never listening (a connection is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        yield int(s.getsockname()[1])


@pytest.fixture(scope="session")
def bare_redis() -> Iterator[RedisServer]:
    """A redis-server without the module (SPEC U1)."""
    r = RedisServer(module=False).start()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="session")
def cluster_redis() -> Iterator[RedisServer]:
    """A one-node Redis Cluster, every slot its own (SPEC U3): with the module, or without
    it under HTTP_BACKEND=scripts (U3 applies on either backend)."""
    r = RedisServer(cluster=True).start()
    try:
        yield r
    finally:
        r.close()


def app_for(example: str, redis_url: str, **env: str | None) -> App:
    """The example on its own; `env` set in its environment (None: removed)."""
    app = App(example, MANIFEST["examples"][example], redis_url, f"{PROXY}/32", sys.executable)
    for k, v in env.items():
        if v is None:
            app.env.pop(k, None)
        else:
            app.env[k] = v
    # the manifest's setting is the only way to start degraded: never inherited from the
    # environment the suite runs in
    if STARTUP["start_degraded_env"] not in env:
        app.env.pop(STARTUP["start_degraded_env"], None)
    return app


def exit_status(app: App) -> int | None:
    """Starts the app and waits until it exits (its status) or answers its readiness
    request (None: it started)."""
    app.start()
    deadline = time.monotonic() + START_TIMEOUT
    assert app.proc is not None
    while time.monotonic() < deadline:
        if (code := app.proc.poll()) is not None:
            return code
        try:
            if http.request(app.base, "GET", app.ready_path, timeout=2).status == app.ready_status:
                return None
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{app.name} neither exited nor became ready within {START_TIMEOUT} s:\n{app.output()}")


def refused_start(app: App, line: str, what: str) -> None:
    """The app exits with the manifest's status, a line of its output ending with `line`
    (a regular expression), and no trace."""
    try:
        code = exit_status(app)
        out = app.output()
    finally:
        app.close()
    assert code is not None, f"{app.name} started against {what}:\n{out}"
    assert code == STARTUP["exit_status"], f"{app.name} exited {code} against {what}, not {STARTUP['exit_status']}:\n{out}"
    assert ends_a_line(out, line), f"{app.name}'s output against {what} has no line ending with /{line}/:\n{out}"
    no_trace(out)


@case("start_unreachable")
def test_start_unreachable_redis_exits(example: str, unreachable: int) -> None:
    """L11, SPEC U2, U4: an unreachable Redis stops the start: status 3 and U2's line, the
    option named in the example's language's case."""
    address = f"{HOST}:{unreachable}"
    language = MANIFEST["examples"][example]["language"]
    line = (re.escape(f"redis-tb: cannot reach Redis at {address} (") + r".+"
            + re.escape(f"): start it, or set {option(language)} to start failing open"))
    refused_start(app_for(example, f"redis://{address}/0"), line, f"an unreachable Redis at {address}")


@case("start_without_module")
def test_start_without_module_exits(example: str, bare_redis: RedisServer) -> None:
    """L11, SPEC U1, U4, E1: a Redis without the module stops the start when the backend is
    forced to the module (REDIS_TB_BACKEND=module; by default a client that has SPEC E starts
    on the scripts): status 3 and U1's line."""
    address = f"{HOST}:{bare_redis.port}"
    line = re.escape(f"redis-tb module not loaded on {address}: load libredis_tb.so with loadmodule")
    app = app_for(example, bare_redis.url, REDIS_TB_BACKEND="module")
    refused_start(app, line, "a Redis without the module")


@case("start_on_scripts")
@pytest.mark.skipif(BACKEND != "scripts", reason="HTTP_BACKEND=module: E1's start on the scripts is checked by"
                    " HTTP_BACKEND=scripts (make test-http-scripts)")
@pytest.mark.parametrize("setting", [None, "scripts"], ids=["auto", "forced"])
def test_start_on_scripts(example: str, bare_redis: RedisServer, setting: str | None) -> None:
    """SPEC E1, E2, E6: on a Redis without the module, the example's default backend (auto,
    REDIS_TB_BACKEND unset) and REDIS_TB_BACKEND=scripts both start on the script library,
    log E6's line (`tb.take not found`, or `forced by backend=scripts`; Functions or
    EVALSHA) and limit: the API answers with RateLimit headers."""
    address = f"{HOST}:{bare_redis.port}"
    why = "tb.take not found" if setting is None else f"forced by backend={setting}"
    line = re.escape(f"redis-tb: backend scripts on {address} ({why}, ") + r"(Functions|EVALSHA)\)"
    app = app_for(example, bare_redis.url, REDIS_TB_BACKEND=setting)
    try:
        code = exit_status(app)
        assert code is None, f"{example} exited {code} against a Redis without the module ({why}):\n{app.output()}"
        api = http.request(app.base, ITEMS["method"], ITEMS["path"], headers={"x-forwarded-for": "198.51.100.9"},
                           source=PROXY)
        out = app.output()
    finally:
        app.close()
    assert ends_a_line(out, line), f"{example} logged no line ending with /{line}/:\n{out}"
    no_trace(out)
    assert api.status == ITEMS["status"] and api.has("ratelimit"), api.describe()


@case("start_degraded")
def test_start_degraded_when_asked(example: str, unreachable: int) -> None:
    """L11, SPEC U2, U4, B4, H5: with the manifest's setting at 1 and Redis unreachable,
    the example starts, logs U2's degraded line, and answers by each limiter's failure
    mode: the API open (200, no rate-limit header), the login closed (503, Retry-After: 1,
    P3's body)."""
    address = f"{HOST}:{unreachable}"
    app = app_for(example, f"redis://{address}/0", **{STARTUP["start_degraded_env"]: "1"})
    try:
        code = exit_status(app)
        assert code is None, f"{example} exited {code} though asked to start degraded:\n{app.output()}"
        api = http.request(app.base, ITEMS["method"], ITEMS["path"], headers={"x-forwarded-for": "198.51.100.9"},
                           source=PROXY)
        login = http.request(app.base, LOGIN["method"], LOGIN["path"], json_body=LOGIN["json"],
                             headers={"x-forwarded-for": "198.51.100.9"}, source=PROXY)
        out = app.output()
    finally:
        app.close()
    line = re.escape(f"redis-tb: Redis at {address} unreachable at startup; starting degraded"
                     " (the limiter's failure mode applies until it answers)")
    assert ends_a_line(out, line), f"{example} logged no line ending with U2's degraded line:\n{out}"
    assert api.status == ITEMS["status"], api.describe()
    no_rate_limit_headers(api)
    assert login.status == 503 and login.header("retry-after") == "1", login.describe()
    assert problem_pairs(login) == [
        ("type", "about:blank"), ("title", "Service Unavailable"), ("status", 503),
        ("detail", "the rate limiter's store is unavailable; retry shortly"),
    ], login.body


@case("start_on_cluster")
def test_start_on_cluster_without_tag_exits(example: str, cluster_redis: RedisServer) -> None:
    """L10, SPEC K6, U3, U4: on a Redis Cluster the demo's api limiter (several policies
    in one call, no tag function) stops the start: status 3 and U3's line naming the
    limiter by its metrics name and its policies that are not settle_later, in policy
    order. (The login limiter has one policy: nothing to refuse.)"""
    multi = [lim for lim in DEMO["limiters"]
             if len([p for p in lim["policies"] if not POLICIES[p].get("settle_later")]) > 1]
    assert multi, "the demo has no limiter that sends several keys in one call"
    lim = multi[0]
    names = ", ".join(f"'{p}'" for p in lim["policies"] if not POLICIES[p].get("settle_later"))
    line = re.escape(f"redis-tb: limiter '{lim['metrics_limiter_label']}' sends several keys in one call"
                     f" (policies {names}), which a Redis Cluster refuses unless they share a hash slot:"
                     " set a tag function (SPEC K6)")
    refused_start(app_for(example, cluster_redis.url), line, "a Redis Cluster")
