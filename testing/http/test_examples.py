"""Every example app, black box, over real HTTP, from examples/manifest.json.

Each check is parametrized over the manifest's examples; `example` and `stack` are
session-scoped, so one example's checks (these and test_streams.py's) run together
against one app and one redis-server (flushed before each check). Each check carries the manifest's name for it
(`@case`, or `route:<id>` for the route table); an example's deviation citing that name
turns the check into xfail(strict=True) for that example (conftest.py).

Only what clients/SPEC.md and the manifest say is asserted: header items and their
numbers (H1-H3), problem bodies (P1-P3, P5, P6), shadow policies (S1-S3), the failure
modes (B4, H5), the metric names and labels (M1), the client address (A1, A2). Redis key
names are not (they are the package's business and change with SPEC K1).
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

import pytest

from conftest import DIRECT, MANIFEST, Stack
from tbhttp import http, prom
from tbhttp.procs import APP_BACKEND, BACKEND
from tbhttp.stream import Stream

case = pytest.mark.case
DEMO = MANIFEST["demo"]
POLICIES = {p["name"]: p for p in DEMO["policies"]}
ROUTES = {r["id"]: r for r in DEMO["routes"]}
ACCOUNTS = DEMO["identities"]["accounts"]
MAX_SF = 999_999_999_999_999


def account(plan: str) -> str:
    """The API key of the demo account on `plan`."""
    return next(k for k, a in ACCOUNTS.items() if a["plan"] == plan)


PRO, FREE = account("pro"), account("free")
ITEMS, ORDERS, SEARCH, LOGIN = ROUTES["GET /items/{id}"], ROUTES["POST /orders"], ROUTES["GET /search"], ROUTES["POST /login"]
STREAM = ROUTES["GET /stream"]


def limit(name: str, plan: str | None = None) -> tuple[float, float]:
    """(capacity, rate) of a demo policy (of a plan's tier for a tiered one)."""
    p = POLICIES[name]
    if "tiers" in p:
        t = p["tiers"][plan or p["default_tier"]]
        return t["capacity"], t["rate"]
    if "window" in p:  # SPEC W2: capacity n, rate n / seconds
        w = p["window"]
        return w["limit"], w["limit"] / w["seconds"]
    return p["capacity"], p["rate"]


def clamp(n: int) -> int:
    return max(0, min(MAX_SF, n))


def whole(x: float) -> float:
    """SPEC H2: a quotient within 1e-9 x max(1, x) of a whole number is that number."""
    n = round(x)
    return float(n) if abs(x - n) <= 1e-9 * max(1.0, abs(x)) else x


def policy_item(name: str, plan: str | None = None) -> tuple[str, dict[str, int]]:
    """The RateLimit-Policy item SPEC H2 gives a demo policy: q = floor(capacity), w = ceil(capacity / rate);
    an in-flight policy's is q alone (SPEC N3)."""
    if "in_flight" in POLICIES[name]:
        return name, {"q": POLICIES[name]["in_flight"]["limit"]}
    capacity, rate = limit(name, plan)
    return name, {"q": clamp(math.floor(capacity)), "w": clamp(max(1, math.ceil(whole(capacity / rate))))}


def cost_of(policy: str, size: int | None) -> int:
    c = POLICIES[policy]["cost"]
    if isinstance(c, (int, float)):
        return int(c)
    return max(1, math.ceil((size if size is not None else c["default"]) / c["per"]))


def fresh_item(r: http.Response, name: str, spent: float, plan: str | None = None) -> None:
    """The RateLimit item of `name` on a bucket that was full before `spent` tokens went,
    for a policy that refills far slower than a check runs: r = floor(capacity - spent),
    t = ceil(spent / rate), less at most one second for the time the check took."""
    capacity, rate = limit(name, plan)
    got = r.item(name)
    assert got is not None, f"no {name!r} item in RateLimit:\n{r.describe()}"
    assert set(got) == {"r", "t"}, f"RateLimit {name!r} has parameters {sorted(got)} (SPEC H1: r and t)"
    assert got["r"] == clamp(math.floor(capacity - spent)), (name, got)
    t = math.ceil(whole(spent / rate))
    assert t - 1 <= got["t"] <= t, (name, got, t)


def no_rate_limit_headers(r: http.Response) -> None:
    for h in ("ratelimit", "ratelimit-policy", "retry-after"):
        assert not r.has(h), f"{h} on a response that should carry none:\n{r.describe()}"


def problem_pairs(r: http.Response) -> list[tuple[str, Any]]:
    """The problem body's members in the order written (P6: keys in the order of P1-P4)."""
    assert r.media_type() == "application/problem+json", r.describe()
    pairs: list[tuple[str, Any]] = json.loads(r.body, object_pairs_hook=lambda ps: ps)
    return pairs


def compact(body: bytes) -> bool:
    """No white space outside strings (P6: compact JSON)."""
    outside = re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', body)
    return not re.search(rb"\s", outside)


def p5(x: float) -> str:
    """SPEC P5: clamped to 0..=999999999999, rounded up to the millisecond, no exponent, no trailing zeros."""
    x = max(0.0, min(999_999_999_999.0, x))
    t = x * 1000
    m = round(t) if abs(t - round(t)) <= 1e-9 * max(1.0, t) else math.ceil(t)
    whole_part, frac = divmod(int(m), 1000)
    return str(whole_part) if frac == 0 else f"{whole_part}.{frac:03d}".rstrip("0")


def number_text(body: bytes, key: str) -> str:
    """The literal JSON text of the number member `key` (to check P5's format, not only its value)."""
    m = re.search(rb'"' + key.encode() + rb'":\s*(-?[0-9][0-9.eE+-]*|null)', body)
    assert m is not None, body
    return m.group(1).decode()


def burst(stack: Stack, n: int, **kw: Any) -> list[http.Response]:
    """n requests back to back from one client, for GET /items/1 unless told."""
    method, path = kw.pop("method", ITEMS["method"]), kw.pop("path", ITEMS["path"])
    return [stack.call(method, path, **kw) for _ in range(n)]


def scrape(stack: Stack) -> prom.Samples:
    r = stack.call("GET", ROUTES["GET /metrics"]["path"])
    assert r.status == 200, r.describe()
    assert r.media_type() == "text/plain", r.describe()
    return prom.parse(r.body.decode())


def until(check: Any, what: str, seconds: float = 20) -> Any:
    """Polls check() (a response or None) until it returns something, within `seconds`."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last is not None:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} within {seconds} s")


# -- the route table ------------------------------------------------------------------


def test_route(stack: Stack, route: dict[str, Any]) -> None:
    """Each demo route answers its status; limited routes carry the manifest's policies
    (anonymous: the per-user ones skipped, SPEC I1), unlimited ones no header and no 429."""
    ip = stack.fresh_ip()
    r = stack.call(route["method"], route["path"], ip=ip, json_body=route.get("json"))
    assert r.status == route["status"], r.describe()
    if "content_type" in route:
        assert r.media_type() == route["content_type"], r.describe()
    if r.status < 300:
        assert not r.has("retry-after"), r.describe()
    if not route["limited"]:
        no_rate_limit_headers(r)
        # never limited: more requests than the ip policy's capacity, all answered alike
        more = burst(stack, 2 * int(limit("ip")[0]) + 5, method=route["method"], path=route["path"], ip=ip)
        assert [x.status for x in more] == [route["status"]] * len(more)
        assert not any(x.has("ratelimit") for x in more)
    elif "anonymous" in route:
        assert [n for n, _ in r.policy()] == route["anonymous"], r.describe()
        assert r.names() == route["anonymous"], r.describe()


# -- headers --------------------------------------------------------------------------


@case("headers_anonymous")
def test_headers_anonymous(stack: Stack) -> None:
    """SPEC H1/H2 on a fresh bucket: q, w from the limit; r, t from the one token spent."""
    ip = stack.fresh_ip()
    r = stack.call("GET", ITEMS["path"], ip=ip)
    assert r.status == 200, r.describe()
    assert r.policy() == [policy_item("ip")]
    assert r.ratelimit() == [("ip", {"r": int(limit("ip")[0]) - 1, "t": 1})]
    assert not r.has("retry-after")


@case("headers_plan_tiers")
def test_headers_plan_tiers(stack: Stack) -> None:
    """The per-user policy follows the caller's plan (tiered), in the same header list."""
    ip = stack.fresh_ip()
    free = stack.call("GET", ITEMS["path"], ip=ip, key=FREE)
    pro = stack.call("GET", ITEMS["path"], ip=stack.fresh_ip(), key=PRO)
    assert free.status == pro.status == 200
    assert free.policy() == [policy_item("ip"), policy_item("user", "free")], free.describe()
    assert pro.policy() == [policy_item("ip"), policy_item("user", "pro")], pro.describe()
    assert free.names() == pro.names() == ITEMS["signed_in"]
    fresh_item(free, "user", 1, "free")
    fresh_item(pro, "user", 1, "pro")


@case("client_address")
def test_client_address(stack: Stack) -> None:
    """SPEC A1/A2: X-Forwarded-For is read from the trusted proxy only, right to left."""
    n = 3 * int(limit("ip")[0])
    # from the trusted proxy, each client its own ip bucket: never refused
    spread = [stack.call("GET", ITEMS["path"], ip=stack.fresh_ip()) for _ in range(n)]
    assert [r.status for r in spread] == [200] * n
    assert all(r.item("ip") == {"r": int(limit("ip")[0]) - 1, "t": 1} for r in spread)
    # spoofed entries left of the client's are not the client: one bucket, refused
    client = stack.fresh_ip()
    spoofed = [stack.call("GET", ITEMS["path"], ip=f"203.0.113.{i + 1}, {client}") for i in range(n)]
    assert 429 in [r.status for r in spoofed], "entries left of the client made buckets of their own"
    # not from a trusted proxy: the header is ignored, every request is the peer's
    direct = [stack.call("GET", ITEMS["path"], ip=stack.fresh_ip(), source=DIRECT) for _ in range(n)]
    assert 429 in [r.status for r in direct], "an untrusted peer's X-Forwarded-For was believed"


# -- refusals -------------------------------------------------------------------------


def first_429(responses: list[http.Response]) -> http.Response:
    refused = [r for r in responses if r.status == 429]
    assert refused, f"no 429 in {[r.status for r in responses]}"
    return refused[0]


@case("burst_429")
def test_burst_429(stack: Stack) -> None:
    """Over the ip policy's capacity: 429, Retry-After (H3), the P1 body, r=0 (H1, H6)."""
    responses = burst(stack, 3 * int(limit("ip")[0]), ip=stack.fresh_ip())
    assert [r.status for r in responses[: int(limit("ip")[0])]] == [200] * int(limit("ip")[0])
    for r in [x for x in responses if x.status == 429]:
        body = dict(problem_pairs(r))
        wait = r.header("retry-after")
        assert wait is not None and wait.isdigit(), r.describe()
        assert int(wait) == max(1, math.ceil(body["retry_after"])), r.describe()
        assert body == {
            "type": "about:blank", "title": "Too Many Requests", "status": 429,
            "detail": f"rate limit exceeded for 'ip': retry after {wait} s",
            "violated_policies": ["ip"], "retry_after": body["retry_after"],
        }
        # one token of the ip policy comes back every 1 / rate seconds
        assert 0 < body["retry_after"] <= 1 / limit("ip")[1] + 1e-6, body
        assert policy_item("ip") in r.policy(), r.describe()
        assert r.item("ip") is not None and r.item("ip")["r"] == 0, r.describe()


@case("problem_body_format")
def test_problem_body_format(stack: Stack) -> None:
    """SPEC P6 (compact JSON, keys in P1's order) and P5 (retry_after rounded up to the
    millisecond, no exponent, no trailing zeros) on a 429."""
    r = first_429(burst(stack, 3 * int(limit("ip")[0]), ip=stack.fresh_ip()))
    assert [k for k, _ in problem_pairs(r)] == ["type", "title", "status", "detail", "violated_policies", "retry_after"]
    assert compact(r.body), r.body
    text = number_text(r.body, "retry_after")
    assert text == p5(float(text)), f"retry_after written {text}, SPEC P5 writes {p5(float(text))}"


@case("refusal_headers_list")
def test_refusal_headers_list(stack: Stack) -> None:
    """SPEC H1: a refusal that reached Redis carries every enforced policy of the check."""
    r = first_429(burst(stack, 3 * int(limit("ip")[0]), ip=stack.fresh_ip(), key=FREE))
    assert r.names() == ITEMS["signed_in"], r.describe()
    assert [n for n, _ in r.policy()] == ITEMS["signed_in"], r.describe()


@case("refund_rejected_order")
def test_refund_rejected_order(stack: Stack) -> None:
    """An order the handler rejects is refunded (SPEC F1): the next order finds the
    buckets as if it had not happened. (Before the checks that spend the orders bucket:
    a deny cache keeps a refusal past the FLUSHALL between checks.)"""
    ip = stack.fresh_ip()
    rejected = ROUTES["POST /orders rejected"]
    r = stack.call("POST", rejected["path"], ip=ip, key=FREE, json_body=rejected["json"])
    assert 400 <= r.status < 500, r.describe()
    ok = stack.call("POST", ORDERS["path"], ip=ip, key=FREE, json_body=ORDERS["json"])
    assert ok.status == ORDERS["status"], ok.describe()
    fresh_item(ok, "orders", 1)
    fresh_item(ok, "user", 1, "free")


@case("endpoint_policy")
def test_endpoint_policy(stack: Stack) -> None:
    """POST /orders: its own policy per user, counted down to 0, then 429 naming it with a
    Retry-After of its refill time (one token in 1 / rate seconds)."""
    ip = stack.fresh_ip()
    capacity, rate = limit("orders")
    ok = [stack.call("POST", ORDERS["path"], ip=ip, key=PRO, json_body=ORDERS["json"]) for _ in range(int(capacity))]
    assert [r.status for r in ok] == [ORDERS["status"]] * int(capacity), [r.describe() for r in ok]
    assert all(policy_item("orders") in r.policy() for r in ok)
    assert all(r.names() == ORDERS["signed_in"] for r in ok), ok[0].describe()
    for i, r in enumerate(ok, start=1):
        fresh_item(r, "orders", i)
    refused = stack.call("POST", ORDERS["path"], ip=ip, key=PRO, json_body=ORDERS["json"])
    assert refused.status == 429, refused.describe()
    body = dict(problem_pairs(refused))
    assert body["violated_policies"] == ["orders"]
    wait = int(refused.header("retry-after") or "0")
    assert 1 <= wait <= math.ceil(1 / rate) and wait == max(1, math.ceil(body["retry_after"])), refused.describe()
    assert body["detail"] == f"rate limit exceeded for 'orders': retry after {wait} s"


@case("all_or_nothing")
def test_all_or_nothing(stack: Stack) -> None:
    """A request refused by one layer spends nothing on the others (one TB.MTAKE): the
    per-user bucket's r after the refusal is what it was before it, less the next request."""
    ip = stack.fresh_ip()
    capacity, _ = limit("orders")
    ok = [stack.call("POST", ORDERS["path"], ip=ip, key=FREE, json_body=ORDERS["json"]) for _ in range(int(capacity))]
    assert [r.status for r in ok] == [ORDERS["status"]] * int(capacity)
    before = ok[-1].item("user")
    assert before is not None, ok[-1].describe()
    refused = [stack.call("POST", ORDERS["path"], ip=ip, key=FREE, json_body=ORDERS["json"]) for _ in range(3)]
    assert [r.status for r in refused] == [429] * 3
    after = stack.call("GET", ITEMS["path"], ip=ip, key=FREE)
    assert after.status == 200, after.describe()
    assert after.item("user") is not None and after.item("user")["r"] == before["r"] - 1, (before, after.describe())


# -- cost, never passing, shadow ------------------------------------------------------


def search(size: int | None) -> str:
    base = SEARCH["path"].split("?")[0]
    return f"{base}?q=x" + ("" if size is None else f"&size={size}")


@case("search_cost")
def test_search_cost(stack: Stack) -> None:
    """A search costs one token per 50 results asked for: r counts the cost down."""
    ip = stack.fresh_ip()
    spent = 0
    for size in (200, 50, None, 120):
        r = stack.call("GET", search(size), ip=ip)
        assert r.status == 200, r.describe()
        spent += cost_of("search", size)
        assert policy_item("search") in r.policy(), r.describe()
        fresh_item(r, "search", spent)


@case("never_passes")
def test_never_passes(stack: Stack) -> None:
    """SPEC P2/H3: a cost above an enforced policy's capacity is refused with no
    Retry-After, retry_after null and the can-never-succeed detail (shadow policies
    are never named, S3)."""
    capacity, _ = limit("search")
    size = int(capacity) * 50 + 50 * 40  # cost 100: above search's capacity
    cost = cost_of("search", size)
    r = stack.call("GET", search(size), ip=stack.fresh_ip())
    assert r.status == 429, r.describe()
    assert not r.has("retry-after"), r.describe()
    body = problem_pairs(r)
    assert body == [
        ("type", "about:blank"), ("title", "Too Many Requests"), ("status", 429),
        ("detail", f"this request costs {p5(cost)} but policy 'search' allows at most {p5(capacity)} at once: it can never succeed"),
        ("violated_policies", ["search"]), ("retry_after", None),
    ], r.body


@case("shadow")
def test_shadow(stack: Stack) -> None:
    """SPEC S1/S2/H1: the shadow policy is charged with the others, refuses nothing, is in
    no header; when only it refuses, nothing is charged and it is counted."""
    shadow = next(p for p in DEMO["policies"] if p["shadow"])
    before = scrape(stack)
    ip = stack.fresh_ip()
    size = 200
    cost = cost_of(shadow["name"], size)
    admitted = int(shadow["capacity"] // cost)
    rs = [stack.call("GET", search(size), ip=ip) for _ in range(admitted + 2)]
    assert [r.status for r in rs] == [200] * len(rs)
    for r in rs:
        assert shadow["name"] not in [n for n, _ in r.policy()] + r.names(), r.describe()
    enforced = [p["name"] for p in DEMO["policies"] if "GET /search" in p["routes"] and not p["shadow"]][0]
    # charged while the shadow bucket had the tokens, then nothing (all or nothing)
    spent = [cost * min(i, admitted) for i in range(1, len(rs) + 1)]
    capacity, _ = limit(enforced)
    assert [r.item(enforced)["r"] for r in rs] == [int(capacity) - s for s in spent]  # type: ignore[index]
    after = scrape(stack)
    grown = prom.total(after, "redis_tb_shadow_limited_total", policy=shadow["name"]) - prom.total(
        before, "redis_tb_shadow_limited_total", policy=shadow["name"])
    assert grown == len(rs) - admitted


# -- the fail-closed login ----------------------------------------------------------


@case("login_policy")
def test_login_policy(stack: Stack) -> None:
    """POST /login is limited by the login policy, a sliding window (SPEC W): q the limit,
    w the window; r counts down; t is when the whole limit is back, past the end of the
    next window for a sliding one (more than one window away, where a token bucket of the
    same q and w would say 1 / rate); the request after the limit is refused naming it."""
    ip = stack.fresh_ip()
    w = POLICIES["login"]["window"]
    # POST /login is also under 'ip' (every route): pace the logins slower than it refills
    _, ip_rate = limit("ip")
    pace = 1.2 / ip_rate
    rs = []
    for _ in range(int(w["limit"])):
        rs.append(stack.call("POST", LOGIN["path"], ip=ip, json_body=LOGIN["json"]))
        time.sleep(pace)
    assert [r.status for r in rs] == [LOGIN["status"]] * len(rs), [r.describe() for r in rs if r.status != LOGIN["status"]][:1]
    for i, r in enumerate(rs, start=1):
        assert policy_item("login") in r.policy(), r.describe()
        got = r.item("login")
        assert got is not None and got["r"] == w["limit"] - i, r.describe()
    first = rs[0].item("login")
    assert first is not None and w["seconds"] < first["t"] <= 2 * w["seconds"], rs[0].describe()
    refused = stack.call("POST", LOGIN["path"], ip=ip, json_body=LOGIN["json"])
    assert refused.status == 429, refused.describe()
    assert dict(problem_pairs(refused))["violated_policies"] == ["login"], refused.body
    assert refused.item("login") == {"r": 0, "t": refused.item("login")["t"]}, refused.describe()  # type: ignore[index]
    wait = refused.header("retry-after")
    # Sliding: the refused request passes once this window's logins, moved to the
    # previous window, weigh limit - 1: at most seconds / limit into the next window, so
    # up to seconds * (1 + 1 / limit) away when the logins came right after a window
    # began (a run in the first minutes of an hour).
    most = math.ceil(w["seconds"] * (1 + 1 / w["limit"])) + 1  # + 1: Retry-After rounds up
    assert wait is not None and 1 <= int(wait) <= most, refused.describe()


# -- metrics --------------------------------------------------------------------------


@case("metrics")
def test_metrics(stack: Stack) -> None:
    """SPEC M1 over HTTP: the counters move by what was done; labels are limiter and
    policy (and the histogram's le), values configuration, never a client identity."""
    before = scrape(stack)
    ip = stack.fresh_ip()
    n = 3
    assert [r.status for r in burst(stack, n, ip=ip)] == [200] * n
    mid = scrape(stack)
    assert prom.total(mid, "redis_tb_allowed_total", policy="ip") - prom.total(before, "redis_tb_allowed_total", policy="ip") == n
    calls = "redis_tb_redis_call_duration_seconds_count"
    assert prom.total(mid, calls) - prom.total(before, calls) >= n
    assert prom.total(mid, "redis_tb_redis_call_duration_seconds_bucket") > 0
    refused = [r for r in burst(stack, 3 * int(limit("ip")[0]), ip=ip, key=FREE) if r.status == 429]
    after = scrape(stack)
    grown = prom.total(after, "redis_tb_limited_total", policy="ip") - prom.total(mid, "redis_tb_limited_total", policy="ip")
    assert 1 <= grown <= len(refused)
    names = {name for name, _ in after if name.startswith("redis_tb_")}
    assert {"redis_tb_allowed_total", "redis_tb_limited_total", "redis_tb_redis_call_duration_seconds_count"} <= names
    for name, labels in after:
        if not name.startswith("redis_tb_"):
            continue
        keys = {k for k, _ in labels}
        if name == "redis_tb_backend":
            # SPEC E6: the backend in use, 1 for it: a label of two values, no identity
            assert keys == {"limiter", "backend"}, (name, labels)
            assert dict(labels)["backend"] in {"module", "scripts"}, (name, labels)
            continue
    # SPEC E6, for a client that exposes the gauge: 1 for the backend of the suite's Redis
    # (the module when loaded, else the scripts, chosen by the app itself unless
    # HTTP_APP_BACKEND forces it), 0 for the other
    gauge = [(dict(g), value) for (name, g), value in after.items() if name == "redis_tb_backend"]
    if gauge:
        want = "scripts" if APP_BACKEND == "scripts" else BACKEND
        for g_labels, g_value in gauge:
            assert g_value == (1 if g_labels["backend"] == want else 0), (g_labels, g_value, f"HTTP_BACKEND={BACKEND}")
        for limiter in {g_labels["limiter"] for g_labels, _ in gauge}:
            assert ({"limiter": limiter, "backend": want}, 1) in gauge, (limiter, want, gauge)
        assert keys <= {"limiter", "policy", "le"}, (name, labels)
        if name.startswith("redis_tb_redis_call_duration_seconds") or name.startswith(
                ("redis_tb_store_errors", "redis_tb_degraded")):
            assert "policy" not in keys, (name, labels)
        for _, v in labels:
            assert not v.startswith("198.51.") and v not in {a["user"] for a in ACCOUNTS.values()}, (name, labels)


@case("metrics_limiter_labels")
def test_metrics_limiter_labels(stack: Stack) -> None:
    """The limiter label names the limiter (the manifest's metrics_limiter_label)."""
    ip = stack.fresh_ip()
    assert stack.call("GET", ITEMS["path"], ip=ip, key=FREE).status == 200
    assert stack.call("POST", LOGIN["path"], ip=ip, json_body=LOGIN["json"]).status == LOGIN["status"]
    after = scrape(stack)
    for lim in DEMO["limiters"]:
        for p in lim["policies"]:
            if POLICIES[p]["routes"] == "*" or LOGIN["id"] in POLICIES[p]["routes"]:
                assert prom.value(after, "redis_tb_allowed_total", limiter=lim["metrics_limiter_label"], policy=p) >= 1, (
                    lim["name"], p, sorted(k for k in after if k[0] == "redis_tb_allowed_total"))


# -- Redis down, then back ------------------------------------------------------------


def limited_again(stack: Stack, ip: str) -> http.Response:
    def check() -> http.Response | None:
        r = stack.call("GET", ITEMS["path"], ip=ip, key=FREE)
        return r if r.status == 200 and r.has("ratelimit") else None

    return until(check, "GET /items/1 limited again after Redis came back")


@case("redis_down_fail_open")
def test_redis_down_fail_open(stack: Stack) -> None:
    """SPEC B4/H5: Redis gone, the API fails open (200, no rate-limit header), counted as
    degraded; Redis back (after the cool-down), limited again."""
    before = scrape(stack)
    ip = stack.fresh_ip()
    stack.redis.stop()
    try:
        down = burst(stack, 3, ip=ip, key=FREE)
        assert [r.status for r in down] == [200] * 3, [r.describe() for r in down]
        for r in down:
            no_rate_limit_headers(r)
        during = scrape(stack)
    finally:
        stack.redis.start()
    assert prom.total(during, "redis_tb_degraded_total") - prom.total(before, "redis_tb_degraded_total") >= 3
    assert prom.total(during, "redis_tb_store_errors_total") - prom.total(before, "redis_tb_store_errors_total") >= 1
    back = limited_again(stack, ip)
    assert "ip" in back.names(), back.describe()  # the other items: test_headers_*


@case("redis_down_login_fail_closed")
def test_redis_down_login_fail_closed(stack: Stack) -> None:
    """SPEC H5/P3: Redis gone, the login fails closed: 503, Retry-After: 1, the P3 body;
    Redis back, the login is admitted (and limited) again."""
    ip = stack.fresh_ip()
    stack.redis.stop()
    try:
        closed = [stack.call("POST", LOGIN["path"], ip=ip, json_body=LOGIN["json"]) for _ in range(2)]
    finally:
        stack.redis.start()
    for r in closed:
        assert r.status == 503, r.describe()
        assert r.header("retry-after") == "1", r.describe()
        assert problem_pairs(r) == [
            ("type", "about:blank"), ("title", "Service Unavailable"), ("status", 503),
            ("detail", "the rate limiter's store is unavailable; retry shortly"),
        ], r.body
        assert compact(r.body), r.body
        assert not r.has("ratelimit") and not r.has("ratelimit-policy"), r.describe()

    def admitted() -> http.Response | None:
        r = stack.call("POST", LOGIN["path"], ip=ip, json_body=LOGIN["json"])
        return r if r.status == LOGIN["status"] else None

    back = until(admitted, "POST /login admitted again after Redis came back")
    assert "login" in back.names(), back.describe()  # its numbers: test_login_policy


# -- in-flight and settled-later: GET /stream ------------------------------------------


def stream_path(**q: int | str) -> str:
    base = STREAM["path"].split("?")[0]
    query = {**STREAM["stream"]["query"], **q}
    return base + "?" + "&".join(f"{k}={v}" for k, v in query.items())


def open_stream(stack: Stack, ip: str, **q: int) -> Stream:
    return Stream(stack.app.base, stream_path(**q), headers={"x-forwarded-for": ip}, source="127.0.0.2")


def streams_item(r: http.Response) -> dict[str, int]:
    got = r.item("streams")
    assert got is not None, f"no 'streams' item in RateLimit:\n{r.describe()}"
    return got


@case("stream")
def test_stream(stack: Stack) -> None:
    """GET /stream: SSE events token-1..n then [DONE] (the manifest's stream); the check's
    headers name the in-flight policy with q and no w (SPEC N3) and r = limit - 1; the
    slot is back once the body ended (N4): the next stream finds r = limit - 1 again."""
    limit_n = POLICIES["streams"]["in_flight"]["limit"]
    ip = stack.fresh_ip()
    for _ in range(2):
        s = open_stream(stack, ip, tokens=3)
        try:
            assert s.head.status == 200, s.head.describe()
            assert s.head.media_type() == "text/event-stream", s.head.describe()
            assert ("streams", {"q": limit_n}) in s.head.policy(), s.head.describe()
            assert "tokens" not in s.head.names(), s.head.describe()  # SPEC G1: held by the handler
            assert streams_item(s.head)["r"] == limit_n - 1, s.head.describe()
            events = []
            while (e := s.event()) is not None:
                events.append(e)
        finally:
            s.close()
        spec = STREAM["stream"]
        assert events == [spec["event"].format(i=i) for i in range(1, 4)] + [spec["done"]], events


@case("stream_settled")
def test_stream_settled(stack: Stack) -> None:
    """SPEC G: each stream holds max_tokens and settles the tokens it sent. Three streams
    holding 400 each fit in 1000 only if each gave back its surplus; a stream that sends
    990 leaves too few for the next hold, refused with a 429 naming 'tokens' (G2)."""
    ip = stack.fresh_ip()
    for _ in range(4):
        s = open_stream(stack, ip, tokens=3, max_tokens=400)
        try:
            assert s.head.status == 200, s.head.describe()
            s.rest()
        finally:
            s.close()
    big = open_stream(stack, ip, tokens=960, max_tokens=970)
    try:
        assert big.head.status == 200, big.head.describe()
        big.rest()
    finally:
        big.close()
    capacity, rate = limit("tokens")
    refused = None
    for _ in range(20):  # the settlement lands after the last event: poll briefly (slower than 'ip' refills)
        r = stack.call("GET", stream_path(tokens=1, max_tokens=100), ip=ip)
        if r.status == 429:
            refused = r
            break
        time.sleep(0.15)
    assert refused is not None, "a hold of 100 passed after 12 + 960 of 1000 tokens were settled"
    body = dict(problem_pairs(refused))
    assert body["violated_policies"] == ["tokens"], refused.body
    wait = refused.header("retry-after")
    assert wait is not None and int(wait) == max(1, math.ceil(body["retry_after"])), refused.describe()
    # 1000 - 12 - 960 = 28 left: 72 more take 72 / rate seconds
    assert abs(body["retry_after"] - (100 - (capacity - 12 - 960)) / rate) < 5, body
    assert policy_item("tokens") in refused.policy(), refused.describe()
    never = stack.call("GET", stream_path(tokens=1, max_tokens=int(capacity) + 1), ip=stack.fresh_ip())
    assert never.status == 429 and dict(problem_pairs(never))["retry_after"] is None, never.describe()


@case("in_flight")
def test_in_flight(stack: Stack) -> None:
    """At most `limit` streams of one client in progress (SPEC N): with two open, a third
    is refused by 'streams' (r=0, a Retry-After), and admitted once one has ended."""
    limit_n = POLICIES["streams"]["in_flight"]["limit"]
    ip = stack.fresh_ip()
    held = [open_stream(stack, ip, tokens=40, delay_ms=50) for _ in range(limit_n)]
    try:
        assert [s.head.status for s in held] == [200] * limit_n, [s.head.describe() for s in held]
        assert [streams_item(s.head)["r"] for s in held] == list(range(limit_n - 1, -1, -1))
        refused = stack.call("GET", stream_path(tokens=1), ip=ip)
        assert refused.status == 429, refused.describe()
        body = dict(problem_pairs(refused))
        assert body["violated_policies"] == ["streams"], refused.body
        assert streams_item(refused)["r"] == 0, refused.describe()
        wait = refused.header("retry-after")
        assert wait is not None and 1 <= int(wait) <= math.ceil(POLICIES["streams"]["in_flight"]["lease_seconds"]), refused.describe()
        other = stack.call("GET", stream_path(tokens=1), ip=stack.fresh_ip())
        assert other.status == 200, other.describe()  # another client's slots are its own
        held[0].rest()
    finally:
        for s in held:
            s.close()
    def admitted() -> http.Response | None:
        r = stack.call("GET", stream_path(tokens=1), ip=ip)
        return r if r.status == 200 else None
    until(admitted, "a stream admitted after the others ended", seconds=5)


@case("in_flight_disconnect")
def test_in_flight_disconnect(stack: Stack) -> None:
    """A client that goes away mid-stream frees its slot when it leaves (SPEC N4), not when
    its lease runs out: with both slots' clients gone, two new streams are admitted before
    an unreleased lease could have expired. The deadline comes from the lease, not from a
    guess at the server's speed: each lease was renewed (N5, every lease / 2) no sooner
    than lease / 2 after its request was sent, so it would hold its slot until at least
    1.5 leases after that; the check ends 0.1 s before, about 1.7 s after the close."""
    limit_n = POLICIES["streams"]["in_flight"]["limit"]
    lease = POLICIES["streams"]["in_flight"]["lease_seconds"]
    ip = stack.fresh_ip()
    sent = time.monotonic()
    held = [open_stream(stack, ip, tokens=200, delay_ms=50) for _ in range(limit_n)]
    for s in held:
        assert s.head.status == 200, s.head.describe()
        assert s.event() is not None
    time.sleep(lease * 0.6)  # past one renewal
    for s in held:
        s.close()
    gone = time.monotonic()
    deadline = sent + lease * 1.5 - 0.1
    assert deadline - gone > 0.5, "the streams took too long to open for this check to mean anything"
    again: list[Stream] = []
    tried: list[str] = []
    try:
        while len(again) < limit_n and time.monotonic() < deadline:
            s = open_stream(stack, ip, tokens=20, delay_ms=50)
            tried.append(f"{time.monotonic() - gone:.3f} s: {s.head.status} {s.head.header('retry-after')}")
            if s.head.status == 200:
                again.append(s)
            else:
                s.close()
                time.sleep(0.1)  # no faster than 'ip' refills
        assert len(again) == limit_n, (
            f"{len(again)} of {limit_n} slots back within {deadline - gone:.2f} s of the clients"
            f" leaving; after the close: {tried}; {lease_story(stack)}")
    finally:
        for s in again:
            s.close()


def lease_story(stack: Stack) -> str:
    """What a failed lease check needs to be read: the app's store errors and lease
    counters, and the last lines it logged (a release lost to a timeout or the breaker
    says so there)."""
    samples = scrape(stack)
    counts = {name: prom.total(samples, name) for name in (
        "redis_tb_store_errors_total", "redis_tb_leases_expired_total", "redis_tb_leases_in_flight")}
    tail = stack.app.output().splitlines()[-12:]
    return f"app counters {counts}; the app's last lines: {tail}"


@case("in_flight_renewal")
def test_in_flight_renewal(stack: Stack) -> None:
    """A stream that outlives its lease keeps its slot (SPEC N5, renewed every lease / 2):
    3 s into a stream on a 2 s lease, the client still holds one slot of two, so of two
    more streams only one is admitted."""
    limit_n = POLICIES["streams"]["in_flight"]["limit"]
    lease = POLICIES["streams"]["in_flight"]["lease_seconds"]
    ip = stack.fresh_ip()
    long = open_stream(stack, ip, tokens=100, delay_ms=50)
    more: list[Stream] = []
    try:
        assert long.head.status == 200, long.head.describe()
        deadline = time.monotonic() + lease * 1.5
        while time.monotonic() < deadline:  # keep reading, as a live client does
            assert long.event() is not None
        more = [open_stream(stack, ip, tokens=40, delay_ms=50) for _ in range(limit_n)]
        assert sorted(s.head.status for s in more) == [200] * (limit_n - 1) + [429], [s.head.describe() for s in more]
    finally:
        long.close()
        for s in more:
            s.close()
