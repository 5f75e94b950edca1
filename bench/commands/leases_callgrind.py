#!/usr/bin/env python3
"""Server instructions per acquire + release, counted by callgrind (issue 25's CPU target
without the machine's noise): TB.ACQUIRE + TB.RELEASE against redis-semaphore's acquire
script (EVALSHA) + its release (ZREM).

    python3 bench/commands/leases_callgrind.py [--ops 4000] [--batch 16] [--cache-sim] [--out FILE]

One redis-server under `valgrind --tool=callgrind` with the module loaded and the current
redis-semaphore release's acquire script (read from the installed npm package by
bench/commands/leases.py's `semaphore_script`, never copied here). For each workload: FLUSHALL,
`callgrind_control --zero`, then `--ops` acquire + release pairs over `--batch` keys, sent
as a pipeline of `--batch` acquires, their replies read, then `--batch` releases (a
release needs its acquire's id), `callgrind_control --dump`. The whole dump / ops is
everything the server did for a pair (reading, parsing, executing, replying); `call()`'s
inclusive count / ops is the commands' own execution, nested script calls included.
With --cache-sim, callgrind also simulates the caches and the table adds the first-level
instruction-cache misses and data read misses a pair (slower; the instruction counts are
the same). Prints markdown.
"""

from __future__ import annotations

import argparse
import glob
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cell_callgrind import Grind, annotate, totals  # noqa: E402
from leases import run_semaphore, run_tb, semaphore_script  # noqa: E402
from tb_bench.resp import RespClient  # noqa: E402
from tb_bench.server import ensure_module  # noqa: E402


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--cache-sim", action="store_true",
                    help="simulate the caches: first-level misses a pair too")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="copy the callgrind dumps into this folder")
    a = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if not shutil.which(tool):
            print(f"leases_callgrind: {tool} not found", file=sys.stderr)
            return 2
    version, script = semaphore_script()
    tb = ensure_module()
    keys = [f"sem:{i}" for i in range(a.batch)]
    labels = ["TB.ACQUIRE + TB.RELEASE", f"redis-semaphore {version}: acquire (EVALSHA) + release (ZREM)"]
    with tempfile.TemporaryDirectory(prefix="lease-callgrind-") as tmp:
        work = Path(tmp)
        shutil.copy2(tb, work / tb.name)  # a private copy: a rebuild must not swap it
        g = Grind(work, [work / tb.name], cache_sim=a.cache_sim)
        try:
            with RespClient(g.port, timeout=600) as c:
                sha = c.call("SCRIPT", "LOAD", script)
                for label in labels:
                    c.call("FLUSHALL", "SYNC")
                    # warm: the keys exist and the script is compiled before counting
                    (run_tb if label.startswith("TB") else lambda *x: run_semaphore(*x, sha))(c, keys, a.batch)
                    g.control("--zero")
                    if label.startswith("TB"):
                        run_tb(c, keys, a.ops)
                    else:
                        run_semaphore(c, keys, a.ops, sha)
                    g.control("--dump=" + re.sub(r"\W+", "_", label))
        finally:
            g.stop()
        dumps = [d for d in glob.glob(str(work / "callgrind.out.*")) if re.search(r"\.\d+\.\d+$", d)]
        dumps.sort(key=lambda p: int(p.rsplit(".", 1)[1]))
        if len(dumps) != len(labels):
            raise RuntimeError(f"expected {len(labels)} dumps, found {dumps}")
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            for d in dumps:
                shutil.copy2(d, a.keep / Path(d).name)
        rows = []
        misses = []
        for label, d in zip(labels, dumps):
            total, funcs = annotate(d)
            events = totals(d)
            rows.append((label, events["Ir"] / a.ops, funcs.get("call", 0) / a.ops))
            misses.append((events.get("I1mr", 0) / a.ops, events.get("D1mr", 0) / a.ops))
    (_, tb_all, tb_call), (_, sem_all, sem_call) = rows
    cache = [
        "",
        "| pair | L1 instruction misses / pair | L1 data read misses / pair |",
        "|---|---:|---:|",
        *[f"| {label} | {i1:,.0f} | {d1:,.0f} |"
          for (label, _, _), (i1, d1) in zip(rows, misses)],
        "",
        (f"TB.ACQUIRE + TB.RELEASE: {misses[0][0] / misses[1][0]:.3f}x redis-semaphore's "
         "first-level instruction-cache misses."),
    ] if a.cache_sim else []
    lines = [
        f"`python3 bench/commands/leases_callgrind.py --ops {a.ops} --batch {a.batch}"
        f"{' --cache-sim' if a.cache_sim else ''}`: instructions per "
        "acquire + release pair, counted by callgrind (the same binary and inputs give the same counts).",
        "",
        "| pair | whole server / pair | call() (execution) / pair |",
        "|---|---:|---:|",
        *[f"| {label} | {whole:,.0f} | {ex:,.0f} |" for label, whole, ex in rows],
        "",
        f"TB.ACQUIRE + TB.RELEASE: {tb_all / sem_all:.3f}x redis-semaphore's instructions for the whole "
        f"server, {tb_call / sem_call:.3f}x for the commands' execution (target: at most 0.5x).",
        *cache,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
