"""What a rate limiter costs a FastAPI app: requests per second of ``GET /items/{id}``
(bench_app.py) with no limiter, against two floors of any limiter that makes one Redis
round trip: one bare ``await redis.ping()`` per request (the round trip through redis-py)
and one pre-encoded ``PING`` written on a raw socket per request, ``+PONG`` read back (the
round trip with no client library); with redis-tb's middleware
(one policy; three policies), and with slowapi on the limits library's Redis storage
(moving window; one limit, three stacked limits). Then the refusal path: every
request refused (429s per second) by redis-tb with and without the local deny cache,
and by slowapi.

Setup, as in issue 21: one uvicorn worker per variant pinned to CPU 0, redis-server
(with the module) pinned to CPU 1, the load generator (16 keep-alive connections on
raw asyncio sockets, pinned to CPU 1 too, beside Redis) sends every request from the
trusted proxy address with its own ``X-Forwarded-For`` (65,536 client addresses; for
the refusal variants one client). Rounds rotate the order of the variants; each
figure is the median over rounds. A response other than the variant's expected status
voids the run.

    python bench/integrations/python/bench_overhead.py [--seconds 10] [--rounds 5] [--baseline REV]
        [--steps-baseline REV] [--steps-instructions] [--backends]

With ``--baseline REV`` (issue 24: before and after in one run) two more variants,
``one@base`` and ``three@base``, run the same bench_app.py with REV's package
(``git archive REV clients/python/src``, put first on the app's ``PYTHONPATH``; the run
checks that ``import redis_tb`` resolves to it) in the same rounds, against the same
floors and the same redis-server; the report gains a before/after table.

With ``--backends`` (issue 42: the integration end to end on both backends) two more
variants, ``one-scripts`` and ``three-scripts``, run the same bench_app.py with its
limiter forced to the script backend (``backend="scripts"``: Functions, as redis-server
takes FUNCTION LOAD), on the same redis-server, in the same rounds. Before any
measurement the run checks that each of them runs on the scripts: its log has the line
``redis-tb: backend scripts on <host:port> (forced by backend=scripts, Functions)``
(SPEC E6) and ``bench_app: stats.backend scripts``; otherwise it stops. The report gains
a table "the two backends end to end": for one and three policies, scripts/module ratios
of req/s, app CPU per request and redis-server CPU per request (medians of the ratios
within each round, with their range), and both backends against the two floors. A
smoke run (a minute or so, numbers not to keep)::

    REDIS_TB_MODULE=target/release/libredis_tb.so python bench/integrations/python/bench_overhead.py \
        --backends --seconds 1 --rounds 1 --warmup 0 --no-steps --out /tmp/bench-py-smoke.md

Every variant also has redis-server's CPU per request: user+system time of the
redis-server process (/proc/<pid>/stat, all its threads) over the variant's measured
phase, over its expected responses. The load generator shares redis-server's CPU but
is another process, so it is not counted; the server's CPU is the scripts' cost, which
app CPU does not show.

Writes bench/results/integrations-python.md (or --out), with the per-step costs of
bench_steps.py (and a baseline revision's, with --steps-baseline) and the machine's
load average.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO / "testing" / "python"))

from redis_tb_testing.servers import RedisServer, Uvicorn, start_all  # noqa: E402

PROXY = "127.0.0.2"
SERVER_CPU, REDIS_CPU = 0, 1

ADMIT = {
    "none": "no limiter",
    "ping": "floor: one bare `await redis.ping()` per request (redis-py)",
    "rawping": "floor: one pre-encoded `PING` per request on a raw socket (no client library)",
    "one": "redis-tb middleware, one policy",
    "three": "redis-tb middleware, three policies",
    "slowapi": "slowapi, one limit (moving window)",
    "slowapi3": "slowapi, three stacked limits",
}
REFUSE = {
    "one-refuse": "redis-tb, deny cache on (the bench app's setting)",
    "one-refuse-nocache": "redis-tb, deny cache off (every refusal from Redis)",
    "slowapi-refuse": "slowapi",
}


async def _worker(port: int, stop_at: float, start: int, step: int, expect: int | None, counts: dict[str, int],
                  one_client: bool, header: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(PROXY, 0))
    i = start
    try:
        while time.monotonic() < stop_at:
            ip = "198.18.0.1" if one_client else f"198.18.{(i >> 8) & 255}.{i & 255}"
            item = 1 if one_client else i & 1023  # slowapi's buckets are per path, too
            writer.write(
                f"GET /items/{item} HTTP/1.1\r\nHost: bench\r\nX-Forwarded-For: {ip}\r\n"
                f"X-API-Key: k{i & 63}\r\n\r\n".encode()
            )
            i += step
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            good = (expect is None or status == expect) and (not header or header in head.lower())
            if not good and counts["other"] == 0:
                print(f"unexpected response: {head[:300]!r}", file=sys.stderr)
            counts["ok" if good else "other"] += 1
            counts[str(status)] = counts.get(str(status), 0) + 1
    finally:
        writer.close()


async def _load(port: int, seconds: float, connections: int, offset: int, expect: int | None,
                one_client: bool, header: bytes = b"", counts: dict[str, int] | None = None
                ) -> tuple[float, int, int]:
    """Requests (or refusals) per second; ``expect``: the status every response must
    have (None: any); ``header``: a header every response must carry (redis-tb's, so that
    a fail-open response without it voids the run). ``counts``, when given, gets the
    number of responses per status (``"200"``, ``"429"``...) besides ``ok``/``other``."""
    if counts is None:
        counts = {}
    counts.update(ok=0, other=0)
    started = time.monotonic()
    await asyncio.gather(*(
        _worker(port, started + seconds, offset + c, connections, expect, counts, one_client, header)
        for c in range(connections)
    ))
    return counts["ok"] / (time.monotonic() - started), counts["ok"], counts["other"]


FLOOD_BEGIN = "<!-- flood:begin"
FLOOD_END = "<!-- flood:end -->"


def with_flood_section(text: str, section: str) -> str:
    """``text`` with its flood section (bench_flood.py's, between FLOOD_BEGIN and
    FLOOD_END) replaced by ``section``, or ``section`` appended."""
    begin, end = text.find(FLOOD_BEGIN), text.find(FLOOD_END)
    if begin >= 0 and end > begin:
        return text[:begin] + section + text[end + len(FLOOD_END):]
    return text.rstrip() + "\n\n" + section + "\n"


def flood_section(path: Path) -> str:
    """The flood section of the results file at ``path`` ("" when it has none)."""
    text = path.read_text() if path.exists() else ""
    begin, end = text.find(FLOOD_BEGIN), text.find(FLOOD_END)
    return text[begin:end + len(FLOOD_END)] if begin >= 0 and end > begin else ""


BASE = {"one@base": "one", "three@base": "three"}
BACKENDS = {
    "one-scripts": "redis-tb middleware, one policy, script backend (Functions)",
    "three-scripts": "redis-tb middleware, three policies, script backend (Functions)",
}


def backend_line(server: str) -> str:
    """SPEC E6's line of a limiter forced to the scripts on ``server`` (host:port),
    loaded as Functions."""
    return f"redis-tb: backend scripts on {server} (forced by backend=scripts, Functions)"


def check_scripts(variant: str, log: str, server: str) -> None:
    """Stops the run unless the app's ``log`` shows it runs on the script backend."""
    lines = log.splitlines()
    if backend_line(server) not in lines:
        raise SystemExit(f"{variant}: no line {backend_line(server)!r} in the app's log: not on the scripts")
    if "bench_app: stats.backend scripts" not in lines:
        raise SystemExit(f"{variant}: limiter.stats.backend is not 'scripts' (no 'bench_app: stats.backend "
                         "scripts' in the app's log)")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _spread(xs: list[float]) -> str:
    """The median of per-round ratios, and their range when there are several."""
    if any(x != x for x in xs):  # a zero denominator (no CPU tick counted)
        return "n/a"
    med = f"{statistics.median(xs):.2f}x"
    return med if len(xs) < 2 else f"{med} ({min(xs):.2f}-{max(xs):.2f}x)"


def backends_table(results: dict[str, list[float]], app_cpu: dict[str, list[float]],
                   redis_cpu: dict[str, list[float]]) -> list[str]:
    """The table of a ``--backends`` run (no lines without one): for one and three
    policies, scripts over module per round (req/s, app CPU per request, redis-server
    CPU per request), the median and the range over rounds; then each backend's req/s
    over the redis-py PING floor and the raw-socket PING floor, medians of per-round ratios."""
    if "one-scripts" not in results:
        return []

    def per_round(num: str, den: str, of: dict[str, list[float]]) -> list[float]:
        return [_ratio(a, b) for a, b in zip(of[num], of[den])]

    rows = []
    for name, module, scripts in (("one policy", "one", "one-scripts"), ("three policies", "three", "three-scripts")):
        floors = " | ".join(
            f"{_spread(per_round(v, 'ping', results))} / {_spread(per_round(v, 'rawping', results))}"
            for v in (module, scripts)
        )
        rows.append(
            f"| {name} | {_spread(per_round(scripts, module, results))} | "
            f"{_spread(per_round(scripts, module, app_cpu))} | {_spread(per_round(scripts, module, redis_cpu))} | "
            f"{floors} |"
        )
    return [
        "## The two backends end to end",
        "",
        "The same bench_app.py, the same floors and the same redis-server; only the limiter's "
        "backend differs (`backend=\"scripts\"`, Functions, against the module's commands). "
        "Scripts over module within each round: the median over rounds (the range in brackets). "
        "Floors: req/s over the redis-py PING floor / the raw-socket PING floor.",
        "",
        "| variant | req/s scripts / module | app CPU per request scripts / module | "
        "redis-server CPU per request scripts / module | module / floors | scripts / floors |",
        "|---|---:|---:|---:|---:|---:|",
        *rows,
        "",
    ]


def extract_baseline(rev: str, into: Path) -> Path:
    """REV's ``clients/python/src`` under ``into``; the directory to put on PYTHONPATH.
    Fails unless ``import redis_tb`` there resolves to REV's copy, not the installed one."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", rev, "clients/python/src"],
                          capture_output=True, check=True).stdout
    tar = into / "base.tar"
    tar.write_bytes(data)
    with tarfile.open(tar) as t:
        t.extractall(into, filter="data")
    src = into / "clients" / "python" / "src"
    where = subprocess.run([sys.executable, "-c", "import redis_tb; print(redis_tb.__file__)"],
                           env={**os.environ, "PYTHONPATH": str(src)}, capture_output=True, text=True,
                           check=True).stdout.strip()
    if not where.startswith(str(src)):
        raise SystemExit(f"--baseline {rev}: import redis_tb resolved to {where}, not {src}")
    return src


def before_after(base_rev: str, head_rev: str, med: dict[str, float], cpu: dict[str, float],
                 results: dict[str, list[float]]) -> list[str]:
    """The before/after table of a ``--baseline`` run (no lines without one): for one and
    three policies, req/s and app CPU per request at the baseline and now, each against
    both floors of the same run, and now over the baseline; per round too, since the
    rounds are where the machine's noise shows."""
    if "one@base" not in med:
        return []
    floor, raw = med["ping"], med["rawping"]
    rows = []
    for name, now, base in (("one policy", "one", "one@base"), ("three policies", "three", "three@base")):
        per_round = ", ".join(f"{n / b:.2f}x" for n, b in zip(results[now], results[base]))
        rows.append(
            f"| {name} | {med[base]:.0f} ({med[base] / floor:.2f}x / {med[base] / raw:.2f}x) | "
            f"{med[now]:.0f} ({med[now] / floor:.2f}x / {med[now] / raw:.2f}x) | {med[now] / med[base]:.2f}x | "
            f"{cpu[base]:.0f} | {cpu[now]:.0f} | {cpu[now] / cpu[base]:.2f}x | {per_round} |"
        )
    return [
        f"## Before ({base_rev}) and after ({head_rev}), in the same rounds",
        "",
        "The same bench_app.py, the same floors and the same redis-server; only the package "
        f"differs (`{base_rev}`'s `clients/python/src` first on the app's PYTHONPATH). "
        "Figures in brackets: against the redis-py PING floor / the raw-socket PING floor.",
        "",
        f"| variant | req/s at {base_rev} | req/s now | now / before | app CPU µs/request at {base_rev} | "
        "now | now / before | now / before per round (req/s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        *rows,
        "",
    ]


def pin(pid: int, cpu: int) -> None:
    subprocess.run(["taskset", "-pc", str(cpu), str(pid)], check=True, capture_output=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="length of one measurement")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--baseline", help="git revision whose package runs as one@base / three@base beside today's")
    ap.add_argument("--backends", action="store_true",
                    help="also one-scripts / three-scripts: the limiter on the script backend")
    ap.add_argument("--steps-baseline", help="git revision for bench_steps.py's side-by-side column")
    ap.add_argument("--no-steps", action="store_true", help="skip bench_steps.py")
    ap.add_argument("--steps-instructions", action="store_true",
                    help="bench_steps.py --instructions: valgrind instruction counts per request (slow)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "integrations-python.md")
    args = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        raise SystemExit("needs 2 CPUs: the app server on one, Redis and the load generator on the other")

    started_at = datetime.datetime.now(datetime.timezone.utc)
    loads = [os.getloadavg()]
    store = RedisServer().start()
    assert store.proc is not None
    pin(store.proc.pid, REDIS_CPU)
    os.sched_setaffinity(0, {REDIS_CPU})
    env = {"REDIS_URL": store.url, "TRUSTED_PROXIES": f"{PROXY}/32"}
    admit = dict(ADMIT)
    scratch = tempfile.TemporaryDirectory(prefix="bench-baseline-")
    base_src: Path | None = None
    base_rev = ""
    if args.baseline:
        base_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.baseline],
                                  capture_output=True, text=True, check=True).stdout.strip()
        base_src = extract_baseline(args.baseline, Path(scratch.name))
        admit["one@base"] = f"redis-tb middleware at {base_rev}, one policy"
        admit["three@base"] = f"redis-tb middleware at {base_rev}, three policies"
    if args.backends:
        admit |= BACKENDS
    head_rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    variants = {**admit, **REFUSE}

    def app_env(v: str) -> dict[str, str]:
        if v in BASE and base_src is not None:
            return {**env, "BENCH_VARIANT": BASE[v], "PYTHONPATH": str(base_src)}
        return {**env, "BENCH_VARIANT": v}

    apps = {v: Uvicorn("bench_app:app", HERE, app_env(v)) for v in variants}
    results: dict[str, list[float]] = {v: [] for v in variants}
    cpu_per_request: dict[str, list[float]] = {v: [] for v in variants}
    redis_per_request: dict[str, list[float]] = {v: [] for v in variants}
    unexpected = {v: 0 for v in variants}
    warnings: list[str] = []
    offset = 0
    try:
        start_all(list(apps.values()))
        for app in apps.values():
            assert app.proc is not None
            pin(app.proc.pid, SERVER_CPU)
        for v in BACKENDS:
            if v in apps:
                check_scripts(v, apps[v].output(), f"127.0.0.1:{store.port}")
        for v, app in apps.items():
            refuse = v in REFUSE
            asyncio.run(_load(app.port, args.warmup, args.connections, offset, 429 if refuse else 200, refuse))
            offset += 1 << 16
        order = list(variants)
        for rnd in range(args.rounds):
            k = rnd % len(order)
            for v in order[k:] + order[:k]:
                app = apps[v]
                assert app.proc is not None
                refuse = v in REFUSE
                cpu0, redis0 = cpu_seconds(app.proc.pid), cpu_seconds(store.proc.pid)
                limited = ("one", "three", *BASE, *BACKENDS, "one-refuse", "one-refuse-nocache")
                header = b"\r\nratelimit:" if v in limited else b""
                rps, ok, other = asyncio.run(
                    _load(app.port, args.seconds, args.connections, offset, 429 if refuse else 200, refuse, header)
                )
                used = cpu_seconds(app.proc.pid) - cpu0
                redis_used = cpu_seconds(store.proc.pid) - redis0
                offset += ok + other + args.connections
                # Only the expected responses count; others (a fail-open pass without
                # headers after a slow Redis call on a busy machine) are reported, and
                # more than 1% of them voids the run.
                unexpected[v] += other
                if other > 0.01 * (ok + other):
                    raise SystemExit(f"{v}: {other} of {ok + other} responses were not {429 if refuse else 200}: "
                                     "the run is void")
                results[v].append(rps)
                cpu_per_request[v].append(used / max(ok, 1) * 1e6)
                redis_per_request[v].append(redis_used / max(ok, 1) * 1e6)
            print(f"round {rnd + 1}: " + ", ".join(f"{v} {results[v][-1]:.0f}" for v in variants), flush=True)
            loads.append(os.getloadavg())
        info = store.cli("INFO", "commandstats")
    finally:
        for app in apps.values():
            # the scripts variants' backend line (SPEC E6) is no warning
            warnings += [ln for ln in app.output().splitlines() if "redis-tb:" in ln and "redis-tb: backend " not in ln]
            app.stop()
        store.stop()
        scratch.cleanup()
    loads.append(os.getloadavg())

    med = {v: statistics.median(r) for v, r in results.items()}
    cpu = {v: statistics.median(c) for v, c in cpu_per_request.items()}
    rcpu = {v: statistics.median(c) for v, c in redis_per_request.items()}
    floor, raw = med["ping"], med["rawping"]
    steps: list[str] = []
    if not args.no_steps:
        cmd = [sys.executable, str(HERE / "bench_steps.py")]
        if args.steps_baseline:
            cmd += ["--baseline-rev", args.steps_baseline]
        if args.steps_instructions:
            cmd += ["--instructions"]
        os.sched_setaffinity(0, set(range(os.cpu_count() or 2)))
        steps = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()

    def fmt_load(x: tuple[float, float, float]) -> str:
        return f"{x[0]:.1f}/{x[1]:.1f}/{x[2]:.1f}"

    def calls(command: str) -> str:
        return next((ln.split("calls=")[1].split(",")[0] for ln in info.splitlines()
                     if ln.startswith(f"cmdstat_{command}:")), "0")

    mtake_calls = calls("tb.mtake")
    fcalls = f" and {calls('fcall')} FCALL calls (the scripts variants)" if args.backends else ""
    redis_version = subprocess.run(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--version"], capture_output=True, text=True
    ).stdout.split()[2].removeprefix("v=")
    lines = [
        "# Python integration: what the limiter costs a FastAPI app",
        "",
        f"Written by `bench/integrations/python/bench_overhead.py` on {started_at:%Y-%m-%d %H:%M} UTC "
        f"({args.rounds} rounds of {args.seconds:g} s per variant).",
        "",
        f"**redis-tb middleware, one policy: {med['one'] / floor:.2f}x the redis-py PING floor, "
        f"{med['one'] / raw:.2f}x the raw-socket PING floor** "
        f"({med['one']:.0f} req/s against {floor:.0f} and {raw:.0f}; no limiter {med['none']:.0f}). "
        f"Three policies (one TB.MTAKE): {med['three'] / floor:.2f}x and {med['three'] / raw:.2f}x. "
        f"slowapi: {med['slowapi'] / floor:.2f}x and {med['slowapi'] / raw:.2f}x with one "
        f"limit, {med['slowapi3'] / floor:.2f}x and {med['slowapi3'] / raw:.2f}x with three.",
        "",
        "## Admitted requests (200), median over rounds",
        "",
        "| variant | req/s | / redis-py PING floor | / raw PING floor | / no limiter | app CPU per request (µs) "
        "| redis-server CPU per request (µs) | rounds (req/s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
        *[
            f"| {label} | {med[v]:.0f} | {med[v] / floor:.2f}x | {med[v] / raw:.2f}x | {med[v] / med['none']:.2f}x | {cpu[v]:.0f} | "
            f"{rcpu[v]:.1f} | "
            + ", ".join(f"{x:.0f}" for x in results[v]) + " |"
            for v, label in admit.items()
        ],
        "",
        f"App CPU beyond each floor per request (from the uvicorn process's CPU time; redis-py "
        f"PING / raw PING): redis-tb one policy {cpu['one'] - cpu['ping']:+.0f} / {cpu['one'] - cpu['rawping']:+.0f} µs, "
        f"three policies {cpu['three'] - cpu['ping']:+.0f} / {cpu['three'] - cpu['rawping']:+.0f} µs, "
        f"slowapi {cpu['slowapi'] - cpu['ping']:+.0f} / {cpu['slowapi'] - cpu['rawping']:+.0f} µs. The raw "
        f"floor's own CPU is {cpu['rawping']:.0f} µs against redis-py's {cpu['ping']:.0f} µs.",
        "",
        "Responses other than the expected status, in all rounds (not counted above): "
        + ", ".join(f"{v} {n}" for v, n in unexpected.items())
        + f". redis-tb warning lines in the app logs: {len(warnings)}"
        + (f", e.g. `{warnings[0][:300]}`" if warnings else "") + ".",
        "",
        *before_after(base_rev, head_rev, med, cpu, results),
        *backends_table(results, cpu_per_request, redis_per_request),
        "## Refused requests (429), median over rounds",
        "",
        "| variant | 429/s | app CPU per request (µs) | redis-server CPU per request (µs) | rounds (429/s) |",
        "|---|---:|---:|---:|---|",
        *[
            f"| {label} | {med[v]:.0f} | {cpu[v]:.0f} | {rcpu[v]:.1f} | " + ", ".join(f"{x:.0f}" for x in results[v]) + " |"
            for v, label in REFUSE.items()
        ],
        "",
        "## Where the time goes (bench_steps.py, in-process)",
        "",
        *(steps or ["(skipped)"]),
        "",
        "## Setup",
        "",
        "- `bench/integrations/python/bench_app.py`: FastAPI `GET /items/{item_id}` returning a small JSON "
        "object; one uvicorn process per variant (h11, no access log), pinned to CPU "
        f"{SERVER_CPU}; redis-server {redis_version} with the module pinned to CPU {REDIS_CPU}, "
        f"beside the load generator. {mtake_calls} TB.MTAKE calls{fcalls} in all. redis-server CPU per "
        "request: its process's user+system time (/proc/<pid>/stat) over each measured phase, over the "
        "variant's expected responses.",
        "- The floors: an ASGI middleware awaiting `redis.asyncio.Redis.ping()` (redis-py's "
        "connection pool), and one writing the pre-encoded `*1\\r\\n$4\\r\\nPING\\r\\n` on a raw "
        "asyncio stream and reading `+PONG\\r\\n` (persistent connections, one per request in flight).",
        "- redis-tb variants run with Prometheus metrics and the local deny cache on "
        "(`PrometheusMetrics`, `DenyCache(max_entries=10_000)`); policies `ip` (one), plus a "
        "per-route `endpoint` and an `X-API-Key` `tenant` policy (three), limits never reached; "
        "refusal variants: `ip` with capacity 1 refilled at 1e-9/s (slowapi: `1/year`), one client on one path (slowapi's keys include the path).",
        "- slowapi: `Limiter(key_func=<X-Forwarded-For>, storage_uri=<redis>, "
        "strategy=\"moving-window\")`, `@limiter.limit(...)` on the endpoint.",
        f"- Load: {args.connections} keep-alive HTTP/1.1 connections on raw asyncio sockets, "
        f"{args.warmup:g} s warm-up per variant, rounds rotating the order of the variants.",
        f"- {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs shared with other "
        f"work. Python {platform.python_version()}, fastapi {version('fastapi')}, starlette "
        f"{version('starlette')}, uvicorn {version('uvicorn')}, redis-py {version('redis')}, "
        f"slowapi {version('slowapi')}, limits {version('limits')}, prometheus_client "
        f"{version('prometheus_client')}.",
        f"- Load average (1/5/15 min) at the start, after each round and at the end: "
        f"{', '.join(fmt_load(x) for x in loads)}. Anything well above 0 is other work on the same "
        "two CPUs: absolute figures then drop and vary between rounds; the ratios within a round "
        "are the figures to read.",
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    kept = flood_section(args.out)  # bench_flood.py's section stays
    args.out.write_text(with_flood_section("\n".join(lines), kept) if kept else "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
