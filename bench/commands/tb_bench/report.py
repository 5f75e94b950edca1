"""The report (bench/results/report.md), the chart (ratios.svg) and the console summary."""

from __future__ import annotations

import html
import math
import shlex
import textwrap
from pathlib import Path

from .memory import MEMORY_PASSES, MemoryResult
from .peer import Peer
from .stats import Runs, Summary, Target, load_note, median, peer_ratios, round_ratio
from .workloads import (CAPACITY, CLIENTS, FIXED_NOW, FIXED_NOW_MS, KEY, LOG_FRESH,
                        LOG_FRESH_AT, LOG_LIMIT, LOG_MAX_CALLS_PER_KEY, LOG_STALE,
                        LOG_STALE_AT, LOG_WINDOW, MEMORY_METHODS, MTAKE_ROLES, PIPELINES,
                        PREFILL_TAKE, RATE, RESERVE_MAX_WAIT, SHAPES, TAKE_N, TYPICAL_TOKENS,
                        TYPICAL_TTL_MS, WIN_LONG, WIN_PREFILL, WINDOW_LOG_KEYS, WORKLOADS,
                        MEMORY_BASELINE, Shape, Workload)

THROUGHPUT_HEADER = ["workload", "req/s", "spread", "req/s vs HSET", "server CPU us/req",
                     "CPU vs HSET", "server busy", "client busy", "p50 ms", "p99 ms",
                     "p99 vs HSET"]
PEER_HEADER = ["workload", "compared with", "buckets/call", "buckets/s", "its buckets/s",
               "buckets/s ratio", "server CPU us/bucket", "its CPU us/bucket",
               "CPU/bucket ratio"]
TARGET_HEADER = ["target", "measured", "per-round range", "required", "result",
                 "server CPU us/call (this vs that)"]
SIDE_HEADER = ["workload", "req/s -P 16", "vs redis-cell", "vs HSET", "server CPU us/call",
               "CPU vs redis-cell", "CPU vs HSET", "p99 ms -P 16", "p99 ms -P 1",
               "p99 -P 1 vs HSET", "B/key (used_memory)", "MEMORY USAGE B"]
WINDOW_HEADER = ["workload", "req/s -P 16", "vs TB.TAKE", "vs INCR+EXPIRE script",
                 "vs ZSET log script", "server CPU us/call", "CPU vs TB.TAKE",
                 "CPU vs ZSET log script", "p99 ms -P 16", "req/s -P 1", "p99 ms -P 1"]
WINDOW_MEMORY_HEADER = ["method", "limit", "state", "keys", "used_memory delta B/key",
                        "pass-to-pass diff", "MEMORY USAGE B", "vs TB.TAKE, same limit",
                        "sample"]
WINDOW_MEMORY_LABELS = {m.label for m in MEMORY_METHODS if m.suite == "issue11"}
# Issue 11's table, in this order; each TB.WINDOW row against TB.TAKE on the same clock.
WINDOW_ORDER = ["tb_now", "tb_clock", "win_fixed", "notes_fixed", "win_sliding",
                "win_sliding_clock", "win_log", "win_log_clock", "notes_log"]
WINDOW_TAKE = {"win_fixed": "tb_now", "win_sliding": "tb_now", "win_log": "tb_now",
               "notes_fixed": "tb_now", "notes_log": "tb_now",
               "win_sliding_clock": "tb_clock", "win_log_clock": "tb_clock"}


def md_table(header: list[str], rows: list[list[str]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                              for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def throughput_rows(wl: list[Workload], summary: dict[tuple[str, int], Summary],
                    p: int) -> list[list[str]]:
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


def peer_rows(runs: Runs, wl: list[Workload], summary: dict[tuple[str, int], Summary],
              p: int) -> list[list[str]]:
    rows = []
    for pr in peer_ratios(runs, wl, p):
        s, o = summary[(pr.workload.id, p)], summary[(pr.peer.id, p)]
        rows.append([pr.workload.label, pr.peer.label, str(pr.workload.units),
                     f"{s.units_per_s:,.0f}", f"{o.units_per_s:,.0f}",
                     f"{pr.units_per_s:.2f}x", f"{s.cpu_us_per_unit:.2f}",
                     f"{o.cpu_us_per_unit:.2f}", f"{pr.cpu_per_unit:.2f}x"])
    return rows


def target_rows(targets: list[Target], bold: bool) -> list[list[str]]:
    mark = (lambda v: f"**{v}**") if bold else (lambda v: v)
    return [[t.text, t.fmt.format(t.measured) if t.ran else "-", t.rounds, t.threshold,
             mark(t.verdict), t.cpu] for t in targets]


def chart_label(w: Workload) -> str:
    return w.label + (" per bucket" if w.units > 1 else "")


def svg_chart(wl: list[Workload], summary: dict[tuple[str, int], Summary]) -> str:
    """Grouped bars: throughput relative to HSET (median of within-round ratios; buckets
    per second for a workload serving several buckets per call), one group per workload,
    pipelined and unpipelined side by side, with the 1.0 line and the 0.65 target line.
    Hand-written SVG: no plotting library on this machine."""
    left, right, top, bottom = 60, 20, 50, 110
    W, H = max(900, left + right + 86 * len(wl)), 430
    plot_w, plot_h = W - left - right, H - top - bottom
    vmax = max(1.2, max(summary[(w.id, p)].units_vs_hset for w in wl for p in PIPELINES))
    vmax = math.ceil(vmax * 4) / 4
    y = lambda v: top + plot_h * (1 - v / vmax)
    colors = {16: "#1f77b4", 1: "#ff7f0e"}
    group_w = plot_w / len(wl)
    bar_w = group_w * 0.34
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">'
           'Throughput relative to HSET (median of per-round ratios; TB.MTAKE in buckets/s)'
           '</text>']
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
            r = summary[(w.id, p)].units_vs_hset
            x = gx + j * bar_w
            out.append(f'<rect x="{x:.1f}" y="{y(r):.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{y(0) - y(r):.1f}" fill="{colors[p]}"><title>'
                       f'{html.escape(chart_label(w))} -P {p}: {r:.2f}x</title></rect>')
            out.append(f'<text x="{x + bar_w / 2 - 1:.1f}" y="{y(r) - 4:.1f}" '
                       f'text-anchor="middle" font-size="11">{r:.2f}</text>')
        cx = left + (i + 0.5) * group_w
        for k, part in enumerate(textwrap.wrap(chart_label(w), 15)):
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


def keys_text(w: Workload, keys: int) -> str:
    """How a workload's keys are put in place, for the Workloads table."""
    if not w.keyed():
        return "none"
    show = lambda c: shlex.join(c).replace(KEY, "KEY")
    text = "`" + " ; ".join(show(c) for c in w.prepare) + "`"
    patterns = len(w.key_patterns())
    if patterns == 1:
        return text + " for each key"
    numbers = w.key_numbers(keys)
    return (text + f" for each of {numbers:,} key numbers (KEY = tb:N, N < {numbers:,}): "
            f"{numbers * patterns:,} keys")


def new_command_notes(wl: list[Workload], keys: int) -> list[str]:
    """The parameters of the issue-10 workloads that ran, and why."""
    ids = {w.id for w in wl}
    notes = []
    if "mtake" in ids:
        notes.append(
            f"- TB.MTAKE (3 keys): one (capacity, rate, n) triple per key, all as TB.TAKE "
            f"(now)'s, keys `tb:N:{'`, `tb:N:'.join(MTAKE_ROLES)}`. redis-benchmark replaces "
            "each `__rand_int__` of a command with its own random number (checked with "
            "MONITOR on 7.0), so a call takes from three independent random buckets, as "
            "three TB.TAKE calls would (no hash tag: the three numbers differ, so a shared "
            "tag would not mean a shared slot). Every keyed workload holds the same number "
            f"of live keys: TB.MTAKE gets {keys:,}/{len(MTAKE_ROLES)} key numbers per role, "
            f"rounded up (`-r {-(-keys // len(MTAKE_ROLES))}`). Before timing, TB.MTAKE was "
            "checked to reply per key and store exactly what three TB.TAKE (now) calls do.")
    if "reserve" in ids:
        notes.append(
            f"- TB.RESERVE: max_wait {RESERVE_MAX_WAIT} s, on buckets prepared like TB.TAKE "
            "(now)'s (one reservation of 1000): with ~1e9 tokens in every bucket each call "
            "is admitted immediately (wait 0, the balance never goes negative; sampled "
            "after each run), i.e. this measures RESERVE's common path against TB.TAKE's. "
            "It was checked to answer and store as TB.TAKE does.")
    if "peek" in ids:
        notes.append(
            "- TB.PEEK reads the buckets TB.TAKE (now) leaves (prepared by TB.TAKE, since a "
            "peek writes nothing) and was checked to answer as TB.TAKE with n = 0 and leave "
            "the bucket byte-identical.")
    return notes


def peer_text(cell: Peer, module_ver: str | None, problem: str) -> str:
    """One line on redis-cell for the report: which one ran, or why none did."""
    if problem:
        return f"redis-cell {cell.version}: NOT MEASURED: {problem}"
    return (f"redis-cell {cell.version} (the crate's version; MODULE LIST ver {module_ver}), "
            f"{cell.how}; loaded in the same server, after the module")


def side_rows(runs: Runs, wl: list[Workload], summary: dict[tuple[str, int], Summary],
              memory: list[MemoryResult], shape: Shape) -> list[list[str]]:
    """Issue 12: one shape's workloads with HSET, against redis-cell."""
    ids = {w.id for w in wl}
    cell = f"cell_{shape.id}"
    mem = {m.label: m for m in memory}
    rows = []
    for w in [x for x in wl if x.id == "hset" or x.shape == shape.id]:
        s16, s1 = summary[(w.id, 16)], summary[(w.id, 1)]
        vs = lambda attr: (f"{round_ratio(runs, w.id, cell, 16, attr):.2f}x"
                           if cell in ids else "-")
        label, m = w.label, mem.get(w.label)
        if w.id == "hset":
            label, m = f"HSET (memory: {MEMORY_BASELINE})", mem.get(MEMORY_BASELINE)
        elif w.id.startswith("lua_"):  # stores what TB.TAKE (now) stores (checked)
            m = mem.get(w.label.replace("Lua EVALSHA (now)", "TB.TAKE (now)"))
        rows.append([label, f"{s16.rps:,.0f}", vs("rps"), f"{s16.rps_vs_hset:.2f}x",
                     f"{s16.cpu_us:.2f}", vs("cpu_us"), f"{s16.cpu_vs_hset:.2f}x",
                     f"{s16.p99_ms:.3f}", f"{s1.p99_ms:.3f}", f"{s1.p99_vs_hset:.2f}x",
                     f"{m.per_bucket:.2f}" if m else "-", str(m.memory_usage) if m else "-"])
    return rows


def side_by_side(cfg, info, runs, wl, summary, memory, skipped) -> list[str]:
    """The issue-12 section: redis-cell, TB.THROTTLE, TB.TAKE on both clocks and the two
    Lua scripts, per bucket shape."""
    shapes = [sh for sh in SHAPES if any(w.shape == sh.id for w in wl)]
    issue12 = {w.label for w in WORKLOADS if w.suite == "issue12"}
    missing = [n for n in skipped if n.split(":", 1)[0] in issue12]
    if not shapes and not missing:
        return []
    L = ["## redis-cell side by side (issue 12)", "",
         f"- Peer: {info.get('redis_cell', 'redis-cell not requested')}. 0.5.0 is the "
         "current release (the crate registry's newest, 0.2.2 of 2018, is slower and "
         "replicates nothing). 0.5.0 replicates every call verbatim "
         "(RedisModule_ReplicateVerbatim: the command as sent, recomputed by replicas on "
         "their own clock) and keeps one string per key; TB.* replicates its exact effects "
         "(HSET, and PEXPIREAT when the expiry moves) into a hash. What else 0.5.0 does "
         "differently is in bench/results/redis-cell-0.5.0.md (bench/commands/cell_facts.py).",
         "- One server holds both modules; every workload below runs in the same "
         "interleaved rounds as the rest, at -c 50 and -P 16 and -P 1. *vs redis-cell* "
         "and *CPU vs redis-cell* are medians of per-round ratios against CL.THROTTLE on "
         "the same shape (req/s: above 1 is faster; CPU: below 1 is cheaper).",
         "- The same bucket for every command: capacity C refilling r/s is `TB.TAKE key C "
         "r 1 [now]`, the scripts' `(C, r, 1, now)`, and `CL.THROTTLE` / `TB.THROTTLE key "
         "C-1 count period 1` with count / period = r. redis-cell, TB.THROTTLE and TB.TAKE "
         "(server clock) use the server clock; TB.TAKE (now) and both scripts are given "
         f"the same fixed `now` ({FIXED_NOW}).",
         "- The seed's own script is the design notes' own script, read from ../shared/seeds/000_*.txt at run time (never copied into the repository): "
         "HMGET, HMSET of Lua numbers, EXPIRE on every allowed call, an integer "
         "reply; *Lua EVALSHA (now)* is bench/commands/token_bucket.lua, the heavier script with "
         "TB.TAKE's exact semantics. Before timing, the seed's script and TB.TAKE (now) "
         "were checked to admit alike and store the same numbers on each shape's calls"
         + (", and TB.THROTTLE to answer them as CL.THROTTLE does." if any(
             w.id.startswith("throttle_") for w in wl) and any(
             w.id.startswith("cell_") for w in wl) else "."),
         "- Keys: each is prepared by one call of its own command taking the prefill "
         "below, so every method holds the same bucket in its own format; every timed "
         "call takes 1 and must be admitted. Checked after every run: DBSIZE unchanged (no "
         "key expired or was created), INFO tb's denial counters unchanged, and for "
         "commands without such a counter (redis-cell, the scripts) a sample of 50 buckets "
         "each still holding at least one token (`CL.THROTTLE key ... 0`, `HGET key "
         "tokens`); otherwise the run aborts.",
         "- The target *TB.TAKE within 5% of the floor* is measured by `make bench-floor` "
         "(bench/floor/run.sh: TB.TAKE against a build that keeps only its module API "
         "calls), not here; if the floor itself sits below 1.2x redis-cell on a shape, "
         "that run is the evidence.", ""]
    if missing:
        L += ["**Not measured:** " + "; ".join(missing) + ".", ""]
    for sh in shapes:
        pre = int(sh.prefill)
        left = int(sh.capacity) - pre
        first = next(w for w in wl if w.shape == sh.id)
        cap = (f" Runs send at most {sh.max_calls_per_key:g} requests per key "
               f"({first.requests(cfg.requests, cfg.keys):,} per pipelined run here, "
               f"{first.requests(cfg.requests_p1, cfg.keys):,} unpipelined), so that "
               "populating and the run end well within the keys' lifetime, and the "
               "prefill leaves tokens for every call with a fixed `now`."
               if sh.max_calls_per_key else "")
        L += [f"### {sh.title[0].upper() + sh.title[1:]}", "",
              f"`CL.THROTTLE key {sh.max_burst} {sh.count} {sh.period} 1`, `TB.TAKE key "
              f"{sh.capacity} {sh.rate} 1 [now]`. Prefill: one call taking {pre:,} tokens "
              f"per key, leaving {left:,} tokens, {pre / float(sh.rate):,.10g} s from "
              f"full.{cap} *Lua EVALSHA (now)* stores exactly what TB.TAKE (now) stores "
              "(checked before timing), so its memory is TB.TAKE (now)'s; HSET's is that of "
              f"the same bucket written by HSET + PEXPIRE.", "",
              md_table(SIDE_HEADER, side_rows(runs, wl, summary, memory, sh)), ""]
    return L


def window_rows(runs: Runs, wl: list[Workload],
                summary: dict[tuple[str, int], Summary]) -> list[list[str]]:
    """Issue 11: TB.TAKE, the three modes and the notes' two scripts, at -P 16 (and the
    unpipelined req/s and p99)."""
    ids = {w.id for w in wl}
    by_id = {w.id: w for w in wl}
    rows = []
    for wid in [i for i in WINDOW_ORDER if i in ids]:
        s16, s1 = summary[(wid, 16)], summary[(wid, 1)]
        vs = lambda other, attr="rps": (f"{round_ratio(runs, wid, other, 16, attr):.2f}x"
                                        if other in ids and other != wid else "-")
        take = WINDOW_TAKE.get(wid, "")
        rows.append([by_id[wid].label, f"{s16.rps:,.0f}", vs(take), vs("notes_fixed"),
                     vs("notes_log"), f"{s16.cpu_us:.2f}", vs(take, "cpu_us"),
                     vs("notes_log", "cpu_us"), f"{s16.p99_ms:.3f}", f"{s1.rps:,.0f}",
                     f"{s1.p99_ms:.3f}"])
    return rows


def window_memory_rows(memory: list[MemoryResult]) -> list[list[str]]:
    """Issue 11's memory per key, with TB.TAKE's bucket at the same limit beside."""
    methods = {m.label: m for m in MEMORY_METHODS if m.suite == "issue11"}
    by_label = {m.label: m for m in memory}
    rows = []
    for r in memory:
        m = methods.get(r.label)
        if m is None:
            continue
        take = (by_label.get(f"TB.TAKE (now), capacity {int(m.limit):,}")
                if m.limit.isdigit() else None)
        x = r.per_bucket / take.per_bucket if take else None
        ratio = "-" if x is None else f"{x:,.0f}x" if x >= 100 else f"{x:.2f}x"
        limit = f"{int(m.limit):,}" if m.limit.isdigit() else m.limit
        rows.append([r.label, limit, m.state, f"{r.keys:,}", f"{r.per_bucket:,.2f}",
                     f"{r.repeat_diff:.2f}", f"{r.memory_usage:,}", ratio,
                     f"`{textwrap.shorten(r.sample, 90)}`"])
    return rows


def window_section(cfg, info, runs, wl, summary, skipped) -> list[str]:
    """The issue-11 section: TB.WINDOW's modes against the notes' scripts and TB.TAKE."""
    issue11 = {w.label for w in WORKLOADS if w.suite == "issue11"}
    missing = [n for n in skipped if n.split(":", 1)[0] in issue11]
    if not any(w.suite == "issue11" for w in wl) and not missing:
        return []
    by_id = {w.id: w for w in WORKLOADS}
    per_run = lambda r: by_id["win_log"].requests(r, cfg.keys)
    log_p16, log_p1 = per_run(cfg.requests), per_run(cfg.requests_p1)
    numbers = by_id["win_log"].key_numbers(cfg.keys)
    L = ["## TB.WINDOW side by side (issue 11)", "",
         "- Every workload below runs in the same interleaved rounds as the rest, at -c 50 "
         "and -P 16 and -P 1. *vs TB.TAKE* is the median of per-round req/s ratios against "
         "TB.TAKE on the same clock (the core suite's TB.TAKE (now) and TB.TAKE (server "
         "clock) workloads: capacity 1e9, 1000 taken, n 1); *vs INCR+EXPIRE script* and "
         "*vs ZSET log script* against the notes' two scripts; CPU ratios likewise (below 1: "
         "cheaper for the server). Memory per key is in the memory section below.",
         f"- **FIXED and SLIDING**: `TB.WINDOW key {CAPACITY} {WIN_LONG} 1 [now] "
         f"FIXED|SLIDING`, every key prepared by one call counting {int(WIN_PREFILL):,} "
         "requests (a busy key of an hourly quota that no run can exhaust: every call is "
         "admitted). A timed call counts 1 and rewrites one field (`count`), as TB.TAKE "
         f"(now) rewrites `tokens`. With `now` fixed ({FIXED_NOW}) the window is "
         "[1764453600, 1764457200): FIXED keys live 932 s, SLIDING keys 4532 s. SLIDING also "
         "runs on the server clock (its key lives at least a window, so nothing can expire "
         "mid-run; the previous window's count is then 0). FIXED runs with `now` only: its "
         "key expires with its window, and a run on the server clock that straddled the top "
         "of an hour would lose keys mid-run.",
         f"- **The notes' INCR+EXPIRE** (bench/commands/window_fixed.lua, `EVALSHA sha 1 key "
         f"{CAPACITY} {WIN_LONG}`): the window is part of the key name in the notes "
         "(rate:{user}:{window}), so with one window per run the key is just tb:N. Prepared "
         f"by the script's first call (count 1, EXPIRE {WIN_LONG}) and `INCRBY key "
         f"{int(WIN_PREFILL) - 1}`: the same count as FIXED's keys; each timed call is one "
         "INCR (EXPIRE only on a first hit).",
         f"- **LOG** (`TB.WINDOW key {LOG_LIMIT} {LOG_WINDOW} 1 {FIXED_NOW} LOG`) and **the "
         f"notes' ZSET log** (the notes' own script, read from ../shared/seeds/002_*.txt, `EVALSHA sha 1 key {FIXED_NOW_MS} "
         f"{int(LOG_WINDOW) * 1000} {LOG_LIMIT}`, the same instant in ms): the notes' own "
         f"example, limit {LOG_LIMIT} per {LOG_WINDOW} s. Every key starts with {LOG_STALE} "
         f"entries older than the window and {LOG_FRESH} inside it (LOG: one call of "
         f"{LOG_STALE} at {LOG_STALE_AT} and one of {LOG_FRESH} at {LOG_FRESH_AT}; the "
         "script: the same instants at distinct milliseconds, written by ZADD + EXPIRE "
         f"{LOG_WINDOW}, checked to be exactly what the script's own calls leave). All timed "
         "calls are at the same fixed instant, so what is measured is: a key's first call "
         f"in a run removes its {LOG_STALE} stale entries and adds one; every later call "
         "adds one more. LOG adds a new member at the same score each time (`<now>-k`); the "
         "script's member is the timestamp, already there, so its ZADD changes nothing and "
         f"its set stays at {LOG_FRESH + 1} entries (the notes' flaw: it makes the script's "
         "calls cheaper than with distinct timestamps, so the ratio is conservative for "
         f"LOG). Runs send at most {LOG_MAX_CALLS_PER_KEY:g} requests per key: here "
         f"{log_p16:,} pipelined and {log_p1:,} unpipelined over {numbers:,} keys, "
         f"{log_p16 / numbers:.1f} and {log_p1 / numbers:.1f} calls per key on average "
         "(redis-benchmark draws each call's key uniformly, so the calls per key are "
         "Poisson: the busiest of 100,000 keys sees about 17 at 5 per key, 27 at 10), so a "
         f"log never nears {LOG_LIMIT} entries and no call is denied. At the default 500,000 "
         "requests (5 calls per key) a pipelined run removes on average one entry per entry "
         "added, as a log in steady state does, but all of it in the key's first call; the "
         "fewer calls per key, the larger the share of first calls (unpipelined, most calls "
         f"are). The keys live {LOG_WINDOW} s after the prepare, far longer than a run."
         f"- **LOG (server clock)**, informational: {LOG_FRESH} entries per key at one "
         "instant, each timed call adds one at its own microsecond; nothing is removed (a "
         f"{LOG_WINDOW} s window outlives the run, and the module cannot be given stale "
         "entries after fresh ones: a `now` behind the log records at its newest).",
         "- Checked before timing: the INCR script and FIXED admit alike at limit 3; the "
         "ZSET script and LOG admit alike on requests in distinct milliseconds, entries "
         "leaving the window included; the prepared keys hold what is said above after one "
         "and two timed calls. Checked after every run: DBSIZE unchanged, INFO tb's "
         "`tb_window_denied` unchanged, and for the scripts a sample of 50 keys each with "
         "at least one request left (limit - INCR counter, limit - ZCARD).",
         *[f"- The notes' flaw, measured before timing: {n}." for n in
           info.get("window_checks", [])],
         ""]
    if missing:
        L += ["**Not measured:** " + "; ".join(missing) + ".", ""]
    if any(w.suite == "issue11" for w in wl):
        L += [md_table(WINDOW_HEADER, window_rows(runs, wl, summary)), ""]
    return L


def layered_section(runs: Runs, wl: list[Workload],
                    summary: dict[tuple[str, int], Summary]) -> list[str]:
    """Issue 18: a request checked against three buckets, by one TB.MTAKE or three
    CL.THROTTLE calls (one round trip, three round trips), per request."""
    rows_wl = [w for w in wl if w.suite == "layered"]
    if not rows_wl:
        return []
    ids = {w.id for w in rows_wl}
    per = len(MTAKE_ROLES)  # buckets per request
    rows = []
    for w in rows_wl:
        row = [w.label]
        for p in PIPELINES:
            s = summary[(w.id, p)]
            user = median([r[(w.id, p)].user_us / w.units for r in runs]) * per
            if "layer_mtake" in ids and w.id != "layer_mtake":
                vs_r = f"{round_ratio(runs, 'layer_mtake', w.id, p, 'units_per_s'):.2f}x"
                vs_c = f"{round_ratio(runs, 'layer_mtake', w.id, p, 'cpu_us_per_unit'):.2f}x"
            else:
                vs_r = vs_c = "-"
            row += [f"-P {p * w.pipeline_factor}", f"{s.units_per_s / per:,.0f}", vs_r,
                    f"{s.cpu_us_per_unit * per:.2f}", f"{user:.2f}", vs_c]
        rows.append(row)
    header = ["workload"]
    for p in PIPELINES:
        header += [f"sent at (-P {p} requests)", f"requests/s (-P {p})",
                   f"TB.MTAKE req/s ratio (-P {p})", f"server CPU us/request (-P {p})",
                   f"of it user (-P {p})", f"TB.MTAKE CPU ratio (-P {p})"]
    return ["## Layered limits: one TB.MTAKE or three CL.THROTTLE (issue 18)", "",
            "A request checked against three buckets (1,000,000 at 0.001/s each, 1,000 "
            "taken when prepared; server clock): one TB.MTAKE over the three, or three "
            "CL.THROTTLE calls (redis-cell) sent together in one round trip, or one after "
            "another in three. *requests/s* is buckets/s / 3, *server CPU us/request* is "
            "server CPU per bucket x 3 (of it *user*: the server's utime, the rest is the "
            "kernel's work for it: reads, writes, epoll). *TB.MTAKE ... ratio* is TB.MTAKE's "
            "figure over the row's, median of per-round ratios (req/s: above 1, TB.MTAKE "
            "serves more requests; CPU: below 1, TB.MTAKE costs the server less). At -P 16 "
            "both CL.THROTTLE rows put 16 requests' worth of calls in flight per "
            "connection (48 and 16 calls): only at -P 1 do round trips differ. Three "
            "CL.THROTTLE calls are not all-or-nothing: a refusal by the third leaves the "
            "first two taken (TB.MTAKE takes from none unless all allow).", "",
            md_table(header, rows), ""]


def write_report(out_dir: Path, cfg, info, pin_note, server_argv, wl, summary, runs,
                 memory: list[MemoryResult], targets: list[Target], bench_cmds, elapsed,
                 skipped: list[str]) -> str:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ratios.svg").write_text(svg_chart(wl, summary))
    L = ["# TB.TAKE benchmark", ""]
    if cfg.rounds < 5:
        L += [f"**Short run ({cfg.rounds} round(s), fewer than the 5 a comparison on this "
              "machine needs): a smoke test, not a measurement.**", ""]
    if skipped:
        L += ["**Not measured** (their targets read NOT RUN): " + "; ".join(skipped) + ".", ""]
    L += [
        f"- Date: {info['date']}; total run time {elapsed:.0f} s",
        f"- Machine: {info['host']}, nproc {info['nproc']}, CPU: {info['cpu']}",
        f"- Pinning: {pin_note}",
        f"- redis-server {info['redis']}; redis-benchmark from PATH",
        f"- Module: {info['module']} (sha256 {info['module_sha256']}…, tb_version "
        f"{info['tb_version']}); git: {info['git']}",
        f"- {cfg.rounds} rounds, interleaved (every workload once per round, in the order "
        f"below); {cfg.requests:,} requests per pipelined run (fewer for the small bucket "
        f"shape of issue 12, and for issue 11's logs beyond {LOG_MAX_CALLS_PER_KEY:g} per "
        f"key; see there), {cfg.requests_p1:,} per unpipelined run; "
        f"{cfg.keys:,} distinct keys; {CLIENTS} clients. Suites: {', '.join(cfg.suites)}"
        + (f"; only {', '.join(cfg.only)}" if cfg.only else "") + ".",
        *([f"- Peer: {info['redis_cell']}"] if "redis_cell" in info else []),
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
        "work at all. In these two tables a request is one call, whatever it serves "
        "(TB.MTAKE: three buckets); the chart and the next section count buckets.",
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
    L += ["## Per bucket, against each workload's peers", "",
          "Each workload against the ones it is declared to be compared with, counted in "
          "buckets: *buckets/s* is req/s x buckets per call, *server CPU us/bucket* is CPU "
          "per call / buckets per call. TB.TAKE and the Lua script serve one bucket per "
          "call, so against TB.MTAKE (3 keys) their rows stand for serving a 3-bucket "
          "request as three TB.TAKE calls (pipelined at -P 16) or as three EVALSHA of "
          "bench/commands/token_bucket.lua in a row (the notes' way). Ratios are medians of "
          "per-round ratios (row / peer): above 1 for buckets/s and below 1 for CPU per "
          "bucket mean the row beats its peer.", ""]
    for p in PIPELINES:
        rows = peer_rows(runs, wl, summary, p)
        if rows:
            L += [f"### -P {p}", "", md_table(PEER_HEADER, rows, "llrrrrrrr"), ""]
    L += side_by_side(cfg, info, runs, wl, summary, memory, skipped)
    L += window_section(cfg, info, runs, wl, summary, skipped)
    L += layered_section(runs, wl, summary)
    windows = WINDOW_MEMORY_LABELS
    window_diffs = [m.repeat_diff / m.per_bucket for m in memory if m.label in windows]
    L += ["## Targets (from the issue)", "",
          md_table(TARGET_HEADER, target_rows(targets, bold=True), "lrrrlr"),
          "",
          "Ratios of req/s and p99 are medians of per-round ratios; *per-round range* shows "
          "how far single rounds strayed (a target whose range straddles the threshold is "
          "a close call on this machine). Both TB.TAKE variants are held to each TB.TAKE "
          "target; the new commands (issue 10) are measured with an explicit `now` and "
          "held against TB.TAKE (now) and the Lua script, which are given the same `now`. "
          "*server CPU us/call* shows, for each throughput target, the medians of server "
          "CPU per call of the two workloads compared and the median of their per-round "
          "ratio (below 1: the first costs the server less). "
          f"Memory: the largest difference between the {MEMORY_PASSES} passes of any method "
          f"was {max(m.repeat_diff for m in memory if m.label not in windows):.2f} B/bucket"
          + (f"; of issue 11's keys, {max(window_diffs) * 100:.2f}% of a key"
             if window_diffs else "") + ".", ""]
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
          "schedule). Issue 12's rows (each workload's own prepared key, per shape: "
          "tokens and time differ from the typical state above) are measured after the "
          "others, as a group of their own with the same measured passes (and no second "
          "warm-up pass when the others ran first), so they cannot move the graded rows.", "",
          md_table(["method", "used_memory delta B/bucket", "pass-to-pass diff",
                    "MEMORY USAGE B", "vs HSET+PEXPIRE", "sample stored fields"],
                   [[m.label, f"{m.per_bucket:.2f}", f"{m.repeat_diff:.2f}", str(m.memory_usage),
                     f"{m.per_bucket / memory[0].per_bucket:.3f}x", f"`{m.sample}`"]
                    for m in memory if m.label not in WINDOW_MEMORY_LABELS], "lrrrrl"), ""]
    window_memory = window_memory_rows(memory)
    if window_memory:
        L += ["### TB.WINDOW per key (issue 11)", "",
              "Each mode at limit 100 and 10,000 beside TB.TAKE holding the same quota as a "
              f"bucket (capacity = limit, refilling limit per {WIN_LONG} s, half of it taken) "
              "and the notes' two scripts, all at the fixed `now` with a "
              f"{WIN_LONG} s window (nothing expires while measured), measured as above, as "
              "a group of their own after the others. FIXED holds the count of a window used "
              "up; SLIDING half the limit in the previous window and half in the current one "
              "(both counts set); a full log holds `limit` entries made by `limit` calls "
              "one millisecond apart (as requests arriving over time leave it: LOG's scores "
              "are whole microseconds and its members `<score>-<k>`, the script's both the "
              "time in ms), over fewer keys "
              f"({', '.join(f'{int(k):,} at limit {int(l):,}' for l, k in WINDOW_LOG_KEYS.items())}"
              ") so populating stays quick. A sorted set of up to 128 entries is a listpack, "
              "beyond that a skiplist with a dict (Redis' defaults). *vs TB.TAKE* divides by "
              "TB.TAKE's used_memory delta at the same limit.", "",
              md_table(WINDOW_MEMORY_HEADER, window_memory, "llllrrrrl"), ""]
    labels = {w.id: w.label for w in wl}
    L += ["## Workloads", "",
          md_table(["workload", "command (redis-benchmark)", "keys before each run",
                    "compared with", "why"],
                   [[w.label, f"`{shlex.join(w.command)}`", keys_text(w, cfg.keys),
                     ", ".join(labels.get(p, p) for p in w.peers) or "-", w.note]
                    for w in wl], "lllll"), ""]
    core_ran = any(w.suite == "core" and w.id not in ("ping", "hset") for w in wl)
    L += ["## Parameters and why", "",
          *([
              f"- capacity {CAPACITY}, rate {RATE}/s, n {TAKE_N}; every key is first populated "
              f"with one take of {PREFILL_TAKE}, so the bucket is {PREFILL_TAKE} tokens short "
              f"and {int(PREFILL_TAKE) // int(RATE)} s from full. Consequences: no key expires "
              "during a run (TTL about 1000 s, while the gaps between hits on one key are "
              "seconds); no call is denied (a key sees a handful of takes per run, capacity is "
              "1e9); the server-clock variant refills only a few tokens per key during a run; "
              "and one take moves time-to-full by only 1 s, so TB.TAKE keeps the key's TTL (as "
              "for a busy limited key in production). Each run checks all of this: DBSIZE "
              "unchanged, every `tb_*_denied` counter and `total_error_replies` unchanged, "
              "else it aborts.",
              f"- With `now` fixed ({FIXED_NOW}) no time passes for the buckets: they only "
              "drain, one token per call, hence the large capacity.",
              f"- The issue's example (capacity 1e9, rate 1, n 1) without the prefill would not work: after one take a "
              "bucket is 1 s from full, its key expires within about 2 s and the next call "
              "re-creates it (a fixed-now run would find its keys gone). A tiny rate (0.001) "
              "keeps keys alive but makes every take push time-to-full 1000 s further, past the "
              "module's TTL margin, so nearly every call re-sets and replicates the expiry: that "
              "regime is the *fresh buckets* workload, shown for information and not graded.",
              "- The Lua script (bench/commands/token_bucket.lua) runs with the same explicit `now` as "
              "TB.TAKE (now) and was checked to give the same answers and store the same fields "
              "before timing. Unlike the module it sets the TTL on every allowed call, which is "
              "how such scripts are usually written.",
              f"- HSET (key has TTL): the keys got `PEXPIRE key {TYPICAL_TTL_MS}` when populated; "
              "HSET keeps an existing TTL, so the timed command is the same HSET on keys that "
              "have an expires entry."] if core_ran else []),
          *new_command_notes(wl, cfg.keys),
          *(["- Issue 12 (redis-cell side by side): the bucket shapes, the prefill and the "
             "checks are in its section above."] if any(w.shape for w in wl) else []),
          *(["- Issue 11 (TB.WINDOW): the limits, windows, the keys' prepared state and what "
             "each timed call does are in its section above."]
            if any(w.suite == "issue11" for w in wl) else []),
          "- Every workload starts with FLUSHALL then populates its keys on a separate "
          "connection, closed before the timed run.", ""]
    L += ["## Exact commands", "", "```",
          "# server (module copied to the temp dir first; port chosen free at start)",
          shlex.join(server_argv), "", "# timed runs (PORT as above), in this order each round"]
    L += bench_cmds
    L += ["```", "", "## Per-round raw numbers", "",
          md_table(["round", "workload", "-P", "req/s", "CPU us/req", "of it user",
                    "server busy",
                    "client busy", "other load", "p50 ms", "p99 ms", "wall s"],
                   [[str(i + 1), w.label, str(p), f"{r[(w.id, p)].rps:,.0f}",
                     f"{r[(w.id, p)].cpu_us:.2f}", f"{r[(w.id, p)].user_us:.2f}",
                     f"{r[(w.id, p)].busy * 100:.0f}%",
                     f"{r[(w.id, p)].client_busy * 100:.0f}%",
                     f"{r[(w.id, p)].other_load * 100:.0f}%",
                     f"{r[(w.id, p)].p50_ms:.3f}",
                     f"{r[(w.id, p)].p99_ms:.3f}", f"{r[(w.id, p)].wall_s:.1f}"]
                    for i, r in enumerate(runs) for w in wl for p in PIPELINES], "llrrrrrrrrrr"), ""]
    text = "\n".join(L)
    (out_dir / "report.md").write_text(text)
    return text


def print_summary(cfg, wl, summary, runs, memory, targets, skipped, elapsed) -> None:
    for p in PIPELINES:
        print(f"\n-c {CLIENTS} -P {p} (medians of {cfg.rounds} rounds)")
        print(text_table(THROUGHPUT_HEADER, throughput_rows(wl, summary, p)))
    for p in PIPELINES:
        rows = peer_rows(runs, wl, summary, p)
        if rows:
            print(f"\nper bucket, against peers, -P {p}")
            print(text_table(PEER_HEADER, rows))
    for sh in SHAPES:
        if any(w.shape == sh.id for w in wl):
            print(f"\nredis-cell side by side, {sh.title}")
            print(text_table(SIDE_HEADER, side_rows(runs, wl, summary, memory, sh)))
    if any(w.suite == "issue11" for w in wl):
        print("\nTB.WINDOW side by side (issue 11), -P 16")
        print(text_table(WINDOW_HEADER, window_rows(runs, wl, summary)))
    print("\nmemory per bucket")
    print(text_table(["method", "used_memory B/bucket", "MEMORY USAGE B"],
                     [[m.label, f"{m.per_bucket:.2f}", str(m.memory_usage)] for m in memory
                      if m.label not in WINDOW_MEMORY_LABELS]))
    window_memory = window_memory_rows(memory)
    if window_memory:
        print("\nTB.WINDOW memory per key (issue 11)")
        print(text_table(WINDOW_MEMORY_HEADER[:-1], [r[:-1] for r in window_memory]))
    print("\ntargets")
    print(text_table(["target", "measured", "per-round", "required", "result",
                      "server CPU/call"], target_rows(targets, bold=False)))
    for note in skipped:
        print(f"not measured: {note}")
    print(f"\n{load_note(runs)}")
    print(f"\nreport: {cfg.out / 'report.md'}  chart: {cfg.out / 'ratios.svg'}  "
          f"({elapsed:.0f} s)")
