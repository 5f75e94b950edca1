#!/usr/bin/env python3
"""Soak: a steady mixed TB.TAKE load for a long time (default 10 minutes), sampling memory
and latency, to show memory stays flat (buckets expire as fast as they are created) and
latency does not creep. Not part of CI: `make soak` runs it.

The load is redis-benchmark, one process per workload of the mix running at once, against
a fresh redis-server with the module loaded, pinned to separate cores where there are two.
Each slice reports req/s and p50/p99 per workload; after each slice used_memory, RSS and
the key count are sampled. The verdict compares the second tenth of the run (after warm-up) with the
last tenth.

Environment: SOAK_SECONDS (default 600), SLICE_SECONDS (default 10), REDIS_SERVER,
REDIS_TB_MODULE, SOAK_REPORT (default bench/results/soak.md).
"""

import csv
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MODULE = os.environ.get("REDIS_TB_MODULE", os.path.join(ROOT, "target/release/libredis_tb.so"))
SOAK_SECONDS = int(os.environ.get("SOAK_SECONDS", "600"))
SLICE_SECONDS = int(os.environ.get("SLICE_SECONDS", "10"))
REPORT = os.environ.get("SOAK_REPORT", os.path.join(ROOT, "bench/results/soak.md"))

# The mix: most calls allowed on a large keyspace with realistic limits (100/min), some
# on the server clock, some queries, and a hot key that is mostly denied. Keys live
# about a minute after their last take, so the keyspace turns over during the run.
MIX = [
    ("take, client now", ["TB.TAKE", "soak:__rand_int__", "100", "1.6666666666666667", "1", "NOW"]),
    ("take, server clock", ["TB.TAKE", "soak:__rand_int__", "100", "1.6666666666666667", "1"]),
    ("query n=0", ["TB.TAKE", "soak:__rand_int__", "100", "1.6666666666666667", "0"]),
    ("hot key, mostly denied", ["TB.TAKE", "soak:hot", "10", "1", "1"]),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30)
    return out.stdout


def info(port, section):
    fields = {}
    for line in cli(port, "INFO", section).splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k] = v.strip()
    return fields


def pinned(core):
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(core)]
    return []


def run_slice(port, seconds):
    """Runs every workload of the mix at once for about `seconds` (one redis-benchmark per
    workload, all pinned to the load core); returns {workload: (req/s, p50 ms, p99 ms)}."""
    procs = {}
    for name, command in MIX:
        args = [a if a != "NOW" else f"{time.time():.6f}" for a in command]
        n = max(5000, int(30000 * seconds))  # about `seconds` at ~30k/s per workload (2 cores)
        cmd = pinned(1) + ["redis-benchmark", "-p", str(port), "-c", "12", "-P", "1", "-r", "1000000",
                           "-n", str(n), "--csv", *args]
        procs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=seconds * 10 + 60)
        rows = list(csv.reader(io.StringIO(out)))
        if len(rows) < 2:
            raise RuntimeError(f"redis-benchmark printed no result: {out!r} {err!r}")
        row = dict(zip(rows[0], rows[1]))
        results[name] = (float(row["rps"]), float(row["p50_latency_ms"]), float(row["p99_latency_ms"]))
    return results


def main():
    if not os.path.exists(MODULE):
        subprocess.run(["cargo", "build", "--release"], cwd=ROOT, check=True)
    workdir = tempfile.mkdtemp(prefix="redis-tb-soak-")
    port = free_port()
    server = subprocess.Popen(pinned(0) + [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
                                           "--save", "", "--appendonly", "no", "--loadmodule", MODULE,
                                           "--logfile", "redis.log"])
    samples = []
    try:
        deadline = time.time() + 20
        while cli(port, "PING").strip() != "PONG":
            if time.time() > deadline or server.poll() is not None:
                sys.exit("redis-server did not start")
            time.sleep(0.05)
        base = info(port, "memory")
        print(f"baseline used_memory {base['used_memory']} rss {base['used_memory_rss']}", flush=True)
        start = time.time()
        while time.time() - start < SOAK_SECONDS:
            results = run_slice(port, SLICE_SECONDS)
            mem = info(port, "memory")
            keys = info(port, "keyspace").get("db0", "keys=0").split(",")[0].split("=")[1]
            t = time.time() - start
            for name, (rps, p50, p99) in results.items():
                samples.append({"t": t, "workload": name, "rps": rps, "p50": p50, "p99": p99,
                                "used": int(mem["used_memory"]), "rss": int(mem["used_memory_rss"]),
                                "keys": int(keys)})
            print(f"{t:6.0f}s used {int(mem['used_memory']) / 1e6:7.1f} MB rss {int(mem['used_memory_rss']) / 1e6:7.1f} MB "
                  f"keys {keys:>8} | " + " | ".join(f"{n}: {r[0]:.0f}/s p99 {r[2]:.2f}" for n, r in results.items()),
                  flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)
    write_report(samples)


def window(samples, lo, hi):
    total = samples[-1]["t"] if samples else 0
    return [s for s in samples if lo * total <= s["t"] <= hi * total]


def write_report(samples):
    if len(samples) < 10 * len(MIX):
        print("too few samples for a verdict")
        return
    early, late = window(samples, 0.1, 0.2), window(samples, 0.9, 1.0)

    def avg(rows, key, workload=None):
        rows = [r for r in rows if workload is None or r["workload"] == workload]
        return sum(r[key] for r in rows) / max(1, len(rows))

    lines = [
        "# Soak run",
        "",
        f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {samples[-1]['t']:.0f} s of load in "
        f"{len(samples) // len(MIX)} slices of {samples[-1]['t'] / max(1, len(samples) // len(MIX)):.1f} s on average "
        f"({len(MIX)} redis-benchmark processes at once, "
        "-c 12 -P 1 -r 1000000 each)",
        f"- Server: {subprocess.run([SERVER, '--version'], capture_output=True, text=True).stdout.strip()}",
        f"- Machine: nproc {os.cpu_count()}; command: `make soak` (SOAK_SECONDS={SOAK_SECONDS})",
        "",
        "| window | used_memory MB | RSS MB | keys | " + " | ".join(f"{w} p99 ms" for w, _ in MIX) + " |",
        "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in MIX) + " |",
    ]
    for label, rows in (("10-20% of the run", early), ("90-100% of the run", late)):
        lines.append(
            f"| {label} | {avg(rows, 'used') / 1e6:.1f} | {avg(rows, 'rss') / 1e6:.1f} | {avg(rows, 'keys'):.0f} | "
            + " | ".join(f"{avg(rows, 'p99', w):.3f}" for w, _ in MIX) + " |")
    growth = avg(late, "used") / max(1, avg(early, "used"))
    creep = avg(late, "p99") / max(1e-9, avg(early, "p99"))
    lines += [
        "",
        f"used_memory late/early: {growth:.2f}x; p99 late/early: {creep:.2f}x.",
        "",
        "Memory is flat when the keyspace turns over (buckets expire about a minute after their last",
        "take) rather than growing; latency creep would show as a rising p99.",
        "",
        "## Every slice",
        "",
        "| t s | workload | req/s | p50 ms | p99 ms | used MB | RSS MB | keys |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in samples:
        lines.append(f"| {s['t']:.0f} | {s['workload']} | {s['rps']:.0f} | {s['p50']:.3f} | {s['p99']:.3f} | "
                     f"{s['used'] / 1e6:.1f} | {s['rss'] / 1e6:.1f} | {s['keys']} |")
    os.makedirs(os.path.dirname(REPORT), exist_ok=True)
    with open(REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    print(f"report: {REPORT}")


if __name__ == "__main__":
    main()
