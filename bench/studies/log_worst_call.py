#!/usr/bin/env python3
"""The worst single TB.WINDOW LOG calls under the cap on `limit` (10,000), timed on a
real redis-server (docs/commands.md quotes the result).

    python3 bench/studies/log_worst_call.py [--limit 10000] [--runs 5]

(`--limit` above the cap needs a build with a larger `LOG_MAX_LIMIT`, as the 100,000 row
of docs/commands.md was measured.)

A LOG call's work is the entries it adds (at most n <= limit) and those it removes (at
most the log's size, <= limit). Three calls, each on a fresh key, each timed by the
server itself (SLOWLOG with slowlog-log-slower-than 0: the command's own duration, in
µs) with used_memory before and after:

- add: an empty key, n = limit (limit entries added in one call);
- remove + add: a full log whose entries all left the window, n = limit (limit entries
  removed, replicated as one ZREM of limit members, and limit added): the worst call;
- remove: the same full, expired log, n = 1 (limit entries removed, one added).

No replica is attached; with one, the replication stream carries the same ZREM / ZADD
(about 250 KB of arguments at 10,000) through the backlog and each replica's buffer.
Prints markdown.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/commands: the shared harness (tb_bench)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "commands"))

from tb_bench.resp import RespClient  # noqa: E402
from tb_bench.server import _set_pdeathsig, ensure_module, free_port  # noqa: E402

B = 1_764_456_240


def timed(c: RespClient, *args) -> tuple[object, int, int]:
    """(reply, server µs, used_memory change in bytes) of one command."""
    c.call("SLOWLOG", "RESET")
    before = int(c.info("memory")["used_memory"])
    reply = c.call(*args)
    after = int(c.info("memory")["used_memory"])
    entries = c.call("SLOWLOG", "GET", "10")
    micros = next(int(e[2]) for e in entries if e[3][0].upper() == b"TB.WINDOW"
                  or e[3][0].upper() == "TB.WINDOW")
    return reply, micros, after - before


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args(argv)
    module = ensure_module()
    limit = str(a.limit)
    rows: dict[str, list[tuple[int, int]]] = {"add": [], "remove + add": [], "remove": []}
    usage = 0
    with tempfile.TemporaryDirectory(prefix="log-worst-") as tmp:
        port = free_port()
        proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp,
             "--slowlog-log-slower-than", "0", "--slowlog-max-len", "16",
             "--loadmodule", str(module)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_set_pdeathsig)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    c = RespClient(port, timeout=120)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            with c:
                for run in range(a.runs):
                    key = f"l{run}"
                    r, us, mem = timed(c, "TB.WINDOW", key, limit, "60", limit, str(B), "LOG")
                    assert r[0] == 1, r
                    rows["add"].append((us, mem))
                    usage = int(c.call("MEMORY", "USAGE", key, "SAMPLES", "0"))
                    r, us, mem = timed(c, "TB.WINDOW", key, limit, "60", limit, str(B + 61),
                                       "LOG")
                    assert r[0] == 1 and int(c.call("ZCARD", key)) == a.limit, r
                    rows["remove + add"].append((us, mem))
                    r, us, mem = timed(c, "TB.WINDOW", key, limit, "60", "1", str(B + 122),
                                       "LOG")
                    assert r[0] == 1 and int(c.call("ZCARD", key)) == 1, r
                    rows["remove"].append((us, mem))
                    c.call("DEL", key)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"`python3 bench/studies/log_worst_call.py --limit {a.limit} --runs {a.runs}` "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); server-side duration "
          "(SLOWLOG) and used_memory change per call; MEMORY USAGE of the full key: "
          f"{usage:,} bytes.\n")
    print("| call (limit %s) | ms, min / median / max | used_memory change |" % f"{a.limit:,}")
    print("|---|---:|---:|")
    for name, vals in rows.items():
        ms = sorted(us / 1000 for us, _ in vals)
        mem = sorted(m for _, m in vals)[len(vals) // 2]
        print(f"| {name} | {ms[0]:.1f} / {ms[len(ms) // 2]:.1f} / {ms[-1]:.1f} | {mem:+,} B |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
