"""One client, one bucket, whatever the language (SPEC K1-K4, A, I): two examples of the
manifest started on ONE redis-server charge the same buckets for the same client. Each
selected example (the session's stack) is paired with peer examples of other frameworks
(HTTP_IDENTITY_PEERS, default `fastapi,express`: Python and Node), the peer started
against the stack's Redis.

Two checks per pair:
- `identity_same_keys`: the same request (the same X-Forwarded-For from the trusted proxy,
  the same API key) makes the same Redis keys in both apps: IPv4, IPv6 under its /64,
  IPv4-mapped IPv6, a user, an endpoint policy, a cost, a window. The suite does not say
  what the keys are (the packages' business, SPEC K1), only that the two apps agree.
- `identity_shared_spend`: requests sent alternately to the two apps count down one
  bucket: the per-user bucket (GET /items/{id}) and the login window (POST /login), by
  the RateLimit items each app answers.

A peer that is not built fails its pairs at start (its output says what is missing):
testing/http/run-tests.sh builds every example unless SKIP_BUILD=1.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterator

import pytest

from conftest import MANIFEST, PROXY, Stack
from test_examples import FREE, ITEMS, LOGIN, ORDERS, PRO, SEARCH
from tbhttp import http
from tbhttp.procs import App

case = pytest.mark.case


def peers() -> list[str]:
    names = [n for n in os.environ.get("HTTP_IDENTITY_PEERS", "fastapi,express").split(",") if n]
    unknown = set(names) - set(MANIFEST["examples"])
    if unknown:
        raise pytest.UsageError(f"HTTP_IDENTITY_PEERS names {sorted(unknown)}, not in the manifest")
    return names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "peer_name" in metafunc.fixturenames:
        metafunc.parametrize("peer_name", peers(), scope="session")


@pytest.fixture(scope="session")
def peer(stack: Stack, peer_name: str) -> Iterator[App | None]:
    """The peer app on the stack's redis-server (None when the peer is the example itself)."""
    if peer_name == stack.name:
        yield None
        return
    app = App(peer_name, MANIFEST["examples"][peer_name], stack.redis.url, f"{PROXY}/32", sys.executable)
    try:
        app.start().wait_ready()
        yield app
    finally:
        app.close()


def send(base: tuple[str, int], probe: dict[str, Any]) -> http.Response:
    headers = {"x-forwarded-for": probe["ip"]}
    if probe.get("key"):
        headers[MANIFEST["demo"]["identities"]["header"]] = probe["key"]
    return http.request(base, probe["method"], probe["path"], headers=headers, json_body=probe.get("json"),
                        source=PROXY)


# the same client seen by both apps: each address form of SPEC A, a user, each policy kind
PROBES: list[dict[str, Any]] = [
    {"what": "IPv4, a free user", "method": ITEMS["method"], "path": ITEMS["path"], "ip": "203.0.113.7", "key": FREE},
    {"what": "IPv6 (its /64), a pro user's order", "method": ORDERS["method"], "path": ORDERS["path"],
     "ip": "2001:db8:1:2:3::9", "key": PRO, "json": ORDERS["json"]},
    {"what": "IPv4-mapped IPv6, a search's cost", "method": "GET", "path": SEARCH["path"], "ip": "::ffff:198.51.100.4"},
    {"what": "the login window", "method": LOGIN["method"], "path": LOGIN["path"], "ip": "198.51.100.77",
     "json": LOGIN.get("json")},
]


def keys(stack: Stack) -> list[str]:
    reply = stack.redis.call("KEYS", "*")
    assert isinstance(reply, list), reply
    return sorted(k.decode() if isinstance(k, bytes) else str(k) for k in reply)


@case("identity_same_keys")
def test_identity_same_keys(stack: Stack, peer: App | None, peer_name: str) -> None:
    """The same request makes the same Redis keys in both apps (SPEC K1-K4 on A's and I's
    identities): from an empty Redis, each app alone."""
    if peer is None:
        pytest.skip(f"{peer_name} is the example itself")
    wrong = []
    for probe in PROBES:
        made = {}
        for name, base in ((stack.name, stack.app.base), (peer_name, peer.base)):
            stack.redis.flushall()
            r = send(base, probe)
            assert r.status < 500 and r.has("ratelimit"), f"{name}, {probe['what']}:\n{r.describe()}"
            made[name] = keys(stack)
        if made[stack.name] != made[peer_name] or not made[stack.name]:
            wrong.append(f"{probe['what']}: {stack.name} {made[stack.name]} != {peer_name} {made[peer_name]}")
    assert not wrong, "one client, different buckets:\n" + "\n".join(wrong)


@case("identity_shared_spend")
def test_identity_shared_spend(stack: Stack, peer: App | None, peer_name: str) -> None:
    """Requests alternately to the two apps spend one bucket: the per-user bucket of a
    free user (100 an hour: r = 99, 98, 97, ... whichever app answers) and the login
    window (20 an hour per address)."""
    if peer is None:
        pytest.skip(f"{peer_name} is the example itself")
    apps = [(stack.name, stack.app.base), (peer_name, peer.base)]
    for probe, policy in ((PROBES[0], "user"), (PROBES[3], "login")):
        seen = []
        for i in range(6):
            name, base = apps[i % 2]
            r = send(base, probe)
            item = r.item(policy)
            assert item is not None, f"{name}: no {policy!r} item:\n{r.describe()}"
            seen.append((name, item["r"]))
        first = seen[0][1]
        assert [r for _, r in seen] == [first - i for i in range(6)], (
            f"the {policy!r} bucket of one client is not counted down across {stack.name} and {peer_name}: {seen}")
