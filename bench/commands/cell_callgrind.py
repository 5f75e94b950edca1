#!/usr/bin/env python3
"""Where a call's server instructions go: CL.THROTTLE (redis-cell 0.5.0) against TB.TAKE
and TB.THROTTLE (issue 18), counted by callgrind instead of timed.

    python3 bench/commands/cell_callgrind.py [--keys 20000] [--calls 40000] [--out FILE]

One redis-server runs under `valgrind --tool=callgrind` with this module and redis-cell
loaded (as `make bench` loads them). For each workload: FLUSHALL, its keys prepared as
`make bench` prepares them (one call of its own command taking the prefill per key), then
`callgrind_control --zero`, `redis-benchmark -c 50 -P 16 -n CALLS -r KEYS` of its timed
command, `callgrind_control --dump`. Each dump holds only that workload's calls (and the
event loop around them: accepting 50 clients, the idle loop, a few hundred instructions a
batch), so its instruction total / CALLS is the cost of a call, and callgrind_annotate's
inclusive counts show where it goes. (Toggling instrumentation instead of zeroing leaves
functions that were on the stack when it was switched with nonsense inclusive counts.)

Workloads: the large slow bucket of the issue-12 suite (capacity 1,000,000 at 0.001/s,
1,000 taken; nothing expires, nothing is refused), on the server clock: CL.THROTTLE,
TB.THROTTLE, TB.TAKE; TB.TAKE with a fixed `now`; and HSET of the same two fields, the
floor. The small fast bucket (100 at 10/s) is run too with --small: under valgrind its keys
(alive 8.5 s) expire mid-run, so its numbers are only indicative.

The breakdown rows are inclusive instruction counts per call of the functions named in
ROWS (a function's callees are in its count), chosen so that a row does not contain
another row listed under the same heading. Prints markdown.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_bench import peer  # noqa: E402
from tb_bench.resp import RespClient, encode_batches  # noqa: E402
from tb_bench.server import _set_pdeathsig, ensure_module, free_port  # noqa: E402

FIXED_NOW = "1764456268.123456"
LARGE = dict(cap="1000000", rate="0.001", burst="999999", count="1", period="1000",
             prefill="1000")
SMALL = dict(cap="100", rate="10", burst="99", count="10", period="1", prefill="85")


def workloads(shape: dict, tag: str) -> list[tuple[str, list[str], list[str]]]:  # noqa
    """(label, timed command, prepare command) with KEY for the key."""
    s = shape
    return [
        (f"CL.THROTTLE (redis-cell 0.5.0), {tag}",
         ["CL.THROTTLE", "KEY", s["burst"], s["count"], s["period"], "1"],
         ["CL.THROTTLE", "KEY", s["burst"], s["count"], s["period"], s["prefill"]]),
        (f"TB.THROTTLE, {tag}",
         ["TB.THROTTLE", "KEY", s["burst"], s["count"], s["period"], "1"],
         ["TB.THROTTLE", "KEY", s["burst"], s["count"], s["period"], s["prefill"]]),
        (f"TB.TAKE (server clock), {tag}",
         ["TB.TAKE", "KEY", s["cap"], s["rate"], "1"],
         ["TB.TAKE", "KEY", s["cap"], s["rate"], s["prefill"]]),
        (f"TB.TAKE (now), {tag}",
         ["TB.TAKE", "KEY", s["cap"], s["rate"], "1", FIXED_NOW],
         ["TB.TAKE", "KEY", s["cap"], s["rate"], s["prefill"], FIXED_NOW]),
    ]


def layered(shape: dict) -> list[tuple[str, list[str], list[str]]]:
    """Issue 18's layered limits: one TB.MTAKE over three buckets (keys KEY:a, KEY:b,
    KEY:c), per call (= per request of three buckets); compare with three CL.THROTTLE calls
    (3 x the CL.THROTTLE column)."""
    s = shape
    keys = ["KEY:a", "KEY:b", "KEY:c"]
    return [(f"TB.MTAKE 3 buckets (server clock), {s['cap']} @ {s['rate']}/s",
             ["TB.MTAKE", "3", *keys, *[s["cap"], s["rate"], "1"] * 3],
             ["TB.MTAKE", "3", *keys, *[s["cap"], s["rate"], s["prefill"]] * 3])]


HSET = ("HSET (two fields, the floor)",
        ["HSET", "KEY", "tokens", "999000", "last_refill_time", FIXED_NOW],
        ["HSET", "KEY", "tokens", "999000", "last_refill_time", FIXED_NOW])

# (heading, function-name regex as callgrind_annotate prints it). Inclusive counts.
ROWS = [
    ("the whole command (call(): the command proc, propagation, the keyspace)", r"^call$"),
    ("  the command proc (module commands: RedisModuleCommandDispatcher)",
     r"^RedisModuleCommandDispatcher$"),
    ("  propagation of the write (after the proc: alsoPropagate + propagateNow)",
     r"^(afterCommand|propagatePendingCommands)$"),
    ("reading the request (readQueryFromClient: parsing, lookup, call())",
     r"^readQueryFromClient$"),
    ("writing replies (handleClientsWithPendingWrites)", r"^handleClientsWithPendingWritesUsingThreads$"),
    ("module API: RM_Replicate (TB: the effect by name)", r"^RM_Replicate$"),
    ("module API: RM_ReplicateVerbatim (redis-cell)", r"^RM_ReplicateVerbatim$"),
    ("module API: RM_OpenKey", r"^RM_OpenKey$"),
    ("module API: RM_CloseKey", r"^RM_CloseKey$"),
    ("module API: RM_HashGet", r"^RM_HashGet$"),
    ("module API: RM_HashSet", r"^RM_HashSet$"),
    ("module API: RM_StringDMA (redis-cell's read)", r"^RM_StringDMA$"),
    ("module API: RM_StringSet (redis-cell's write)", r"^RM_StringSet$"),
    ("module API: RM_SetExpire (redis-cell, every call)", r"^RM_SetExpire$"),
    ("module API: RM_GetAbsExpire / RM_GetExpire", r"^RM_Get(Abs)?Expire$"),
    ("module API: RM_SetAbsExpire", r"^RM_SetAbsExpire$"),
    ("module API: replies (RM_ReplyWith*)", r"^RM_ReplyWith(Array|LongLong|Double|SimpleString|String|StringBuffer|CString)$"),
    ("module API: RM_CreateString / RM_FreeString", r"^RM_(CreateString|FreeString)$"),
    ("module API: RM_NotifyKeyspaceEvent", r"^RM_NotifyKeyspaceEvent$"),
    ("module API: RM_Milliseconds / RM_Microseconds / RM_CachedMicroseconds", r"^RM_(Milliseconds|Microseconds|CachedMicroseconds|Monotonic\w*)$"),
    ("libc clock_gettime (redis-cell: OffsetDateTime::now_utc)", r"^(__)?clock_gettime"),
    ("malloc + free (all callers)", r"^(malloc|free|je_malloc|je_free|ztrymalloc_usable|zfree)$"),
]


class Grind:
    def __init__(self, workdir: Path, modules: list[Path], cache_sim: bool = False):
        self.workdir = workdir
        self.port = free_port()
        self.out = workdir / "callgrind.out.%p"
        argv = ["valgrind", "--tool=callgrind",
                f"--callgrind-out-file={self.out}", "--dump-instr=no",
                *(["--cache-sim=yes"] if cache_sim else []),
                "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(workdir),
                "--logfile", str(workdir / "redis.log")]
        for m in modules:
            argv += ["--loadmodule", str(m)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=open(workdir / "valgrind.log", "wb"),
                                     start_new_session=True, preexec_fn=_set_pdeathsig)
        deadline = time.monotonic() + 120
        while True:
            try:
                with RespClient(self.port, timeout=30) as c:
                    if c.call("PING") == "PONG":
                        break
            except (OSError, ConnectionError):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server under valgrind did not start: "
                                       + (workdir / "valgrind.log").read_text()[-2000:])
                time.sleep(0.5)

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True,
                       capture_output=True, timeout=120)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def totals(dump: str) -> dict[str, int]:
    """Every event's program total (Ir; with --cache-sim also D1mr, DLmr, ...)."""
    text = Path(dump).read_text(errors="replace")
    events = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    line = re.search(r"^(?:summary|totals): (.+)$", text, re.M).group(1).split()
    return dict(zip(events, (int(x) for x in line)))


def annotate(dump: str) -> tuple[int, dict[str, int]]:
    """(total instructions, {function: inclusive instructions})."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           "--show=Ir", dump], capture_output=True, text=True,
                          check=True).stdout
    total = totals(dump)["Ir"]
    funcs: dict[str, int] = {}
    for m in re.finditer(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+\S+?:(\S+)", text, re.M):
        name = re.sub(r"\[.*\]$", "", m.group(2))
        funcs[name] = max(funcs.get(name, 0), int(m.group(1).replace(",", "")))
    return total, funcs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--cache-sim", action="store_true",
                    help="simulate the caches too: data reads/writes missing the first level "
                         "and the last level, per call")
    ap.add_argument("--small", action="store_true", help="also the small fast bucket")
    ap.add_argument("--layered", action="store_true",
                    help="only CL.THROTTLE, TB.TAKE (server clock) and TB.MTAKE over three "
                         "buckets, the large shape (issue 18's layered limits)")
    ap.add_argument("--take-only", action="store_true",
                    help="only TB.TAKE (server clock) and TB.TAKE (now), without redis-cell: "
                         "the two rows a change to TB.TAKE's path is held to")
    ap.add_argument("--top", type=int, default=0,
                    help="also list each workload's N most expensive functions")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--keep", type=Path, help="copy the callgrind dumps into this folder")
    a = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "redis-benchmark"):
        if not shutil.which(tool):
            print(f"cell_callgrind: {tool} not found", file=sys.stderr)
            return 2
    cell = peer.redis_cell() if not a.take_only else None
    if cell is not None and cell.path is None:
        print(f"cell_callgrind: no redis-cell: {cell.error}", file=sys.stderr)
        return 2
    tb = ensure_module()
    wl = workloads(LARGE, "1e6 @ 0.001/s") + [HSET]
    if a.take_only:
        wl = [w for w in wl if w[0].startswith("TB.TAKE")]
    if a.layered:
        wl = [w for w in wl if w[0].startswith(("CL.THROTTLE", "TB.TAKE (server"))]
        wl += layered(LARGE)
    if a.small:
        wl += workloads(SMALL, "100 @ 10/s")
    results = []
    with tempfile.TemporaryDirectory(prefix="cell-callgrind-") as tmp:
        work = Path(tmp)
        mods = []
        for m in (tb, *([cell.path] if cell else [])):  # private copies: a rebuild must not swap them
            shutil.copy2(m, work / m.name)
            mods.append(work / m.name)
        g = Grind(work, mods, a.cache_sim)
        try:
            with RespClient(g.port, timeout=600) as c:
                for label, cmd, prep in wl:
                    c.call("FLUSHALL", "SYNC")
                    numbers = a.keys // (3 if cmd[0] == "TB.MTAKE" else 1)
                    batches = encode_batches(
                        [x.replace("KEY", f"k:{i:012d}") for x in prep] for i in range(numbers))
                    errs = c.send_batches(batches)
                    if errs:
                        raise RuntimeError(f"{label}: prepare: {errs[0]}")
                    before = c.call("DBSIZE")
                    g.control("--zero")
                    bench = subprocess.run(
                        ["redis-benchmark", "-p", str(g.port), "-c", "50", "-P", "16",
                         "-n", str(a.calls), "-r", str(numbers), "-q",
                         *[x.replace("KEY", "k:__rand_int__") for x in cmd]],
                        capture_output=True, text=True, timeout=1800)
                    g.control("--dump=" + re.sub(r"\W+", "_", label))
                    if bench.returncode != 0:
                        raise RuntimeError(f"{label}: redis-benchmark: {bench.stderr}")
                    errors = c.info("stats").get("total_error_replies", "0")
                    after = c.call("DBSIZE")
                    results.append((label, cmd, before, after, errors))
                    print(f"{label}: dumped ({before} -> {after} keys, error replies so far "
                          f"{errors})", file=sys.stderr)
        finally:
            g.stop()
        dumps = sorted(glob.glob(str(work / "callgrind.out.*")),
                       key=lambda p: int(re.search(r"\.(\d+)$", p).group(1))
                       if re.search(r"\.\d+\.(\d+)$", p) else 0)
        dumps = [d for d in dumps if re.search(r"\.\d+\.\d+$", d)]
        dumps.sort(key=lambda p: int(p.rsplit(".", 1)[1]))
        if len(dumps) != len(results):
            raise RuntimeError(f"expected {len(results)} dumps, found {dumps}")
        annotated = [annotate(d) for d in dumps]
        events = [totals(d) for d in dumps]
        if a.keep:
            a.keep.mkdir(parents=True, exist_ok=True)
            for d in dumps:
                shutil.copy2(d, a.keep / Path(d).name)

    n = a.calls
    flags = "".join(f" --{f.replace('_', '-')}" for f in ("small", "layered", "cache_sim",
                                                           "take_only")
                    if getattr(a, f))
    lines = [f"callgrind, server instructions per call: `python3 bench/commands/cell_callgrind.py "
             f"--keys {a.keys} --calls {n}{flags}` "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}); redis-cell: "
             f"{cell.how if cell else 'not loaded'}; -c 50 -P 16, {n:,} calls over {a.keys:,} prepared keys per "
             "workload.", ""]
    head = ["", *[r[0].split(",")[0] + (" " + r[0].split(",")[1].strip()
                                         if "," in r[0] and "small" in r[0] else "")
                  for r in results]]
    lines.append("| per call | " + " | ".join(h for h in head[1:]) + " |")
    lines.append("|---|" + "---:|" * len(results))
    lines.append("| **total** | " + " | ".join(f"**{t / n:,.0f}**" for t, _ in annotated) + " |")
    for text, pattern in ROWS:
        vals = []
        for _, funcs in annotated:
            v = sum(c for f, c in funcs.items() if re.search(pattern, f))
            vals.append(v / n)
        if any(v >= 5 for v in vals):
            lines.append(f"| {text.strip()} | " + " | ".join(f"{v:,.0f}" if v >= 1 else "-"
                                                          for v in vals) + " |")
    if a.cache_sim:
        for ev, text in (("Dr", "data reads"), ("Dw", "data writes"),
                         ("D1mr", "data reads missing L1"), ("D1mw", "data writes missing L1"),
                         ("DLmr", "data reads missing the last level"),
                         ("DLmw", "data writes missing the last level"),
                         ("I1mr", "instruction fetches missing L1")):
            if all(ev in e for e in events):
                lines.append(f"| {text} ({ev}, simulated) | "
                             + " | ".join(f"{e[ev] / n:,.1f}" for e in events) + " |")
    lines += ["", "Keys before / after each run (nothing may expire), error replies so far: "
              + "; ".join(f"{r[0]}: {r[2]} / {r[3]}, {r[4]}" for r in results), ""]
    if a.top:
        for (label, *_), (total, funcs) in zip(results, annotated):
            lines += [f"Top {a.top} inclusive, {label} (per call):", ""]
            for f, c in sorted(funcs.items(), key=lambda x: -x[1])[:a.top]:
                lines.append(f"    {c / n:>9,.0f}  {f}")
            lines.append("")
    text = "\n".join(lines)
    if a.out:
        a.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
