#!/usr/bin/env python3
"""What redis-cell 0.5.0 (the peer users run, tb_bench/peer.py builds it) actually does, on
real servers, for each statement the project's docs make about redis-cell (issue 18).

    python3 bench/commands/cell_facts.py [--out FILE]     (default: print the markdown to stdout)

Every fact is observed here, never assumed: each check starts its own redis-server(s) on
free loopback ports with redis-cell (and, where compared, this module), runs the calls,
reads replies, keys, TTLs, the AOF, a replica and the server's fate, and prints one
section per statement with what was seen. The verdict is computed from what was seen
against what the docs claim ("holds on 0.5.0" / "changed: now ..."). A check that cannot
run (no redis-cell: the reason is printed) is reported as NOT CHECKED and the script exits
with status 2; a check whose server did something no branch expects raises and exits 1.

Timing-sensitive checks (sub-millisecond waits, 2,500/s) use the server clock, as
CL.THROTTLE does; they count what happened over several tries instead of relying on one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tb_bench import peer  # noqa: E402
from tb_bench.resp import RedisError, RespClient  # noqa: E402
from tb_bench.server import _set_pdeathsig, ensure_module, free_port  # noqa: E402


class Server:
    """A redis-server child with the given modules and options; stderr kept (a Rust panic
    message lands there), always stopped."""

    def __init__(self, workdir: Path, name: str, modules: list[tuple[Path, list[str]]],
                 extra: list[str] | None = None):
        self.dir = workdir / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = self.dir / "redis.log"
        self.stderr = self.dir / "stderr.txt"
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                "--logfile", str(self.log), *(extra or [])]
        for path, args in modules:
            argv += ["--loadmodule", str(path), *args]
        self.argv = argv
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=err,
                                         stderr=err, start_new_session=True,
                                         preexec_fn=_set_pdeathsig)
        self.started = self._wait()

    def _wait(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with RespClient(self.port, timeout=2) as c:
                    if c.call("PING") == "PONG":
                        return True
            except (OSError, ConnectionError, RedisError):
                time.sleep(0.05)
        return False

    def client(self) -> RespClient:
        return RespClient(self.port, timeout=10)

    def alive(self) -> bool:
        time.sleep(0.2)
        if self.proc.poll() is not None:
            return False
        try:
            with self.client() as c:
                return c.call("PING") == "PONG"
        except (OSError, ConnectionError):
            return False

    def log_lines(self, pattern: str) -> list[str]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [re.sub(r"^\d+:\w \d\d \w+ \d+ [\d:.]+ [#*.-] ", "", ln)
                for ln in text.splitlines() if re.search(pattern, ln)]

    def panic(self) -> str:
        text = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        at = next((i for i, ln in enumerate(lines) if "panicked at" in ln), None)
        return " ".join(lines[at:at + 2]) if at is not None else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


class Facts:
    def __init__(self, workdir: Path, cell: Path, tb: Path):
        self.workdir, self.cell, self.tb = workdir, cell, tb
        self.sections: list[tuple[str, str, str, list[str]]] = []  # claim, verdict, seen
        self.stack = contextlib.ExitStack()
        self.n = 0

    def server(self, modules=None, extra=None) -> Server:
        self.n += 1
        s = Server(self.workdir, f"s{self.n}", modules if modules is not None
                   else [(self.cell, [])], extra)
        self.stack.callback(s.stop)
        if not s.started and modules is None:
            raise RuntimeError(f"redis-server with redis-cell did not start: {s.log_lines('.')[-5:]}")
        return s

    def add(self, claim: str, where: str, verdict: str, seen: list[str]) -> None:
        self.sections.append((claim, where, verdict, seen))
        print(f"[{verdict.split(':')[0]}] {claim}", file=sys.stderr)


def call(c: RespClient, *args):
    """A reply, or the error text (prefixed `(error)`)."""
    try:
        return c.call(*args)
    except RedisError as e:
        return f"(error) {e}"


# ---------------------------------------------------------------------------------------
# The checks, one per statement of the docs.
# ---------------------------------------------------------------------------------------
def reply_shape(f: Facts) -> None:
    s = f.server()
    with s.client() as c:
        a = call(c, "CL.THROTTLE", "user123", "15", "30", "60", "1")
        b = call(c, "CL.THROTTLE", "user123", "15", "30", "60", "16")
        typ, val, pttl = call(c, "TYPE", "user123"), call(c, "GET", "user123"), \
            call(c, "PTTL", "user123")
    ok = (a == [0, 16, 15, -1, 2] and isinstance(b, list) and b[:3] == [1, 16, 15]
          and b[3] == 2 and typ == "string" and str(val).isdigit() and 0 < pttl <= 2000)
    f.add("Reply: five integers [limited, limit, remaining, retry_after, reset_after], limit "
          "= max_burst + 1, retry_after -1 when allowed, waits in whole seconds; the README "
          "example `CL.THROTTLE user123 15 30 60 1` -> 0 16 15 -1 2, then quantity 16 -> "
          "1 16 15 2 2. State: a GCRA time in a string whose TTL is the time to refill.",
          "README `TB.THROTTLE` section and 'State starts fresh'",
          "holds on 0.5.0" if ok else "changed: see what was seen",
          [f"`CL.THROTTLE user123 15 30 60 1` -> {a}",
           f"`CL.THROTTLE user123 15 30 60 16` -> {b}",
           f"TYPE {typ}, GET {val} (ns since the epoch), PTTL {pttl} ms"])

    # A redis-cell key read by TB.THROTTLE.
    both = f.server([(f.tb, []), (f.cell, [])])
    with both.client() as c:
        call(c, "CL.THROTTLE", "k", "15", "30", "60", "1")
        tb = call(c, "TB.THROTTLE", "k", "15", "30", "60", "1")
    f.add("A redis-cell key read by TB.THROTTLE gets WRONGTYPE.",
          "README 'State starts fresh'",
          "holds on 0.5.0" if str(tb).startswith("(error) WRONGTYPE") else "changed",
          [f"CL.THROTTLE k 15 30 60 1, then TB.THROTTLE k 15 30 60 1 -> {tb}"])


def loading(f: Facts) -> None:
    seen = []
    both = f.server([(f.tb, []), (f.cell, [])])
    with both.client() as c:
        names = sorted(m[1] for m in call(c, "MODULE", "LIST"))
        cl = call(c, "COMMAND", "INFO", "cl.throttle")[0]
    seen.append(f"`--loadmodule libredis_tb.so --loadmodule libredis_cell.so`: started, "
                f"MODULE LIST {names}, CL.THROTTLE registered with flags {cl[2]} "
                f"(first/last key/step {cl[3]}/{cl[4]}/{cl[5]}): both load side by side, "
                "CL.THROTTLE is redis-cell's")
    fails = 0
    for order in ([(f.tb, ["CL.THROTTLE"]), (f.cell, [])],
                  [(f.cell, []), (f.tb, ["CL.THROTTLE"])]):
        s = f.server(order)
        first = "libredis_tb.so CL.THROTTLE" if order[0][0] == f.tb else "libredis_cell.so"
        if s.started:
            seen.append(f"{first} first: the server STARTED (unexpected)")
            continue
        fails += 1
        said = s.log_lines(r"(?i)module|cl\.throttle")
        said = [ln for ln in said if "loaded from" not in ln][:3]
        seen.append(f"{first} loaded first, the other second: redis-server exits "
                    f"({s.proc.returncode}); log: " + " | ".join(said))
    f.add("Both modules load into one server; with the `CL.THROTTLE` load argument (which "
          "registers CL.THROTTLE too) they cannot: the load fails with a log line.",
          "README 'Migrating from redis-cell or Dragonfly'",
          "holds on 0.5.0 (the log line comes from whichever module loads second: redis-cell "
          "logs no reason of its own)" if fails == 2 else "changed", seen)


def replication(f: Facts) -> None:
    seen = []
    s = f.server(extra=["--appendonly", "yes", "--appendfsync", "always",
                        "--appenddirname", "aof"])
    with s.client() as c:
        call(c, "CL.THROTTLE", "r:1", "0", "1", "60", "1")     # allowed
        denied = call(c, "CL.THROTTLE", "r:1", "0", "1", "60", "1")  # denied
        call(c, "CL.THROTTLE", "r:2", "5", "1", "60", "0")     # quantity 0, missing key
        time.sleep(0.3)
    aof = b"".join(p.read_bytes() for p in sorted((s.dir / "aof").glob("*.incr.aof")))
    cmds = re.findall(rb"\*\d+\r\n\$\d+\r\n([^\r]+)\r\n", aof)
    cl_lines = [m for m in re.finditer(rb"\*6\r\n\$11\r\n(?i:cl\.throttle)\r\n"
                                       rb"(?:\$\d+\r\n([^\r]*)\r\n){5}", aof)]
    verbs = sorted({x.decode().upper() for x in cmds} - {"SELECT"})
    seen.append(f"AOF (appendonly yes) after an allowed call, a denied call {denied} and a "
                f"quantity-0 call on a missing key: commands {verbs}, "
                f"{len(cl_lines)} CL.THROTTLE entries (one per call, as sent: verbatim)")
    # A quantity-0 call on a missing key writes the key with a TTL of 0 ms: it expires at
    # once and the server then propagates a DEL of its own.
    verbatim = set(verbs) <= {"CL.THROTTLE", "DEL"} and len(cl_lines) == 3
    if "DEL" in verbs:
        seen.append("the DEL is the server's own: the quantity-0 call wrote `r:2` with a TTL "
                    "of 0 ms, the key expired at once and its deletion was propagated")

    master = f.server()
    replica = f.server(extra=["--replicaof", "127.0.0.1", str(master.port)])
    bare = f.server(modules=[(f.tb, [])], extra=["--replicaof", "127.0.0.1", str(master.port)])
    for r in (replica, bare):
        with r.client() as c:
            deadline = time.monotonic() + 10
            while c.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("replica did not connect")
                time.sleep(0.05)
    with master.client() as c:
        for i in range(20):
            call(c, "CL.THROTTLE", f"d:{i}", "100", "1", "1", "1")
        call(c, "SET", "marker", "1")
        m_vals = [call(c, "GET", f"d:{i}") for i in range(20)]
        call(c, "WAIT", "2", "2000")
    time.sleep(0.2)
    with replica.client() as c:
        r_vals = [call(c, "GET", f"d:{i}") for i in range(20)]
    with bare.client() as c:
        b_vals = [call(c, "GET", f"d:{i}") for i in range(20)]
        b_marker = call(c, "GET", "marker")
    differ = sum(1 for a, b in zip(m_vals, r_vals) if a != b)
    delta = [int(b) - int(a) for a, b in zip(m_vals, r_vals) if a and b]
    seen.append(f"master + replica (both with redis-cell), 20 fresh keys: the replica's stored "
                f"time differs from the master's on {differ} of 20 "
                f"(replica - master: {min(delta) / 1e3:.0f} .. {max(delta) / 1e3:.0f} us): "
                "each recomputes the call on its own clock" if delta else
                "master + replica: no values to compare")
    errs = bare.log_lines(r"(?i)error|unknown command")
    seen.append(f"a replica without redis-cell: keys present {sum(v is not None for v in b_vals)}"
                f" of 20, the next write (SET marker) arrived: {b_marker is not None}; its "
                "log: " + (" | ".join(errs[:1]) if errs else "nothing"))
    f.add("redis-cell replicates the command itself, so each replica recomputes it on its own "
          "clock (README); redis-cell 0.2.2 replicates nothing, its AOF stays empty "
          "(README performance section).",
          "README 'Replicas no longer drift' and the paragraph under the performance table",
          ("holds on 0.5.0 for 'replicates the command itself' (every call, allowed, "
           "denied or quantity 0, is replicated verbatim; replicas need the module and "
           "drift); the 0.2.2 sentence is true only of 0.2.2: changed: 0.5.0 replicates "
           "(RedisModule_ReplicateVerbatim, since redis-cell 0.3.0), so its cost per call "
           "includes propagation") if verbatim and differ else "changed: see what was seen",
          seen)


def rates(f: Facts) -> None:
    s = f.server()
    seen = []
    with s.client() as c:
        for args in (["0", "2000", "1", "1"], ["20", "1500", "1", "1"],
                     ["6000", "6000", "1", "1"], ["9", "1", "0.5", "1"],
                     ["9", "2", "1", "1"]):
            seen.append(f"`CL.THROTTLE k{len(seen)} {' '.join(args)}` -> "
                        f"{call(c, 'CL.THROTTLE', f'k{len(seen)}', *args)}")
    # 2,500 per second with a burst of 100 (capacity 100): count what is admitted over
    # ~0.2 s of back-to-back pipelined calls on one key, beside TB.THROTTLE on the same key
    # shape in another server-side key; both on the server clock.
    both = f.server([(f.tb, []), (f.cell, [])])
    out = {}
    with both.client() as c:
        for cmd in ("CL.THROTTLE", "TB.THROTTLE"):
            batch = RespClient.encode([cmd, f"fast:{cmd}", "99", "2500", "1", "1"]) * 50
            admitted = calls = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.2:
                c.sock.sendall(batch)
                for _ in range(50):
                    r = c._read()
                    calls += 1
                    admitted += (r[0] == 0)
            elapsed = time.monotonic() - t0
            out[cmd] = (admitted, calls, elapsed)
    for cmd, (adm, calls, el) in out.items():
        seen.append(f"{cmd} key 99 2500 1, {calls:,} calls in {el * 1000:.0f} ms: {adm:,} "
                    f"admitted; a bucket of 100 refilling 2,500/s admits at most "
                    f"{100 + 2500 * el:,.0f}")
    cell_adm, _, cell_el = out["CL.THROTTLE"]
    fine = cell_adm <= 100 + 2500 * cell_el + 1 and cell_adm >= 100 + 2500 * cell_el * 0.5
    big = next((s for s in seen if " 6000 6000 1 1`" in s), "")
    m = re.search(r"-> \[0, (\d+), (\d+),", big)
    over = bool(m) and int(m.group(2)) > int(m.group(1))
    f.add("More than 1000 per second: 2,500 per second is 2,500 per second here (redis-cell "
          "refuses or silently misbehaves there, its issues 50 and 80); fractional "
          "count/period work here.",
          "README 'Fractional rates and more than 1000 per second work'",
          ("changed: 0.5.0 takes rates above 1,000/s (its emission interval is in "
           "nanoseconds: 2,000/s and 1,500/s are accepted, 2,500/s admits what a bucket of "
           "100 at 2,500/s admits); what still holds: period and count must be integers "
           "(`period 0.5` is refused), so fractional rates below 1 per second need a longer "
           "period"
           + ("; and `remaining` can still exceed the limit at such rates (issue 50's "
              "6000 6000 1 answers remaining 6024 of limit 6001: it is divided by the "
              "emission interval truncated to whole microseconds, 166 us for 166.67 us)"
              if over else ""))
          if fine else "holds on 0.5.0: see what was seen", seen)


def rounding(f: Facts) -> None:
    s = f.server([(f.tb, []), (f.cell, [])])
    seen = []
    with s.client() as c:
        # One per 2 s, no burst: a second call 100 ms after the first waits 1.9 s.
        call(c, "CL.THROTTLE", "w", "0", "1", "2", "1")
        call(c, "TB.THROTTLE", "tw", "0", "1", "2", "1")
        time.sleep(0.1)
        r = call(c, "CL.THROTTLE", "w", "0", "1", "2", "1")
        t = call(c, "TB.THROTTLE", "tw", "0", "1", "2", "1")
        seen.append(f"`CL.THROTTLE w 0 1 2 1` twice, 100 ms apart (the wait is 1.9 s): the "
                    f"second -> {r}; TB.THROTTLE the same -> {t}")
        tz = []
        for i in range(5):
            cmd = ["TB.THROTTLE", f"tz:{i}", "0", "2500", "1", "1"]
            c.sock.sendall(RespClient.encode(cmd) * 2)
            c._read()
            tz.append(c._read())
        seen.append(f"TB.THROTTLE, the same 2,500/s pairs (5 keys): second calls -> {tz}")
        ceil_19 = isinstance(r, list) and r[0] == 1 and r[3] == 2 and r[4] == 2
        # Sub-millisecond waits: 2,500/s, no burst: two calls in one pipeline, the second
        # refused with a wait under 0.4 ms.
        zero = refused = 0
        for i in range(50):
            cmd = ["CL.THROTTLE", f"z:{i}", "0", "2500", "1", "1"]
            c.sock.sendall(RespClient.encode(cmd) * 2)
            c._read()
            r2 = c._read()
            if isinstance(r2, list) and r2[0] == 1:
                refused += 1
                zero += r2[3] == 0
        seen.append(f"`CL.THROTTLE z:N 0 2500 1 1` twice in one pipeline, 50 keys: {refused} "
                    f"second calls refused, {zero} of them with retry_after 0 (the wait, "
                    "< 0.4 ms, has no whole millisecond: it is rounded down to 0)")
    f.add("Waits are rounded up, so a caller that waits retry_after seconds is admitted "
          "(redis-cell 0.2.2 truncates: a wait of 1.9 s reads 1).",
          "README 'Waits are rounded up'",
          ("changed: 0.5.0 rounds a wait up to whole seconds when it has at least one whole "
           "millisecond past the second (1.9 s reads 2), but drops a remainder under 1 ms: "
           "a refusal can answer retry_after 0 (seen with 2,500/s), and by the same rule "
           "(its src/lib.rs adds 1 only if subsec_milliseconds() > 0) a wait of 1.0004 s "
           "reads 1; reset_after is rounded the same way")
          if ceil_19 else "holds on 0.5.0: see what was seen", seen)


def quantity_zero(f: Facts) -> None:
    s = f.server(extra=["--appendonly", "yes", "--appendfsync", "always",
                        "--appenddirname", "aof"])
    seen = []
    with s.client() as c:
        past = str((time.time_ns() - 5_000_000_000))
        call(c, "SET", "q", past, "PX", "100000")
        r = call(c, "CL.THROTTLE", "q", "9", "1", "1", "0")
        after, pttl = call(c, "GET", "q"), call(c, "PTTL", "q")
        seen.append(f"a key holding a time 5 s in the past (a full bucket) with a 100 s TTL; "
                    f"`CL.THROTTLE q 9 1 1 0` -> {r}; then GET {after}, PTTL {pttl}: the "
                    "value and TTL were rewritten (a TTL of 0 ms: the key is gone)")
        call(c, "CL.THROTTLE", "q2", "9", "1", "10", "1")
        v0, t0 = call(c, "GET", "q2"), call(c, "PTTL", "q2")
        time.sleep(0.05)
        r2 = call(c, "CL.THROTTLE", "q2", "9", "1", "10", "0")
        v1, t1 = call(c, "GET", "q2"), call(c, "PTTL", "q2")
        seen.append(f"a key one take in (tat in the future): quantity 0 -> {r2}; value "
                    f"{'unchanged' if v0 == v1 else 'changed'}, PTTL {t0} -> {t1} ms "
                    "(re-set to tat - now)")
        time.sleep(0.3)
        neg = []
        for q in ("-1", "-1"):
            neg.append(call(c, "CL.THROTTLE", "n", "4", "1", "10", q))
        call(c, "CL.THROTTLE", "n2", "4", "1", "10", "3")
        neg2 = [call(c, "CL.THROTTLE", "n2", "4", "1", "10", "-1") for _ in range(4)]
        neg2_val = call(c, "GET", "n2")
    aof = b"".join(p.read_bytes() for p in sorted((s.dir / "aof").glob("*.incr.aof")))
    zero_cmds = len(re.findall(rb"\$1\r\n0\r\n(?=\*|$)", aof))
    seen.append(f"the AOF holds {zero_cmds} CL.THROTTLE calls ending in quantity 0: each "
                "quantity-0 call is propagated as a write")
    seen.append(f"negative quantities: `CL.THROTTLE n 4 1 10 -1` on a missing key, twice -> "
                f"{neg}; a key 3 taken, then -1 four times -> {neg2} (key left holding "
                f"{neg2_val})")
    writes = after != past and zero_cmds >= 2
    f.add("Quantity 0 writes nothing here (redis-cell writes the key on a 'peek'); a negative "
          "quantity refunds, never above the limit (the idiom redis-cell users rely on, its "
          "issue 22).",
          "README 'Quantity 0 writes nothing'",
          ("holds on 0.5.0: quantity 0 still rewrites the stored time and the TTL (and "
           "deletes a full bucket's key by giving it a TTL of 0) and is replicated as a "
           "write; new detail for the refund idiom: on 0.5.0 a refund that brings the "
           "bucket back to full (or past it) answers an error, `Cell error: Store error: "
           "Error while setting key expire` (a negative TTL), after it has already "
           "written the key") if writes else "changed: see what was seen", seen)


def corrupt(f: Facts) -> None:
    seen, crashed = [], 0
    for what, setup, key in (
            ("a non-integer string", ["SET", "c", "abc"], "c"),
            ("a hash (a TB.* bucket under the same name)", ["HSET", "c", "tokens", "1"], "c"),
            ("an integer too large for u64", ["SET", "c", "99999999999999999999999"], "c"),
            ("a key name that is not UTF-8", None, b"\xff")):
        s = f.server()
        with s.client() as c:
            if setup:
                call(c, *setup)
            try:
                r = call(c, "CL.THROTTLE", key, "1", "1", "1", "1")
            except (OSError, ConnectionError) as e:
                r = f"no reply ({type(e).__name__})"
        alive = s.alive()
        crashed += not alive
        signal = s.log_lines(r"crashed by signal")
        seen.append(f"{what}: CL.THROTTLE -> {r}; server "
                    + ("alive" if alive else f"DEAD ({' '.join(signal[:1])}; stderr: "
                       f"{s.panic() or 'no panic text'})"))
    f.add("Bad or corrupt input is an error here, never a crash (redis-cell aborts the server "
          "on a non-integer stored value, its issue 91).",
          "README 'Bad or corrupt input is an error, never a crash'",
          ("holds on 0.5.0, and wider than the docs say: the server aborts (SIGABRT from a "
           "Rust panic that cannot unwind out of the module) on a non-integer stored value, "
           "on a key of another type (e.g. a hash of the same name), and on a key name that "
           "is not UTF-8 (the arguments are unwrapped as UTF-8 before anything is checked)")
          if crashed >= 2 else "changed: see what was seen", seen)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the markdown here (default: stdout)")
    a = ap.parse_args(argv)
    cell = peer.redis_cell()
    if cell.path is None:
        print(f"cell_facts: NOT CHECKED: no redis-cell {peer.REDIS_CELL_VERSION}: {cell.error}",
              file=sys.stderr)
        return 2
    tb = ensure_module()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    with tempfile.TemporaryDirectory(prefix="cell-facts-") as tmp:
        f = Facts(Path(tmp), cell.path, tb)
        with f.stack:
            for check in (reply_shape, loading, replication, rates, rounding,
                          quantity_zero, corrupt):
                check(f)
    version = subprocess.run(["redis-server", "--version"], capture_output=True,
                             text=True).stdout.strip()
    out = [f"# redis-cell {cell.version}: the docs' statements, checked",
           "",
           f"Generated by `python3 bench/commands/cell_facts.py` at {started} ({version}); "
           f"redis-cell: {cell.how}. Every line under *seen* is what the servers did in "
           "this run.", ""]
    for claim, where, verdict, seen in f.sections:
        out += [f"## {where}", "", f"Claim: {claim}", "", f"**{verdict}**", "",
                *[f"- seen: {s}" for s in seen], ""]
    text = "\n".join(out)
    if a.out:
        a.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
