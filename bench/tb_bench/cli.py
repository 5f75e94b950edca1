"""Configuration (environment and flags) and the run from start to report."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import memory, report, runner, stats
from .common import BENCH_DIR, LUA_SCRIPT, SetupError
from .resp import RespClient
from .server import RedisServer, cpu_pinning, ensure_module, machine_info
from .workloads import WORKLOADS, Workload


@dataclass
class Config:
    rounds: int
    requests: int
    requests_p1: int
    keys: int
    out: Path
    only: list[str]


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        raise SetupError(f"{name}={raw!r} is not an integer") from None


def parse_config(argv: list[str]) -> Config:
    env = os.environ
    ap = argparse.ArgumentParser(
        prog="bench.py",
        description="Benchmark TB.TAKE and the other TB.* commands against HSET, PING and "
                    "the same token bucket as a Lua script, on a server this script starts.")
    ap.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 5))
    ap.add_argument("--requests", type=int, default=env_int("BENCH_REQUESTS", 500_000),
                    help="requests per pipelined run")
    ap.add_argument("--requests-p1", type=int, default=env_int("BENCH_REQUESTS_P1", 80_000),
                    help="requests per unpipelined run")
    ap.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 100_000))
    ap.add_argument("--out", type=Path,
                    default=Path(env.get("BENCH_OUT", BENCH_DIR / "results")))
    ap.add_argument("--quick", action="store_true",
                    help="1 round, 100000/20000 requests: a smoke test")
    ap.add_argument("--only", default="",
                    help="comma-separated workload ids to run (plus HSET and their peers); "
                         "ids: " + ", ".join(w.id for w in WORKLOADS))
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.requests, a.requests_p1 = 1, 100_000, 20_000
    if a.rounds < 1 or a.requests < 1 or a.requests_p1 < 1 or a.keys < 1:
        ap.error("rounds, requests and keys must be positive")
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    unknown = set(only) - {w.id for w in WORKLOADS}
    if unknown:
        ap.error(f"unknown workload ids: {', '.join(sorted(unknown))}")
    return Config(a.rounds, a.requests, a.requests_p1, a.keys, a.out, only)


def selected(only: list[str]) -> list[Workload]:
    """All workloads, or the chosen ones with HSET (every table's baseline) and their
    peers, in table order."""
    if not only:
        return list(WORKLOADS)
    by_id = {w.id: w for w in WORKLOADS}
    keep = {"hset", *only}
    keep |= {p for i in only for p in by_id[i].peers}
    return [w for w in WORKLOADS if w.id in keep]


def _raise_exit(signum, _frame):
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    cfg = parse_config(argv)
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGHUP, _raise_exit)
    server_binary = os.environ.get("REDIS_SERVER", "redis-server")
    for tool in (server_binary, "redis-benchmark"):
        if not shutil.which(tool):
            raise SetupError(f"{tool} not found on PATH")
    module = ensure_module()
    server_pin, bench_pin, pin_note = cpu_pinning()
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"bench: warning: load average is {load1:.2f}: other work is running and "
              "will add noise", file=sys.stderr)
    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="redis-tb-bench-") as tmp:
        workdir = Path(tmp)
        # A private copy: a concurrent `cargo build` must not swap the code under the server.
        private = workdir / module.name
        shutil.copy2(module, private)
        with RedisServer(server_binary, private, workdir, server_pin) as server, \
                RespClient(server.port) as ctl:
            info = machine_info(server_binary, private, ctl)
            info["module"] = str(module)
            sha = ctl.call("SCRIPT", "LOAD", LUA_SCRIPT.read_text())
            wl, skipped = runner.available(ctl, runner.bind(selected(cfg.only), sha))
            have = set().union(*(w.module_commands() for w in wl))
            runner.sanity_check(ctl, sha, have)
            print(f"redis-server {info['redis']} on port {server.port}; {pin_note}",
                  file=sys.stderr)
            for note in skipped:
                print(f"bench: warning: not measured: {note}", file=sys.stderr)

            print("memory per bucket ...", file=sys.stderr)
            mem = memory.measure_memory(ctl, server, sha, cfg.keys)
            runs = runner.run_rounds(ctl, server, bench_pin, wl, cfg.rounds, cfg.requests,
                                     cfg.requests_p1, cfg.keys)
            server_argv = [a if a != str(server.port) else "PORT" for a in server.argv]
            server_argv = [("TMPDIR" + a[len(tmp):]) if a.startswith(tmp) else a
                           for a in server_argv]
            bench_cmds = runner.bench_commands(bench_pin, wl, cfg.requests, cfg.requests_p1,
                                               cfg.keys)

    elapsed = time.monotonic() - started
    summary = stats.summarise(runs, wl)
    targets = stats.evaluate_targets(runs, wl, mem)
    report.write_report(cfg.out, cfg, info, pin_note, server_argv, wl, summary, runs, mem,
                        targets, bench_cmds, elapsed, skipped)
    report.print_summary(cfg, wl, summary, runs, mem, targets, skipped, elapsed)
    return 0


def run(argv: list[str]) -> None:
    """The command-line entry: exits with 1 and a one-line message on a setup error."""
    try:
        sys.exit(main(argv))
    except SetupError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)
