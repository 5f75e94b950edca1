"""The shared vectors of clients/vectors (clients/vectors/README.md): every file of the
folder, every case, named by its id.

Pure files call the package's pure functions. ``limiter.json`` drives the
framework-neutral limiter, both :class:`RateLimiter` (asyncio tasks for held calls)
and :class:`SyncRateLimiter` (threads for held calls), with an injected clock and a
scripted store at the level of the typed client (``call_packed`` / ``refund_many``):
the store decodes each command the limiter sends, compares it with the case's call,
and answers with the scripted reply (encoded as RESP and read by the limiter's own
reader), error reply, timeout, connection error, or a held answer.

The cases of SPEC E (the script backend, issue 42) run on :class:`redis_tb.Backend`
(the scripts chosen already for a limiter case, chosen by the startup for a startup case),
with the README's placeholders bound (:class:`Placeholders`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import re
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import redis.exceptions
from redis._parsers.base import BaseParser

from redis_tb import (
    AsyncClient,
    Backend,
    Client,
    Decision,
    DenyCache,
    Hold,
    HoldError,
    StoreError,
    Key,
    Limit,
    Policy,
    PolicyResult,
    RateLimiter,
    Scope,
    StartupError,
    SyncRateLimiter,
    check_policy_kinds,
    tiered,
)
from redis_tb.address import ClientIpConfig
from redis_tb.headers import quota, remaining_units, reset_seconds, retry_after_seconds, window
from redis_tb.problem import body_number, respond
from redis_tb.keys import BadHeader, KeyBuilder, header_identity
from redis_tb.limiter import check_prefix
from redis_tb.lua import lua_sources
from redis_tb.policy import check_policy_name, check_policy_names
from redis_tb.replies import RespError, packed, read_resp

VECTORS = Path(__file__).resolve().parents[2] / "vectors"
WALL0 = 1764456268.0  # the wall clock at at_ms = 0 (README)


def num(x: Any) -> Any:
    """A vector number: "NaN", "Infinity", "-Infinity" are strings in JSON."""
    if isinstance(x, str) and x in ("NaN", "Infinity", "-Infinity"):
        return float(x.lower().replace("infinity", "inf"))
    if isinstance(x, list):
        return [num(v) for v in x]
    if isinstance(x, dict):
        return {k: num(v) for k, v in x.items()}
    return x


def load(name: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((VECTORS / name).read_text())["cases"]
    return cases


def ids(cases: list[dict[str, Any]]) -> list[str]:
    return [c["id"] for c in cases]


# -- the folder ---------------------------------------------------------------------

HANDLED = {
    "numbers.json", "config.json", "address.json", "keys.json", "header_identity.json",
    "response.json", "limiter.json", "limiter-scripts.json", "startup.json",
}
KINDS = {"check", "release", "cancel", "refund", "finish", "renew", "take_hold", "settle", "renew_hold"}


def test_every_file_has_a_handler() -> None:
    files = sorted(p.name for p in VECTORS.glob("*.json"))
    assert files, f"no vectors in {VECTORS}"
    missing = [f for f in files if f not in HANDLED]
    assert not missing, f"vector files without a handler in the Python runner: {missing}"


#: Cases of a rule Python does not implement yet, each required to FAIL (a listed case
#: that passes is an error: take it off this list), with the SPEC rule it waits for.
#: Empty since SPEC E (the script backend, issue 42) is in Python.
PENDING: dict[str, str] = {}


@contextlib.contextmanager
def pending(case_id: str) -> Iterator[None]:
    """Runs a case: a PENDING one must fail (an AssertionError), any other must pass."""
    if case_id not in PENDING:
        yield
        return
    try:
        yield
    except AssertionError:
        return  # the rule is not in Python yet
    pytest.fail(f"{case_id} passes: take it off PENDING (SPEC {PENDING[case_id]})")


def test_pending_cases_exist() -> None:
    """A PENDING id that no vector has is stale: it would hide nothing and say wrongly
    that something waits."""
    known = {c["id"] for p in VECTORS.glob("*.json") for c in json.loads(p.read_text())["cases"]}
    assert not set(PENDING) - known, f"PENDING ids without a case: {sorted(set(PENDING) - known)}"


def test_ids_are_unique() -> None:
    seen: dict[str, str] = {}
    for p in sorted(VECTORS.glob("*.json")):
        for c in json.loads(p.read_text())["cases"]:
            assert c["id"] not in seen, f"{c['id']} in {p.name} and {seen[c['id']]}"
            seen[c["id"]] = p.name


# -- numbers.json (SPEC H2, H3, P5) -------------------------------------------------

NUMBER_FNS: dict[str, Callable[..., Any]] = {
    "quota": quota,
    "window": window,
    "remaining": remaining_units,
    "reset": reset_seconds,
    "retry_after": retry_after_seconds,
    "body_number": body_number,
}


@pytest.mark.parametrize("case", load("numbers.json"), ids=ids(load("numbers.json")))
def test_numbers(case: dict[str, Any]) -> None:
    fn = NUMBER_FNS.get(case["fn"])
    assert fn is not None, f"{case['id']}: unknown fn {case['fn']!r}"
    got = fn(*num(case["args"]))
    assert got == case["expect"], f"{case['id']} {case['title']}: got {got!r}"


# -- config.json (SPEC C, I3) -------------------------------------------------------


def _kind_policy(i: int, kind: str) -> Policy:
    if kind == "bucket":
        return Policy(f"p{i}", Limit(1, 1))
    if kind == "window":
        return Policy(f"p{i}", Limit.window(1, 60))
    if kind == "in_flight":
        return Policy(f"p{i}", Limit.in_flight(1))
    if kind == "settle_later":
        return Policy(f"p{i}", Limit(1, 1), settle_later=True)
    raise AssertionError(f"unknown policy kind {kind!r}")


def _configure(setting: str, value: Any) -> Any:
    """Build what ``setting`` configures; its normalized form where there is one."""
    if setting == "prefix":
        check_prefix(value)
    elif setting == "policy_name":
        check_policy_name(value)
    elif setting == "policy_names":
        check_policy_names([Policy(n, Limit(1, 1)) for n in value])
    elif setting == "limit":
        Policy("p", Limit(value["capacity"], value["rate"]))
    elif setting == "cost":
        Policy("p", Limit(1, 1), cost=value)
    elif setting == "trusted_proxy":
        return str(ClientIpConfig([value]).trusted[0])
    elif setting == "ipv4_prefix":
        ClientIpConfig(ipv4_prefix=value)
    elif setting == "ipv6_prefix":
        ClientIpConfig(ipv6_prefix=value)
    elif setting == "header":
        ClientIpConfig(header=value)
    elif setting == "fixed_key":
        Key.fixed(value)
    elif setting == "window":
        Policy("p", Limit.window(value["limit"], value["seconds"], value["mode"]))
    elif setting == "in_flight":
        unknown = set(value) - {"limit", "lease", "max_duration", "cost"}
        assert not unknown, f"unknown in_flight fields {sorted(unknown)}"
        extra = {"cost": value["cost"]} if "cost" in value else {}
        lim = (
            Limit.in_flight(value["limit"], value["lease"], value["max_duration"])
            if "max_duration" in value else Limit.in_flight(value["limit"], value["lease"])
        )
        Policy("p", lim, **extra)
        return {"limit": lim.limit, "lease_ms": lim.lease_ms, "max_duration_ms": lim.max_duration_ms}
    elif setting == "policy_kinds":
        check_policy_kinds([_kind_policy(i, k) for i, k in enumerate(value)])
    elif setting == "timeout_ms":  # SPEC C7: the limiter takes seconds
        RateLimiter(FakeAsyncClient(Script("config")), timeout=value / 1000)
    elif setting == "cooldown_ms":
        RateLimiter(FakeAsyncClient(Script("config")), cooldown=value / 1000)
    elif setting == "deny_cache_max_entries":
        RateLimiter(FakeAsyncClient(Script("config")), deny_cache=DenyCache(value))
    elif setting == "window_helper":  # SPEC W1: Limit.window_per_<unit>(n[, mode])
        helper = getattr(Limit, f"window_per_{value['unit']}")
        w = helper(value["n"], value["mode"]) if "mode" in value else helper(value["n"])
        return {"limit": w.limit, "seconds": w.seconds, "mode": w.mode}
    else:
        raise AssertionError(f"unknown setting {setting!r}")
    return None


@pytest.mark.parametrize("case", load("config.json"), ids=ids(load("config.json")))
def test_config(case: dict[str, Any]) -> None:
    exp = case["expect"]
    try:
        normalized = _configure(case["setting"], num(case["value"]))
    except (ValueError, TypeError) as exc:
        assert not exp["valid"], f"{case['id']} {case['title']}: refused ({exc})"
        return
    assert exp["valid"], f"{case['id']} {case['title']}: accepted"
    if "normalized" in exp:
        assert normalized == exp["normalized"], f"{case['id']}: normalized to {normalized!r}"


# -- address.json (SPEC A) ----------------------------------------------------------


@pytest.mark.parametrize("case", load("address.json"), ids=ids(load("address.json")))
def test_address(case: dict[str, Any]) -> None:
    cfg = case["config"]
    conf = ClientIpConfig(
        cfg.get("trusted_proxies", ()),
        header=cfg.get("header", "x-forwarded-for"),
        ipv4_prefix=cfg.get("ipv4_prefix", 32),
        ipv6_prefix=cfg.get("ipv6_prefix", 64),
    )
    hs: dict[str, list[str]] = case["headers"]
    got = conf.resolve(case["peer"], hs.get(conf.header, []))
    exp = case["expect"]
    client = None if got.address is None else str(got.address)
    assert (client, got.identity) == (exp["client"], exp["identity"]), f"{case['id']} {case['title']}"
    # the limiter's own path (with its fast path for plain IPv4) agrees
    fast = conf.of(case["peer"], lambda name: hs.get(name, []))
    assert fast == exp["identity"], f"{case['id']} {case['title']}: the limiter's path gave {fast!r}"


# -- keys.json, header_identity.json (SPEC K, I) ------------------------------------


@pytest.mark.parametrize("case", load("keys.json"), ids=ids(load("keys.json")))
def test_keys(case: dict[str, Any]) -> None:
    identity = case["identity"]
    if not identity:  # SPEC I1, as the limiter skips it
        got: dict[str, Any] = {"skip": True}
    else:
        got = {"key": KeyBuilder(case["prefix"]).key(case["policy"], identity, route=case["route"], tag=case["tag"])}
    assert got == case["expect"], f"{case['id']} {case['title']}"


@pytest.mark.parametrize("case", load("header_identity.json"), ids=ids(load("header_identity.json")))
def test_header_identity(case: dict[str, Any]) -> None:
    try:
        identity = header_identity(case["header"], case["lines"])
        got: dict[str, Any] = {"skip": True} if identity is None else {"key": KeyBuilder("rl").key("key", identity)}
    except BadHeader:
        got = {"bad_request": True}
    assert got == case["expect"], f"{case['id']} {case['title']}"


# -- response.json (SPEC D, H, P) ---------------------------------------------------


def _headers_match(case_id: str, expected: dict[str, str | None], got: list[tuple[str, str]]) -> None:
    have: dict[str, list[str]] = {}
    for k, v in got:
        have.setdefault(k.lower(), []).append(v)
    for name, value in expected.items():
        values = have.get(name)
        if value is None:
            assert values is None, f"{case_id}: header {name} should be absent, got {values}"
        else:
            assert values == [value], f"{case_id}: header {name}: got {values}, want {value!r}"


@pytest.mark.parametrize("case", load("response.json"), ids=ids(load("response.json")))
def test_response(case: dict[str, Any]) -> None:
    results = tuple(
        PolicyResult(
            r["name"], f"rl:{r['name']}:x", r["capacity"], r["rate"], r["cost"], r["allowed"],
            r["remaining"], r["retry_after"], r["reset_after"], r["shadow"], r.get("kind", "bucket"),
            # SPEC W2: a window's seconds are limit / rate
            r["capacity"] / r["rate"] if r.get("kind") == "window" else None,
        )
        for r in num(case["results"])
    )
    for r in num(case["results"]):
        assert set(r) <= {
            "name", "capacity", "rate", "cost", "shadow", "allowed", "remaining", "retry_after", "reset_after", "kind",
        }, f"{case['id']}: unknown result field in {sorted(r)}"
        assert r.get("kind", "bucket") in ("bucket", "window", "in_flight"), f"{case['id']}: unknown kind"
    d = Decision.of(results)
    exp = case["expect"]
    agg = exp["decision"]
    got_agg = {
        "outcome": d.outcome.value, "allowed": d.allowed, "remaining": d.remaining,
        "retry_after": d.retry_after, "reset_after": d.reset_after,
        "violated": list(d.violated), "shadow_limited": list(d.shadow_limited),
    }
    assert got_agg == agg, f"{case['id']} {case['title']}: decision"
    legacy = case["legacy"]
    status, hs, body = respond(
        d, legacy=legacy is not None, legacy_reset=legacy or "unix", now_unix=case["now_unix"]
    )
    assert status == exp["status"], f"{case['id']}: status {status}"
    _headers_match(case["id"], exp["headers"], hs)
    assert (None if body is None else body.decode()) == exp["body"], f"{case['id']} {case['title']}: body"


# -- limiter.json (SPEC L, R, B, F, S, I2), scripted --------------------------------


class FakeClock:
    """SPEC T1: the case sets the time (at_ms)."""

    def __init__(self) -> None:
        self.ms = 0.0

    def monotonic(self) -> float:
        return self.ms / 1000

    def time(self) -> float:
        return WALL0 + self.ms / 1000


class Cancelled(BaseException):
    """A held sync call whose client went away (the thread's check is abandoned)."""


def decode_command(packed: bytes) -> list[Any]:
    """The arguments of one RESP-encoded command, as text (:func:`same_call` reads the
    numbers)."""
    value = read_resp(packed)
    assert isinstance(value, list)
    return [v.decode() for v in value]


LUA = lua_sources()
#: SPEC E (README): the library's SHA-1 and texts as the package ships them
TEXTS = {"{sha}": LUA.sha, "{script}": LUA.script, "{functions}": LUA.functions}
ID = re.compile(r"^\{id:([A-Za-z0-9_]+)\}$")


class Placeholders:
    """SPEC E (README): ``{sha}``, ``{script}``, ``{functions}``, and ``{id:x}`` bound to
    the first id the client sent there (every later one the same; two names never one id)."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def fill(self, v: Any) -> Any:
        """A reply's or an expectation's placeholders, as the ids were bound."""
        if isinstance(v, list):
            return [self.fill(x) for x in v]
        if isinstance(v, dict):
            return {k: self.fill(x) for k, x in v.items()}
        if not isinstance(v, str):
            return v
        if v in TEXTS:
            return TEXTS[v]
        m = ID.match(v)
        if m:
            assert m[1] in self.ids, f"{v} in a reply before any call bound it"
            return self.ids[m[1]]
        return v

    def matches(self, want: str, got: str) -> bool:
        m = ID.match(want)
        if m is None:
            return got == TEXTS.get(want, want)
        if not re.fullmatch(r"[0-9a-f]{16}", got):
            return False
        if m[1] in self.ids:
            return self.ids[m[1]] == got
        if got in self.ids.values():
            return False  # E4: every id fresh
        self.ids[m[1]] = got
        return True


def encode_reply(reply: Any) -> bytes:
    """A scripted reply as the module writes it under RESP3: in each array the first
    field an integer, the other numbers doubles, ids bulk strings, null as null;
    nested arrays (TB.MTAKE's per-key arrays, TB.ACQUIRE ... TAKE's aggregate and
    per-bucket arrays) alike. A script's numbers are strings (bulk strings, E7); a
    reply that is a string alone (SCRIPT LOAD's, FUNCTION LOAD's) is a bulk string."""
    if isinstance(reply, str):
        return b"$%d\r\n%s\r\n" % (len(reply.encode()), reply.encode())
    assert isinstance(reply, list)
    parts = [b"*%d\r\n" % len(reply)]
    for i, v in enumerate(reply):
        if isinstance(v, list):
            parts.append(encode_reply(v))
        elif v is None:
            parts.append(b"_\r\n")
        elif isinstance(v, str):
            parts.append(b"$%d\r\n%s\r\n" % (len(v), v.encode()))
        elif i == 0:
            parts.append(b":%d\r\n" % int(v))
        else:
            parts.append(b",%r\r\n" % float(v))
    return b"".join(parts)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def same_call(got: list[Any], want: list[Any], names: Placeholders | None = None) -> bool:
    """Names and keys exactly (placeholders bound by ``names``), numbers numerically."""
    if len(got) != len(want):
        return False
    names = names or Placeholders()
    for g, w in zip(got, want):
        if isinstance(w, str):
            if not names.matches(w, str(g)):
                return False
        else:
            n = g if isinstance(g, float) else _number(str(g))
            if n is None or not math.isclose(n, float(w), rel_tol=1e-12, abs_tol=0.0):
                return False
    return True


def redis_error(message: str) -> BaseException:
    """An error reply as redis-py's parser raises it (``CROSSSLOT ...`` is its
    ClusterCrossSlotError, ``NOPERM ...`` its NoPermissionError, the code cut off)."""
    error: BaseException = BaseParser.parse_error(message)  # type: ignore[no-untyped-call]
    return error


class Script:
    """The calls a step must make, in order, and how each is answered."""

    def __init__(self, case_id: str) -> None:
        self.case_id = case_id
        self.calls: deque[dict[str, Any]] = deque()
        self.unexpected: list[list[Any]] = []
        self.held: dict[str, Any] = {}
        self.hold_seen = threading.Event()
        self.names = Placeholders()

    def next(self, args: list[Any]) -> dict[str, Any]:
        if not self.calls:
            self.unexpected.append(args)
            raise AssertionError(f"{self.case_id}: unexpected call {args}")
        exp = self.calls.popleft()
        if not same_call(args, exp["call"], self.names):
            self.unexpected.append(args)
            raise AssertionError(f"{self.case_id}: call {args}, the case lists {exp['call']}")
        return {k: self.names.fill(v) if k == "reply" else v for k, v in exp.items()}


#: the calls of the script backend (SPEC E2, E3) a fake answers through ``command``
SCRIPT_CALLS = {"FCALL", "FCALL_RO", "EVALSHA", "EVALSHA_RO", "SCRIPT", "FUNCTION"}


class FakeAsyncClient(AsyncClient):
    """The typed client with a scripted store behind it."""

    server = "fake:6379"

    def __init__(self, script: Script) -> None:
        self.script = script

    async def _answer(self, exp: dict[str, Any]) -> Any:
        if "reply" in exp:
            return exp["reply"]
        if "error" in exp:
            return RespError(exp["error"])
        if exp.get("timeout"):
            await asyncio.Event().wait()  # never answered: the limiter's timeout fires
        if exp.get("connection_error"):
            raise redis.exceptions.ConnectionError("fake: connection refused")
        name = exp["hold"]
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.script.held[name] = fut
        self.script.hold_seen.set()
        return await fut

    async def call_packed(self, packed: bytes, read: Callable[[bytes], Any] = read_resp) -> Any:
        exp = self.script.next(decode_command(packed))
        answer = await self._answer(exp)
        if isinstance(answer, RespError):
            raise redis_error(answer)
        value = read(encode_reply(answer))
        if isinstance(value, RespError):
            raise redis_error(value)
        return value

    async def command(self, *args: Any) -> Any:
        """A script call the backend sends as it is (a refund through the scripts)."""
        assert args and str(args[0]).upper() in SCRIPT_CALLS, f"{self.script.case_id}: a startup call {list(args)} in a limiter case"
        return await self.call_packed(packed(*args))

    async def refund_many(self, buckets: Any, *, now: float | None = None) -> list[Any]:
        if self.backend is not None and await self._scripts() is not None:
            return await super().refund_many(buckets, now=now)  # one script call each, as sent
        out = []
        for b in buckets:
            exp = self.script.next(["TB.REFUND", b.key, repr(float(b.capacity)), repr(float(b.rate)), repr(float(b.n))])
            answer = await self._answer(exp)
            if isinstance(answer, RespError):
                raise redis_error(answer)
            out.append(answer)
        return out

    async def aclose(self) -> None:
        pass


class FakeSyncClient(Client):
    server = "fake:6379"

    def __init__(self, script: Script) -> None:
        self.script = script

    def _answer(self, exp: dict[str, Any]) -> Any:
        if "reply" in exp:
            return exp["reply"]
        if "error" in exp:
            raise redis_error(exp["error"])
        if exp.get("timeout"):
            raise redis.exceptions.TimeoutError("Timeout reading from socket")  # the socket timeout
        if exp.get("connection_error"):
            raise redis.exceptions.ConnectionError("fake: connection refused")
        name = exp["hold"]
        box: dict[str, Any] = {"event": threading.Event()}
        self.script.held[name] = box
        self.script.hold_seen.set()
        box["event"].wait(10)
        if "cancel" in box:
            raise Cancelled
        if "error" in box:
            raise redis_error(box["error"])
        return box["reply"]

    def call_packed(self, packed: bytes) -> Any:
        return self._answer(self.script.next(decode_command(packed)))

    def command(self, *args: Any) -> Any:
        """A script call the backend sends as it is (a refund through the scripts)."""
        assert args and str(args[0]).upper() in SCRIPT_CALLS, f"{self.script.case_id}: a startup call {list(args)} in a limiter case"
        return self.call_packed(packed(*args))

    def refund_many(self, buckets: Any, *, now: float | None = None) -> list[Any]:
        if self.backend is not None and self._scripts() is not None:
            return super().refund_many(buckets, now=now)  # one script call each, as sent
        return [
            self._answer(self.script.next(["TB.REFUND", b.key, repr(float(b.capacity)), repr(float(b.rate)), repr(float(b.n))]))
            for b in buckets
        ]

    def close(self) -> None:
        pass


def getter(hs: dict[str, list[str]]) -> Callable[[str], list[str]]:
    def get(name: str) -> list[str]:
        return hs.get(name, [])

    return get


class Req:
    """The request the policies' cost and limit functions see."""

    def __init__(self, step: dict[str, Any]) -> None:
        self.cost: dict[str, Any] = num(step.get("cost", {}))
        self.limit: dict[str, Any] = num(step.get("limit", {}))
        self.tier: dict[str, str | None] = step.get("tier", {})


CHECK_FIELDS = {"peer", "headers", "cost", "limit", "tier", "route"}
#: a check without ``route`` matched a route no policy lists and no ``exclude`` names
#: (clients/vectors/README.md)
SOME_ROUTE = "GET /vector"


def route_of(check: dict[str, Any]) -> str | None:
    unknown = set(check) - CHECK_FIELDS
    assert not unknown, f"unknown check fields {sorted(unknown)}"
    route: str | None = check.get("route", SOME_ROUTE)
    return route


def build_policies(case: dict[str, Any]) -> list[Policy]:
    checks = [s["check"] for s in case["steps"] if "check" in s]
    out = []
    for p in case["limiter"]["policies"]:
        name = p["name"]
        extra = set(p) - {
            "name", "capacity", "rate", "cost", "shadow", "key", "window", "in_flight", "settle_later",
            "routes", "per_route", "tiers", "default_tier",
        }
        assert not extra, f"{case['id']}: unknown policy fields {extra}"
        base: Any
        if "tiers" in p:  # SPEC L2: tiered(), its limit resolved per request
            base = None
        elif "window" in p:  # SPEC W1
            w = p["window"]
            base = Limit.window(w["limit"], w["seconds"], w["mode"])
        elif "in_flight" in p:  # SPEC N1, N7
            f = p["in_flight"]
            unknown = set(f) - {"limit", "lease_ms", "max_duration_ms"}
            assert not unknown, f"{case['id']}: unknown in_flight fields {sorted(unknown)}"
            if "max_duration_ms" in f:
                base = Limit.in_flight(f["limit"], f["lease_ms"] / 1000, f["max_duration_ms"] / 1000)
            else:  # the default, 300 s
                base = Limit.in_flight(f["limit"], f["lease_ms"] / 1000)
        else:
            base = Limit(p["capacity"], p["rate"])
        static_cost = num(p.get("cost", 1))
        key_spec = p.get("key", {"kind": "client_ip"})
        kind = key_spec["kind"]
        if kind == "client_ip":
            key: Any = Key.client_ip()
        elif kind == "header":
            key = Key.header(key_spec["name"])
        elif kind == "fixed":
            key = Key.fixed(key_spec["value"])
        else:
            raise AssertionError(f"{case['id']}: unknown key kind {kind!r}")
        cost: Any = static_cost
        if any(name in c.get("cost", {}) for c in checks):  # the policy has a cost function
            def cost(req: Req, name: str = name, default: Any = static_cost) -> Any:
                return req.cost.get(name, default)
        scope: dict[str, Any] = {"routes": p.get("routes"), "per_route": bool(p.get("per_route", False))}
        if "tiers" in p:  # SPEC L2: the tier function returns the check's `tier`
            tiers = {t: Limit(num(v["capacity"]), num(v["rate"])) for t, v in p["tiers"].items()}

            def tier_of(req: Req, name: str = name) -> str | None:
                return req.tier.get(name)

            out.append(tiered(
                name, tiers, tier_of, default=p.get("default_tier"), key=key, cost=cost,
                shadow=bool(p.get("shadow", False)), **scope,
            ))
            continue
        limit: Any = base
        if any(name in c.get("limit", {}) for c in checks):  # ... a limit function
            def limit(req: Req, name: str = name, default: Limit = base) -> Limit | None:
                if name not in req.limit:
                    return default
                got = req.limit[name]  # null: the function returns nothing (L2)
                return None if got is None else Limit(got["capacity"], got["rate"])
        out.append(Policy(
            name, limit, key=key, cost=cost, shadow=bool(p.get("shadow", False)),
            settle_later=bool(p.get("settle_later", False)), **scope,
        ))
    return out


def case_scope(case: dict[str, Any]) -> Scope:
    """SPEC L1, F2: the limiter's exclude, limit_unmatched and refund_on."""
    cfg = case["limiter"]
    return Scope(
        exclude=cfg.get("exclude", ()), limit_unmatched=cfg.get("limit_unmatched", False),
        refund_on=cfg.get("refund_on", ()),
    )


def limiter_options(case: dict[str, Any], clock: FakeClock) -> dict[str, Any]:
    cfg = case["limiter"]
    extra = set(cfg) - {
        "backend", "policies", "fail_open", "timeout_ms", "cooldown_ms", "deny_cache", "exclude", "limit_unmatched", "refund_on",
    }
    assert not extra, f"{case['id']}: unknown limiter settings {extra}"
    opts: dict[str, Any] = {
        "clock": clock,
        "fail_open": cfg.get("fail_open", True),
        "timeout": cfg.get("timeout_ms", 50) / 1000,
        "cooldown": cfg.get("cooldown_ms", 1000) / 1000,
    }
    if "deny_cache" in cfg:
        opts["deny_cache"] = DenyCache(cfg["deny_cache"]["max_entries"])
    return opts


def case_client(case: dict[str, Any], client: Any, clock: FakeClock) -> Any:
    """The client of a case: the module's (TB.* as they are), or SPEC E's scripts as the
    case's ``backend`` says (chosen already: a limiter case runs no startup)."""
    backend = case["limiter"].get("backend")
    if backend is not None:
        assert set(backend) <= {"kind", "via", "client_clock"}, f"{case['id']}: backend {backend}"
        assert backend["kind"] == "scripts", f"{case['id']}: backend kind {backend['kind']!r}"
        client.use_backend(Backend.scripts("127.0.0.1:6379", backend["via"], backend.get("client_clock", False), clock.time))
    return client


def check_result(case_id: str, step_no: int, limiter: Any, d: Decision, expect: dict[str, Any]) -> None:
    where = f"{case_id} step {step_no}"
    status, hs, body = limiter.response(d)
    got = {
        "outcome": d.outcome.value, "allowed": d.allowed, "from_cache": d.from_cache, "status": status,
        "violated": list(d.violated), "shadow_limited": list(d.shadow_limited),
        "body": None if body is None else body.decode(),
        "lease": None if d.lease is None else {"key": d.lease.key, "id": d.lease.id, "policy": d.lease.policy},
    }
    for k, want in expect.items():
        if k == "headers":
            _headers_match(where, want, hs)
        elif k == "results":
            check_results(where, d.results, want)
        elif k == "returns":
            continue
        else:
            assert k in got, f"{where}: unknown expectation {k!r}"
            assert got[k] == want, f"{where}: {k} is {got[k]!r}, want {want!r}"


RESULT_FIELDS = {
    "name", "key", "capacity", "rate", "cost", "allowed", "remaining", "retry_after", "reset_after", "shadow",
}


def check_results(where: str, got: tuple[PolicyResult, ...], want: list[dict[str, Any]]) -> None:
    """SPEC D2: one result per applied policy, in order, every field compared (numbers
    numerically)."""
    assert [r.name for r in got] == [w["name"] for w in want], f"{where}: results {[r.name for r in got]}"
    for r, w in zip(got, num(want)):
        unknown = set(w) - RESULT_FIELDS
        assert not unknown, f"{where}: unknown result fields {sorted(unknown)}"
        for k, v in w.items():
            assert getattr(r, k) == v, f"{where}: results[{r.name}].{k} is {getattr(r, k)!r}, want {v!r}"


def check_stats(case: dict[str, Any], limiter: Any) -> None:
    for k, want in case.get("expect_stats", {}).items():
        got = getattr(limiter.stats, k)
        assert got == want, f"{case['id']}: stats.{k} is {got}, want {want}"


def _step_kind(case_id: str, i: int, step: dict[str, Any]) -> str:
    kinds = [k for k in KINDS if k in step]
    assert len(kinds) == 1, f"{case_id} step {i}: unknown or ambiguous step kind {sorted(step)}"
    return kinds[0]


def check_hold(where: str, limiter: Any, hold: Hold | None, error: Exception | None, expect: dict[str, Any]) -> None:
    """A take_hold step's expectation (SPEC G1, G2)."""
    if "error" in expect:
        kinds = {"invalid_input": HoldError, "store_error": StoreError}
        assert expect["error"] in kinds, f"{where}: unknown error kind {expect['error']!r}"
        want = kinds[expect["error"]]
        assert isinstance(error, want), f"{where}: hold() did not raise {want.__name__} (got {hold!r}, {error!r})"
        return
    assert not isinstance(error, StoreError), f"{where}: hold() raised {error!r}"
    assert error is None and hold is not None, f"{where}: hold() raised {error!r}"
    status, hs, _ = limiter.hold_response(hold)
    for k, want in expect.items():
        if k == "status":
            assert status == want, f"{where}: status {status}, want {want}"
        elif k == "headers":
            _headers_match(where, want, hs)
        else:
            assert k in ("allowed", "id", "remaining", "retry_after", "key", "policy"), f"{where}: unknown expectation {k!r}"
            assert getattr(hold, k) == want, f"{where}: hold.{k} is {getattr(hold, k)!r}, want {want!r}"


def check_settlement(where: str, got: Any, expect: dict[str, Any]) -> None:
    """A settle step's expectation (SPEC G3)."""
    for k, want in expect.items():
        assert k in ("settled", "remaining", "charged", "reset_after"), f"{where}: unknown expectation {k!r}"
        assert getattr(got, k) == want, f"{where}: settlement.{k} is {getattr(got, k)!r}, want {want!r}"


def check_lease_stats(where: str, limiter: Any, expect: dict[str, Any]) -> None:
    for k, want in expect.items():
        assert k == "leases_in_flight", f"{where}: unknown expectation {k!r}"
        assert limiter.stats.leases_in_flight == want, f"{where}: leases_in_flight {limiter.stats.leases_in_flight}"


def check_renew(where: str, expect: dict[str, Any], renewed: bool, timed_out: bool) -> None:
    """A renew step's expectation (SPEC N5, N7): ``timed_out`` is whether this tick
    ended the request at its max_duration."""
    for k in expect:
        assert k in ("renewed", "timed_out"), f"{where}: unknown expectation {k!r}"
    assert renewed is expect["renewed"], f"{where}: renew() gave {renewed}"
    if "timed_out" in expect:
        assert timed_out is expect["timed_out"], f"{where}: timed out {timed_out}, want {expect['timed_out']}"


def held_name(step: dict[str, Any]) -> str | None:
    """The name of a step's held call (its answer comes with a later release step)."""
    return next((r["hold"] for r in step["redis"] if "hold" in r), None)


async def run_async(case: dict[str, Any]) -> None:
    clock = FakeClock()
    script = Script(case["id"])
    limiter = RateLimiter(case_client(case, FakeAsyncClient(script), clock), **limiter_options(case, clock))
    policies = build_policies(case)
    scope = case_scope(case)
    decisions: dict[int, Decision] = {}
    holds: dict[int, Hold | None] = {}
    # a held call: its step, its task, and whether it is a check's or a hold's
    held: dict[str, tuple[int, asyncio.Task[Any], str]] = {}

    async def await_held(where: str, name: str) -> None:
        for _ in range(1000):
            await asyncio.sleep(0)
            if name in script.held:
                return
        raise AssertionError(f"{where}: the held call was not made")

    async def take_hold(th: dict[str, Any]) -> tuple[Hold | None, Exception | None]:
        try:
            return await decisions[th["check"]].hold(th["policy"], num(th["estimate"]), th["ttl_ms"] / 1000), None
        except (HoldError, StoreError) as exc:
            return None, exc

    for i, step in enumerate(case["steps"]):
        kind = _step_kind(case["id"], i, step)
        clock.ms = step["at_ms"]
        where = f"{case['id']} step {i}"
        if kind == "check":
            c = step["check"]
            hs: dict[str, list[str]] = c.get("headers", {})
            script.calls.extend(step["redis"])
            task: asyncio.Task[Any] = asyncio.create_task(
                limiter.check(Req(c), policies, route_of(c), peer=c["peer"], headers=getter(hs), scope=scope)
            )
            name = held_name(step)
            if name is not None:
                await await_held(where, name)
                held[name] = (i, task, "check")
                assert step["expect"] is None, f"{where}: a held check is checked at its release"
                continue
            d = await asyncio.wait_for(task, 5)
            decisions[i] = d
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
            check_result(case["id"], i, limiter, d, script.names.fill(step["expect"]))
        elif kind == "release":
            idx, task, what = held.pop(step["release"])
            fut = script.held.pop(step["release"])
            fut.set_result(script.names.fill(step["reply"]) if "reply" in step else RespError(step["error"]))
            got = await asyncio.wait_for(task, 5)
            if what == "check":
                decisions[idx] = got
                check_result(case["id"], i, limiter, got, script.names.fill(step["expect"]))
            else:
                holds[idx] = got[0]
                check_hold(where, limiter, got[0], got[1], script.names.fill(step["expect"]))
        elif kind == "cancel":
            idx, task, _ = held.pop(step["cancel"])
            script.held.pop(step["cancel"])
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elif kind in ("finish", "renew", "take_hold", "settle", "renew_hold"):
            script.calls.extend(step["redis"])
            if kind == "finish":
                await asyncio.wait_for(decisions[step["finish"]].finish(step.get("status")), 5)
                check_lease_stats(where, limiter, step["expect"])
            elif kind == "renew":
                d = decisions[step["renew"]]
                before = d.timed_out
                renewed = await asyncio.wait_for(d.renew(), 5)
                check_renew(where, step["expect"], renewed, d.timed_out and not before)
            elif kind == "take_hold":
                name = held_name(step)
                if name is not None:
                    task = asyncio.create_task(take_hold(step["take_hold"]))
                    await await_held(where, name)
                    held[name] = (i, task, "hold")
                    assert step["expect"] is None, f"{where}: a held hold is checked at its release"
                    continue
                hold_got, error = await asyncio.wait_for(take_hold(step["take_hold"]), 5)
                holds[i] = hold_got
                check_hold(where, limiter, hold_got, error, script.names.fill(step["expect"]))
            elif kind == "renew_hold":
                hold_of = holds[step["renew_hold"]]
                renewed = False if hold_of is None else await asyncio.wait_for(hold_of.renew(), 5)
                assert step["expect"] == {"renewed": renewed}, f"{where}: hold.renew() gave {renewed}"
            else:
                st = step["settle"]
                hold_of = holds[st["hold"]]
                assert hold_of is not None, f"{where}: no hold at step {st['hold']}"
                check_settlement(where, await asyncio.wait_for(hold_of.settle(num(st["actual"])), 5), step["expect"])
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
        else:  # refund
            script.calls.extend(step["redis"])
            returned = await asyncio.wait_for(decisions[step["refund"]].refund(), 5)
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
            assert returned is step["expect"]["returns"], f"{where}: refund() returned {returned}"
    for _, task, _ in held.values():  # never released: dropped
        task.cancel()
    assert not script.unexpected, f"{case['id']}: unexpected calls {script.unexpected}"
    check_stats(case, limiter)


def run_sync(case: dict[str, Any]) -> None:
    clock = FakeClock()
    script = Script(case["id"])
    limiter = SyncRateLimiter(case_client(case, FakeSyncClient(script), clock), **limiter_options(case, clock))
    policies = build_policies(case)
    scope = case_scope(case)
    decisions: dict[int, Decision] = {}
    holds: dict[int, Hold | None] = {}
    # a held call: its step, its thread, what it gave, and whether it is a check's or a hold's
    held: dict[str, tuple[int, threading.Thread, dict[str, Any], str]] = {}

    def take_hold(th: dict[str, Any]) -> tuple[Hold | None, Exception | None]:
        try:
            return decisions[th["check"]].hold_sync(th["policy"], num(th["estimate"]), th["ttl_ms"] / 1000), None
        except (HoldError, StoreError) as exc:
            return None, exc

    def in_thread(where: str, name: str, run: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
        out: dict[str, Any] = {}

        def body() -> None:
            try:
                out["value"] = run()
            except Cancelled:
                out["cancelled"] = True

        script.hold_seen.clear()
        t = threading.Thread(target=body, daemon=True)
        t.start()
        assert script.hold_seen.wait(5), f"{where}: the held call was not made"
        return t, out

    for i, step in enumerate(case["steps"]):
        kind = _step_kind(case["id"], i, step)
        clock.ms = step["at_ms"]
        where = f"{case['id']} step {i} (sync)"
        if kind == "check":
            c = step["check"]
            hs: dict[str, list[str]] = c.get("headers", {})
            script.calls.extend(step["redis"])

            def run(c: dict[str, Any] = c, hs: dict[str, list[str]] = hs) -> Decision:
                return limiter.check(Req(c), policies, route_of(c), peer=c["peer"], headers=getter(hs), scope=scope)

            name = held_name(step)
            if name is not None:
                t, out = in_thread(where, name, run)
                held[name] = (i, t, out, "check")
                continue
            d = run()
            decisions[i] = d
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
            check_result(case["id"] + " (sync)", i, limiter, d, script.names.fill(step["expect"]))
        elif kind == "release":
            idx, t, out, what = held.pop(step["release"])
            box = script.held.pop(step["release"])
            box.update({"reply": script.names.fill(step["reply"])} if "reply" in step else {"error": step["error"]})
            box["event"].set()
            t.join(5)
            if what == "check":
                decisions[idx] = out["value"]
                check_result(case["id"] + " (sync)", i, limiter, out["value"], script.names.fill(step["expect"]))
            else:
                holds[idx] = out["value"][0]
                check_hold(where, limiter, out["value"][0], out["value"][1], script.names.fill(step["expect"]))
        elif kind == "cancel":
            idx, t, out, _ = held.pop(step["cancel"])
            box = script.held.pop(step["cancel"])
            box["cancel"] = True
            box["event"].set()
            t.join(5)
            assert out.get("cancelled"), f"{where}: the cancelled check did not end"
        elif kind in ("finish", "renew", "take_hold", "settle", "renew_hold"):
            script.calls.extend(step["redis"])
            if kind == "finish":
                decisions[step["finish"]].finish_sync(step.get("status"))
                check_lease_stats(where, limiter, step["expect"])
            elif kind == "renew":
                d = decisions[step["renew"]]
                before = d.timed_out
                renewed = d.renew_sync()
                check_renew(where, step["expect"], renewed, d.timed_out and not before)
            elif kind == "take_hold":
                th = step["take_hold"]
                name = held_name(step)
                if name is not None:
                    t, out = in_thread(where, name, functools.partial(take_hold, th))
                    held[name] = (i, t, out, "hold")
                    assert step["expect"] is None, f"{where}: a held hold is checked at its release"
                    continue
                hold_got, error = take_hold(th)
                holds[i] = hold_got
                check_hold(where, limiter, hold_got, error, script.names.fill(step["expect"]))
            elif kind == "renew_hold":
                hold_of = holds[step["renew_hold"]]
                renewed = False if hold_of is None else hold_of.renew_sync()
                assert step["expect"] == {"renewed": renewed}, f"{where}: hold.renew_sync() gave {renewed}"
            else:
                st = step["settle"]
                hold_of = holds[st["hold"]]
                assert hold_of is not None, f"{where}: no hold at step {st['hold']}"
                check_settlement(where, hold_of.settle_sync(num(st["actual"])), step["expect"])
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
        else:
            script.calls.extend(step["redis"])
            returned = decisions[step["refund"]].refund_sync()
            assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
            assert returned is step["expect"]["returns"], f"{where}: refund_sync() returned {returned}"
    for name in list(held):  # never released: dropped
        box = script.held.pop(name)
        box["cancel"] = True
        box["event"].set()
    assert not script.unexpected, f"{case['id']} (sync): unexpected calls {script.unexpected}"
    check_stats(case, limiter)


#: limiter.json, then limiter-scripts.json: the same cases on the script backend (issue 42:
#: the vectors run on both backends; clients/vectors/scripts_form.py makes the file)
LIMITER = load("limiter.json") + load("limiter-scripts.json")


@pytest.mark.parametrize("case", LIMITER, ids=ids(LIMITER))
async def test_limiter_async(case: dict[str, Any]) -> None:
    with pending(case["id"]):
        await run_async(case)


@pytest.mark.parametrize("case", LIMITER, ids=ids(LIMITER))
def test_limiter_sync(case: dict[str, Any]) -> None:
    with pending(case["id"]):
        run_sync(case)


def test_sync_breaker_one_probe_across_threads() -> None:
    """SPEC B3 (D17): after the cool-down, of many threads checking at once exactly
    one reaches Redis; the others keep the failure mode until it answers."""
    clock = FakeClock()
    script = Script("b3-threads")
    limiter = SyncRateLimiter(FakeSyncClient(script), clock=clock)
    policies = [Policy("ip", Limit(2, 1))]
    script.calls.append({"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "connection_error": True})
    assert limiter.check(None, policies, peer="203.0.113.9").outcome.value == "store_error"
    clock.ms = 1100
    script.calls.append({"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "hold": "p"})
    results: list[Decision] = []
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        results.append(limiter.check(None, policies, peer="203.0.113.9"))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    assert script.hold_seen.wait(5)
    for t in threads:
        t.join(0.2)
    assert len(results) == 7 and all(d.outcome.value == "store_error" for d in results)
    box = script.held.pop("p")
    box["reply"] = [1, 1, 0, 1]
    box["event"].set()
    for t in threads:
        t.join(5)
    assert sorted(d.outcome.value for d in results) == ["allowed"] + ["store_error"] * 7
    assert not script.unexpected


# A case in the vectors' format that clients/vectors does not hold yet (proposed for
# limiter.json): lim-017 passes whether a probe stopped by the open breaker gives its
# claim back (SPEC R6) or drops the entry; this one tells them apart. After the
# cool-down, the entry given back is claimed by the next probe, so a second check
# while that probe is out is refused from the cache; had the entry been dropped, it
# would take the failure mode (the breaker's probe is out).
R6_CASE: dict[str, Any] = {
    "id": "py-r6-001",
    "rule": "R6",
    "title": "D12: the claim given back is probed again after the cool-down, one probe at a time",
    "limiter": {
        "policies": [{"name": "ip", "capacity": 2, "rate": 1, "cost": 1}],
        "deny_cache": {"max_entries": 100},
        "timeout_ms": 60000,
    },
    "steps": [
        {"at_ms": 0, "check": {"peer": "203.0.113.9", "headers": {}},
         "redis": [{"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "reply": [0, 0, 1.5, 2]}],
         "expect": {"outcome": "limited", "from_cache": False}},
        {"at_ms": 1000, "check": {"peer": "198.51.100.7", "headers": {}},
         "redis": [{"call": ["TB.TAKE", "rl:ip:198.51.100.7", 2, 1, 1], "connection_error": True}],
         "expect": {"outcome": "store_error"}},
        {"at_ms": 1600, "check": {"peer": "203.0.113.9", "headers": {}}, "redis": [],
         "expect": {"outcome": "store_error", "from_cache": False}},
        {"at_ms": 2100, "check": {"peer": "203.0.113.9", "headers": {}},
         "redis": [{"call": ["TB.TAKE", "rl:ip:203.0.113.9", 2, 1, 1], "hold": "p"}], "expect": None},
        {"at_ms": 2110, "check": {"peer": "203.0.113.9", "headers": {}}, "redis": [],
         "expect": {"outcome": "limited", "from_cache": True, "headers": {"retry-after": "1"}}},
        {"at_ms": 2120, "release": "p", "reply": [1, 1, 0, 1],
         "expect": {"outcome": "allowed", "from_cache": False}},
    ],
}


async def test_r6_claim_given_back_async() -> None:
    await run_async(R6_CASE)


def test_r6_claim_given_back_sync() -> None:
    run_sync(R6_CASE)


# -- startup.json (SPEC U1-U4, K6), scripted ------------------------------------------


class StartupScript:
    """The calls a startup must make, in order (the README's ``redis``), and how each
    is answered; ``flat``: HELLO's map as RESP2's flat list (what redis-py returns
    unless the connection is RESP3)."""

    def __init__(self, case: dict[str, Any], flat: bool) -> None:
        self.case_id = case["id"]
        self.calls: deque[dict[str, Any]] = deque(case["redis"])
        self.flat = flat
        self.unexpected: list[list[str]] = []

    def answer(self, args: tuple[str, ...]) -> Any:
        if not self.calls:
            self.unexpected.append(list(args))
            raise AssertionError(f"{self.case_id}: unexpected call {list(args)}")
        exp = self.calls.popleft()
        if not same_call(list(args), exp["call"]):
            self.unexpected.append(list(args))
            raise AssertionError(f"{self.case_id}: call {list(args)}, the case lists {exp['call']}")
        unknown = set(exp) - {"call", "reply", "error", "connection_error"}
        assert not unknown, f"{self.case_id}: unknown call fields {sorted(unknown)}"
        if exp.get("connection_error"):
            raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
        if "error" in exp:
            raise redis_error(exp["error"])
        return self.encode(Placeholders().fill(exp["reply"]))

    def encode(self, reply: Any) -> Any:
        """As redis-py returns a raw reply: strings as bytes; a map as a dict, or flat."""
        if isinstance(reply, dict):
            pairs = [(self.encode(k), self.encode(v)) for k, v in reply.items()]
            return [x for kv in pairs for x in kv] if self.flat else dict(pairs)
        if isinstance(reply, list):
            return [self.encode(v) for v in reply]
        if isinstance(reply, str):
            return reply.encode()
        return reply


class StartupAsyncClient(AsyncClient):
    server = "127.0.0.1:6379"

    def __init__(self, script: StartupScript) -> None:
        self.script = script

    async def command(self, *args: str) -> Any:
        return self.script.answer(args)


class StartupSyncClient(Client):
    server = "127.0.0.1:6379"

    def __init__(self, script: StartupScript) -> None:
        self.script = script

    def command(self, *args: str) -> Any:
        return self.script.answer(args)


class Lines(logging.Handler):
    """The warnings (``lines``) and the INFO lines (``infos``: E6's) a start logs."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.infos: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        (self.infos if record.levelno < logging.WARNING else self.lines).append(record.getMessage())


def startup_limiter(case: dict[str, Any], make: Callable[..., Any], lines: Lines) -> tuple[Any, list[Policy]]:
    cfg = case["limiter"]
    unknown = set(cfg) - {"name", "policies", "tag", "start_degraded", "backend"}
    assert not unknown, f"{case['id']}: unknown limiter settings {sorted(unknown)}"
    log = logging.getLogger(f"redis_tb.vectors.{case['id']}")
    log.propagate = False
    log.handlers[:] = [lines]
    log.setLevel(logging.DEBUG)
    limiter = make(
        name=cfg["name"], logger=log, start_degraded=cfg.get("start_degraded", False),
        hash_tag=(lambda request: "t") if cfg.get("tag") else None, backend=cfg.get("backend", "auto"),
    )
    return limiter, build_policies({"id": case["id"], "limiter": cfg, "steps": []})


def check_started(
    case: dict[str, Any], error: Exception | None, lines: Lines, script: StartupScript, limiter: Any
) -> None:
    where = f"{case['id']} {case['title']}"
    exp = case["expect"]
    assert set(exp) <= {"error", "started", "log", "backend", "backend_log"}, f"{where}: unknown expectation {sorted(exp)}"
    assert not script.unexpected, f"{where}: unexpected calls {script.unexpected}"
    assert not script.calls, f"{where}: calls not made: {list(script.calls)}"
    # SPEC E6: the backend chosen (None until a degraded start's first call) and its one line
    assert limiter.stats.backend == exp.get("backend"), f"{where}: stats.backend is {limiter.stats.backend!r}"
    backend_log = exp.get("backend_log")
    assert lines.infos == ([] if backend_log is None else [backend_log]), f"{where}: the backend's line {lines.infos}"
    if "error" in exp:
        assert error is not None, f"{where}: started, want {exp['error']!r}"
        pattern = re.escape(exp["error"]).replace(re.escape("{reason}"), "[^\\n]+")
        pattern = pattern.replace(re.escape("{start_degraded}"), "start_degraded")
        assert isinstance(error, StartupError), f"{where}: raised {error!r}"
        assert re.fullmatch(pattern, str(error)), f"{where}: {str(error)!r}"
        return
    assert error is None, f"{where}: failed with {error!r}"
    assert exp["started"] is True
    want = [] if exp["log"] is None else [exp["log"]]
    assert lines.lines == want, f"{where}: logged {lines.lines}"


STARTUP = load("startup.json")


@pytest.mark.parametrize("flat", [True, False], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", STARTUP, ids=ids(STARTUP))
async def test_startup_async(case: dict[str, Any], flat: bool) -> None:
    with pending(case["id"]):
        await run_startup_async(case, flat)


async def run_startup_async(case: dict[str, Any], flat: bool) -> None:
    script, lines = StartupScript(case, flat), Lines()
    limiter, policies = startup_limiter(case, lambda **o: RateLimiter(StartupAsyncClient(script), **o), lines)
    limiter.register_policies(policies)  # as the adapters do
    error: Exception | None = None
    try:
        await limiter.startup()
    except (StartupError, AssertionError) as exc:
        error = exc
    check_started(case, error, lines, script, limiter)


@pytest.mark.parametrize("flat", [True, False], ids=["resp2", "resp3"])
@pytest.mark.parametrize("case", STARTUP, ids=ids(STARTUP))
def test_startup_sync(case: dict[str, Any], flat: bool) -> None:
    with pending(case["id"]):
        run_startup_sync(case, flat)


def run_startup_sync(case: dict[str, Any], flat: bool) -> None:
    script, lines = StartupScript(case, flat), Lines()
    limiter, policies = startup_limiter(case, lambda **o: SyncRateLimiter(StartupSyncClient(script), **o), lines)
    error: Exception | None = None
    try:
        limiter.startup(policies)  # as code that calls check() itself does
    except (StartupError, AssertionError) as exc:
        error = exc
    check_started(case, error, lines, script, limiter)
