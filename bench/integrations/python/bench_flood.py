"""Issue 21's deny-cache measurement for Python: one client (one ``X-Forwarded-For``
identity) floods one limited route of bench_app.py (``GET /items/{item_id}``) as fast as
bench_overhead.py's load generator manages, for ``--seconds``, once with redis-tb's local
deny cache off (variant ``flood-nocache``) and once with it on (``flood``:
``DenyCache(max_entries=10_000)``), one uvicorn worker each against the same
redis-server with the module. For each: the app's requests per second (200s and 429s),
Redis commands per second from ``INFO commandstats`` deltas (TB.MTAKE / TB.TAKE, and
every command), and the limiter's own counters (``GET /_stats``, not limited).

Target: with the cache, Redis sees at most one call per identity per retry window from
the instance. The policy is capacity C refilled at R per second: after a refusal one
token is back within 1/R s, so the retry window is at most 1/R s and the refusals that
may reach Redis over T seconds are at most W = ceil(T x R) + 1 (one per window, plus the
window open at the end). Admitted requests always go to Redis (the cache only answers
refusals); they are bounded by the limit, C + ceil(T x R) + 1. So the Redis calls with
the cache are at most admitted + W. The client floods over one connection (a single
client: each request sent when the previous answer came: exactly the target) and over
several (one identity with requests in flight together: the requests already sent to
Redis when the first answer fills the cache are refused by Redis; after that, single
flight and the refusal cached after an admission that leaves fewer tokens than the cost
keep the others local; the bound checked there is one per connection per window,
W x connections).

    python bench/integrations/python/bench_flood.py [--seconds 10] [--connections 1,16] [--capacity 10] [--rate 1]

Pinning as bench_overhead.py: the app on CPU 0, redis-server and the load generator on
CPU 1. Writes (replaces) the section "Deny cache under a flood" of
bench/results/integrations-python.md (or --out), keeping the rest; bench_overhead.py keeps
this section when it rewrites the file. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import math
import os
import sys
import urllib.request
from pathlib import Path
from typing import Any

from bench_overhead import PROXY, REDIS_CPU, REPO, SERVER_CPU, _load, pin, with_flood_section

from redis_tb_testing.servers import RedisServer, Uvicorn

HERE = Path(__file__).resolve().parent
CLIENT_IP = "198.18.0.1"  # bench_overhead's one client (one_client=True)
#: what the script itself sends Redis between the snapshots' reads: not the app's
OWN_COMMANDS = {"info", "flushall"}


def command_calls(store: RedisServer) -> dict[str, int]:
    """Calls per command from INFO commandstats (``tb.mtake`` -> 123)."""
    calls: dict[str, int] = {}
    for line in store.cli("INFO", "commandstats").splitlines():
        if line.startswith("cmdstat_") and "calls=" in line:
            name, rest = line[len("cmdstat_"):].split(":", 1)
            calls[name] = int(rest.split("calls=")[1].split(",")[0])
    return calls


def limiter_stats(app: Uvicorn) -> dict[str, int]:
    with urllib.request.urlopen(f"{app.url}/_stats", timeout=30) as r:
        got: dict[str, int] = json.load(r)
    return got


def flood(store: RedisServer, env: dict[str, str], variant: str, connections: int, seconds: float,
          warmup: float) -> dict[str, Any]:
    app = Uvicorn("bench_app:app", HERE, {**env, "BENCH_VARIANT": variant}).start()
    try:
        assert app.proc is not None
        pin(app.proc.pid, SERVER_CPU)
        # warm-up: many identities (connections, imports), then a clean store
        asyncio.run(_load(app.port, warmup, connections, 1 << 16, None, False))
        store.cli("FLUSHALL")
        s0, c0 = limiter_stats(app), command_calls(store)
        statuses: dict[str, int] = {}
        rps, answered, _ = asyncio.run(_load(app.port, seconds, connections, 0, None, True, counts=statuses))
        c1, s1 = command_calls(store), limiter_stats(app)
        warnings = [ln for ln in app.output().splitlines() if "redis-tb:" in ln]
    finally:
        app.stop()
    delta = {k: n - c0.get(k, 0) for k, n in c1.items() if n > c0.get(k, 0) and k not in OWN_COMMANDS}
    stats = {k: s1[k] - s0[k] for k in s1}
    elapsed = answered / rps if rps else seconds
    tb_calls = delta.get("tb.mtake", 0) + delta.get("tb.take", 0)
    return {
        "variant": variant, "connections": connections, "rps": rps, "elapsed": elapsed,
        "ok": statuses.get("200", 0), "refused": statuses.get("429", 0),
        "other": answered - statuses.get("200", 0) - statuses.get("429", 0),
        "delta": delta, "stats": stats, "tb_calls": tb_calls, "all_calls": sum(delta.values()),
        "refused_by_redis": stats["limited"] - stats["deny_cache_hits"], "warnings": warnings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of one flood")
    ap.add_argument("--connections", default="1,16", help="comma-separated keep-alive connection counts")
    ap.add_argument("--capacity", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1.0, help="tokens per second")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "integrations-python.md")
    args = ap.parse_args()
    connection_counts = [int(c) for c in args.connections.split(",")]
    pinned = (os.cpu_count() or 1) >= 2
    C, R, T = args.capacity, args.rate, args.seconds

    started_at = datetime.datetime.now(datetime.timezone.utc)
    load_before = os.getloadavg()
    store = RedisServer().start()
    runs: list[dict[str, Any]] = []
    try:
        assert store.proc is not None
        if pinned:
            pin(store.proc.pid, REDIS_CPU)
            os.sched_setaffinity(0, {REDIS_CPU})
        env = {
            "REDIS_URL": store.url, "TRUSTED_PROXIES": f"{PROXY}/32",
            "BENCH_CAPACITY": repr(C), "BENCH_RATE": repr(R),
        }
        for conns in connection_counts:
            for variant in ("flood-nocache", "flood"):
                run = flood(store, env, variant, conns, T, args.warmup)
                runs.append(run)
                print(f"{conns} conn, {variant}: {run['rps']:.0f} req/s (200: {run['ok']}, 429: {run['refused']}); "
                      f"Redis {run['delta']} = {run['all_calls'] / run['elapsed']:.1f} commands/s; "
                      f"limiter {run['stats']}", file=sys.stderr, flush=True)
    finally:
        store.stop()
    load_after = os.getloadavg()

    checks: list[tuple[str, bool, bool]] = []  # (text, ok, is the issue's target)
    for run in runs:
        conns, s = run["connections"], run["stats"]
        label = f"{conns} connection{'s' if conns > 1 else ''}, cache {'on' if run['variant'] == 'flood' else 'off'}"
        checks.append((f"{label}: every request answered 200 or 429, none decided by the failure mode "
                       f"(other statuses {run['other']}, degraded {s['degraded']})",
                       run["other"] == 0 and s["degraded"] == 0, False))
        if run["variant"] != "flood":
            continue
        windows = math.ceil(run["elapsed"] * R) + 1
        admitted_max = C + math.ceil(run["elapsed"] * R) + 1
        many = f"{conns} x " if conns > 1 else ""
        checks += [
            (f"{label}: refusals that reached Redis {run['refused_by_redis']} <= {many}(ceil(T x R) + 1) = "
             f"{windows * conns} ({'one per connection' if conns > 1 else 'one'} per identity per retry window)",
             run["refused_by_redis"] <= windows * conns, conns == 1),
            (f"{label}: Redis TB calls = admitted + refused by Redis: {run['tb_calls']} = "
             f"{s['allowed']} + {run['refused_by_redis']}",
             run["tb_calls"] == s["allowed"] + run["refused_by_redis"], False),
            (f"{label}: admitted within the limit: {s['allowed']} <= C + ceil(T x R) + 1 = {admitted_max:g}",
             s["allowed"] <= admitted_max, False),
            (f"{label}: every other request answered from the cache: {s['deny_cache_hits']} deny-cache hits = "
             f"{s['checks']} checks - {run['tb_calls']} Redis calls",
             s["deny_cache_hits"] == s["checks"] - run["tb_calls"], False),
        ]
    passed = all(ok for _, ok, _ in checks)
    target = all(ok for _, ok, is_target in checks if is_target)
    for text, ok, _ in checks:
        print(f"{'PASS' if ok else 'FAIL'} {text}", file=sys.stderr)

    cmd = "python bench/integrations/python/bench_flood.py " + " ".join(sys.argv[1:])
    lines = [
        "<!-- flood:begin (written by bench/integrations/python/bench_flood.py; bench_overhead.py keeps it) -->",
        "## Deny cache under a flood (issue 21)",
        "",
        f"Written by `bench/integrations/python/bench_flood.py` on {started_at:%Y-%m-%d %H:%M} UTC:",
        "",
        "```",
        cmd.strip(),
        "```",
        "",
        f"One client identity (`X-Forwarded-For: {CLIENT_IP}` behind the trusted proxy address "
        f"{PROXY}) floods `GET /items/1` as fast as bench_overhead.py's load generator manages for "
        f"{T:g} s, from a full bucket: over one keep-alive connection (a single client: each request "
        "sent when the previous answer came) and over "
        + (", ".join(str(c) for c in connection_counts if c > 1) or "-")
        + " (the same identity with requests in flight together). The app is bench_app.py with "
        f"redis-tb's middleware and one policy `ip`, capacity {C:g} refilled at {R:g} per second (a "
        f"refusal's retry window is at most {1 / R:g} s); one uvicorn worker with the deny cache off "
        "(`flood-nocache`), then one with `DenyCache(max_entries=10_000)` (`flood`), against the same "
        "redis-server. Redis commands from `INFO commandstats` deltas around each flood; admitted, "
        "refused and cache hits from the limiter's `stats`.",
        "",
        "| connections | deny cache | app req/s | 200 | 429 | Redis commands/s (all) | TB.MTAKE calls "
        "| admitted (stats.allowed) | refused by Redis | refused by the cache |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {r['connections']} | {'on' if r['variant'] == 'flood' else 'off'} | {r['rps']:.0f} | {r['ok']} | "
            f"{r['refused']} | {r['all_calls'] / r['elapsed']:.1f} | {r['tb_calls']} | {r['stats']['allowed']} | "
            f"{r['refused_by_redis']} | {r['stats']['deny_cache_hits']} |"
            for r in runs
        ],
        "",
    ]
    for conns in connection_counts:
        off, on = [r for r in runs if r["connections"] == conns]
        ratio = on["rps"] / off["rps"] if off["rps"] else float("nan")
        text = (f"Over {conns} connection{'s' if conns > 1 else ''} Redis went from "
                f"{off['all_calls'] / off['elapsed']:.1f} to {on['all_calls'] / on['elapsed']:.1f} commands per "
                f"second for this client, and the app from {off['rps']:.0f} to {on['rps']:.0f} requests per "
                f"second ({ratio:.2f}x).")
        if conns == 1:
            lines += [f"**Target (with the cache, Redis sees at most one call per identity per retry window "
                      f"from the instance): {'PASS' if target else 'FAIL'}.** " + text, ""]
        else:
            lines += [text + " Here the requests in flight together could all reach Redis when a "
                      "window opens; redis_tb keeps them away in two ways. When a cached refusal expires, "
                      "one request (the probe) goes to Redis and the others are refused locally until its "
                      "answer (single flight). And whenever Redis admits a request and leaves the bucket "
                      "below that request's cost, the limiter caches the refusal Redis would give next "
                      "(deny-until = now + (cost - remaining) / rate), so the identity's other requests "
                      "are refused locally instead of going to Redis after each admission. The refusals "
                      "that still reach Redis are the ones sent before the first answer of the flood and "
                      "the few that lose a race with an answer in flight; the bound checked is one per "
                      "connection per window.", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {text}" for text, ok, _ in checks]
    warnings = [w for r in runs for w in r["warnings"]]
    lines += [
        "",
        "Admitted requests always reach Redis (the cache only answers refusals), so with the cache "
        "the Redis calls are at most the admitted ones (C + ceil(T x R) + 1) plus one refusal per "
        "retry window (ceil(T x R) + 1).",
        "",
        f"redis-tb warning lines in the app logs: {len(warnings)}"
        + (f", e.g. `{warnings[0][:200]}`" if warnings else "") + ". "
        f"Load average (1/5/15 min) before and after: {load_before[0]:.2f}/{load_before[1]:.2f}/"
        f"{load_before[2]:.2f} and {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f} (2 CPUs "
        "shared with other work); "
        + (f"the app on CPU {SERVER_CPU}, redis-server and the load generator on CPU {REDIS_CPU}."
           if pinned else "nothing pinned."),
        "<!-- flood:end -->",
    ]
    section = "\n".join(lines)
    old = args.out.read_text() if args.out.exists() else ""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(with_flood_section(old, section))
    print(section)
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
