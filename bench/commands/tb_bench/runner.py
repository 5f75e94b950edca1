"""How a workload is run: its keys put in place, one timed redis-benchmark run with the
server's CPU time around it, and the checks that the run measured what it claims."""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from decimal import Decimal

from .common import SetupError
from .resp import RespClient, encode_batches
from .server import RedisServer
from .workloads import (CAPACITY, CLIENTS, FIXED_NOW, FIXED_NOW_MS, KEY, LOG_FRESH, LOG_LIMIT,
                        LOG_SCRIPT_ENTRIES, LOG_WINDOW, LUA_SHA, MTAKE_ROLES, PIPELINES,
                        PREFILL_TAKE, RATE, SHAPES, TAKE_N, WORKLOADS, Workload, cell,
                        log_script_prepare, lua, ms, mtake, notes_fixed, notes_log, now_minus,
                        peek, reserve, seed_lua, take, window)

BENCH_TIMEOUT_S = 300.0


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
    units: int = 1      # buckets per call (the workload's `units`)
    user_us: float = 0.0  # of cpu_us, the server's user-space part (utime; the rest is
                          # the kernel's: reads, writes, epoll on the server's behalf)

    @property
    def units_per_s(self) -> float:
        """Buckets per second."""
        return self.rps * self.units

    @property
    def cpu_us_per_unit(self) -> float:
        """Server CPU microseconds per bucket."""
        return self.cpu_us / self.units


# ---------------------------------------------------------------------------------------
# Placeholders.
# ---------------------------------------------------------------------------------------
def key_number(i: int) -> str:
    """A key number as redis-benchmark writes __rand_int__ (12 digits, zero-padded)."""
    return f"{i:012d}"


def fill(args: list[str], number: int | None = None) -> list[str]:
    """`args` with __rand_int__ replaced by one key number."""
    if number is None:
        return list(args)
    n = key_number(number)
    return [a.replace("__rand_int__", n) for a in args]


def substitute(args: list[str], shas: dict[str, str]) -> list[str]:
    """`args` with the script placeholders (__lua_sha__, __seed_sha__) replaced."""
    return [shas.get(a, a) for a in args]


def bind(wl: list[Workload], shas: dict[str, str]) -> list[Workload]:
    """The workloads with the Lua scripts' SHAs filled in."""
    sub = lambda c: substitute(c, shas) if c else c
    return [dataclasses.replace(w, command=sub(w.command), prepare=[sub(c) for c in w.prepare],
                                probe=sub(w.probe))
            for w in wl]


def missing_note(command: str, reasons: dict[str, str]) -> str:
    """Why a module command is not there: a known reason (redis-cell not built or not
    loaded), else the module lacks it."""
    return reasons.get(command) or f"the loaded module has no {command.upper()}"


def available(ctl: RespClient, wl: list, reasons: dict[str, str] | None = None
              ) -> tuple[list, list[str]]:
    """The workloads (or memory methods) whose module commands the server has, and notes on
    the rest. `reasons` explains known absences by command (lower case)."""
    known: dict[str, bool] = {}
    keep, skipped = [], []
    for w in wl:
        missing = sorted(c for c in w.module_commands()
                         if not known.setdefault(c, ctl.has_command(c)))
        if missing:
            skipped.append(f"{w.label}: " + "; ".join(dict.fromkeys(
                missing_note(m, reasons or {}) for m in missing)))
        else:
            keep.append(w)
    return keep, skipped


# ---------------------------------------------------------------------------------------
# One run.
# ---------------------------------------------------------------------------------------
def bench_argv(pin: list[str], port: int | str, w: Workload, pipeline: int, requests: int,
               keys: int) -> list[str]:
    return [*pin, "redis-benchmark", "-h", "127.0.0.1", "-p", str(port),
            "-c", str(CLIENTS), "-P", str(pipeline * w.pipeline_factor), "-n", str(requests),
            "-r", str(w.key_numbers(keys)), "--csv", *w.command]


def requests_for(w: Workload, pipeline: int, requests: int, requests_p1: int,
                 keys: int) -> int:
    """Requests of one run: the configured count for the depth, within the workload's cap
    per key (the small bucket shape's keys live only seconds)."""
    return w.requests(requests if pipeline > 1 else requests_p1, keys)


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


_batches: dict[tuple[str, int], list[tuple[bytes, int]]] = {}


def population(w: Workload, keys: int) -> list[tuple[bytes, int]]:
    """`prepare` for every key number, encoded once and reused every round."""
    cache_key = (w.id, keys)
    if cache_key not in _batches:
        _batches[cache_key] = encode_batches(
            fill(c, i) for i in range(w.key_numbers(keys)) for c in w.prepare)
    return _batches[cache_key]


def expected_keys(w: Workload, keys: int) -> int:
    return w.key_numbers(keys) * len(w.key_patterns()) if w.keyed() else 0


def prepare(ctl: RespClient, server: RedisServer, w: Workload, keys: int) -> None:
    """FLUSHALL, then `prepare` once per key number on a separate connection (closed, so
    its buffers are gone before the run)."""
    ctl.call("FLUSHALL", "SYNC")
    if not w.keyed():
        return
    with RespClient(server.port) as pop:
        errors = pop.send_batches(population(w, keys))
    if errors:
        raise SetupError(f"{w.label}: populating got {len(errors)} errors, first: {errors[0]}")
    if ctl.call("DBSIZE") != expected_keys(w, keys):
        raise SetupError(f"{w.label}: expected {expected_keys(w, keys)} keys after populating")


def denied_counts(ctl: RespClient) -> dict[str, int]:
    """Every tb_<command>_denied counter of INFO tb."""
    return {k: int(v) for k, v in ctl.info("tb").items() if k.endswith("_denied")}


def run_once(ctl: RespClient, server: RedisServer, bench_pin: list[str], w: Workload,
             pipeline: int, requests: int, keys: int) -> RunResult:
    """One timed redis-benchmark run, with checks that it measured what it claims: no
    error replies, no call of any command denied, the keyspace unchanged (nothing expired,
    nothing created), and no sampled bucket in debt (every reservation was served at once)."""
    prepare(ctl, server, w, keys)
    errors_before = int(ctl.info("stats").get("total_error_replies", 0))
    denied_before = denied_counts(ctl)
    cpu0, sys0, kids0, t0 = (server.cpu_seconds(), system_busy_seconds(),
                             children_cpu_seconds(), time.monotonic())
    user0 = server.user_seconds()
    argv = bench_argv(bench_pin, server.port, w, pipeline, requests, keys)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SetupError(f"redis-benchmark took over {BENCH_TIMEOUT_S:.0f} s: "
                         f"{shlex.join(argv)}") from None
    wall, cpu = time.monotonic() - t0, server.cpu_seconds() - cpu0
    user = server.user_seconds() - user0
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
    denied = {k: v - denied_before.get(k, 0) for k, v in denied_counts(ctl).items()}
    denied = {k: v for k, v in denied.items() if v}
    if denied:
        raise SetupError(f"{w.label}: calls were denied ({denied}); the parameters must "
                         "keep every call allowed")
    expect = expected_keys(w, keys)
    if ctl.call("DBSIZE") != expect:
        raise SetupError(f"{w.label}: keyspace changed during the run "
                         f"(expected {expect} keys): keys expired or were created")
    check_no_debt(ctl, w, keys)
    check_probe(ctl, w, keys)
    return RunResult(rps=parsed["rps"], avg_ms=parsed["avg_latency_ms"],
                     p50_ms=parsed["p50_latency_ms"], p99_ms=parsed["p99_latency_ms"],
                     cpu_us=cpu / requests * 1e6, wall_s=wall, busy=cpu / wall,
                     client_busy=client / wall, other_load=other / wall, units=w.units,
                     user_us=user / requests * 1e6)


def check_no_debt(ctl: RespClient, w: Workload, keys: int, samples: int = 10) -> None:
    """No sampled bucket holds a negative balance: every call was served from tokens that
    were there (for TB.RESERVE: admitted immediately, not by waiting)."""
    if not w.keyed():
        return
    numbers = w.key_numbers(keys)
    for i in range(0, numbers, max(1, numbers // samples)):
        for pattern in w.key_patterns():
            key = fill([pattern], i)[0]
            if ctl.call("TYPE", key) != "hash":  # redis-cell's string: checked by its probe
                continue
            value = ctl.call("HGET", key, "tokens")
            if value is not None and float(value) < 0:
                raise SetupError(f"{w.label}: {key} holds {value} tokens after the run: "
                                 "calls went into debt (waited) instead of being served")


def check_probe(ctl: RespClient, w: Workload, keys: int, samples: int = 50) -> None:
    """For commands that keep no denial count (redis-cell, the Lua scripts): no sampled
    bucket has run dry (fewer than one token, or for the notes' window scripts one
    request, left), which would mean some calls were denied and wrote nothing."""
    if not w.probe:
        return
    numbers = w.key_numbers(keys)
    for i in range(0, numbers, max(1, numbers // samples)):
        reply = ctl.call(*fill(w.probe, i))
        left = reply if w.probe_index is None else reply[w.probe_index]
        if left is None or float(left) < 1:
            raise SetupError(f"{w.label}: key number {i} has {left} left after the run "
                             f"({shlex.join(fill(w.probe, i))}): calls were denied; the "
                             "parameters must keep every call allowed")


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


def run_rounds(ctl: RespClient, server: RedisServer, bench_pin: list[str],
               wl: list[Workload], rounds: int, requests: int, requests_p1: int,
               keys: int) -> list[dict[tuple[str, int], RunResult]]:
    """Interleaved rounds: every workload at every depth once per round, in table order."""
    runs = []
    for rnd in range(rounds):
        results = {}
        for w in wl:
            for p in PIPELINES:
                r = run_once(ctl, server, bench_pin, w, p,
                             requests_for(w, p, requests, requests_p1, keys), keys)
                results[(w.id, p)] = r
                print(f"round {rnd + 1}/{rounds}  {w.label:<30} -P {p:<2} "
                      f"{r.rps:>10,.0f} req/s  {r.cpu_us:5.2f} us/req  "
                      f"p50 {r.p50_ms:.3f}  p99 {r.p99_ms:.3f} ms", file=sys.stderr)
        runs.append(results)
    return runs


# ---------------------------------------------------------------------------------------
# Like with like: before anything is timed, the compared commands must do the same thing.
# ---------------------------------------------------------------------------------------
def _same_reply(a, b) -> bool:
    if isinstance(a, list) or isinstance(b, list):
        return (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
                and all(_same_reply(x, y) for x, y in zip(a, b)))
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-12)
    except (TypeError, ValueError):
        return a == b


def _fields(ctl: RespClient, key: str) -> dict[str, str]:
    a = ctl.call("HGETALL", key)
    return dict(zip(a[::2], a[1::2]))


def sanity_check(ctl: RespClient, shas: dict[str, str], have: set[str],
                 ids: set[str]) -> list[str]:
    """The Lua script and TB.TAKE agree on a few calls (same allowed flag and remaining
    tokens, same stored fields); and, for the new commands the module has, each does on
    the benchmark's calls what TB.TAKE does: TB.MTAKE leaves each of its buckets as
    TB.TAKE leaves it and replies per key as TB.TAKE does, TB.RESERVE (tokens there)
    answers and stores as TB.TAKE, TB.PEEK answers as TB.TAKE with n = 0 and writes
    nothing. Issue 12 (the workloads in `ids`): the seed's script and TB.TAKE agree on the
    shapes' calls, and TB.THROTTLE answers them as CL.THROTTLE does. Issue 11: see
    check_windows. Returns what the checks found worth reporting."""
    sha = shas[LUA_SHA]
    ctl.call("FLUSHALL", "SYNC")
    for args in ([CAPACITY, RATE, PREFILL_TAKE, FIXED_NOW], [CAPACITY, RATE, TAKE_N, FIXED_NOW],
                 ["10", "2", "7", FIXED_NOW], ["10", "2", "5", FIXED_NOW],
                 ["10", "2", "5", "1764456270.123456"], ["10", "2", "11", FIXED_NOW]):
        tb = ctl.call("TB.TAKE", "check:tb", *args)
        lua = ctl.call("EVALSHA", sha, "1", "check:lua", *args)
        if tb[0] != lua[0] or not math.isclose(float(tb[1]), float(lua[1]), rel_tol=1e-12):
            raise SetupError(f"TB.TAKE and the Lua script disagree on {args}: {tb} vs {lua}")
    if _fields(ctl, "check:tb") != _fields(ctl, "check:lua"):
        raise SetupError("TB.TAKE and the Lua script store different fields: "
                         f"{_fields(ctl, 'check:tb')} vs {_fields(ctl, 'check:lua')}")

    ref = {role: f"check:take:{role}" for role in MTAKE_ROLES}
    last_take = {}
    for role, key in ref.items():
        ctl.call(*take(key, PREFILL_TAKE))
        last_take[role] = ctl.call(*take(key, TAKE_N))
    if "tb.mtake" in have:
        keys = [f"check:mtake:{role}" for role in MTAKE_ROLES]
        ctl.call(*mtake(keys, PREFILL_TAKE))
        reply = ctl.call(*mtake(keys, TAKE_N))
        if str(reply[0]) != "1" or len(reply) != 5 or len(reply[4]) != len(keys):
            raise SetupError(f"TB.MTAKE was not allowed or has an unexpected reply: {reply}")
        for role, key, per_key in zip(MTAKE_ROLES, keys, reply[4]):
            if not _same_reply(per_key, last_take[role]):
                raise SetupError(f"TB.MTAKE's reply for {key} {per_key} differs from "
                                 f"TB.TAKE's {last_take[role]}")
            if _fields(ctl, key) != _fields(ctl, ref[role]):
                raise SetupError(f"TB.MTAKE stores {_fields(ctl, key)} where TB.TAKE stores "
                                 f"{_fields(ctl, ref[role])}")
    if "tb.reserve" in have:
        ctl.call(*reserve("check:reserve", PREFILL_TAKE))
        reply = ctl.call(*reserve("check:reserve", TAKE_N))
        if not _same_reply(reply, last_take["a"]):
            raise SetupError(f"TB.RESERVE answers {reply} where TB.TAKE answers {last_take['a']}")
        if _fields(ctl, "check:reserve") != _fields(ctl, ref["a"]):
            raise SetupError(f"TB.RESERVE stores {_fields(ctl, 'check:reserve')} where "
                             f"TB.TAKE stores {_fields(ctl, ref['a'])}")
    if "tb.peek" in have:
        before = ctl.call("DUMP", ref["a"])
        reply = ctl.call(*peek(ref["a"]))
        query = ctl.call(*take(ref["a"], "0"))
        if not _same_reply(reply, query):
            raise SetupError(f"TB.PEEK answers {reply} where TB.TAKE with n = 0 answers {query}")
        if ctl.call("DUMP", ref["a"]) != before:
            raise SetupError("TB.PEEK changed the bucket")
    if any(i.startswith(("seed_", "lua_")) for i in ids):
        check_shape_scripts(ctl, shas)
    if "tb.throttle" in have and "cl.throttle" in have:
        check_throttle(ctl)
    notes = []
    if "tb.window" in have and any(i.startswith(("win_", "notes_")) for i in ids):
        notes = check_windows(ctl, shas)
    ctl.call("FLUSHALL", "SYNC")
    return notes


def _admitted(reply) -> bool:
    """TB.WINDOW's allowed flag, or a notes' script's 1/0."""
    return str(reply[0] if isinstance(reply, list) else reply) == "1"


def check_windows(ctl: RespClient, shas: dict[str, str]) -> list[str]:
    """Issue 11, before timing: the notes' scripts and the modes they are timed against
    decide alike where the scripts are right (INCR+EXPIRE and FIXED on one window; the
    ZSET log and LOG on requests in distinct milliseconds, including entries leaving the
    window), and the benchmark's keys hold what the report says: after the prepare and
    one timed call, FIXED's count and the INCR counter agree, LOG and the script hold
    LOG_FRESH + 1 entries (the stale ones removed), a second call adds an entry to LOG and
    none to the script (same millisecond), and the script's prepared key (ZADD) is exactly
    what the script's own calls leave. Also measures the notes' flaw (requests in one
    millisecond) for the report."""
    sub = lambda c: substitute(c, shas)
    fixed = [_admitted(ctl.call(*window("check:wf", "3", "3600", "1", FIXED_NOW, "FIXED")))
             for _ in range(4)]
    incr = [_admitted(ctl.call(*sub(notes_fixed("check:nf", "3")))) for _ in range(4)]
    if fixed != incr or fixed != [True, True, True, False]:
        raise SetupError(f"TB.WINDOW FIXED and the notes' INCR script disagree at limit 3: "
                         f"{fixed} vs {incr}")
    win_ms = str(int(LOG_WINDOW) * 1000)
    steps = [Decimal(k) / 1000 for k in (0, 1, 2, 3)] + [Decimal(61)]
    log, zset = [], []
    for step in steps:
        t = now_minus(-step)
        log.append(_admitted(ctl.call(*window("check:wl", "3", LOG_WINDOW, "1", t, "LOG"))))
        zset.append(_admitted(ctl.call(*sub(notes_log("check:nl", str(ms(t)), win_ms, "3")))))
    if log != zset or log != [True, True, True, False, True]:
        raise SetupError("TB.WINDOW LOG and the notes' ZSET script disagree on requests in "
                         f"distinct milliseconds at limit 3: {log} vs {zset}")
    same_log = sum(_admitted(ctl.call(*window("check:fl", "3", LOG_WINDOW, "1", FIXED_NOW,
                                              "LOG"))) for _ in range(5))
    same_zset = sum(_admitted(ctl.call(*sub(notes_log("check:fz", FIXED_NOW_MS, win_ms,
                                                      "3")))) for _ in range(5))
    flaw = (f"5 requests in the same millisecond at limit 3: the notes' ZSET script admitted "
            f"{same_zset} and its set holds {ctl.call('ZCARD', 'check:fz')} entry; TB.WINDOW "
            f"LOG admitted {same_log} and holds {ctl.call('ZCARD', 'check:fl')} entries")

    by_id = {w.id: w for w in WORKLOADS}
    for a, b in (("win_fixed", "notes_fixed"), ("win_log", "notes_log")):
        keys = {}
        for wid in (a, b):
            w, key = by_id[wid], f"check:bench:{wid}"
            keys[wid] = key
            for c in w.prepare:
                ctl.call(*sub([x.replace(KEY, key) for x in c]))
            if not _admitted(ctl.call(*sub([x.replace(KEY, key) for x in w.command]))):
                raise SetupError(f"{w.label}: the benchmark's first call was denied")
        if a == "win_fixed":
            counted = (ctl.call("HGET", keys[a], "count"), ctl.call("GET", keys[b]))
            if counted != (str(int(PREFILL_TAKE) + 1),) * 2:
                raise SetupError(f"TB.WINDOW FIXED and the notes' INCR script count {counted} "
                                 "after the prepare and one call")
            continue
        sizes = [ctl.call("ZCARD", keys[a]), ctl.call("ZCARD", keys[b])]
        for wid in (a, b):
            ctl.call(*sub([x.replace(KEY, keys[wid]) for x in by_id[wid].command]))
        after = [ctl.call("ZCARD", keys[a]), ctl.call("ZCARD", keys[b])]
        if sizes != [LOG_FRESH + 1] * 2 or after != [LOG_FRESH + 2, LOG_FRESH + 1]:
            raise SetupError(f"LOG and the notes' script hold {sizes} entries after the prepare "
                             f"and one call, {after} after two (expected {LOG_FRESH + 1} each, "
                             f"then {LOG_FRESH + 2} and {LOG_FRESH + 1})")
    for t in LOG_SCRIPT_ENTRIES:
        ctl.call(*sub(notes_log("check:own", str(t), win_ms, LOG_LIMIT)))
    for c in log_script_prepare("check:zadd"):
        ctl.call(*c)
    own, made = (ctl.call("ZRANGE", k, "0", "-1", "WITHSCORES")
                 for k in ("check:own", "check:zadd"))
    if own != made or not all(0 < ctl.call("TTL", k) <= int(LOG_WINDOW)
                              for k in ("check:own", "check:zadd")):
        raise SetupError("the notes' ZSET script's prepared keys differ from what its own "
                         "calls leave")
    return [flaw]


def check_shape_scripts(ctl: RespClient, shas: dict[str, str]) -> None:
    """On each shape's calls (the prefill, then takes of 1, same `now`) the design notes'
    script and TB.TAKE admit alike, leave the same whole number of tokens (the script's
    reply truncates to an integer) and store the same numbers; bench/commands/token_bucket.lua
    admits alike, leaves the same tokens and stores exactly the same fields (so its memory
    is TB.TAKE's). The waits are not compared: the module may compute them from absolute
    times (an epoch's last bit, ~2.4e-7 s, apart from the script's)."""
    for shape in SHAPES:
        keys = {k: f"check:{k}:{shape.id}" for k in ("take", "seed", "lua")}
        for n in (shape.prefill, TAKE_N, TAKE_N):
            tb = ctl.call(*take(keys["take"], n, shape.rate, FIXED_NOW, shape.capacity))
            seed = ctl.call(*substitute(seed_lua(keys["seed"], n, shape.capacity, shape.rate),
                                        shas))
            lua_ = ctl.call(*substitute(lua(keys["lua"], n, shape.capacity, shape.rate), shas))
            if str(tb[0]) != str(seed[0]) or int(float(tb[1])) != int(seed[1]):
                raise SetupError(f"TB.TAKE and the seed's script disagree on {shape.id} "
                                 f"take {n}: {tb} vs {seed}")
            if str(tb[0]) != str(lua_[0]) or not math.isclose(float(tb[1]), float(lua_[1]),
                                                              rel_tol=1e-12):
                raise SetupError(f"TB.TAKE and bench/commands/token_bucket.lua disagree on {shape.id} "
                                 f"take {n}: {tb} vs {lua_}")
        a, b = _fields(ctl, keys["take"]), _fields(ctl, keys["seed"])
        if (a.keys() != b.keys()
                or any(not math.isclose(float(a[k]), float(b[k]), rel_tol=1e-15) for k in a)):
            raise SetupError(f"TB.TAKE and the seed's script store different buckets "
                             f"({shape.id}): {a} vs {b}")
        if _fields(ctl, keys["lua"]) != a:
            raise SetupError(f"TB.TAKE and bench/commands/token_bucket.lua store different fields "
                             f"({shape.id}): {a} vs {_fields(ctl, keys['lua'])}")


def check_peer(ctl: RespClient) -> str:
    """redis-cell answers the benchmark's calls as documented: the prefill and a take of 1
    admitted, limit = max_burst + 1, remaining counted down. An empty string if so, else
    what went wrong (then it is left out, like a module that failed to load)."""
    try:
        for shape in SHAPES:
            key = f"check:cell:{shape.id}"
            first = ctl.call(*cell(key, shape, shape.prefill))
            second = ctl.call(*cell(key, shape, TAKE_N))
            cap, left = int(shape.capacity), int(shape.capacity) - int(shape.prefill)
            if (first[:4] != [0, cap, left, -1] or second[:2] != [0, cap]
                    or second[2] not in (left - 1, left) or second[3] != -1):
                return (f"CL.THROTTLE answered {first} then {second} on the {shape.id} "
                        f"bucket (expected [0, {cap}, {left}, -1, ...] then "
                        f"[0, {cap}, {left - 1}, -1, ...])")
        return ""
    except Exception as e:  # an error reply or a dead connection: no usable peer
        return f"CL.THROTTLE failed on the benchmark's calls: {e}"
    finally:
        try:
            ctl.call("FLUSHALL", "SYNC")
        except Exception:
            pass


def check_throttle(ctl: RespClient) -> None:
    """TB.THROTTLE answers each shape's calls (the prefill, then takes of 1) as redis-cell's
    CL.THROTTLE does: limited, limit and retry_after equal; remaining and reset_after
    (whole seconds, on the server clock, the two calls a moment apart) within 1."""
    for shape in SHAPES:
        for n in (shape.prefill, TAKE_N, TAKE_N):
            ours = ctl.call(*cell(f"check:throttle:{shape.id}", shape, n, "TB.THROTTLE"))
            peer = ctl.call(*cell(f"check:cell:{shape.id}", shape, n))
            if (not isinstance(ours, list) or len(ours) != 5 or ours[0] != peer[0]
                    or ours[1] != peer[1] or ours[3] != peer[3]
                    or abs(ours[2] - peer[2]) > 1 or abs(ours[4] - peer[4]) > 1):
                raise SetupError(f"TB.THROTTLE answers {ours} where CL.THROTTLE answers "
                                 f"{peer} ({shape.id} bucket, quantity {n})")


def bench_commands(bench_pin: list[str], wl: list[Workload], requests: int, requests_p1: int,
                   keys: int) -> list[str]:
    """The timed runs as shell commands (PORT stands for the server's port)."""
    return [shlex.join(bench_argv(bench_pin, "PORT", w, p,
                                  requests_for(w, p, requests, requests_p1, keys), keys))
            for w in wl for p in PIPELINES]
