#!/usr/bin/env python3
"""What redis-tb's Java integrations cost a request, side by side in one run (issue 41).

Two groups, each a set of apps served at once (one JVM per variant, all pinned to CPU 0,
redis-server and the load generator on CPU 1), measured in rounds whose order alternates:

- servlet (Spring MVC, Tomcat; servlet/): `none`; `tb` / `tb3` (redis-tb's starter filter,
  one policy or three in one TB.MTAKE); `bucket4j` (a filter on Bucket4j's Lettuce
  backend); the floors `ping` (one Lettuce PING per request: the client of both redis-tb's
  store and Bucket4j's backend) and `rawping` (a pre-encoded PING on a raw socket).
- gateway (Spring Cloud Gateway, WebFlux on Netty; gateway/): `none`; `tb` / `tb3`
  (redisTbRateLimiter); `redis` (Spring Cloud Gateway's RedisRateLimiter, its Lua script);
  `bucket4j` (Bucket4j's Lettuce backend, asynchronous); the floors `ping-data` (a PING on
  RedisRateLimiter's client, spring-data-redis's reactive template), `ping` (a Lettuce
  PING: redis-tb's and Bucket4j's client) and `rawping` (a raw asynchronous socket).

Measured per variant and round: requests per second (16 keep-alive connections, a ring of
65,536 client addresses in X-Forwarded-For, bench/integrations/node/loadgen.mjs) and the
app process's CPU time per request (user + system from /proc over the run), the steadier
measure on a shared machine. The report gives each limiter against the floors of its own
Redis client and against its competitors, as medians of per-round ratios with their
range. No limit is ever reached (1,000,000 a second per client). The redis-server process's
CPU time per request is measured alike (user + system of its /proc/<pid>/stat over each
variant's measured run: what a request costs the server).

With --backends (issue 42) the servlet group gains `tbs` / `tbs3`: the same app and
policies as `tb` / `tb3` with `redis-tb.backend=scripts` (SPEC E: clients/lua's library,
loaded by FUNCTION LOAD on this server, called by FCALL) on the same redis-server, and
`tb` / `tb3` run forced to `redis-tb.backend=module`, so the backend is the only
difference. Each of the four apps must log SPEC E6's line (`redis-tb: backend scripts on
127.0.0.1:<port> (forced by backend=scripts, Functions)`, logger redis_tb at INFO; `backend
module ... (forced by backend=module)` for tb / tb3) or the run stops. The report gains
"the two backends end to end": scripts over module in req/s, app CPU and redis-server CPU
per request, and both backends against the floors, for one and three policies. Without
--backends the run is the one of issue 41.

    mvn -B -f clients/java/pom.xml package -DskipTests \\
        -pl :redis-tb-bench-servlet,:redis-tb-bench-gateway -am
    python3 bench/integrations/java/bench.py --rounds 5 --seconds 5
    # both backends end to end (issue 42): the servlet group with tbs / tbs3 as well
    python3 bench/integrations/java/bench.py --rounds 5 --seconds 5 --backends
    # only the servlet group on both backends
    python3 bench/integrations/java/bench.py --rounds 5 --seconds 5 --backends --groups servlet
    # smoke run
    python3 bench/integrations/java/bench.py --rounds 1 --seconds 1 --warmup 2 \\
        --out /tmp/integrations-java.md

Needs java (17+), node (the load generator has no dependencies), redis-server on the PATH
and the module built (target/release/libredis_tb.so, or REDIS_TB_MODULE).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
MODULE = Path(os.environ.get("REDIS_TB_MODULE", REPO / "target" / "release" / "libredis_tb.so"))
LOADGEN = REPO / "bench" / "integrations" / "node" / "loadgen.mjs"
TICK = os.sysconf("SC_CLK_TCK")
BUILD = ("mvn -B -f clients/java/pom.xml package -DskipTests "
         "-pl :redis-tb-bench-servlet,:redis-tb-bench-gateway -am")

GROUPS = {
    "servlet": {
        "jar": HERE / "servlet" / "target" / "redis-tb-bench-servlet.jar",
        "title": "Spring MVC servlet filter (Tomcat)",
        "variants": {
            "none": "no limiter",
            "tb": "redis-tb's servlet filter, one policy",
            "tb3": "redis-tb's servlet filter, three policies (one TB.MTAKE)",
            "bucket4j": "Bucket4j 8.19 on Lettuce (compare-and-swap), a servlet filter",
            "ping": "floor: one Lettuce PING per request",
            "rawping": "floor: one pre-encoded PING per request on a raw socket",
        },
        # limiter -> its Redis client's floor
        "floors": {"tb": "ping", "tb3": "ping", "bucket4j": "ping"},
        "versus": [("tb", "bucket4j"), ("tb3", "bucket4j")],
    },
    "gateway": {
        "jar": HERE / "gateway" / "target" / "redis-tb-bench-gateway.jar",
        "title": "Spring Cloud Gateway RateLimiter (WebFlux, Netty)",
        "variants": {
            "none": "no RequestRateLimiter",
            "tb": "redisTbRateLimiter, one limit",
            "tb3": "redisTbRateLimiter, three limits (one TB.MTAKE)",
            "redis": "Spring Cloud Gateway's RedisRateLimiter (Lua script, spring-data-redis)",
            "bucket4j": "Bucket4j 8.19 on Lettuce, asynchronous",
            "ping-data": "floor: one PING per request on spring-data-redis's reactive template",
            "ping": "floor: one Lettuce PING per request",
            "rawping": "floor: one pre-encoded PING per request on a raw asynchronous socket",
        },
        "floors": {"tb": "ping", "tb3": "ping", "bucket4j": "ping", "redis": "ping-data"},
        "versus": [("tb", "redis"), ("tb", "bucket4j"), ("tb3", "redis")],
    },
}


# --backends (issue 42): the servlet filter on the script backend, beside tb / tb3 forced to the module
BACKENDS = {
    "variants": {
        "tbs": "redis-tb's servlet filter on the script backend (Functions), one policy",
        "tbs3": "redis-tb's servlet filter on the script backend (Functions), three policies (one FCALL of its MTAKE)",
    },
    "floors": {"tbs": "ping", "tbs3": "ping"},
    "versus": [("tbs", "bucket4j"), ("tbs3", "bucket4j")],
    # policies -> (module variant, scripts variant)
    "pairs": [("one policy", "tb", "tbs"), ("three policies", "tb3", "tbs3")],
}
TB_VARIANTS = ("tb", "tb3", "tbs", "tbs3")


def with_backends() -> None:
    """Adds tbs / tbs3 to the servlet group, after tb3 (the order the rounds rotate)."""
    spec = GROUPS["servlet"]
    variants = {}
    for v, text in spec["variants"].items():
        variants[v] = text
        if v == "tb3":
            variants.update(BACKENDS["variants"])
    spec["variants"] = variants
    floors = {**spec["floors"], **BACKENDS["floors"]}
    spec["floors"] = {v: floors[v] for v in variants if v in floors}
    spec["versus"] = spec["versus"] + BACKENDS["versus"]


def backend_of(group: str, variant: str, backends: bool) -> str | None:
    """The redis-tb.backend a variant is forced to (None: the default, auto; the gateway's as before)."""
    if variant in ("tbs", "tbs3"):
        return "scripts"
    if backends and group == "servlet" and variant in ("tb", "tb3"):
        return "module"
    return None


def expected_line(backend: str, redis_port: int) -> str:
    """SPEC E6's one line at INFO (the Java client's wording, ScriptBackend / Startup)."""
    if backend == "scripts":
        return f"redis-tb: backend scripts on 127.0.0.1:{redis_port} (forced by backend=scripts, Functions)"
    return f"redis-tb: backend module on 127.0.0.1:{redis_port} (forced by backend=module)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PINNING = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2


def pin(cpu: int, argv: list[str]) -> list[str]:
    return ["taskset", "-c", str(cpu), *argv] if PINNING else argv


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, seconds (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def get(port: int, path: str = "/items/1") -> int:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"X-Forwarded-For": "10.9.9.9"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status


class Proc:
    def __init__(self, name: str, argv: list[str], logdir: Path) -> None:
        self.name = name
        self.log = logdir / f"{name}.log"
        with self.log.open("wb") as out:
            self.p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)


def start_redis(logdir: Path) -> tuple[Proc, int]:
    port = free_port()
    r = Proc("redis", pin(1, ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(logdir), "--loadmodule", str(MODULE)]), logdir)
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return r, port
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"redis-server did not start:\n{r.log.read_text()}")


def app_args(group: str, variant: str, redis_url: str, limit: int, backend: str | None = None) -> list[str]:
    args = [f"--bench.variant={variant}", f"--bench.redis-url={redis_url}", f"--bench.limit={limit}"]
    if variant not in TB_VARIANTS:
        return args
    args += ["--redis-tb.enabled=true", f"--redis-tb.url={redis_url}", "--redis-tb.name=bench",
             # a loaded machine must not send requests down the fail-open path (no Redis call)
             "--redis-tb.timeout=1s", "--redis-tb.trusted-proxies=127.0.0.0/8"]
    if backend:
        # SPEC E1's setting, and E6's one line at INFO to check the app really runs on it
        args += [f"--redis-tb.backend={backend}", "--logging.level.redis_tb=info"]
    if group == "servlet":
        args += ["--redis-tb.policies[0].name=ip", f"--redis-tb.policies[0].limit={limit}",
                 "--redis-tb.policies[0].per=1s"]
        if variant in ("tb3", "tbs3"):
            args += ["--redis-tb.policies[1].name=endpoint", f"--redis-tb.policies[1].limit={limit}",
                     "--redis-tb.policies[1].per=1s", "--redis-tb.policies[1].per-route=true",
                     "--redis-tb.policies[2].name=all", f"--redis-tb.policies[2].limit={limit}",
                     "--redis-tb.policies[2].per=1s", "--redis-tb.policies[2].key=fixed:all"]
    return args


def start_app(group: str, variant: str, redis_url: str, limit: int, logdir: Path,
              backend: str | None = None) -> tuple[Proc, int]:
    port = free_port()
    argv = ["java", "-XX:+UseSerialGC", "-XX:ActiveProcessorCount=1", "-Xms256m", "-Xmx256m",
            "-jar", str(GROUPS[group]["jar"]), f"--server.port={port}",
            *app_args(group, variant, redis_url, limit, backend)]
    return Proc(f"{group}-{variant}", pin(0, argv), logdir), port


def wait_ready(proc: Proc, port: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.p.poll() is not None:
            raise SystemExit(f"{proc.name} exited:\n{proc.log.read_text()[-3000:]}")
        try:
            if get(port) == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{proc.name} not ready:\n{proc.log.read_text()[-3000:]}")


def check_backend(proc: Proc, backend: str, redis_port: int) -> None:
    """Stops the run unless the app logged that it runs on the backend it was given."""
    want = expected_line(backend, redis_port)
    text = proc.log.read_text(errors="replace")
    if want not in text:
        got = [line for line in text.splitlines() if "redis-tb: backend" in line]
        raise SystemExit(f"{proc.name}: no line {want!r} in its log (SPEC E6); its backend lines: {got or 'none'}\n"
                         f"{text[-3000:]}")


def load(port: int, connections: int, seconds: float, app: int, redis: int) -> dict:
    """One closed-loop run: its JSON, with the app's and Redis's CPU per request (µs)."""
    a0, r0 = cpu_seconds(app), cpu_seconds(redis)
    out = subprocess.run(pin(1, ["node", str(LOADGEN), str(port), str(connections), str(seconds), "0", "65536",
                                 "/items/", "100"]), capture_output=True, text=True, check=True).stdout
    a1, r1 = cpu_seconds(app), cpu_seconds(redis)
    run = json.loads(out.strip().splitlines()[-1])
    n = max(1, run["all"])
    run["app_cpu_us"] = (a1 - a0) / n * 1e6
    run["redis_cpu_us"] = (r1 - r0) / n * 1e6
    return run


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio_text(xs: list[float]) -> str:
    return f"{med(xs):.2f}x (rounds {min(xs):.2f}-{max(xs):.2f})" if xs else "n/a"


def run_group(group: str, args: argparse.Namespace, redis: Proc, redis_port: int, logdir: Path) -> dict:
    spec = GROUPS[group]
    variants = [v for v in spec["variants"] if not args.only or v in args.only]
    url = f"redis://127.0.0.1:{redis_port}"
    apps: dict[str, tuple[Proc, int]] = {}
    backends = {v: backend_of(group, v, args.backends) for v in variants}
    try:
        for v in variants:
            apps[v] = start_app(group, v, url, args.limit, logdir, backends[v])
        for v in variants:
            wait_ready(*apps[v])
            if backends[v]:
                check_backend(apps[v][0], backends[v], redis_port)
                print(f"{group} {v}: {expected_line(backends[v], redis_port)}", file=sys.stderr, flush=True)
        for v in variants:  # the JIT compiles the hot path before anything is measured
            print(f"{group}: warming {v}", file=sys.stderr, flush=True)
            load(apps[v][1], args.connections, args.warmup, apps[v][0].p.pid, redis.p.pid)
        rounds: list[dict[str, dict]] = []
        for r in range(args.rounds):
            order = variants if r % 2 == 0 else list(reversed(variants))
            shift = r % len(order)
            order = order[shift:] + order[:shift]
            got: dict[str, dict] = {}
            for v in order:
                got[v] = load(apps[v][1], args.connections, args.seconds, apps[v][0].p.pid, redis.p.pid)
                statuses = got[v]["statuses"]
                if set(statuses) != {"200"}:
                    raise SystemExit(f"{group} {v}: statuses {statuses} (every request must be admitted)")
                print(f"{group} round {r + 1} {v}: {got[v]['rps']:.0f} req/s, app {got[v]['app_cpu_us']:.0f} us/req,"
                      f" redis-server {got[v]['redis_cpu_us']:.1f} us/req",
                      file=sys.stderr, flush=True)
            rounds.append(got)
        return {"variants": variants, "rounds": rounds, "backends": backends}
    finally:
        for proc, _ in apps.values():
            proc.stop()


def per_round(rounds: list[dict], fn) -> list[float]:
    out = []
    for got in rounds:
        try:
            out.append(fn(got))
        except (KeyError, ZeroDivisionError):
            pass
    return out


def report_backends(variants: list[str], rounds: list[dict]) -> list[str]:
    """--backends: the script backend over the module, and each against the floors (issue 42)."""
    pairs = [(n, m, sc) for n, m, sc in BACKENDS["pairs"] if m in variants and sc in variants]
    if not pairs:
        return []
    floors = [f for f in ("ping", "rawping") if f in variants]
    lines = ["", "### The two backends end to end", "",
             "The same app and policies on the same redis-server, `redis-tb.backend=module` against"
             " `redis-tb.backend=scripts` (Functions), each app's backend checked by its log line (SPEC E6)."
             " Scripts over module, medians of per-round ratios with their range: req/s (below 1: the scripts"
             " serve fewer), app CPU and redis-server CPU per request (above 1: the scripts cost more);"
             " then each backend's req/s over a floor's (module; scripts).", "",
             "| policies | scripts / module | req/s | app CPU per request | redis-server CPU per request | "
             + " | ".join(f"req/s over `{f}`: module; scripts" for f in floors) + " |",
             "|---|---|---:|---:|---:|" + "---:|" * len(floors)]
    def ratios(num: str, den: str, field: str) -> str:
        return ratio_text(per_round(rounds, lambda g: g[num][field] / g[den][field]))

    for name, mod, scr in pairs:
        cells = [f"{ratios(mod, f, 'rps')}; {ratios(scr, f, 'rps')}" for f in floors]
        lines.append(f"| {name} | `{scr}` / `{mod}` | {ratios(scr, mod, 'rps')} | {ratios(scr, mod, 'app_cpu_us')} |"
                     f" {ratios(scr, mod, 'redis_cpu_us')} | " + " | ".join(cells) + " |")
    shown = [x for _, m, sc in pairs for x in (m, sc)] + floors
    fewest = min((g[v]["all"] for g in rounds for v in shown), default=0)
    lines += ["", "Medians, µs per request, app / redis-server: "
              + "; ".join(f"`{v}` {med([g[v]['app_cpu_us'] for g in rounds]):.0f} /"
                          f" {med([g[v]['redis_cpu_us'] for g in rounds]):.1f}" for v in shown)
              + f". CPU times count in clock ticks of {1000 / TICK:g} ms: one tick is"
              f" {1e6 / TICK / max(1, fewest):.1f} µs per request at the fewest requests of a variant's run"
              f" ({fewest:,}); longer runs (--seconds) resolve the redis-server column finer."]
    return lines


def report_group(group: str, data: dict) -> list[str]:
    spec = GROUPS[group]
    variants, rounds = data["variants"], data["rounds"]
    rps = {v: med([g[v]["rps"] for g in rounds]) for v in variants}
    cpu = {v: med([g[v]["app_cpu_us"] for g in rounds]) for v in variants}
    rcpu = {v: med([g[v]["redis_cpu_us"] for g in rounds]) for v in variants}
    p50 = {v: med([g[v]["p50_us"] for g in rounds]) for v in variants}
    lines = [f"## {spec['title']}", ""]
    lines += ["| variant | req/s | vs none | app CPU per request (µs) | added vs none (µs) | redis-server CPU per request (µs) | p50 at 16 connections (µs) |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for v in variants:
        vs = f"{rps[v] / rps['none']:.2f}x" if "none" in rps else ""
        added = f"{cpu[v] - cpu['none']:+.0f}" if "none" in cpu and v != "none" else ""
        lines.append(f"| `{v}`: {spec['variants'][v]} | {rps[v]:.0f} | {vs} | {cpu[v]:.0f} | {added} | {rcpu[v]:.1f} | {p50[v]:.0f} |")
    lines += ["", "Each limiter against the raw round trip of its own Redis client (medians of per-round ratios, the range in"
              " brackets): req/s as the limiter's over the floor's (1 would be as fast as one bare command), app CPU as"
              " the floor's per request over the limiter's (1 would cost what one bare command costs).", "",
              "| limiter | its client's floor | / client floor, req/s | client floor CPU / its CPU | / raw-socket PING, req/s | raw-socket PING CPU / its CPU |",
              "|---|---|---:|---:|---:|---:|"]
    for lim, floor in spec["floors"].items():
        if lim not in variants or floor not in variants:
            continue
        a = per_round(rounds, lambda g: g[lim]["rps"] / g[floor]["rps"])
        b = per_round(rounds, lambda g: g[floor]["app_cpu_us"] / g[lim]["app_cpu_us"])
        c = per_round(rounds, lambda g: g[lim]["rps"] / g["rawping"]["rps"])
        d = per_round(rounds, lambda g: g["rawping"]["app_cpu_us"] / g[lim]["app_cpu_us"])
        lines.append(f"| `{lim}` | `{floor}` | {ratio_text(a)} | {ratio_text(b)} | {ratio_text(c)} | {ratio_text(d)} |")
    lines += report_backends(variants, rounds)
    lines += ["", "Head to head (above 1: redis-tb is faster / cheaper):", "",
              "| redis-tb | against | req/s, redis-tb over it | app CPU per request, its over redis-tb's |",
              "|---|---|---:|---:|"]
    for ours, theirs in spec["versus"]:
        if ours not in variants or theirs not in variants:
            continue
        a = per_round(rounds, lambda g: g[ours]["rps"] / g[theirs]["rps"])
        b = per_round(rounds, lambda g: g[theirs]["app_cpu_us"] / g[ours]["app_cpu_us"])
        lines.append(f"| `{ours}` | `{theirs}` | {ratio_text(a)} | {ratio_text(b)} |")
    lines += ["", "Requests per second, app CPU and redis-server CPU per request (µs) in each round:", "",
              "| round | " + " | ".join(f"`{v}`" for v in variants) + " |",
              "|---:|" + "---:|" * len(variants)]
    for i, g in enumerate(rounds, 1):
        lines.append(f"| {i} | " + " | ".join(f"{g[v]['rps']:.0f} / {g[v]['app_cpu_us']:.0f} / {g[v]['redis_cpu_us']:.1f}"
                                             for v in variants) + " |")
    return lines + [""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=10, help="seconds of load per variant before the rounds")
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--limit", type=int, default=1_000_000, help="per client per second (never reached)")
    ap.add_argument("--groups", default="servlet,gateway")
    ap.add_argument("--only", default="", help="comma-separated variants (a profile, a smoke run)")
    ap.add_argument("--backends", action="store_true",
                    help="the servlet group on both backends: tbs / tbs3 (redis-tb.backend=scripts) beside"
                         " tb / tb3 (forced to the module), and the report's table of the two (issue 42)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "integrations-java.md"))
    args = ap.parse_args()
    args.only = [v for v in args.only.split(",") if v]
    groups = [g for g in args.groups.split(",") if g]
    if args.backends:
        with_backends()
    for g in groups:
        if not GROUPS[g]["jar"].exists():
            raise SystemExit(f"{GROUPS[g]['jar']} is missing: build it first ({BUILD})")
    if not MODULE.exists():
        raise SystemExit(f"{MODULE} is missing: cargo build --release (or set REDIS_TB_MODULE)")
    logdir = Path(tempfile.mkdtemp(prefix="redis-tb-bench-java-"))
    redis, redis_port = start_redis(logdir)
    results = {}
    try:
        for g in groups:
            results[g] = run_group(g, args, redis, redis_port, logdir)
    finally:
        redis.stop()
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python3 bench/integrations/java/bench.py " + " ".join(sys.argv[1:])
    lines = ["# Java integrations: the rate limiter's cost per request (Spring MVC filter, Spring Cloud Gateway)", "",
             f"Written by `bench/integrations/java/bench.py` on {now}. Command (from the repository root, after"
             f" `{BUILD}`):", "", "```", cmd.strip(), "```", "",
             f"{os.cpu_count()} CPUs ({'apps on CPU 0, redis-server and the load generator on CPU 1' if PINNING else 'not pinned'}),"
             f" {java}, JVMs with -XX:+UseSerialGC -XX:ActiveProcessorCount=1 -Xmx256m, one per variant, all"
             f" serving for the whole group; {args.rounds} rounds of {args.seconds:g} s per variant after"
             f" {args.warmup:g} s of warm-up each, the order alternating; {args.connections} keep-alive connections;"
             " every request admitted (a limit of"
             f" {args.limit:,} a second per client address, 65,536 addresses). Other work on the same two cores moves"
             " single rounds; read the medians and the ranges, and the CPU columns before the req/s ones.", ""]
    for g in groups:
        lines += report_group(g, results[g])
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}", file=sys.stderr)
    shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    main()
