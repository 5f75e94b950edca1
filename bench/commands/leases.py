#!/usr/bin/env python3
"""In-flight limits and holds, measured (issue 25): server CPU per operation and operations
per second, side by side, written to bench/results/leases.md (`make bench-leases`; `make
bench` runs it after the main report).

Rows:
  acquire+release  TB.ACQUIRE + TB.RELEASE against redis-semaphore's Semaphore (the current
                   npm release, installed into ~/.cache/redis-tb/redis-semaphore by npm; its
                   acquire Lua script is read from the installed package at run time, never
                   copied here; its release is a plain ZREM, as the package sends it)
  combined         TB.ACQUIRE ... TAKE 2 (one call) against TB.ACQUIRE + TB.MTAKE 2 (two)
  hold+settle      TB.HOLD + TB.SETTLE against TB.TAKE + TB.REFUND
  floor            PING + PING in the same loops, one at a time and pipelined: what any two
                   commands cost the server at the least (reading, parsing, replying), so
                   the lowest ratio to the peer that any acquire + release of two commands
                   could reach
  bytes per lease  MEMORY USAGE of one key at 1, 100 and 10,000 leases, both peers

Server CPU is the server process's utime + stime (/proc) over the timed loop divided by
the operations, beside utime alone (user space: Redis and the commands, without the
kernel's socket work) and INFO commandstats' usec of the commands timed (which leaves out
the reading and writing of the network). Clients are `--workers` processes, each sending
one operation at a time (its replies are needed: the release needs the acquire's id).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_bench.common import RESULTS_DIR, SetupError  # noqa: E402
from tb_bench.resp import RedisError, RespClient  # noqa: E402
from tb_bench.server import RedisServer, cpu_pinning, ensure_module  # noqa: E402

CACHE = Path.home() / ".cache" / "redis-tb" / "redis-semaphore"
RESULT = RESULTS_DIR / "leases.md"
KEYS_PER_WORKER = 16
LIMIT = "1000"
LEASE_MS = "60000"


def semaphore_script() -> tuple[str, str]:
    """(version, acquire Lua) of the installed current redis-semaphore release."""
    if not shutil.which("npm"):
        raise SetupError("npm is needed to install redis-semaphore")
    CACHE.mkdir(parents=True, exist_ok=True)
    version = subprocess.run(["npm", "view", "redis-semaphore", "version"], check=True,
                             capture_output=True, text=True).stdout.strip()
    pkg = CACHE / "node_modules" / "redis-semaphore"
    installed = None
    if (pkg / "package.json").exists():
        installed = json.loads((pkg / "package.json").read_text())["version"]
    if installed != version:
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(CACHE),
                        f"redis-semaphore@{version}"], check=True, capture_output=True)
    source = (pkg / "lib" / "semaphore" / "acquire" / "lua.js").read_text()
    m = re.search(r"createEval\)\(`(.*?)`, 1\)", source, re.S)
    if not m:
        raise SetupError(f"no acquire script found in {pkg}/lib/semaphore/acquire/lua.js")
    return version, m.group(1)


def pipeline(c: RespClient, commands: list[list[str]]) -> list[object]:
    """Sends `commands` in one write, then reads their replies (an error reply raises)."""
    c.sock.sendall(b"".join(c.encode(cmd) for cmd in commands))
    replies = [c._read() for _ in commands]
    bad = [r for r in replies if isinstance(r, RedisError)]
    if bad:
        raise RuntimeError(f"{commands[0][0]}: {bad[0]}")
    return replies


def run_tb(c: RespClient, keys: list[str], ops: int) -> None:
    """`ops` TB.ACQUIRE + TB.RELEASE pairs: a pipeline of one acquire per key, then one of
    their releases (a release needs its acquire's id)."""
    for _ in range(ops // len(keys)):
        got = pipeline(c, [["TB.ACQUIRE", k, LIMIT, LEASE_MS] for k in keys])
        ids = [r[2] for r in got]  # type: ignore[index]
        pipeline(c, [["TB.RELEASE", k, i] for k, i in zip(keys, ids)])


def run_semaphore(c: RespClient, keys: list[str], ops: int, sha: str) -> None:
    """The same with redis-semaphore's acquire script (EVALSHA) and its release (ZREM)."""
    for _ in range(ops // len(keys)):
        ids = [uuid.uuid4().hex for _ in keys]
        now = str(int(time.time() * 1000))
        got = pipeline(c, [["EVALSHA", sha, "1", k, LIMIT, i, LEASE_MS, now] for k, i in zip(keys, ids)])
        if any(r != 1 for r in got):
            raise RuntimeError(f"redis-semaphore refused: {got[:3]}")
        pipeline(c, [["ZREM", k, i] for k, i in zip(keys, ids)])


def run_floor(c: RespClient, ops: int, batch: int) -> None:
    """`ops` PING + PING pairs sent like run_tb's pairs: `batch` PINGs in one write, their
    replies read, then `batch` more."""
    for _ in range(ops // batch):
        for _ in range(2):
            if pipeline(c, [["PING"]] * batch) != ["PONG"] * batch:
                raise RuntimeError("PING did not answer PONG")


def worker(port: int, kind: str, index: int, ops: int, sha: str, cpu: int | None, out) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    c = RespClient(port)
    keys = [f"w{index}:{i}" for i in range(KEYS_PER_WORKER)]
    slow = "0.000000001"
    start = time.perf_counter()
    if kind == "tb_pipelined":
        run_tb(c, ["sem:" + k for k in keys], ops)
    elif kind == "semaphore_pipelined":
        run_semaphore(c, ["sem:" + k for k in keys], ops, sha)
    elif kind == "floor_pipelined":
        run_floor(c, ops, len(keys))
    for i in range(ops if not kind.endswith("_pipelined") else 0):
        k = keys[i % KEYS_PER_WORKER]
        if kind == "tb":
            r = c.call("TB.ACQUIRE", "sem:" + k, LIMIT, LEASE_MS)
            assert r[0] == 1, r
            c.call("TB.RELEASE", "sem:" + k, r[2])
        elif kind == "floor":
            assert c.call("PING") == "PONG"
            assert c.call("PING") == "PONG"
        elif kind == "semaphore":
            ident = uuid.uuid4().hex
            now = str(int(time.time() * 1000))
            assert c.call("EVALSHA", sha, "1", "sem:" + k, LIMIT, ident, LEASE_MS, now) == 1
            c.call("ZREM", "sem:" + k, ident)
        elif kind == "combined":
            r = c.call("TB.ACQUIRE", "sem:{" + k + "}", LIMIT, LEASE_MS, "TAKE", "2",
                       "a:{" + k + "}", "b:{" + k + "}", "1000000000", slow, "1",
                       "1000000000", slow, "1")
            assert r[0] == 1, r
            c.call("TB.RELEASE", "sem:{" + k + "}", r[2])
        elif kind == "separate":
            r = c.call("TB.ACQUIRE", "sem:{" + k + "}", LIMIT, LEASE_MS)
            assert r[0] == 1, r
            m = c.call("TB.MTAKE", "2", "a:{" + k + "}", "b:{" + k + "}", "1000000000", slow,
                       "1", "1000000000", slow, "1")
            assert m[0] == 1, m
            c.call("TB.RELEASE", "sem:{" + k + "}", r[2])
        elif kind == "hold":
            r = c.call("TB.HOLD", "h:" + k, "1000000000", slow, "10", LEASE_MS)
            assert r[0] == 1, r
            c.call("TB.SETTLE", "h:" + k, "1000000000", slow, r[4], "7")
        elif kind == "take_refund":
            assert c.call("TB.TAKE", "h:" + k, "1000000000", slow, "10")[0] == 1
            c.call("TB.REFUND", "h:" + k, "1000000000", slow, "3")
    out.put(time.perf_counter() - start)


# What each row times, and which commandstats entries its server CPU is read from.
KINDS = {
    "tb": ("TB.ACQUIRE + TB.RELEASE", ["tb.acquire", "tb.release"]),
    "semaphore": ("redis-semaphore acquire (EVALSHA) + release (ZREM)", ["evalsha", "zrem"]),
    "floor": ("floor: PING + PING", ["ping"]),
    "tb_pipelined": ("TB.ACQUIRE + TB.RELEASE, pipelined", ["tb.acquire", "tb.release"]),
    "semaphore_pipelined": ("redis-semaphore acquire + release, pipelined", ["evalsha", "zrem"]),
    "floor_pipelined": ("floor: PING + PING, pipelined", ["ping"]),
    "combined": ("TB.ACQUIRE ... TAKE 2 (+ TB.RELEASE)", ["tb.acquire"]),
    "separate": ("TB.ACQUIRE + TB.MTAKE 2 (+ TB.RELEASE)", ["tb.acquire", "tb.mtake"]),
    "hold": ("TB.HOLD + TB.SETTLE", ["tb.hold", "tb.settle"]),
    "take_refund": ("TB.TAKE + TB.REFUND", ["tb.take", "tb.refund"]),
}


def measure(server: RedisServer, target, make_args, workers: int, total: int,
            commands: list[str]) -> dict:
    """Runs `workers` processes of `target(*make_args(i, queue))` against a flushed server
    with reset stats; per operation of `total`: the server's CPU and user time (us), the
    `commands`' INFO commandstats usec, and the throughput."""
    with RespClient(server.port) as ctl:
        ctl.call("FLUSHALL")
        ctl.call("CONFIG", "RESETSTAT")
        cpu0, user0 = server.cpu_seconds(), server.user_seconds()
        q: mp.Queue = mp.Queue()
        t0 = time.perf_counter()
        procs = [mp.Process(target=target, args=make_args(i, q)) for i in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode != 0:
                raise SetupError(f"{target.__name__} {make_args(0, q)[1]!r} failed")
        wall = time.perf_counter() - t0
        cpu, user = server.cpu_seconds() - cpu0, server.user_seconds() - user0
        stats = ctl.info("commandstats")
    usec = 0.0
    for name in commands:
        m = re.search(r"usec=(\d+)", stats.get(f"cmdstat_{name}", ""))
        usec += int(m.group(1)) if m else 0
    return {"ops_per_s": total / wall, "cpu_us": cpu / total * 1e6,
            "user_us": user / total * 1e6, "usec": usec / total}


def run(server: RedisServer, kind: str, workers: int, ops: int, sha: str,
        load_cpu: int | None) -> dict:
    return measure(server, worker, lambda i, q: (server.port, kind, i, ops, sha, load_cpu, q),
                   workers, workers * ops, KINDS[kind][1])


def bytes_per_lease(server: RedisServer, sha: str) -> list[tuple[int, int, int]]:
    rows = []
    with RespClient(server.port) as c:
        for n in (1, 100, 10_000):
            c.call("FLUSHALL")
            for _ in range(n):
                c.call("TB.ACQUIRE", "ours", "10000", LEASE_MS)
                c.call("EVALSHA", sha, "1", "theirs", "10000", str(uuid.uuid4()), LEASE_MS,
                       str(int(time.time() * 1000)))
            rows.append((n, c.call("MEMORY", "USAGE", "ours", "SAMPLES", "0"),
                         c.call("MEMORY", "USAGE", "theirs", "SAMPLES", "0")))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", type=int, default=int(os.environ.get("LEASE_BENCH_OPS", 20000)),
                    help="operations per worker per row")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3, help="runs per row; the median is kept")
    ap.add_argument("--pipelined-ops", type=int, default=None,
                    help="pairs per worker for the pipelined rows (default: 8 x --ops; they "
                         "are cheaper per pair, and utime counts in clock ticks)")
    args = ap.parse_args()
    pipelined_ops = args.pipelined_ops or 8 * args.ops
    module = ensure_module()
    binary = os.environ.get("REDIS_SERVER", "redis-server")
    version, script = semaphore_script()
    server_pin, load_pin, pin_note = cpu_pinning()
    pin_note = pin_note.replace("redis-benchmark", "the client processes")
    load_cpu = int(load_pin[-1]) if load_pin else None
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            RedisServer(binary, module, Path(tmp), server_pin) as server:
        with RespClient(server.port) as c:
            sha = c.call("SCRIPT", "LOAD", script)
            redis_version = c.info("server").get("redis_version", "?")
        for kind in KINDS:
            ops = pipelined_ops if kind.endswith("_pipelined") else args.ops
            runs = sorted((run(server, kind, args.workers, ops, sha, load_cpu)
                           for _ in range(args.rounds)), key=lambda r: r["cpu_us"])
            results[kind] = runs[len(runs) // 2]
            print(f"{kind:12} {results[kind]}", flush=True)
        memory = bytes_per_lease(server, sha)

    def row(kind: str) -> str:
        r = results[kind]
        return (f"| {KINDS[kind][0]} | {r['cpu_us']:.2f} | {r['user_us']:.2f} | "
                f"{r['usec']:.2f} | {r['ops_per_s']:,.0f} |")

    def ratio(a: str, b: str, key: str) -> float:
        return results[a][key] / results[b][key]

    def floor_note(tb: str, peer: str, floor: str, how: str) -> str:
        """What the floor row says about the 0.5x target: any pair of two commands costs at
        least the floor, so a floor above half the peer's pair puts the target out of reach."""
        f, t, p = (results[k]["cpu_us"] for k in (floor, tb, peer))
        reach = ("so no acquire + release of two commands can reach 0.5x by server CPU "
                 f"{how}" if f >= p / 2 else
                 f"so 0.5x is within reach {how}: it leaves {p / 2 - f:.2f} µs a pair for "
                 "the commands' own work")
        return (f"Two PINGs sent the same way already cost {f / p:.2f}x the peer's pair, "
                f"{reach}; above that floor TB.ACQUIRE + TB.RELEASE spends {t - f:.2f} µs a "
                f"pair and redis-semaphore {p - f:.2f} µs ({(t - f) / (p - f):.2f}x)."
                if p > f else "The floor costs as much as the peer's pair: the run is noise.")

    lines = [
        "# In-flight limits and holds: measurements",
        "",
        f"`python3 bench/commands/leases.py --ops {args.ops} --workers {args.workers} "
        f"--rounds {args.rounds} --pipelined-ops {pipelined_ops}` on Redis {redis_version}, "
        f"{pin_note}; redis-semaphore "
        f"{version} (npm, its acquire script read from the installed package). Each row: "
        f"{args.workers} client processes x {args.ops} operations, one at a time; median "
        f"of {args.rounds} runs by server CPU. Server CPU per operation is the server "
        "process's utime + stime over the run, user CPU its utime alone (Redis and the "
        "commands in user space, without the kernel's socket work); commandstats usec is "
        "the time inside the "
        "timed commands only. The clients send one operation at a time, so the server's "
        "CPU per operation is mostly reading and writing the socket, the same for every "
        "row; commandstats shows the commands' own cost. On a shared machine runs vary by "
        "a third: compare rows of one run.",
        "",
        "| operation | server CPU µs / op | user CPU µs / op | commandstats µs / op "
        "| ops / s |",
        "|---|---|---|---|---|",
        row("tb"), row("semaphore"), row("floor"),
        "",
        f"TB.ACQUIRE + TB.RELEASE uses {ratio('tb', 'semaphore', 'cpu_us'):.2f}x the server "
        f"CPU of redis-semaphore's acquire + release ({ratio('tb', 'semaphore', 'user_us'):.2f}x "
        f"its user CPU, {ratio('tb', 'semaphore', 'usec'):.2f}x by commandstats; target: "
        "at most 0.5x), at "
        f"{ratio('tb', 'semaphore', 'ops_per_s'):.2f}x its operations per second. "
        + floor_note("tb", "semaphore", "floor", "one at a time"),
        "",
        f"Pipelined, as a busy multiplexed client sends them: each client process writes "
        f"{KEYS_PER_WORKER} acquires (one per key) in one write, reads their replies, then "
        f"writes the {KEYS_PER_WORKER} releases ({pipelined_ops} pairs a process), so the "
        "socket's cost is shared by "
        f"{KEYS_PER_WORKER} commands and the server's CPU is mostly the commands' own:",
        "",
        "| operation | server CPU µs / op | user CPU µs / op | commandstats µs / op "
        "| ops / s |",
        "|---|---|---|---|---|",
        row("tb_pipelined"), row("semaphore_pipelined"), row("floor_pipelined"),
        "",
        f"Pipelined, TB.ACQUIRE + TB.RELEASE uses "
        f"{ratio('tb_pipelined', 'semaphore_pipelined', 'cpu_us'):.2f}x the server CPU of "
        f"redis-semaphore's ({ratio('tb_pipelined', 'semaphore_pipelined', 'user_us'):.2f}x "
        f"its user CPU, {ratio('tb_pipelined', 'semaphore_pipelined', 'usec'):.2f}x by "
        f"commandstats), at {ratio('tb_pipelined', 'semaphore_pipelined', 'ops_per_s'):.2f}x "
        "its operations per second. "
        + floor_note("tb_pipelined", "semaphore_pipelined", "floor_pipelined", "pipelined"),
        "",
        "| operation | server CPU µs / op | user CPU µs / op | commandstats µs / admission "
        "| ops / s |",
        "|---|---|---|---|---|",
        row("combined"), row("separate"),
        "",
        f"The combined call: {ratio('combined', 'separate', 'usec'):.2f}x the commandstats "
        "time of the two separate calls per admission (target: below 1), "
        f"{ratio('combined', 'separate', 'cpu_us'):.2f}x the server CPU of the whole loop "
        "(the release included in both).",
        "",
        "| operation | server CPU µs / op | user CPU µs / op | commandstats µs / op "
        "| ops / s |",
        "|---|---|---|---|---|",
        row("hold"), row("take_refund"),
        "",
        "## Bytes per lease (MEMORY USAGE of the key)",
        "",
        "| leases | TB.ACQUIRE key | bytes / lease | redis-semaphore key | bytes / lease |",
        "|---|---|---|---|---|",
        *[f"| {n:,} | {a:,} | {a / n:.0f} | {b:,} | {b / n:.0f} |" for n, a, b in memory],
        "",
    ]
    RESULT.write_text("\n".join(lines))
    print(f"wrote {RESULT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
