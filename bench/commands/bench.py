#!/usr/bin/env python3
"""Benchmark TB.TAKE and the other TB.* commands against the floor (a plain two-field HSET),
the ceiling (PING), the usual alternative (the same token bucket as a Lua script) and the
peer users would pick (redis-cell's CL.THROTTLE, issue 12), and TB.WINDOW's three modes
against the design notes' window scripts (issue 11), on a server this script starts.

Run from anywhere (paths are resolved from this file), normally as `python3 bench/commands/bench.py`
from the repository root (`make bench`). Python 3 standard library only.

What it does, and why:

* Starts its own redis-server with a private copy of the module (a concurrent `cargo build`
  must not swap the code under a running server), persistence off, on a free loopback
  port, in a temporary directory; pins the server to one core and redis-benchmark to
  another, so the two do not fight for a core and the server's CPU time is its own.
  The server is killed on exit, exception, Ctrl-C or SIGTERM (and by the kernel if this
  process dies: PR_SET_PDEATHSIG).
* Interleaves the workloads (A B C ..., A B C ..., several rounds) because this machine is
  shared and noisy: drift then hits every workload alike, and ratios are taken within a
  round before the median over rounds is reported.
* Every keyed workload runs on 100,000 keys that already exist, each in the state its own
  command leaves it in (FLUSHALL, then one call per key), so no run pays for creating keys
  or growing the keyspace dict while another does not.
* Issue 12 (suite "issue12"): redis-cell 0.5.0 (issue 18: the current release, not the
  registry's 0.2.2), built once from its release tarball (../shared/peers, or
  REDIS_CELL_TARBALL) into ${REDIS_TB_CACHE:-~/.cache/redis-tb}/redis-cell-0.5.0-<sha256>/
  (tb_bench/peer.py), is loaded into the same server; CL.THROTTLE, TB.THROTTLE, TB.TAKE on both clocks, the
  design notes' own script (read from ../shared/seeds at run time), the heavier token_bucket.lua and HSET
  run in the same rounds on two bucket shapes (small fast, large slow). If redis-cell
  cannot be built or loaded, the report says why and everything else still runs.
* Issue 11 (suite "issue11"): TB.WINDOW FIXED, SLIDING (with `now` and on the server
  clock) and LOG (both), the notes' fixed window counter (window_fixed.lua: INCR + EXPIRE)
  and sliding log (the notes' own script, read from the notes: a sorted set of
  request times) via EVALSHA, and
  TB.TAKE on both clocks, in the same rounds; memory per key of each mode at limit 100
  and 10,000 (full logs over fewer keys).
* Reports throughput, server CPU per request (from /proc/<pid>/stat, steadier than req/s
  here), per bucket for commands that serve several, latency percentiles from
  redis-benchmark's CSV, and memory per bucket; checks the issues' targets and prints
  PASS/FAIL exactly as measured. A workload whose command the loaded module lacks is
  skipped, said so, and its targets read NOT RUN.

Where things are (bench/commands/tb_bench/):
  workloads.py  WHAT is measured: parameters, the workload table, bucket shapes, memory
                methods, targets
  peer.py       redis-cell: fetched, built and cached, or why not
  runner.py     one timed run: keys prepared, redis-benchmark, CPU accounting, checks
  memory.py     memory per bucket
  stats.py      medians, within-round ratios, per-bucket peers, target verdicts
  report.py     report.md, ratios.svg and the console summary
  server.py     the redis-server under test, the module, the machine description
  resp.py       a small RESP2 client;  cli.py  flags, environment and the run in order

Adding a workload is one row in workloads.WORKLOADS (id, label, timed command, commands
that prepare each key, peers, buckets per call, note) and, if it is graded, one row in
workloads.TARGETS; the report, the chart and the checks pick it up.

Environment / flags (flags win):
  REDIS_SERVER       server binary (default: redis-server)
  REDIS_TB_MODULE    module path (default: target/release/libredis_tb.so, built if missing)
  REDIS_CELL_MODULE  a redis-cell .so to load instead of the cached build, or `off`
  REDIS_TB_CACHE     cache root for the redis-cell build (default ~/.cache/redis-tb)
  REDIS_CELL_TARBALL the redis-cell 0.5.0 source (default ../shared/peers/redis-cell-0.5.0.tar.gz)
  BENCH_ROUNDS       rounds (default 5)                          --rounds
  BENCH_REQUESTS     requests per pipelined run (default 500000) --requests
  BENCH_REQUESTS_P1  requests per unpipelined run (default 80000) --requests-p1
  BENCH_KEYS         distinct keys (default 100000)              --keys
  BENCH_OUT          output directory (default bench/results)    --out
  --quick            1 round, 100000 / 20000 requests: a smoke test, not a measurement
  --only ID,...      only these workloads (plus HSET and their peers): for development
  --suite NAME       core (TB.* vs HSET, PING, Lua), issue12 (redis-cell side by side),
                     issue11 (TB.WINDOW vs the notes' window scripts and TB.TAKE) or
                     layered (issue 18: one TB.MTAKE over three buckets vs three
                     CL.THROTTLE, in one round trip and in three); several comma-separated
                     (issue12,layered); default all: `make bench` runs every suite, then
                     bench/commands/cell_facts.py (redis-cell's behaviour, into <out>/redis-cell-facts.md). On the 2-core development machine
                     with other work running, issue11 alone took 8 min (5 rounds, 1.5 of
                     them memory), `--quick` 2 min, all suites `--quick` 3.3 min; all suites
                     at 5 rounds: roughly 20 min (estimated from those)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_bench.cli import run  # noqa: E402

if __name__ == "__main__":
    run(sys.argv[1:])
