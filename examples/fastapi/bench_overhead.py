"""The limiter's overhead per request: requests/s of the example app with the
limiter against the same app without it (RATE_LIMIT=off).

Starts a redis-server with the module and two uvicorn servers (one process each),
then drives them in interleaved rounds (A B, B A, ...) with a keep-alive HTTP/1.1
load generator on raw asyncio sockets (lighter than any HTTP client library, so
the servers, not the generator, set the pace). Every request is
``GET /items/{n}`` through the trusted-proxy address with its own
``X-Forwarded-For``, so the limited app checks a real spread of buckets (65,536
client addresses) and admits every request: a 429 would be cheaper than a 200
and flatter the limiter, so any non-200 aborts the run.

Writes bench/results/integrations-python.md (or --out).

    .venv/python/bin/python examples/fastapi/bench_overhead.py [--seconds 5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))

from servers import RedisServer, Uvicorn, start_all  # noqa: E402

PROXY = "127.0.0.2"


async def _worker(port: int, stop_at: float, start_index: int, step: int, counts: dict[str, int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(PROXY, 0))
    i = start_index
    try:
        while time.monotonic() < stop_at:
            ip = f"198.18.{(i >> 8) & 255}.{i & 255}"
            writer.write(
                f"GET /items/{i & 1023} HTTP/1.1\r\nHost: bench\r\nX-Forwarded-For: {ip}\r\n\r\n".encode()
            )
            i += step
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if status != 200:
                counts["other"] += 1
            else:
                counts["ok"] += 1
    finally:
        writer.close()


async def measure(port: int, seconds: float, connections: int, offset: int) -> tuple[float, int]:
    counts = {"ok": 0, "other": 0}
    started = time.monotonic()
    stop_at = started + seconds
    await asyncio.gather(*(_worker(port, stop_at, offset + c, connections, counts) for c in range(connections)))
    elapsed = time.monotonic() - started
    return counts["ok"] / elapsed, counts["other"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one measurement")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of (limited, plain)")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "integrations-python.md")
    args = ap.parse_args()

    store = RedisServer().start()
    env = {"REDIS_URL": store.url, "TRUSTED_PROXIES": f"{PROXY}/32"}
    limited = Uvicorn("app:app", HERE, env)
    plain = Uvicorn("app:app", HERE, {**env, "RATE_LIMIT": "off"})
    rows: list[tuple[int, float, float]] = []
    load_before = os.getloadavg()[0]
    try:
        start_all([limited, plain])
        offset = 0
        for app in (limited, plain):
            asyncio.run(measure(app.port, args.warmup, args.connections, offset))
            offset += 1 << 16
        for rnd in range(args.rounds):
            order = [(limited, "limited"), (plain, "plain")]
            if rnd % 2:
                order.reverse()
            got: dict[str, float] = {}
            for app, name in order:
                rps, other = asyncio.run(measure(app.port, args.seconds, args.connections, offset))
                offset += int(rps * args.seconds) + args.connections
                if other:
                    raise SystemExit(f"{name}: {other} responses were not 200: the run is void")
                got[name] = rps
            rows.append((rnd + 1, got["limited"], got["plain"]))
            print(f"round {rnd + 1}: limited {got['limited']:.0f} req/s, plain {got['plain']:.0f} req/s, "
                  f"ratio {got['limited'] / got['plain']:.3f}", flush=True)
        info = store.cli("INFO", "tb")
    finally:
        limited.stop()
        plain.stop()
        store.stop()

    load_after = os.getloadavg()[0]
    ratios = [lim / pl for _, lim, pl in rows]
    med = statistics.median(ratios)
    lim_med = statistics.median(r[1] for r in rows)
    pl_med = statistics.median(r[2] for r in rows)
    per_request_us = (1 / lim_med - 1 / pl_med) * 1e6
    takes = next((ln.split(":")[1].strip() for ln in info.splitlines() if ln.startswith("tb_mtake_calls")), "?")
    redis_version = subprocess.run(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--version"], capture_output=True, text=True
    ).stdout.split()[2].removeprefix("v=")

    lines = [
        "# Python integration: the limiter's overhead per request",
        "",
        f"Written by `examples/fastapi/bench_overhead.py` on "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.",
        "",
        f"**Median ratio, limited / unlimited requests per second: {med:.2f}x** "
        f"(median {lim_med:.0f} req/s against {pl_med:.0f} req/s; the limiter adds about "
        f"{per_request_us:.0f} µs of server time per request).",
        "",
        "| round | with the limiter (req/s) | without (req/s) | ratio |",
        "|---:|---:|---:|---:|",
        *[f"| {n} | {lim:.0f} | {pl:.0f} | {lim / pl:.3f} |" for n, lim, pl in rows],
        "",
        "## Setup",
        "",
        f"- The example app (`examples/fastapi/app.py`), one uvicorn process (h11, no access log) "
        f"per variant; the unlimited twin is the same app with `RATE_LIMIT=off` (no middleware).",
        f"- Request: `GET /items/{{n}}` from the trusted proxy address with a distinct "
        f"`X-Forwarded-For` per request (65,536 client addresses): the limited app runs the peer/"
        f"proxy walk, one policy (`ip`, 10 per second; the `user` policy is skipped for anonymous "
        f"calls), one TB.MTAKE on a real spread of buckets, and writes both headers. Every "
        f"response was a 200 ({takes} TB.MTAKE calls in all).",
        f"- Load: {args.connections} keep-alive connections on raw asyncio sockets, "
        f"{args.seconds:g} s per measurement, {args.rounds} rounds alternating which variant goes "
        f"first, after {args.warmup:g} s of warm-up each.",
        f"- One machine: {os.cpu_count()} cores shared by the server under test, redis-server "
        f"{redis_version} and the load generator (nothing pinned). Python "
        f"{platform.python_version()}, fastapi {version('fastapi')}, starlette "
        f"{version('starlette')}, uvicorn {version('uvicorn')}, redis-py {version('redis')}. "
        f"Load average before and after the run: {load_before:.1f} and {load_after:.1f} "
        f"(anything above 0 is other work competing for the same cores: rounds then vary, "
        f"and the median is the figure to read).",
        "",
        "The ratio depends on how much the app itself costs: a faster server (httptools, "
        "a lighter framework) or a heavier handler moves it. The absolute cost per request "
        "(one Redis round trip, the key functions and the header serialization) is the "
        "number that carries over.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"median ratio {med:.3f}; wrote {args.out}")


if __name__ == "__main__":
    main()
