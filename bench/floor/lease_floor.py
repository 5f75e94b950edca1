#!/usr/bin/env python3
"""The floors under issue 25's server-CPU target: TB.ACQUIRE + TB.RELEASE and
redis-semaphore's acquire + release beside what any acquire + release of two commands
costs (two PINGs) and what the least module pairs cost (lease_floor.c: a sorted-set
member as in TB, a counter in a module type, the counter with nothing but the value and
one replicated command), one at a time and pipelined, the same loops as bench/commands/leases.py,
in interleaved rounds on one server. `make bench-floor-leases`; not part of CI.

    python3 bench/floor/lease_floor.py [--ops 64000] [--rounds 5] [--out FILE]

Server CPU is the server process's utime + stime per pair (/proc), as in bench/commands/leases.py;
the report gives each row's median and its ratio to redis-semaphore's pair in the same
round (median and range over the rounds).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
# bench/commands: the shared harness (tb_bench) and leases.py, whose loops this reuses
sys.path.insert(0, str(HERE.parent / "commands"))

import leases as L
from tb_bench.common import REPO_ROOT, RESULTS_DIR, SetupError
from tb_bench.resp import RespClient
from tb_bench.server import RedisServer, cpu_pinning, ensure_module

# kind: (label, commandstats entries)
KINDS = {
    "ping": ("two PINGs", ["ping"]),
    "semaphore": ("redis-semaphore acquire (EVALSHA) + release (ZREM)", ["evalsha", "zrem"]),
    "tb": ("TB.ACQUIRE + TB.RELEASE", ["tb.acquire", "tb.release"]),
    "zset": ("least module pair, sorted set (TB's design)", ["floor.zacq", "floor.zrel"]),
    "type": ("least module pair, module type", ["floor.nacq", "floor.nrel"]),
    "bare": ("least module pair, module type, no expiry, no event", ["floor.macq", "floor.mrel"]),
}
AT = str(int(time.time() * 1000) + 86_400_000)


def build_floor(out: Path) -> Path:
    """lease_floor.c built against the redismodule.h of the redis-module crate."""
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--manifest-path", str(REPO_ROOT / "Cargo.toml")],
        check=True, capture_output=True, text=True).stdout)
    manifests = [p["manifest_path"] for p in meta["packages"] if p["name"] == "redis-module"]
    if not manifests:
        raise SetupError("cargo metadata lists no redis-module package (its redismodule.h is needed)")
    include = Path(manifests[0]).parent / "src" / "include"
    so = out / "lease_floor.so"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-fPIC", "-shared", "-I", str(include),
                    "-o", str(so), str(HERE / "lease_floor.c")], check=True)
    return so


def pairs(c: RespClient, kind: str, keys: list[str], sha: str) -> None:
    """One acquire per key in one write, their replies, then the releases."""
    if kind == "ping":
        L.pipeline(c, [["PING"]] * len(keys))
        L.pipeline(c, [["PING"]] * len(keys))
    elif kind == "tb":
        got = L.pipeline(c, [["TB.ACQUIRE", k, L.LIMIT, L.LEASE_MS] for k in keys])
        L.pipeline(c, [["TB.RELEASE", k, r[2]] for k, r in zip(keys, got)])  # type: ignore[index]
    elif kind == "semaphore":
        ids = [uuid.uuid4().hex for _ in keys]
        now = str(int(time.time() * 1000))
        got = L.pipeline(c, [["EVALSHA", sha, "1", k, L.LIMIT, i, L.LEASE_MS, now]
                             for k, i in zip(keys, ids)])
        if any(r != 1 for r in got):
            raise RuntimeError(f"redis-semaphore refused: {got[:3]}")
        L.pipeline(c, [["ZREM", k, i] for k, i in zip(keys, ids)])
    elif kind == "zset":
        ids = [uuid.uuid4().hex for _ in keys]
        L.pipeline(c, [["FLOOR.ZACQ", k, i, AT, AT] for k, i in zip(keys, ids)])
        L.pipeline(c, [["FLOOR.ZREL", k, i] for k, i in zip(keys, ids)])
    elif kind == "type":
        L.pipeline(c, [["FLOOR.NACQ", k, AT] for k in keys])
        L.pipeline(c, [["FLOOR.NREL", k] for k in keys])
    elif kind == "bare":
        L.pipeline(c, [["FLOOR.MACQ", k] for k in keys])
        L.pipeline(c, [["FLOOR.MREL", k] for k in keys])


def worker(port: int, kind: str, index: int, ops: int, batch: int, sha: str,
           cpu: int | None, out: mp.Queue) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    c = RespClient(port)
    keys = [f"sem:w{index}:{i}" for i in range(L.KEYS_PER_WORKER)]
    for n in range(ops // batch):
        start = (n * batch) % len(keys)
        pairs(c, kind, (keys + keys)[start:start + batch], sha)
    out.put(0)


def measure(server: RedisServer, kind: str, workers: int, ops: int, batch: int, sha: str,
            cpu: int | None) -> dict[str, float]:
    return L.measure(server, worker, lambda i, q: (server.port, kind, i, ops, batch, sha, cpu, q),
                     workers, workers * ops, KINDS[kind][1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=64000, help="pipelined pairs per worker per row")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS_DIR / "lease-floor.md"))
    args = ap.parse_args()
    module = ensure_module()
    version, script = L.semaphore_script()
    server_pin, load_pin, pin_note = cpu_pinning()
    pin_note = pin_note.replace("redis-benchmark", "the client processes")
    load_cpu = int(load_pin[-1]) if load_pin else None
    # Pipelined (16 a write) and one at a time (an eighth of the pairs: each costs more).
    modes = [("pipelined", L.KEYS_PER_WORKER, args.ops), ("one at a time", 1, args.ops // 8)]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        floor_so = build_floor(Path(tmp))
        with RedisServer(os.environ.get("REDIS_SERVER", "redis-server"), module, Path(tmp),
                         server_pin, extra=[floor_so]) as server:
            with RespClient(server.port) as c:
                sha = c.call("SCRIPT", "LOAD", script)
                redis_version = c.info("server").get("redis_version", "?")
            for r in range(args.rounds):
                for mode, batch, ops in modes:
                    for kind in KINDS:
                        runs.setdefault((mode, kind), []).append(
                            measure(server, kind, args.workers, ops, batch, sha, load_cpu))
                print(f"round {r + 1}: " + ", ".join(
                    f"{m[:4]} {k} {runs[(m, k)][-1]['cpu_us']:.2f}" for m, _, _ in modes for k in KINDS),
                    file=sys.stderr, flush=True)

    def med(mode: str, kind: str, key: str) -> float:
        return statistics.median(x[key] for x in runs[(mode, kind)])

    lines = [
        "# The floors under the in-flight target (issue 25)",
        "",
        (f"`python3 bench/floor/lease_floor.py --ops {args.ops} --workers {args.workers} "
         f"--rounds {args.rounds}` on Redis {redis_version}, {pin_note}; redis-semaphore {version}. "
         "Every row is an acquire + release pair, sent as bench/commands/leases.py sends them: pipelined "
         f"({L.KEYS_PER_WORKER} acquires in one write, their replies, then the releases; "
         f"{args.workers} processes x {args.ops} pairs) and one at a time ({args.ops // 8} pairs a "
         "process). The module pairs are bench/floor/lease_floor.c: each does less than a "
         "correct in-flight limit must (no lease id, no reclaim of expired leases, no count). "
         f"{args.rounds} interleaved rounds on one server; ratios are to redis-semaphore's pair "
         "of the same round (median, and range over the rounds)."),
        "",
    ]
    for mode, _, _ in modes:
        lines += [f"## {mode.capitalize()}", "",
                  ("| pair | server CPU µs | user CPU µs | commandstats µs | server CPU / peer "
                   "(median, range) |"), "|---|---:|---:|---:|---|"]
        peer = runs[(mode, "semaphore")]
        for kind, (label, _) in KINDS.items():
            ratios = sorted(a["cpu_us"] / b["cpu_us"] for a, b in zip(runs[(mode, kind)], peer))
            lines.append(f"| {label} | {med(mode, kind, 'cpu_us'):.2f} | {med(mode, kind, 'user_us'):.2f} | "
                         f"{med(mode, kind, 'usec'):.2f} | {statistics.median(ratios):.2f}x "
                         f"({ratios[0]:.2f}-{ratios[-1]:.2f}) |")
        lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"lease_floor.py: {e}", file=sys.stderr)
        sys.exit(2)
