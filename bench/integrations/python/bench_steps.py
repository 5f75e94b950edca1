"""Where the limiter's time goes, step by step, in-process (no HTTP server): the
CPU cost of each step of the middleware's request path, and the app CPU per request
of the whole middleware stack driven sequentially against a real redis-server.

    python bench/integrations/python/bench_steps.py                       # the installed redis_tb
    python bench/integrations/python/bench_steps.py --baseline-rev 87769c2   # and a git revision's, side by side

With ``--baseline-rev`` the same measurements run in a subprocess on that revision's
``clients/python/src`` (``git archive``), then in one on this checkout's, and the
table shows both. Steps that a version does not have show "-". Each figure is the
best of 5 repeats (timeit), in microseconds; the machine's load average is printed
because a busy machine inflates every figure alike (compare within a column).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

STEPS = [
    ("route", "route template of the request (route_template)"),
    ("plans", "plans: policies, identity (ClientIP behind a proxy), keys"),
    ("identity", "  of which: the client identity (ClientIP)"),
    ("encode", "TB.MTAKE argument encoding"),
    ("parse", "reply parsing (bytes to values; before: redis-py parsed, then typed)"),
    ("decision", "decision (PolicyResult, Decision, metrics, stats)"),
    ("headers", "RateLimit-Policy + RateLimit serialization"),
    ("ping_rt", "bare PING round trip, client CPU (redis-py)"),
    ("mtake_rt", "the limiter's TB.MTAKE round trip, client CPU"),
    ("check", "limiter.check, whole (client CPU)"),
    ("mw_none", "app CPU per request: FastAPI, no limiter"),
    ("mw_ping", "app CPU per request: one bare PING middleware"),
    ("mw_one", "app CPU per request: redis-tb middleware, one policy"),
    ("mw_three", "app CPU per request: redis-tb middleware, three policies"),
]


def best(fn: Callable[[], Any], n: int = 20000) -> float:
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def measure() -> dict[str, float]:  # runs in the subprocess, on whichever redis_tb is importable
    sys.path.insert(0, str(REPO / "testing" / "python"))
    sys.path.insert(0, str(HERE))
    from redis_tb_testing.servers import RedisServer  # noqa: PLC0415

    store = RedisServer().start()
    os.environ["REDIS_URL"] = store.url
    os.environ["TRUSTED_PROXIES"] = "127.0.0.2/32"
    out: dict[str, float] = {}
    try:
        import redis.asyncio
        from fastapi import FastAPI, Request
        from prometheus_client import CollectorRegistry
        from starlette.requests import Request as StarletteRequest

        import redis_tb
        from redis_tb import AsyncClient, ClientIP, DenyCache, RateLimiter, per_minute
        from redis_tb.asgi import route_template
        from redis_tb.metrics import PrometheusMetrics

        app = FastAPI()

        @app.get("/items/{item_id}")
        async def get_item(item_id: int, request: Request) -> dict[str, object]:
            return {}

        scope: dict[str, Any] = {
            "type": "http", "method": "GET", "path": "/items/7", "root_path": "", "app": app,
            "query_string": b"", "client": ("127.0.0.2", 5000),
            "headers": [(b"host", b"bench"), (b"x-forwarded-for", b"198.18.0.7")],
        }
        lim = RateLimiter(
            AsyncClient.from_url(store.url, timeout=5), timeout=5, client_ip=ClientIP(["127.0.0.2/32"]),
            metrics=PrometheusMetrics(CollectorRegistry(), limiter="x"), deny_cache=DenyCache(10_000),
        )
        policies = [per_minute("ip", 10**9)]
        route = "GET /items/{item_id}"
        request = StarletteRequest(scope)
        out["route"] = best(lambda: route_template(scope))
        new = hasattr(lim, "_command")
        loop = asyncio.new_event_loop()
        if new:
            def getter(name: str) -> list[str]:
                key = name.encode("latin-1")
                return [v.decode("latin-1") for k, v in scope["headers"] if k == key]

            def plans_of() -> Any:
                steps = lim._plan_steps(scope, policies, route, "127.0.0.2", getter)
                try:
                    steps.send(None)
                except StopIteration as done:
                    return done.value
            out["identity"] = best(lambda: lim.client_ip.of("127.0.0.2", getter))
        else:
            before: Any = lim  # a revision before _plan_steps, whose _plans is gone now

            def plans_of() -> Any:
                coro = before._plans(request, policies, route)
                try:
                    coro.send(None)
                except StopIteration as done:
                    return done.value
            out["identity"] = best(lambda: lim.client_ip(request))
        out["plans"] = best(plans_of)
        plans = plans_of()
        raw_reply = b"*5\r\n:1\r\n,999999999\r\n,0\r\n,0.06\r\n*1\r\n*4\r\n:1\r\n,999999999\r\n,0\r\n,0.06\r\n"
        if new:
            from redis_tb.replies import mtake_reader

            out["encode"] = best(lambda: lim._command(plans))
            reader = mtake_reader(1)
            out["parse"] = best(lambda: reader(raw_reply))
            allowed, per_key = reader(raw_reply)
            out["decision"] = best(lambda: lim._decision(plans, allowed, per_key))
            decision = lim._decision(plans, allowed, per_key)
        else:
            from redis_tb.replies import Bucket, mtake_args, parse_multi_reply

            conn = redis.asyncio.Connection()

            def encode() -> Any:
                args = mtake_args([Bucket(p.key, p.capacity, p.rate, p.cost) for p in plans], None)
                return conn.pack_command(*args)
            out["encode"] = best(encode)
            parsed = [1, 999999999.0, 0.0, 0.06, [[1, 999999999.0, 0.0, 0.06]]]
            out["parse"] = best(lambda: parse_multi_reply(parsed, 1))
            reply = parse_multi_reply(parsed, 1)
            old: Any = lim  # the baseline's signature: _decision(plans, reply)
            out["decision"] = best(lambda: old._decision(plans, reply))
            decision = old._decision(plans, reply)
        out["headers"] = best(lambda: lim.headers(decision) if hasattr(lim, "headers") else
                              redis_tb.decision_headers(decision))

        async def round_trips() -> None:
            plain = redis.asyncio.Redis.from_url(store.url)
            await plain.ping()
            n = 5000
            c0 = time.process_time()
            for _ in range(n):
                await plain.ping()
            c1 = time.process_time()
            out["ping_rt"] = (c1 - c0) / n * 1e6
            if new:
                cmd = lim._command(plans)
                # the reader the limiter itself uses for this many plans (one plan is a
                # TB.TAKE since SPEC L4's fast path; older revisions: TB.MTAKE for all)
                reader = getattr(lim, "_readers", {}).get(len(plans)) or mtake_reader(len(plans))
                await lim.client.call_packed(cmd, reader)
                c0 = time.process_time()
                for _ in range(n):
                    await lim.client.call_packed(cmd, reader)
            else:
                buckets = [Bucket(p.key, p.capacity, p.rate, p.cost) for p in plans]
                await lim.client.mtake(buckets)
                c0 = time.process_time()
                for _ in range(n):
                    await lim.client.mtake(buckets)
            out["mtake_rt"] = (time.process_time() - c0) / n * 1e6
            c0 = time.process_time()
            for _ in range(n):
                await lim.check(request, policies, route)
            out["check"] = (time.process_time() - c0) / n * 1e6
            await plain.aclose()
        loop.run_until_complete(round_trips())

        for variant in ("none", "ping", "one", "three"):
            out[f"mw_{variant}"] = app_cpu(variant)
    finally:
        store.stop()
    return out


def app_cpu(variant: str, n: int = 5000) -> float:
    """App CPU per request of bench_app.py's variant, driven in-process, sequentially."""
    code = f"""
import asyncio, os, sys, time
sys.path.insert(0, {str(HERE)!r})
os.environ["BENCH_VARIANT"] = {variant!r}
import bench_app
app = bench_app.app
async def one(i):
    path = "/items/%d" % (i & 1023)
    scope = {{"type": "http", "asgi": {{"version": "3.0"}}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"bench"), (b"x-forwarded-for", ("198.18.%d.%d" % ((i >> 8) & 255, i & 255)).encode()),
                         (b"x-api-key", b"k%d" % (i & 63))],
             "client": ("127.0.0.2", 5000), "server": ("127.0.0.1", 8000)}}
    async def receive(): return {{"type": "http.request", "body": b"", "more_body": False}}
    status = []
    async def send(m):
        if m["type"] == "http.response.start": status.append(m["status"])
    await app(scope, receive, send)
    if status != [200]: raise SystemExit("status %s" % status)
async def main():
    async with app.router.lifespan_context(app):
        for i in range(1000): await one(i)
        best = float("inf")
        for r in range(3):
            c0 = time.process_time()
            for i in range({n}): await one(i + 2000 + r * {n})
            best = min(best, (time.process_time() - c0) / {n} * 1e6)
        print(best)
asyncio.run(main())
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ, timeout=600)
    if res.returncode:
        raise SystemExit(f"{variant}: {res.stderr}")
    return float(res.stdout.split()[-1])


DRIVER = """
import asyncio, os, sys
sys.path.insert(0, sys.argv[3])
os.environ["BENCH_VARIANT"] = sys.argv[1]
import bench_app
app = bench_app.app
async def one(i):
    path = "/items/%d" % (i & 1023)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"bench"), (b"x-forwarded-for", ("198.18.%d.%d" % ((i >> 8) & 255, i & 255)).encode()),
                         (b"x-api-key", b"k%d" % (i & 63))],
             "client": ("127.0.0.2", 5000), "server": ("127.0.0.1", 8000)}
    async def receive(): return {"type": "http.request", "body": b"", "more_body": False}
    status = []
    async def send(m):
        if m["type"] == "http.response.start": status.append(m["status"])
    await app(scope, receive, send)
    if status != [200]: raise SystemExit("status %s" % status)
async def main():
    async with app.router.lifespan_context(app):
        for i in range(int(sys.argv[2])): await one(i)
asyncio.run(main())
"""


def instructions(src: Path, variants: list[str], small: int = 100, large: int = 600) -> dict[str, float]:
    """Instructions per request of the app process (valgrind --tool=callgrind), from two
    runs of ``small`` and ``large`` sequential requests (the difference cancels start-up):
    a count other work on the machine does not change, unlike any time."""
    sys.path.insert(0, str(REPO / "testing" / "python"))
    from redis_tb_testing.servers import RedisServer  # noqa: PLC0415

    store = RedisServer().start()
    # A fixed hash seed: with a random one, the same code's count moves by about 3k
    # instructions a request from run to run (dict and set layouts differ).
    env = {**os.environ, "PYTHONPATH": str(src), "REDIS_URL": store.url, "TRUSTED_PROXIES": "127.0.0.2/32",
           "PYTHONHASHSEED": "0"}
    out: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            driver = Path(tmp) / "drive.py"
            driver.write_text(DRIVER)
            for v in variants:
                counts = []
                for n in (small, large):
                    res = subprocess.run(
                        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
                         str(driver), v, str(n), str(HERE)],
                        capture_output=True, text=True, env=env, timeout=1800,
                    )
                    found = [ln for ln in res.stderr.splitlines() if "Collected :" in ln]
                    if res.returncode or not found:
                        raise SystemExit(f"callgrind {v}: {res.stderr[-2000:]}")
                    counts.append(int(found[-1].split(":")[-1]))
                out[v] = (counts[1] - counts[0]) / (large - small)
    finally:
        store.stop()
    return out


def run_on(src: Path | None) -> dict[str, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, __file__, "--measure"], capture_output=True, text=True, env=env,
                         timeout=1800)
    if res.returncode:
        raise SystemExit(res.stderr)
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def table(columns: list[tuple[str, dict[str, float]]]) -> list[str]:
    head = "| step | " + " | ".join(name for name, _ in columns) + " |"
    lines = [head, "|---|" + "---:|" * len(columns)]
    for key, label in STEPS:
        cells = [f"{col[key]:.1f}" if key in col else "-" for _, col in columns]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--baseline-rev", help="a git revision to measure side by side")
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per request with valgrind (slow; immune to machine load)")
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure()))
        return
    columns: list[tuple[str, dict[str, float]]] = []
    load = [os.getloadavg()[0]]
    sources: list[tuple[str, Path]] = []
    if args.baseline_rev:
        tmp = Path(tempfile.mkdtemp(prefix="redis-tb-baseline-"))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline_rev, "clients/python/src"],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=__import__("io").BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        sources.append((f"at {args.baseline_rev}", tmp / "clients" / "python" / "src"))
    sources.append(("this checkout", REPO / "clients" / "python" / "src"))
    for name, src in sources:
        columns.append((f"{name} (µs)", run_on(src)))
        load.append(os.getloadavg()[0])
    for line in table(columns):
        print(line)
    print(f"\nload average (1 min) before/between/after: {', '.join(f'{x:.1f}' for x in load)}")
    if args.instructions:
        variants = ["none", "ping", "one", "three"]
        counts = [(name, instructions(src, variants)) for name, src in sources]
        print("\nInstructions per request of the app process (callgrind; thousands), and the CPU-bound")
        print("throughput they imply against the one-PING floor (ping / variant):\n")
        print("| variant | " + " | ".join(f"{name} (k instr.)" for name, _ in counts)
              + " | " + " | ".join(f"{name}: / PING floor" for name, _ in counts) + " |")
        print("|---|" + "---:|" * (2 * len(counts)))
        for v in variants:
            print(f"| {v} | " + " | ".join(f"{c[v] / 1000:.0f}" for _, c in counts) + " | "
                  + " | ".join(f"{c['ping'] / c[v]:.2f}x" for _, c in counts) + " |")


if __name__ == "__main__":
    main()
