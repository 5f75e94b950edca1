"""Configuration (environment and flags) and the run from start to report."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import memory, peer, report, runner, stats
from .common import (LUA_SCRIPT, RESULTS_DIR, WINDOW_FIXED_SCRIPT,
                     SetupError, seed_log_script, seed_script)
from .resp import RespClient
from .server import RedisServer, cpu_pinning, ensure_module, machine_info
from .workloads import (LUA_SHA, MEMORY_BASELINE, MEMORY_METHODS, SEED_SHA, SUITES, WFIXED_SHA,
                        WLOG_SHA, WORKLOADS, MemoryMethod, Workload)


@dataclass
class Config:
    rounds: int
    requests: int
    requests_p1: int
    keys: int
    out: Path
    only: list[str]
    suites: tuple[str, ...]


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
        description="Benchmark TB.TAKE and the other TB.* commands against HSET, PING, "
                    "the same token bucket as a Lua script and redis-cell, and TB.WINDOW "
                    "against the design notes' window scripts, on a server this script "
                    "starts.")
    ap.add_argument("--rounds", type=int, default=env_int("BENCH_ROUNDS", 5))
    ap.add_argument("--requests", type=int, default=env_int("BENCH_REQUESTS", 500_000),
                    help="requests per pipelined run")
    ap.add_argument("--requests-p1", type=int, default=env_int("BENCH_REQUESTS_P1", 80_000),
                    help="requests per unpipelined run")
    ap.add_argument("--keys", type=int, default=env_int("BENCH_KEYS", 100_000))
    ap.add_argument("--out", type=Path,
                    default=Path(env.get("BENCH_OUT", RESULTS_DIR)))
    ap.add_argument("--quick", action="store_true",
                    help="1 round, 100000/20000 requests: a smoke test")
    ap.add_argument("--only", default="",
                    help="comma-separated workload ids to run (plus HSET and their peers); "
                         "ids: " + ", ".join(w.id for w in WORKLOADS))
    ap.add_argument("--suite", default="all",
                    help="core: TB.* against HSET, PING and the Lua script; issue12: "
                         "redis-cell side by side on two bucket shapes; issue11: TB.WINDOW's "
                         "modes against the notes' window scripts and TB.TAKE; layered: one "
                         "TB.MTAKE over three buckets against three CL.THROTTLE calls "
                         "(issue 18); several comma-separated (issue12,layered); all "
                         "(default): every suite")
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.requests, a.requests_p1 = 1, 100_000, 20_000
    if a.rounds < 1 or a.requests < 1 or a.requests_p1 < 1 or a.keys < 1:
        ap.error("rounds, requests and keys must be positive")
    only = [x.strip() for x in a.only.split(",") if x.strip()]
    unknown = set(only) - {w.id for w in WORKLOADS}
    if unknown:
        ap.error(f"unknown workload ids: {', '.join(sorted(unknown))}")
    names = [x.strip() for x in a.suite.split(",") if x.strip()]
    bad = set(names) - {"all", *SUITES}
    if bad or not names:
        ap.error(f"unknown suite {', '.join(sorted(bad)) or '(none)'}: choose from all, "
                 + ", ".join(SUITES))
    suites = SUITES if "all" in names else tuple(x for x in SUITES if x in names)
    return Config(a.rounds, a.requests, a.requests_p1, a.keys, a.out, only, suites)


def selected(only: list[str], suites: tuple[str, ...] = SUITES) -> list[Workload]:
    """The suites' workloads, or the chosen ones, with HSET (every table's baseline) and
    their peers, in table order."""
    by_id = {w.id: w for w in WORKLOADS}
    keep = set(only) or {w.id for w in WORKLOADS if w.suite in suites}
    keep |= {"hset"} | {p for i in set(keep) for p in by_id[i].peers}
    return [w for w in WORKLOADS if w.id in keep]


def memory_methods(cfg: Config, chosen: list[Workload]) -> list[MemoryMethod]:
    """The baseline, the core methods when the core suite runs, the prepared key of
    every chosen issue-12 workload, and issue 11's keys when any of its workloads runs."""
    ids = {w.id for w in chosen}
    issue11 = any(w.suite == "issue11" for w in chosen)
    return [m for m in MEMORY_METHODS
            if m.label == MEMORY_BASELINE or (m.suite == "core" and "core" in cfg.suites)
            or m.workload in ids or (m.suite == "issue11" and issue11)]


def start_server(stack: contextlib.ExitStack, binary: str, module: Path, workdir: Path,
                 pin: list[str], cell: Path | None) -> tuple[RedisServer, str]:
    """The server with our module and, if it loads, redis-cell; else without it and the
    reason (the log's last lines)."""
    if cell is not None:
        try:
            return stack.enter_context(RedisServer(binary, module, workdir, pin, [cell])), ""
        except SetupError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            # The log's warnings (" # ") about modules, without pid and time.
            said = [re.sub(r"^\d+:\w .*?\d\d:\d\d:\d\d\.\d+ # ", "", ln)
                    for ln in lines[1:] if " # " in ln and "module" in ln.lower()]
            said = said or lines[-3:]
            reason = ("the server did not start with redis-cell loaded: "
                      + " | ".join([lines[0].rstrip(":")] + said if lines else [str(e)]))
            print(f"bench: warning: {reason}; going on without it", file=sys.stderr)
        return stack.enter_context(RedisServer(binary, module, workdir, pin)), reason
    return stack.enter_context(RedisServer(binary, module, workdir, pin)), ""


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
    chosen = selected(cfg.only, cfg.suites)
    wants_peer = any(c.startswith("cl.") for w in chosen for c in w.module_commands())
    cell = peer.redis_cell() if wants_peer else None
    if cell is not None and cell.error:
        print(f"bench: warning: no redis-cell: {cell.error}", file=sys.stderr)
    server_pin, bench_pin, pin_note = cpu_pinning()
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        print(f"bench: warning: load average is {load1:.2f}: other work is running and "
              "will add noise", file=sys.stderr)
    started = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="redis-tb-bench-") as tmp, \
            contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        # Private copies: a concurrent `cargo build` must not swap the code under the server.
        private = workdir / module.name
        shutil.copy2(module, private)
        private_cell = None
        if cell is not None and cell.path is not None:
            private_cell = workdir / cell.path.name
            shutil.copy2(cell.path, private_cell)
        server, load_error = start_server(stack, server_binary, private, workdir, server_pin,
                                          private_cell)
        ctl = stack.enter_context(RespClient(server.port))
        info = machine_info(server_binary, private, ctl)
        info["module"] = str(module)
        shas = {sha: ctl.call("SCRIPT", "LOAD", text)
                for sha, text in ((LUA_SHA, LUA_SCRIPT.read_text()), (SEED_SHA, seed_script()),
                                  (WFIXED_SHA, WINDOW_FIXED_SCRIPT.read_text()),
                                  (WLOG_SHA, seed_log_script()))}
        reasons: dict[str, str] = {}
        if cell is not None:
            problem = cell.error or load_error
            if not problem and "redis-cell" not in server.modules:
                problem = f"redis-cell is not in MODULE LIST ({sorted(server.modules)})"
            problem = problem or runner.check_peer(ctl)
            if problem:
                reasons["cl.throttle"] = f"no redis-cell: {problem}"
            info["redis_cell"] = report.peer_text(cell, server.modules.get("redis-cell"),
                                                  problem)
        wl, skipped = runner.available(ctl, runner.bind(chosen, shas), reasons)
        have = set().union(*(w.module_commands() for w in wl))
        info["window_checks"] = runner.sanity_check(ctl, shas, have, {w.id for w in wl})
        print(f"redis-server {info['redis']} on port {server.port}; {pin_note}",
              file=sys.stderr)
        for note in skipped:
            print(f"bench: warning: not measured: {note}", file=sys.stderr)

        # The core methods (with the baseline) as they always were, then issue 12's and
        # issue 11's, each in a group of its own, so they cannot disturb the core ones'
        # graded figures; the server is warm by then unless the core suite does not run
        # (then the first of these groups gets a warm-up pass of its own).
        methods, _ = runner.available(ctl, memory_methods(cfg, chosen), reasons)
        print(f"memory per bucket ({len(methods)} methods) ...", file=sys.stderr)
        t_mem = time.monotonic()
        mem = []
        warm = "core" in cfg.suites  # the core group (not just the baseline) warms up
        for suite in SUITES:
            group = [m for m in methods if m.suite == suite]
            if group:
                mem += memory.measure_memory(ctl, server, shas, cfg.keys, group,
                                             suite == "core" or not warm)
                warm = warm or suite != "core"
        print(f"memory per bucket: {time.monotonic() - t_mem:.0f} s", file=sys.stderr)
        runs = runner.run_rounds(ctl, server, bench_pin, wl, cfg.rounds, cfg.requests,
                                 cfg.requests_p1, cfg.keys)
        server_argv = [a if a != str(server.port) else "PORT" for a in server.argv]
        server_argv = [("TMPDIR" + a[len(tmp):]) if a.startswith(tmp) else a
                       for a in server_argv]
        bench_cmds = runner.bench_commands(bench_pin, wl, cfg.requests, cfg.requests_p1,
                                           cfg.keys)

    elapsed = time.monotonic() - started
    summary = stats.summarise(runs, wl)
    targets = stats.evaluate_targets(runs, wl, mem, {w.id for w in chosen},
                                     {m.label for m in memory_methods(cfg, chosen)})
    report.write_report(cfg.out, cfg, info, pin_note, server_argv, wl, summary, runs, mem,
                        targets, bench_cmds, elapsed, skipped)
    report.print_summary(cfg, wl, summary, runs, mem, targets, skipped, elapsed)
    if cell is not None and cell.path is not None and not cfg.only:
        # Issue 18: what redis-cell does where the docs say it differs (a few seconds, its
        # own servers, after the timed runs so it cannot disturb them).
        import cell_facts  # bench/commands/cell_facts.py (bench/commands/ is on sys.path: bench.py)
        facts = cfg.out / "redis-cell-facts.md"
        print(f"redis-cell facts (bench/commands/cell_facts.py) -> {facts}", file=sys.stderr)
        if cell_facts.main(["--out", str(facts)]) != 0:
            print("bench: warning: bench/commands/cell_facts.py could not check redis-cell",
                  file=sys.stderr)
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
