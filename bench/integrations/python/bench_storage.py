"""flask-limiter on limits' own Redis storage (redis://) vs on redis-tb (redis+tb://),
side by side in one run, for the moving window and the sliding window counter.

For each strategy, limit (100 and 1,000 per minute) and storage, in alternating rounds:

- requests per second: gunicorn (1 gthread worker, 4 threads) serving bench_flask_app.py,
  driven by 4 client threads on keep-alive connections, every request under its limit
  (REQUESTS requests over REQUESTS / (limit / 2) clients, so each client's window ends
  half full), headers on (flask-limiter reads the window after each hit);
- Redis CPU per request: the server's INFO cpu (used_cpu_sys + used_cpu_user) delta over
  the same requests, divided by them;
- bytes per limited key: one client's keys through limits' strategy API (the moving
  window full at its limit; the sliding window counter with both windows), MEMORY USAGE
  ... SAMPLES 0 summed over its keys.

Writes bench/results/integrations-limits.md. Usage (repo root, module built):
    python bench/integrations/python/bench_storage.py [--requests 3000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

import redis_tb.limits  # noqa: F401

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "testing" / "python"))
from redis_tb_testing.servers import Process, RedisServer, _wait_port, free_port  # noqa: E402

STORAGES = {"limits' redis://": "redis", "redis-tb redis+tb://": "redis+tb"}
THREADS = 4


class App(Process):
    def __init__(self, env: dict[str, str]) -> None:
        super().__init__()
        self.port = free_port()
        self.env = {**os.environ, **env}

    def start(self) -> App:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", "--chdir", str(HERE), "--bind",
                f"127.0.0.1:{self.port}", "-w", "1", "-k", "gthread", "--threads", str(THREADS),
                "--log-level", "warning", "bench_flask_app:app",
            ],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=self.env,
        )
        _wait_port(self.port, self.proc, "gunicorn bench_flask_app", self.log)
        return self


def cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def load(port: int, clients: list[str]) -> tuple[int, int]:
    """Send one request per entry of ``clients`` (split over THREADS keep-alive connections)."""
    statuses: dict[int, int] = {}
    lock = threading.Lock()

    def worker(part: list[str]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        seen: dict[int, int] = {}
        for c in part:
            conn.request("GET", "/", headers={"X-Client": c})
            resp = conn.getresponse()
            resp.read()
            seen[resp.status] = seen.get(resp.status, 0) + 1
        conn.close()
        with lock:
            for k, v in seen.items():
                statuses[k] = statuses.get(k, 0) + v

    threads = [threading.Thread(target=worker, args=(clients[i::THREADS],)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses.get(200, 0), sum(statuses.values())


def throughput(server: RedisServer, scheme: str, strategy: str, limit: int, requests: int, round_: int) -> tuple[float, float]:
    r = redis.Redis(port=server.port)
    r.flushall()
    app = App({
        "STORAGE_URI": f"{scheme}://127.0.0.1:{server.port}/0",
        "STRATEGY": strategy,
        "LIMIT": f"{limit} per minute",
    }).start()
    try:
        per_client = limit // 2
        n_clients = max(1, requests // per_client)
        warm = [f"warm-{round_}-{i}" for i in range(THREADS * 10)]
        load(app.port, warm)  # connections, scripts loaded, imports done
        clients = [f"c{round_}-{i % n_clients}" for i in range(n_clients * per_client)]
        c0, t0 = cpu(r), time.perf_counter()
        ok, total = load(app.port, clients)
        t1, c1 = time.perf_counter(), cpu(r)
    finally:
        app.stop()
        r.close()
    if ok != total:
        raise RuntimeError(f"{scheme} {strategy}: {total - ok} of {total} requests refused (all should be under the limit)")
    return total / (t1 - t0), (c1 - c0) / total * 1e6


def key_bytes(server: RedisServer, scheme: str, strategy: str, limit: int) -> int:
    """Bytes of one client's keys at the limit. The moving window: a key hit `limit` times.
    The sliding window counter: in steady state, with both windows (limits' Redis storage
    then holds two keys): `limit / 2` hits, one window later one more (2-second windows,
    as the bytes do not depend on the window's length)."""
    r = redis.Redis(port=server.port)
    r.flushall()
    storage = storage_from_string(f"{scheme}://127.0.0.1:{server.port}/0")
    limiter = STRATEGIES[strategy](storage)
    if strategy == "moving-window":
        item: RateLimitItem = RateLimitItemPerMinute(limit)
        for _ in range(limit):
            if not limiter.hit(item, "k"):
                raise RuntimeError(f"{scheme} {strategy}: refused under the limit")
        if limiter.hit(item, "k"):
            raise RuntimeError(f"{scheme} {strategy}: admitted over the limit")
    else:
        item = RateLimitItemPerSecond(limit, 2)
        if not limiter.hit(item, "k", cost=limit // 2):
            raise RuntimeError(f"{scheme} {strategy}: refused under the limit")
        time.sleep(2.1)
        if not limiter.hit(item, "k"):
            raise RuntimeError(f"{scheme} {strategy}: refused under the limit")
        if len(r.keys("*")) not in (1, 2):
            raise RuntimeError(f"{scheme} {strategy}: unexpected keys {r.keys('*')}")
    total = 0
    for key in r.keys("*"):
        total += int(r.memory_usage(key, samples=0) or 0)
    r.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "integrations-limits.md"))
    args = ap.parse_args()
    server = RedisServer().start()
    rows = []
    rounds_log: list[str] = []
    try:
        load_before = os.getloadavg()
        for strategy in ("moving-window", "sliding-window-counter"):
            for limit in (100, 1000):
                rps: dict[str, list[float]] = {k: [] for k in STORAGES}
                us: dict[str, list[float]] = {k: [] for k in STORAGES}
                for rnd in range(args.rounds):
                    order = list(STORAGES.items())
                    if rnd % 2:
                        order.reverse()
                    for name, scheme in order:
                        a, b = throughput(server, scheme, strategy, limit, args.requests, rnd)
                        rps[name].append(a)
                        us[name].append(b)
                        line = f"{strategy} limit {limit} {name} round {rnd}: {a:.0f} req/s, {b:.1f} us Redis CPU/request"
                        rounds_log.append(line)
                        print(line, flush=True)
                mem = {name: key_bytes(server, scheme, strategy, limit) for name, scheme in STORAGES.items()}
                rows.append((strategy, limit, {k: statistics.median(v) for k, v in rps.items()},
                             {k: statistics.median(v) for k, v in us.items()}, mem))
        load_after = os.getloadavg()
    finally:
        server.stop()

    up, tb = list(STORAGES)
    out = [
        "# flask-limiter: limits' own Redis storage vs redis-tb (`redis+tb://`)",
        "",
        "Written by `bench/integrations/python/bench_storage.py` "
        f"(`--requests {args.requests} --rounds {args.rounds}`), one run, both storages on the "
        "same redis-server (7.0, module loaded), alternating rounds, medians. App: gunicorn, 1 gthread "
        f"worker x {THREADS} threads, flask-limiter {version('flask-limiter')}, limits {version('limits')}, "
        f"headers on; {THREADS} client threads on keep-alive connections; every request under its "
        "limit. Redis CPU = INFO cpu used_cpu_sys + used_cpu_user delta / requests. Bytes per key = "
        "MEMORY USAGE SAMPLES 0 of one client's keys (see below).",
        "",
        f"Load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after (2 cores, shared).",
        "",
        "| strategy | limit/min | app req/s: limits / redis-tb (ratio) | Redis CPU us/request: limits / redis-tb (ratio) | bytes per limited key: limits / redis-tb (ratio) |",
        "|---|---|---|---|---|",
    ]
    for strategy, limit, rps_m, us_m, mem in rows:
        out.append(
            f"| {strategy} | {limit} | {rps_m[up]:.0f} / {rps_m[tb]:.0f} ({rps_m[tb] / rps_m[up]:.2f}x) "
            f"| {us_m[up]:.1f} / {us_m[tb]:.1f} ({us_m[tb] / us_m[up]:.2f}x) "
            f"| {mem[up]:,} / {mem[tb]:,} ({mem[tb] / mem[up]:.2f}x) |"
        )
    out += [
        "",
        "Ratios are redis-tb / limits: above 1x is better for req/s, below 1x is better for CPU and bytes.",
        "Bytes: the moving window's key full at its limit (limits: a list of timestamps; redis-tb: the",
        "TB.WINDOW LOG sorted set, a listpack up to Redis' zset-max-listpack-entries, 128 by default, then a",
        "skiplist); the sliding window counter in steady state (limits: the current and the previous",
        "window's counters, two keys; redis-tb: one hash).",
        "",
        "Every round:",
        "",
        "```",
        *rounds_log,
        "```",
        "",
    ]
    Path(args.out).write_text("\n".join(out))
    print("\n".join(out))


def version(dist: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(dist)


if __name__ == "__main__":
    main()
