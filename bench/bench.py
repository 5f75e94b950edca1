#!/usr/bin/env python3
"""Benchmark TB.TAKE against the floor (a plain two-field HSET), the ceiling (PING) and the
usual alternative (the same token bucket as a Lua script), on a server this script starts.

Run from anywhere (paths are resolved from this file), normally as `python3 bench/bench.py`
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
* Reports throughput, server CPU per request (from /proc/<pid>/stat, steadier than req/s
  here), latency percentiles from redis-benchmark's CSV, and memory per bucket; checks the
  issue's targets and prints PASS/FAIL exactly as measured.

Environment / flags (flags win):
  REDIS_SERVER       server binary (default: redis-server)
  REDIS_TB_MODULE    module path (default: target/release/libredis_tb.so, built if missing)
  BENCH_ROUNDS       rounds (default 5)                          --rounds
  BENCH_REQUESTS     requests per pipelined run (default 500000) --requests
  BENCH_REQUESTS_P1  requests per unpipelined run (default 80000) --requests-p1
  BENCH_KEYS         distinct keys (default 100000)              --keys
  BENCH_OUT          output directory (default bench/results)    --out
  --quick            1 round, 100000 / 20000 requests: a smoke test, not a measurement
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime as dt
import hashlib
import html
import io
import math
import os
import platform
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_MODULE = REPO_ROOT / "target" / "release" / "libredis_tb.so"
LUA_SCRIPT = BENCH_DIR / "token_bucket.lua"

# ---------------------------------------------------------------------------------------
# Bucket parameters (see the report's "Parameters" section for the reasoning).
#
# Keys must stay alive for the whole run (a key that expires comes back as a *new* full
# bucket: the workload would silently turn into key creation), every call must be allowed
# (a denied call writes nothing and would flatter the write path), and the module should
# be measured in the state a busy bucket is normally in.
#
# * capacity 1e9: no bucket can run dry (each key sees ~10 takes per run).
# * Each key is populated with one take of PREFILL_TAKE = 1000 tokens, then every timed
#   call takes n = 1. The bucket is then 1000 tokens short: time-to-full 1000 s at rate 1,
#   so the key's TTL is ~1000 s and nothing expires during a run (the gaps between hits on
#   one key are seconds), whether `now` is fixed or the server clock (which refills only a
#   few tokens per key during a run).
# * rate 1: one take moves time-to-full by 1 s, small against the TTL the module keeps
#   (it only rewrites a TTL that no longer covers time-to-full within its margin): the
#   steady state of a limited key. The "fresh buckets" workload shows the other regime.
# ---------------------------------------------------------------------------------------
CAPACITY = "1000000000"
RATE = "1"
TAKE_N = "1"
PREFILL_TAKE = "1000"
# A fixed, realistic epoch time for the calls with an explicit `now`. With `now` fixed no
# time passes for the buckets: they only drain (by n per call), hence the large capacity.
FIXED_NOW = "1764456268.123456"
# The values a populated bucket holds (capacity - PREFILL_TAKE, FIXED_NOW): the plain HSET
# workloads write exactly these, so every variant stores the same typical values.
TYPICAL_TOKENS = str(int(CAPACITY) - int(PREFILL_TAKE))
# "Fresh buckets" regime: one take of 1 at rate 0.001 leaves time-to-full at 1000 s (the
# key lives), but each further take pushes it another 1000 s out, beyond the module's TTL
# margin, so (almost) every call re-sets and replicates the expiry: the module's worst path.
FRESH_RATE = "0.001"
# TTL given to the keys of the HSET-on-keys-with-a-TTL workload and of the HSET+PEXPIRE
# memory baseline: what the Lua script sets for the typical state (ceil(1000 s) + 1 s).
TYPICAL_TTL_MS = str(int(PREFILL_TAKE) * 1000 // int(RATE) + 1000)

KEY_PREFIX = "tb:"
CLIENTS = 50
PIPELINES = (16, 1)  # pipelined first: it is the headline comparison
STARTUP_TIMEOUT_S = 15.0
BENCH_TIMEOUT_S = 300.0
SETTLE_TIMEOUT_S = 20.0


# =======================================================================================
# Small RESP2 client (no third-party packages on this machine).
# =======================================================================================
class RedisError(Exception):
    """An error reply from the server."""


class RespClient:
    """A blocking RESP2 connection: enough for setup, checks, population and INFO."""

    def __init__(self, port: int, timeout: float = 60.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb")

    def close(self) -> None:
        try:
            self.rfile.close()
        finally:
            self.sock.close()

    def __enter__(self) -> "RespClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def encode(args) -> bytes:
        """One command as a RESP array of bulk strings."""
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(parts)

    def _read(self):
        line = self.rfile.readline()
        if not line:
            raise ConnectionError("server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            size = int(rest)
            if size < 0:
                return None
            data = self.rfile.read(size + 2)
            return data[:-2].decode(errors="replace")
        if kind == b"*":
            size = int(rest)
            return None if size < 0 else [self._read() for _ in range(size)]
        raise ConnectionError(f"unexpected RESP line {line!r}")

    def call(self, *args):
        """Sends one command; raises RedisError on an error reply."""
        self.sock.sendall(self.encode(args))
        reply = self._read()
        if isinstance(reply, RedisError):
            raise reply
        return reply

    def send_batches(self, batches: list[tuple[bytes, int]]) -> list[RedisError]:
        """Sends pre-encoded batches (bytes, command count), reading each batch's replies
        before the next so neither side's buffers grow without bound. Returns the errors."""
        errors = []
        for payload, count in batches:
            self.sock.sendall(payload)
            for _ in range(count):
                reply = self._read()
                if isinstance(reply, RedisError):
                    errors.append(reply)
        return errors

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section)
        out = {}
        for line in text.splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out


def encode_batches(commands, batch: int = 1000) -> list[tuple[bytes, int]]:
    """Pre-encodes an iterable of commands into pipeline batches (cached per workload)."""
    out, buf, n = [], [], 0
    for cmd in commands:
        buf.append(RespClient.encode(cmd))
        n += 1
        if n == batch:
            out.append((b"".join(buf), n))
            buf, n = [], 0
    if n:
        out.append((b"".join(buf), n))
    return out


# =======================================================================================
# Server management.
# =======================================================================================
class SetupError(Exception):
    """Something the benchmark needs is missing or broken; the message says what."""


def _set_pdeathsig() -> None:
    """Runs in the child before exec: the kernel kills the server if this script dies
    without cleaning up (SIGKILL, crash). Best effort: Linux only."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_pinning() -> tuple[list[str], list[str], str]:
    """taskset prefixes for server and load generator: two different cores when this
    process may use at least two, otherwise none (and a note saying so)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= 2 and shutil.which("taskset"):
        return (["taskset", "-c", str(cpus[0])], ["taskset", "-c", str(cpus[1])],
                f"server on CPU {cpus[0]}, redis-benchmark on CPU {cpus[1]} (taskset)")
    return [], [], f"not pinned (usable CPUs: {cpus}, taskset: {bool(shutil.which('taskset'))})"


class RedisServer:
    """A redis-server child with the module loaded; a context manager that always stops it."""

    def __init__(self, binary: str, module: Path, workdir: Path, pin: list[str]):
        self.binary, self.module, self.workdir, self.pin = binary, module, workdir, pin
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.argv: list[str] = []
        self.log = workdir / "redis.log"

    def __enter__(self) -> "RedisServer":
        last_error = None
        for _ in range(5):  # a free port can be taken between probing and binding
            self.port = free_port()
            try:
                self._start()
                return self
            except SetupError as e:
                last_error = e
                self.stop()
                if "Address already in use" not in str(e):
                    raise
        raise last_error  # type: ignore[misc]

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        self.argv = [
            *self.pin, self.binary,
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--logfile", str(self.log),
            "--daemonize", "no",
            # DEBUG HTSTATS tells when the keyspace dict has finished rehashing (memory).
            "--enable-debug-command", "local",
            "--loadmodule", str(self.module),
        ]
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_set_pdeathsig)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SetupError(f"redis-server exited with status {self.proc.returncode} "
                                 f"at startup:\n{self.log_tail()}")
            try:
                with RespClient(self.port, timeout=2) as c:
                    if c.call("PING") == "PONG":
                        modules = c.call("MODULE", "LIST")
                        names = [dict(zip(m[::2], m[1::2])).get("name") for m in modules]
                        if "tb" not in names:
                            raise SetupError(f"module 'tb' not loaded (loaded: {names})")
                        return
            except (OSError, ConnectionError):
                time.sleep(0.05)
            except RedisError as e:  # e.g. LOADING
                if "LOADING" not in str(e):
                    raise SetupError(f"server answered PING with an error: {e}")
                time.sleep(0.05)
        raise SetupError(f"redis-server did not answer within {STARTUP_TIMEOUT_S:.0f} s:\n"
                         f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def cpu_seconds(self) -> float:
        """utime + stime of the whole server process (all threads), from /proc."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """SIGTERM, bounded wait, then SIGKILL. Safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


# =======================================================================================
# Workloads.
# =======================================================================================
Commands = list[list[str]]


@dataclass
class Workload:
    """One command benchmarked with redis-benchmark over the keyspace, and how its keys are
    put in place before each run."""

    id: str
    label: str
    command: list[str]             # for redis-benchmark; __rand_int__ marks the key
    populate: Callable[[str], Commands] | None = None  # run once per key before a run
    note: str = ""
    _batches: list = field(default_factory=list, repr=False)

    def keyed(self) -> bool:
        return self.populate is not None

    def batches(self, keys: int) -> list[tuple[bytes, int]]:
        """The population, encoded once and reused every round."""
        if not self._batches:
            self._batches = encode_batches(
                c for i in range(keys) for c in self.populate(f"{KEY_PREFIX}{i:012d}"))
        return self._batches


def workloads(sha: str) -> list[Workload]:
    """The interleaved set, in run order. Keys are named as redis-benchmark expands
    `__rand_int__` (12 digits, 0 .. keys-1), so population covers exactly the run's keys.
    Each key is populated by the workload's own command (with a take of PREFILL_TAKE for
    the buckets), so every run starts from the state its command keeps the keys in."""
    rk = KEY_PREFIX + "__rand_int__"

    def hset(k):
        return ["HSET", k, "tokens", TYPICAL_TOKENS, "last_refill_time", FIXED_NOW]

    def lua(k, n):
        return ["EVALSHA", sha, "1", k, CAPACITY, RATE, n, FIXED_NOW]

    def tb_now(k, n, rate=RATE):
        return ["TB.TAKE", k, CAPACITY, rate, n, FIXED_NOW]

    def tb_clock(k, n):
        return ["TB.TAKE", k, CAPACITY, RATE, n]

    return [
        Workload("ping", "PING", ["PING"], note="the server's ceiling"),
        Workload("hset", "HSET", hset(rk), lambda k: [hset(k)],
                 note="a plain two-field hash write: the floor of TB.TAKE"),
        Workload("hset_ttl", "HSET (key has TTL)", hset(rk),
                 lambda k: [hset(k), ["PEXPIRE", k, TYPICAL_TTL_MS]],
                 note="the same HSET on keys given a TTL beforehand (HSET keeps it)"),
        Workload("lua", "Lua EVALSHA (now)", lua(rk, TAKE_N), lambda k: [lua(k, PREFILL_TAKE)],
                 note="bench/token_bucket.lua with the same explicit now"),
        Workload("tb_now", "TB.TAKE (now)", tb_now(rk, TAKE_N),
                 lambda k: [tb_now(k, PREFILL_TAKE)], note="explicit, fixed now"),
        Workload("tb_clock", "TB.TAKE (server clock)", tb_clock(rk, TAKE_N),
                 lambda k: [tb_clock(k, PREFILL_TAKE)], note="now omitted"),
        Workload("tb_fresh", "TB.TAKE (now, fresh buckets)", tb_now(rk, TAKE_N, FRESH_RATE),
                 lambda k: [tb_now(k, TAKE_N, FRESH_RATE)],
                 note="rate 0.001 after a single take: the TTL is re-set on nearly every "
                      "call (the module's worst path); informational, not graded"),
    ]


# =======================================================================================
# Running redis-benchmark.
# =======================================================================================
@dataclass
class RunResult:
    rps: float
    avg_ms: float
    p50_ms: float
    p99_ms: float
    cpu_us: float   # server CPU microseconds per request
    wall_s: float
    busy: float     # server CPU seconds / wall seconds: near 1 = server-bound
    client_busy: float  # redis-benchmark CPU seconds / wall seconds
    other_load: float   # CPUs used by everything else on the machine during the run


def bench_argv(pin: list[str], port: int, w: Workload, pipeline: int, requests: int,
               keys: int) -> list[str]:
    return [*pin, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
            "-c", str(CLIENTS), "-P", str(pipeline), "-n", str(requests),
            "-r", str(keys), "--csv", *w.command]


def parse_csv(text: str) -> dict[str, float]:
    """redis-benchmark 7.x --csv: a header row and one row per test, latencies in ms."""
    rows = list(csv.DictReader(io.StringIO(text)))
    if len(rows) != 1:
        raise SetupError(f"expected one CSV row from redis-benchmark, got:\n{text}")
    row = rows[0]
    try:
        return {k: float(row[k]) for k in
                ("rps", "avg_latency_ms", "p50_latency_ms", "p99_latency_ms")}
    except (KeyError, ValueError) as e:
        raise SetupError(f"unexpected redis-benchmark CSV ({e}):\n{text}") from None


def prepare(ctl: RespClient, server: RedisServer, w: Workload, keys: int) -> None:
    """FLUSHALL, then one populating call per key on a separate connection (closed, so its
    buffers are gone before the run)."""
    ctl.call("FLUSHALL", "SYNC")
    if not w.keyed():
        return
    with RespClient(server.port) as pop:
        errors = pop.send_batches(w.batches(keys))
    if errors:
        raise SetupError(f"{w.label}: populating got {len(errors)} errors, first: {errors[0]}")
    if ctl.call("DBSIZE") != keys:
        raise SetupError(f"{w.label}: expected {keys} keys after populating")


def run_once(ctl: RespClient, server: RedisServer, bench_pin: list[str], w: Workload,
             pipeline: int, requests: int, keys: int) -> RunResult:
    """One timed redis-benchmark run, with checks that it measured what it claims: no
    error replies, every TB.TAKE allowed, and the keyspace unchanged (nothing expired,
    nothing created)."""
    prepare(ctl, server, w, keys)
    errors_before = int(ctl.info("stats").get("total_error_replies", 0))
    tb_before = ctl.info("tb")
    cpu0, sys0, kids0, t0 = (server.cpu_seconds(), system_busy_seconds(),
                             children_cpu_seconds(), time.monotonic())
    argv = bench_argv(bench_pin, server.port, w, pipeline, requests, keys)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SetupError(f"redis-benchmark took over {BENCH_TIMEOUT_S:.0f} s: "
                         f"{shlex.join(argv)}") from None
    wall, cpu = time.monotonic() - t0, server.cpu_seconds() - cpu0
    client = children_cpu_seconds() - kids0
    other = max(0.0, system_busy_seconds() - sys0 - cpu - client)
    if proc.returncode != 0:
        raise SetupError(f"redis-benchmark failed ({proc.returncode}): {shlex.join(argv)}\n"
                         f"{proc.stderr}{proc.stdout}")
    parsed = parse_csv(proc.stdout)

    new_errors = int(ctl.info("stats").get("total_error_replies", 0)) - errors_before
    if new_errors:
        raise SetupError(f"{w.label}: {new_errors} error replies during the run "
                         f"({shlex.join(argv)}); stderr: {proc.stderr.strip()[:500]}")
    tb_after = ctl.info("tb")
    denied = int(tb_after.get("tb_take_denied", 0)) - int(tb_before.get("tb_take_denied", 0))
    if denied:
        raise SetupError(f"{w.label}: {denied} TB.TAKE calls were denied; the parameters "
                         f"must keep every call allowed")
    expect = keys if w.keyed() else 0
    if ctl.call("DBSIZE") != expect:
        raise SetupError(f"{w.label}: keyspace changed during the run "
                         f"(expected {expect} keys): keys expired or were created")
    return RunResult(rps=parsed["rps"], avg_ms=parsed["avg_latency_ms"],
                     p50_ms=parsed["p50_latency_ms"], p99_ms=parsed["p99_latency_ms"],
                     cpu_us=cpu / requests * 1e6, wall_s=wall, busy=cpu / wall,
                     client_busy=client / wall, other_load=other / wall)


def system_busy_seconds() -> float:
    """Process and stolen CPU time of the whole machine (all CPUs), from /proc/stat.
    Interrupt and softirq time is left out: on loopback much of it is the benchmark's
    own network traffic, not other work."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = v[:8]
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU time of waited-for children: the redis-benchmark runs (the server, still
    running, is not counted until it is reaped)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def sanity_check(ctl: RespClient, sha: str) -> None:
    """The Lua script and TB.TAKE agree on a few calls before anything is timed: same
    allowed flag and remaining tokens, same stored fields (the benchmark compares like
    with like, so they must do the same thing)."""
    ctl.call("FLUSHALL", "SYNC")
    for args in ([CAPACITY, RATE, PREFILL_TAKE, FIXED_NOW], [CAPACITY, RATE, TAKE_N, FIXED_NOW],
                 ["10", "2", "7", FIXED_NOW], ["10", "2", "5", FIXED_NOW],
                 ["10", "2", "5", "1764456270.123456"], ["10", "2", "11", FIXED_NOW]):
        tb = ctl.call("TB.TAKE", "check:tb", *args)
        lua = ctl.call("EVALSHA", sha, "1", "check:lua", *args)
        if tb[0] != lua[0] or not math.isclose(float(tb[1]), float(lua[1]), rel_tol=1e-12):
            raise SetupError(f"TB.TAKE and the Lua script disagree on {args}: {tb} vs {lua}")
    a = ctl.call("HGETALL", "check:tb")
    b = ctl.call("HGETALL", "check:lua")
    if dict(zip(a[::2], a[1::2])) != dict(zip(b[::2], b[1::2])):
        raise SetupError(f"TB.TAKE and the Lua script store different fields: {a} vs {b}")
    ctl.call("FLUSHALL", "SYNC")


# =======================================================================================
# Memory per bucket.
# =======================================================================================
@dataclass
class MemoryResult:
    label: str
    per_bucket: float      # used_memory delta / buckets (smallest over measured passes)
    memory_usage: int      # MEMORY USAGE of a sample key (median of a few)
    sample: str            # HGETALL of a sample key
    repeat_diff: float     # largest difference between measured passes, B/bucket


MEMORY_PASSES = 2  # measured passes, after one discarded warm-up pass


def wait_settled(ctl: RespClient) -> int:
    """Waits until the keyspace dicts are not rehashing and the data's memory holds still,
    so a half-finished rehash (two tables allocated) is not counted. Returns used_memory
    minus mem_clients_normal: client buffers are resized by serverCron on its own schedule
    (tens of KB here), which is noise, not bucket memory."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last, stable = None, 0
    while time.monotonic() < deadline:
        try:
            rehashing = "rehashing" in ctl.call("DEBUG", "HTSTATS", "0")
        except RedisError:
            rehashing = False  # DEBUG disabled: rely on stability alone
        mem = ctl.info("memory")
        used = int(mem["used_memory"]) - int(mem.get("mem_clients_normal", 0))
        stable = stable + 1 if (used == last and not rehashing) else 0
        if stable >= 3:
            return used
        last = used
        time.sleep(0.1)
    raise SetupError(f"used_memory did not settle within {SETTLE_TIMEOUT_S:.0f} s")


def populate_keys(server: RedisServer, what: str, make, keys: int) -> None:
    """Runs make(key)'s commands for every key, pipelined on a connection of its own that
    is closed afterwards (its buffers must not be counted)."""
    with RespClient(server.port) as pop:
        errors = pop.send_batches(encode_batches(
            c for i in range(keys) for c in make(f"{KEY_PREFIX}{i:012d}")))
    if errors:
        raise SetupError(f"{what}: {len(errors)} errors, first: {errors[0]}")


def measure_memory(ctl: RespClient, server: RedisServer, sha: str, keys: int) -> list[MemoryResult]:
    """Bytes per bucket for the same typical bucket stored by each method.

    A whole discarded pass runs first: on a fresh server the first few 100k-key
    populations read up to ~0.7 B/bucket high (transient allocations outside the dataset,
    seen in MEMORY STATS as dataset.bytes only), which would be charged to whichever
    method came first. Then every method is measured MEMORY_PASSES times; such noise only
    ever adds bytes, so the smallest delta is the estimate and the spread is reported."""
    typical = ["tokens", TYPICAL_TOKENS, "last_refill_time", FIXED_NOW]
    variants = [
        ("HSET + PEXPIRE", lambda k: [["HSET", k, *typical], ["PEXPIRE", k, TYPICAL_TTL_MS]]),
        ("Lua EVALSHA (now)",
         lambda k: [["EVALSHA", sha, "1", k, CAPACITY, RATE, PREFILL_TAKE, FIXED_NOW]]),
        ("TB.TAKE (now)", lambda k: [["TB.TAKE", k, CAPACITY, RATE, PREFILL_TAKE, FIXED_NOW]]),
        ("TB.TAKE (server clock)", lambda k: [["TB.TAKE", k, CAPACITY, RATE, PREFILL_TAKE]]),
        ("HSET, no TTL (reference)", lambda k: [["HSET", k, *typical]]),
    ]
    per_pass: dict[str, list[float]] = {label: [] for label, _ in variants}
    results: dict[str, MemoryResult] = {}
    for n in range(1 + MEMORY_PASSES):
        for label, make in variants:
            ctl.call("FLUSHALL", "SYNC")
            base = wait_settled(ctl)
            populate_keys(server, f"memory {label}", make, keys)
            if ctl.call("DBSIZE") != keys:
                raise SetupError(f"memory {label}: expected {keys} keys")
            used = wait_settled(ctl)
            if n == 0:
                continue  # warm-up pass
            per_pass[label].append((used - base) / keys)
            step = max(1, keys // 10)
            usages = [ctl.call("MEMORY", "USAGE", f"{KEY_PREFIX}{i:012d}", "SAMPLES", "0")
                      for i in range(0, keys, step)]
            sample = ctl.call("HGETALL", f"{KEY_PREFIX}{0:012d}")
            values = per_pass[label]
            results[label] = MemoryResult(label, min(values), int(statistics.median(usages)),
                                          " ".join(sample), max(values) - min(values))
    ctl.call("FLUSHALL", "SYNC")
    return [results[label] for label, _ in variants]


# =======================================================================================
# Aggregation, targets, output.
# =======================================================================================
def median(xs):
    return statistics.median(xs) if xs else float("nan")


@dataclass
class Summary:
    """Medians over rounds for one workload and pipeline depth, plus within-round ratios."""
    rps: float
    rps_min: float
    rps_max: float
    cpu_us: float
    busy: float
    client_busy: float
    p50_ms: float
    p99_ms: float
    rps_vs_hset: float
    cpu_vs_hset: float
    p99_vs_hset: float


def round_ratios(runs, a: str, b: str, pipeline: int, attr: str) -> list[float]:
    """(a / b) within each round: drift between rounds on a shared machine then cancels
    instead of adding to the spread."""
    return [getattr(r[(a, pipeline)], attr) / getattr(r[(b, pipeline)], attr) for r in runs]


def round_ratio(runs, a: str, b: str, pipeline: int, attr: str) -> float:
    """Median over rounds of the within-round ratio."""
    return median(round_ratios(runs, a, b, pipeline, attr))


def summarise(runs: list[dict], wl: list[Workload]) -> dict[tuple[str, int], Summary]:
    out = {}
    for w in wl:
        for p in PIPELINES:
            rs = [r[(w.id, p)] for r in runs]
            out[(w.id, p)] = Summary(
                rps=median([x.rps for x in rs]), rps_min=min(x.rps for x in rs),
                rps_max=max(x.rps for x in rs), cpu_us=median([x.cpu_us for x in rs]),
                busy=median([x.busy for x in rs]),
                client_busy=median([x.client_busy for x in rs]),
                p50_ms=median([x.p50_ms for x in rs]), p99_ms=median([x.p99_ms for x in rs]),
                rps_vs_hset=round_ratio(runs, w.id, "hset", p, "rps"),
                cpu_vs_hset=round_ratio(runs, w.id, "hset", p, "cpu_us"),
                p99_vs_hset=round_ratio(runs, w.id, "hset", p, "p99_ms"))
    return out


@dataclass
class Target:
    text: str
    measured: float
    threshold: str
    ok: bool
    fmt: str = "{:.3f}"
    rounds: str = ""   # range of the per-round values, to show how close a call it is


def ratio_target(runs, text, a, b, p, attr, threshold, check) -> Target:
    """A target on the median of per-round ratios a/b, with the per-round range."""
    values = round_ratios(runs, a, b, p, attr)
    m = median(values)
    return Target(text, m, threshold, check(m), rounds=f"{min(values):.2f} .. {max(values):.2f}")


def evaluate_targets(runs, memory: list[MemoryResult]) -> list[Target]:
    """The issue's targets, measured as stated; both TB.TAKE variants must meet each."""
    t = []
    tbs = (("tb_now", "TB.TAKE (now)"), ("tb_clock", "TB.TAKE (server clock)"))
    for tb, name in tbs:
        t.append(ratio_target(runs, f"{name} req/s >= 0.65x HSET, pipelined (-P 16)",
                              tb, "hset", 16, "rps", ">= 0.65", lambda r: r >= 0.65))
    for p in PIPELINES:
        t.append(ratio_target(runs, f"TB.TAKE without now within 15% of with now, -P {p} "
                              "(req/s ratio)", "tb_clock", "tb_now", p, "rps", "0.85 .. 1.15",
                              lambda r: 0.85 <= r <= 1.15))
    for tb, name in tbs:
        t.append(ratio_target(runs, f"{name} req/s >= 2.8x Lua script, pipelined (-P 16)",
                              tb, "lua", 16, "rps", ">= 2.8", lambda r: r >= 2.8))
    for tb, name in tbs:
        t.append(ratio_target(runs, f"{name} p99 <= 1.2x HSET's p99, unpipelined (-P 1)",
                              tb, "hset", 1, "p99_ms", "<= 1.2", lambda r: r <= 1.2))
    mem = {m.label: m for m in memory}
    base = mem["HSET + PEXPIRE"]
    for label in ("TB.TAKE (now)", "TB.TAKE (server clock)"):
        m = mem[label]
        t.append(Target(f"{label} bytes/bucket (used_memory) <= HSET+PEXPIRE "
                        f"({base.per_bucket:.2f})", m.per_bucket, f"<= {base.per_bucket:.2f}",
                        m.per_bucket <= base.per_bucket, "{:.2f}"))
        t.append(Target(f"{label} MEMORY USAGE <= HSET+PEXPIRE ({base.memory_usage})",
                        m.memory_usage, f"<= {base.memory_usage}",
                        m.memory_usage <= base.memory_usage, "{:.0f}"))
    return t


def md_table(header: list[str], rows: list[list[str]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def throughput_rows(wl, summary, p: int) -> list[list[str]]:
    rows = []
    for w in wl:
        s = summary[(w.id, p)]
        spread = (s.rps_max - s.rps_min) / s.rps * 100 if s.rps else float("nan")
        rows.append([w.label, f"{s.rps:,.0f}", f"{spread:.0f}%", f"{s.rps_vs_hset:.2f}x",
                     f"{s.cpu_us:.2f}", f"{s.cpu_vs_hset:.2f}x", f"{s.busy * 100:.0f}%",
                     f"{s.client_busy * 100:.0f}%",
                     f"{s.p50_ms:.3f}",
                     f"{s.p99_ms:.3f}", f"{s.p99_vs_hset:.2f}x"])
    return rows


THROUGHPUT_HEADER = ["workload", "req/s", "spread", "req/s vs HSET", "server CPU us/req",
                     "CPU vs HSET", "server busy", "client busy", "p50 ms", "p99 ms",
                     "p99 vs HSET"]


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                              for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def svg_chart(wl: list[Workload], summary) -> str:
    """Grouped bars: req/s relative to HSET (median of within-round ratios), one group per
    workload, pipelined and unpipelined side by side, with the 1.0 line and the 0.65
    target line. Hand-written SVG: no plotting library on this machine."""
    W, H, left, right, top, bottom = 900, 430, 60, 20, 50, 110
    plot_w, plot_h = W - left - right, H - top - bottom
    vmax = max(1.2, max(summary[(w.id, p)].rps_vs_hset for w in wl for p in PIPELINES))
    vmax = math.ceil(vmax * 4) / 4
    y = lambda v: top + plot_h * (1 - v / vmax)
    colors = {16: "#1f77b4", 1: "#ff7f0e"}
    group_w = plot_w / len(wl)
    bar_w = group_w * 0.34
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">'
           'Throughput relative to HSET (median of per-round ratios)</text>']
    step = 0.25 if vmax <= 2 else 0.5
    v = 0.0
    while v <= vmax + 1e-9:
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   'stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        v += step
    for i, w in enumerate(wl):
        gx = left + i * group_w + group_w * 0.16
        for j, p in enumerate(PIPELINES):
            r = summary[(w.id, p)].rps_vs_hset
            x = gx + j * bar_w
            out.append(f'<rect x="{x:.1f}" y="{y(r):.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{y(0) - y(r):.1f}" fill="{colors[p]}"><title>'
                       f'{html.escape(w.label)} -P {p}: {r:.2f}x</title></rect>')
            out.append(f'<text x="{x + bar_w / 2 - 1:.1f}" y="{y(r) - 4:.1f}" '
                       f'text-anchor="middle" font-size="11">{r:.2f}</text>')
        cx = left + (i + 0.5) * group_w
        for k, part in enumerate(textwrap.wrap(w.label, 15)):
            out.append(f'<text x="{cx:.1f}" y="{y(0) + 18 + 14 * k:.1f}" '
                       f'text-anchor="middle" font-size="11">{html.escape(part)}</text>')
    for v, label, dash in ((1.0, "HSET = 1.0", "6,3"), (0.65, "target 0.65", "2,3")):
        out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#c00" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{W - right - 4}" y="{y(v) - 4:.1f}" text-anchor="end" '
                   f'fill="#c00" font-size="11">{label}</text>')
    out.append(f'<line x1="{left}" x2="{W - right}" y1="{y(0):.1f}" y2="{y(0):.1f}" stroke="black"/>')
    lx = left + 10
    for j, p in enumerate(PIPELINES):
        text = f"-c {CLIENTS} -P {p} ({'pipelined' if p > 1 else 'unpipelined'})"
        out.append(f'<rect x="{lx + j * 260}" y="{H - 28}" width="14" height="14" '
                   f'fill="{colors[p]}"/>')
        out.append(f'<text x="{lx + j * 260 + 20}" y="{H - 16}">{text}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# =======================================================================================
# Environment description.
# =======================================================================================
def machine_info(server_binary: str, module: Path, ctl: RespClient) -> dict[str, str]:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
                                capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10)
        git = (commit.stdout.strip() if commit.returncode == 0 else "no commit yet")
        if dirty.returncode == 0 and dirty.stdout.strip():
            git += " (working tree has uncommitted changes)"
    except (OSError, subprocess.SubprocessError):
        git = "unavailable"
    server = ctl.info("server")
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": f"{platform.system()} {platform.release()}",
        "nproc": str(os.cpu_count()),
        "cpu": cpu_model,
        "redis": f"{server.get('redis_version', '?')} ({shutil.which(server_binary) or server_binary})",
        "module": str(module),
        "module_sha256": hashlib.sha256(module.read_bytes()).hexdigest()[:16],
        "git": git,
        "tb_version": ctl.info("tb").get("tb_version", "?"),
        "python": platform.python_version(),
    }


def ensure_module() -> Path:
    """The module to load: REDIS_TB_MODULE, or the release build (built if missing)."""
    env = os.environ.get("REDIS_TB_MODULE")
    if env:
        path = Path(env).resolve()
        if not path.is_file():
            raise SetupError(f"REDIS_TB_MODULE={env} does not exist")
        return path
    if not DEFAULT_MODULE.is_file():
        print(f"{DEFAULT_MODULE} missing: running cargo build --release", file=sys.stderr)
        if not shutil.which("cargo"):
            raise SetupError("cargo not found: build the module or set REDIS_TB_MODULE")
        if subprocess.run(["cargo", "build", "--release"], cwd=REPO_ROOT).returncode != 0:
            raise SetupError("cargo build --release failed")
        if not DEFAULT_MODULE.is_file():
            raise SetupError(f"cargo build --release did not produce {DEFAULT_MODULE}")
    return DEFAULT_MODULE


# =======================================================================================
# Report.
# =======================================================================================
def load_note(runs: list[dict]) -> str:
    """How much CPU everything else on the machine used during the timed runs: the one
    kind of noise that interleaving and per-round ratios cannot remove."""
    loads = [r.other_load for rnd in runs for r in rnd.values()]
    med, top = median(loads), max(loads)
    text = (f"other processes used a median of {med * 100:.0f}% of a CPU during the timed "
            f"runs (max {top * 100:.0f}%; /proc/stat busy time minus server and "
            "redis-benchmark).")
    if med > 0.05 or top > 0.3:
        text += (" The machine was not quiet: runs competed with other work for the two "
                 "cores, so req/s and latencies are depressed and noisier than usual; "
                 "server CPU per request suffers least.")
    return text


def write_report(out_dir: Path, cfg, info, pin_note, server_argv, wl, summary, runs,
                 memory, targets, bench_cmds, elapsed) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ratios.svg").write_text(svg_chart(wl, summary))
    L = ["# TB.TAKE benchmark", ""]
    if cfg.rounds < 5:
        L += [f"**Short run ({cfg.rounds} round(s), fewer than the 5 a comparison on this "
              "machine needs): a smoke test, not a measurement.**", ""]
    L += [
        f"- Date: {info['date']}; total run time {elapsed:.0f} s",
        f"- Machine: {info['host']}, nproc {info['nproc']}, CPU: {info['cpu']}",
        f"- Pinning: {pin_note}",
        f"- redis-server {info['redis']}; redis-benchmark from PATH",
        f"- Module: {info['module']} (sha256 {info['module_sha256']}…, tb_version "
        f"{info['tb_version']}); git: {info['git']}",
        f"- {cfg.rounds} rounds, interleaved (every workload once per round, in the order "
        f"below); {cfg.requests:,} requests per pipelined run, {cfg.requests_p1:,} per "
        f"unpipelined run; {cfg.keys:,} distinct keys; {CLIENTS} clients.",
        "",
        "Medians over rounds. *vs HSET* columns are the median of the ratios taken within each "
        "round (the machine is shared and noisy; per-round ratios cancel drift). *spread* is "
        "(max - min) / median of req/s over rounds. Server CPU is utime+stime of the "
        "redis-server process from /proc/<pid>/stat over the run, divided by requests "
        "(10 ms ticks; steadier than req/s here). Latencies are redis-benchmark's own "
        "(`--csv`, from its HdrHistogram). *server busy* is server CPU seconds / wall "
        "seconds of the run: near 100% means the run was bound by the server; well below "
        "means the rest of the path (client, loopback, wake-ups, the VM's scheduling) set "
        "the pace, and req/s then understates differences in server cost that *CPU vs "
        "HSET* shows. *client busy* is the same for redis-benchmark. The unpipelined p99 "
        "includes the machine's scheduling tail: compare with PING's p99, which does no "
        "work at all.",
        "",
        f"**Other load:** {load_note(runs)}",
        "",
        "![ratios](ratios.svg)",
        "",
    ]
    for p in PIPELINES:
        kind = "pipelined: the throughput comparison" if p > 1 else \
            "unpipelined: latency-bound"
        L += [f"## -c {CLIENTS} -P {p} ({kind})", "",
              md_table(THROUGHPUT_HEADER, throughput_rows(wl, summary, p)), ""]
    L += ["## Targets (from the issue)", "",
          md_table(["target", "measured", "per-round range", "required", "result"],
                   [[t.text, t.fmt.format(t.measured), t.rounds, t.threshold,
                     "**PASS**" if t.ok else "**FAIL**"] for t in targets], "lrrrl"),
          "",
          "Ratios of req/s and p99 are medians of per-round ratios; *per-round range* shows "
          "how far single rounds strayed (a target whose range straddles the threshold is "
          "a close call on this machine). Both TB.TAKE variants are held to each target. "
          f"Memory: the largest difference between the {MEMORY_PASSES} passes of any method "
          f"was {max(m.repeat_diff for m in memory):.2f} B/bucket.", ""]
    L += ["## Memory per bucket", "",
          f"{cfg.keys:,} live buckets, each made by one call of the method (the same typical "
          f"state: tokens {TYPICAL_TOKENS}, last_refill_time {FIXED_NOW} or the server "
          "clock, with a TTL except for the reference row). *used_memory delta* is INFO "
          "memory used_memory after the keyspace dicts finished rehashing and used_memory "
          "held still, minus the same after FLUSHALL, divided by the bucket count: it "
          "includes the keyspace and expires dict entries and tables. *MEMORY USAGE* is the "
          "median over 10 sample keys (`SAMPLES 0`; it does not count the expires entry). "
          f"A discarded warm-up pass of all methods runs first (on a fresh server the first "
          f"few populations read up to ~0.7 B/bucket high), then each method is measured "
          f"{MEMORY_PASSES} times; that noise only ever adds bytes, so the table shows the "
          "smallest delta and the spread between passes. `mem_clients_normal` is "
          "subtracted from used_memory (client buffers are resized by serverCron on its own "
          "schedule).", "",
          md_table(["method", "used_memory delta B/bucket", "pass-to-pass diff",
                    "MEMORY USAGE B", "vs HSET+PEXPIRE", "sample stored fields"],
                   [[m.label, f"{m.per_bucket:.2f}", f"{m.repeat_diff:.2f}", str(m.memory_usage),
                     f"{m.per_bucket / memory[0].per_bucket:.3f}x", f"`{m.sample}`"]
                    for m in memory], "lrrrrl"), ""]
    L += ["## Workloads", "",
          md_table(["workload", "command (redis-benchmark)", "keys before each run", "why"],
                   [[w.label, f"`{shlex.join(w.command)}`",
                     ("`" + " ; ".join(shlex.join(c) for c in w.populate("KEY"))
                      + "` for each key") if w.keyed() else "none", w.note]
                    for w in wl], "llll"), ""]
    L += ["## Parameters and why", "",
          f"- capacity {CAPACITY}, rate {RATE}/s, n {TAKE_N}; every key is first populated "
          f"with one take of {PREFILL_TAKE}, so the bucket is {PREFILL_TAKE} tokens short "
          f"and {int(PREFILL_TAKE) // int(RATE)} s from full. Consequences: no key expires "
          "during a run (TTL about 1000 s, while the gaps between hits on one key are "
          "seconds); no call is denied (a key sees a handful of takes per run, capacity is "
          "1e9); the server-clock variant refills only a few tokens per key during a run; "
          "and one take moves time-to-full by only 1 s, so TB.TAKE keeps the key's TTL (as "
          "for a busy limited key in production). Each run checks all of this: DBSIZE "
          "unchanged, `tb_take_denied` and `total_error_replies` unchanged, else it aborts.",
          f"- With `now` fixed ({FIXED_NOW}) no time passes for the buckets: they only "
          "drain, one token per call, hence the large capacity.",
          f"- The issue's example (capacity 1e9, rate 1, n 1) without the prefill would not work: after one take a "
          "bucket is 1 s from full, its key expires within about 2 s and the next call "
          "re-creates it (a fixed-now run would find its keys gone). A tiny rate (0.001) "
          "keeps keys alive but makes every take push time-to-full 1000 s further, past the "
          "module's TTL margin, so nearly every call re-sets and replicates the expiry: that "
          "regime is the *fresh buckets* workload, shown for information and not graded.",
          "- The Lua script (bench/token_bucket.lua) runs with the same explicit `now` as "
          "TB.TAKE (now) and was checked to give the same answers and store the same fields "
          "before timing. Unlike the module it sets the TTL on every allowed call, which is "
          "how such scripts are usually written.",
          f"- HSET (key has TTL): the keys got `PEXPIRE key {TYPICAL_TTL_MS}` when populated; "
          "HSET keeps an existing TTL, so the timed command is the same HSET on keys that "
          "have an expires entry.",
          "- Every workload starts with FLUSHALL then populates its keys on a separate "
          "connection, closed before the timed run.", ""]
    L += ["## Exact commands", "", "```",
          "# server (module copied to the temp dir first; port chosen free at start)",
          shlex.join(server_argv), "", "# timed runs (PORT as above), in this order each round"]
    L += bench_cmds
    L += ["```", "", "## Per-round raw numbers", "",
          md_table(["round", "workload", "-P", "req/s", "CPU us/req", "server busy",
                    "client busy", "other load", "p50 ms", "p99 ms", "wall s"],
                   [[str(i + 1), w.label, str(p), f"{r[(w.id, p)].rps:,.0f}",
                     f"{r[(w.id, p)].cpu_us:.2f}", f"{r[(w.id, p)].busy * 100:.0f}%",
                     f"{r[(w.id, p)].client_busy * 100:.0f}%",
                     f"{r[(w.id, p)].other_load * 100:.0f}%",
                     f"{r[(w.id, p)].p50_ms:.3f}",
                     f"{r[(w.id, p)].p99_ms:.3f}", f"{r[(w.id, p)].wall_s:.1f}"]
                    for i, r in enumerate(runs) for w in wl for p in PIPELINES], "llrrrrrrrrr"), ""]
    text = "\n".join(L)
    (out_dir / "report.md").write_text(text)
    return text


# =======================================================================================
# Main.
# =======================================================================================
@dataclass
class Config:
    rounds: int
    requests: int
    requests_p1: int
    keys: int
    out: Path


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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    a = ap.parse_args(argv)
    if a.quick:
        a.rounds, a.requests, a.requests_p1 = 1, 100_000, 20_000
    if a.rounds < 1 or a.requests < 1 or a.requests_p1 < 1 or a.keys < 1:
        ap.error("rounds, requests and keys must be positive")
    return Config(a.rounds, a.requests, a.requests_p1, a.keys, a.out)


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
        private = workdir / module.name
        shutil.copy2(module, private)
        with RedisServer(server_binary, private, workdir, server_pin) as server, \
                RespClient(server.port) as ctl:
            info = machine_info(server_binary, private, ctl)
            info["module"] = str(module)
            sha = ctl.call("SCRIPT", "LOAD", LUA_SCRIPT.read_text())
            sanity_check(ctl, sha)
            wl = workloads(sha)
            print(f"redis-server {info['redis']} on port {server.port}; {pin_note}",
                  file=sys.stderr)

            print("memory per bucket ...", file=sys.stderr)
            memory = measure_memory(ctl, server, sha, cfg.keys)

            runs: list[dict] = []
            for rnd in range(cfg.rounds):
                results = {}
                for w in wl:
                    for p in PIPELINES:
                        n = cfg.requests if p > 1 else cfg.requests_p1
                        r = run_once(ctl, server, bench_pin, w, p, n, cfg.keys)
                        results[(w.id, p)] = r
                        print(f"round {rnd + 1}/{cfg.rounds}  {w.label:<30} -P {p:<2} "
                              f"{r.rps:>10,.0f} req/s  {r.cpu_us:5.2f} us/req  "
                              f"p50 {r.p50_ms:.3f}  p99 {r.p99_ms:.3f} ms", file=sys.stderr)
                runs.append(results)
            server_argv = [a if a != str(server.port) else "PORT" for a in server.argv]
            server_argv = [("TMPDIR" + a[len(tmp):]) if a.startswith(tmp) else a
                           for a in server_argv]
            bench_cmds = [shlex.join(bench_argv(bench_pin, 0, w, p,
                                                cfg.requests if p > 1 else cfg.requests_p1,
                                                cfg.keys)).replace("-p 0 ", "-p PORT ")
                          for w in wl for p in PIPELINES]

    elapsed = time.monotonic() - started
    summary = summarise(runs, wl)
    targets = evaluate_targets(runs, memory)
    write_report(cfg.out, cfg, info, pin_note, server_argv, wl, summary, runs, memory,
                 targets, bench_cmds, elapsed)

    for p in PIPELINES:
        print(f"\n-c {CLIENTS} -P {p} (medians of {cfg.rounds} rounds)")
        print(text_table(THROUGHPUT_HEADER, throughput_rows(wl, summary, p)))
    print("\nmemory per bucket")
    print(text_table(["method", "used_memory B/bucket", "MEMORY USAGE B"],
                     [[m.label, f"{m.per_bucket:.2f}", str(m.memory_usage)] for m in memory]))
    print("\ntargets")
    print(text_table(["target", "measured", "per-round", "required", "result"],
                     [[t.text, t.fmt.format(t.measured), t.rounds, t.threshold,
                       "PASS" if t.ok else "FAIL"] for t in targets]))
    print(f"\n{load_note(runs)}")
    print(f"\nreport: {cfg.out / 'report.md'}  chart: {cfg.out / 'ratios.svg'}  "
          f"({elapsed:.0f} s)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except SetupError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        sys.exit(130)
