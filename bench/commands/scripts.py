#!/usr/bin/env python3
"""The script backend (clients/lua, issue 42) against the module and against the scripts
people run instead, side by side in one run on one server: server CPU per call and
throughput, as ratios (bench/results/scripts.md). `make bench-scripts`.

Workloads (every one a token bucket taking 1 of a large bucket, so every call is admitted
and writes; 10,000 keys; on the server's clock unless the script needs the caller's):

  module       TB.TAKE key 1000000 1000000 1                  (the module)
  fcall        FCALL tb_take 1 key 1000000 1000000 1          (clients/lua as Functions)
  evalsha      EVALSHA <tb.lua> 1 key TAKE 1000000 1000000 1  (clients/lua as a script)
  notes        the design notes' own token bucket script, read from the notes at run time
               (../shared/seeds/000_*.txt or REDIS_TB_SEEDS; never copied here), with the
               caller's now, as bench/bench.py runs it
  spring       Spring Cloud Gateway's RedisRateLimiter script (request_rate_limiter.lua
               from the spring-cloud-gateway-server jar), two keys, ARGV rate capacity ""
               requested as RedisRateLimiter sends them (the empty now: TIME)
  upstash      @upstash/ratelimit's tokenBucket script, ARGV maxTokens interval refillRate
               now(ms) incrementBy as Ratelimit.tokenBucket sends them
  redis_rate   go-redis/redis_rate's allowN (GCRA), ARGV burst rate period cost

Each peer script is taken from its current release at bench time, through the package
registries' own clients (npm pack, go mod download, mvn dependency:get), into
${REDIS_TB_CACHE:-~/.cache/redis-tb}/peers: never committed. A peer that cannot be fetched
is reported as such; the rest still runs.

How: one redis-server (module loaded, library loaded both ways, peers loaded) pinned to one
core, redis-benchmark (-c 4) pinned to the other; every workload warmed once, then ROUNDS
rounds, interleaved; server CPU per call from /proc/<pid>/stat over each timed run;
medians over rounds; ratios taken within a round. Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from tb_bench.common import DEFAULT_MODULE, REPO_ROOT, RESULTS_DIR, SetupError, seed_script  # noqa: E402
from tb_bench.resp import RespClient  # noqa: E402

CACHE = Path(os.environ.get("REDIS_TB_CACHE", Path.home() / ".cache" / "redis-tb")) / "peers"
LIBRARY = REPO_ROOT / "clients" / "lua" / "tb.lua"
FUNCTIONS = REPO_ROOT / "clients" / "lua" / "functions.lua"
KEYS = 10_000
BIG = "1000000"
# The caller's now for the scripts that take one (fixed: no refill, every call admitted).
NOW_S = "1764456268.123456"
NOW_MS = "1764456268123"


def run(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SetupError(f"{' '.join(cmd)}: {r.stderr.strip()[-400:]}")
    return r.stdout


# ---------------------------------------------------------------------------------------
# The peers, from their current releases


def upstash() -> tuple[str, str]:
    """@upstash/ratelimit's token bucket script, from the npm package's dist/index.js."""
    version = run(["npm", "view", "@upstash/ratelimit", "version"]).strip()
    dest = CACHE / f"upstash-ratelimit-{version}"
    if not (dest / "package" / "dist" / "index.js").exists():
        dest.mkdir(parents=True, exist_ok=True)
        out = run(["npm", "pack", f"@upstash/ratelimit@{version}", "--pack-destination", str(dest)])
        tgz = dest / out.strip().splitlines()[-1]
        shutil.unpack_archive(str(tgz), str(dest))
    js = (dest / "package" / "dist" / "index.js").read_text()
    m = re.search(r"var tokenBucketLimitScript = `(.*?)`;", js, re.S)
    if not m:
        raise SetupError("tokenBucketLimitScript not found in @upstash/ratelimit's dist/index.js")
    return m.group(1), f"@upstash/ratelimit {version}"


def redis_rate() -> tuple[str, str]:
    """go-redis/redis_rate's allowN, from lua.go of the module's latest version."""
    env = dict(os.environ, GOFLAGS="-mod=mod", GOPATH=str(CACHE / "go"))
    info = json.loads(run(["go", "mod", "download", "-json",
                           "github.com/go-redis/redis_rate/v10@latest"], env=env))
    src = (Path(info["Dir"]) / "lua.go").read_text()
    m = re.search(r"var allowN = redis\.NewScript\(`(.*?)`\)", src, re.S)
    if not m:
        raise SetupError("allowN not found in redis_rate's lua.go")
    return m.group(1), f"go-redis/redis_rate {info['Version']}"


def spring() -> tuple[str, str]:
    """request_rate_limiter.lua from the spring-cloud-gateway-server jar's latest release."""
    repo = CACHE / "m2"
    artifact = "org.springframework.cloud:spring-cloud-gateway-server"
    run(["mvn", "-q", "-B", f"-Dmaven.repo.local={repo}", "dependency:get",
         f"-Dartifact={artifact}:RELEASE:jar", "-Dtransitive=false"])
    base = repo / "org" / "springframework" / "cloud" / "spring-cloud-gateway-server"
    meta = next(base.glob("maven-metadata*.xml")).read_text()
    version = re.search(r"<release>([^<]+)</release>", meta).group(1)
    jar = base / version / f"spring-cloud-gateway-server-{version}.jar"
    with zipfile.ZipFile(jar) as z:
        text = z.read("META-INF/scripts/request_rate_limiter.lua").decode()
    return text, f"spring-cloud-gateway-server {version}"


# ---------------------------------------------------------------------------------------
# The server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(tmp: Path, module: Path) -> tuple[subprocess.Popen, int]:
    port = free_port()
    copy = tmp / "libredis_tb.so"
    shutil.copy(module, copy)
    server = os.environ.get("REDIS_SERVER", "redis-server")
    cmd = ["taskset", "-c", "0", server, "--port", str(port), "--bind", "127.0.0.1",
           "--save", "", "--appendonly", "no", "--dir", str(tmp), "--loadmodule", str(copy)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            with RespClient(port) as c:
                if c.call("PING") == "PONG":
                    return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SetupError("redis-server did not start")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_once(pid: int, port: int, argv: list[str], requests: int) -> tuple[float, float]:
    """(requests per second, server CPU microseconds per call) of one timed run."""
    before = cpu_seconds(pid)
    out = run(["taskset", "-c", "1", "redis-benchmark", "-p", str(port), "-c", "4",
               "-n", str(requests), "-r", str(KEYS), "--csv", *argv])
    after = cpu_seconds(pid)
    rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    return rps, (after - before) * 1e6 / requests


# ---------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS_DIR / "scripts.md"))
    args = ap.parse_args()
    module = Path(os.environ.get("REDIS_TB_MODULE", DEFAULT_MODULE))
    if not module.exists():
        raise SetupError(f"{module} not built (make build)")
    CACHE.mkdir(parents=True, exist_ok=True)
    peers: dict[str, tuple[str, str]] = {}
    missing: dict[str, str] = {}
    for name, fetch in (("spring", spring), ("upstash", upstash), ("redis_rate", redis_rate)):
        try:
            peers[name] = fetch()
        except (SetupError, OSError, StopIteration, AttributeError, KeyError) as e:
            missing[name] = str(e)
    try:
        peers["notes"] = (seed_script(), "the design notes' token_bucket.lua")
    except SetupError as e:
        missing["notes"] = str(e)

    tmp = Path(tempfile.mkdtemp(prefix="redis-tb-bench-scripts-"))
    proc, port = start_server(tmp, module)
    try:
        with RespClient(port) as c:
            sha = c.call("SCRIPT", "LOAD", LIBRARY.read_text())
            library = LIBRARY.read_text().split("-- EVAL entry:")[0]
            c.call("FUNCTION", "LOAD", "REPLACE", "#!lua name=tb\n" + library + FUNCTIONS.read_text())
            shas = {}
            notes = []
            for name, (text, _) in peers.items():
                try:
                    shas[name] = c.call("SCRIPT", "LOAD", text)
                except Exception as e:  # a shebang flag this server does not know
                    if text.startswith("#!lua"):
                        stripped = text.split("\n", 1)[1]
                        shas[name] = c.call("SCRIPT", "LOAD", stripped)
                        notes.append(f"{name}: this server refused the script's shebang "
                                     f"line ({e}); loaded without it (the body unchanged)")
                    else:
                        missing[name] = f"SCRIPT LOAD: {e}"
            redis_version = c.call("INFO", "server").split("redis_version:")[1].split()[0]
        k = "k:__rand_int__"
        workloads: list[tuple[str, str, list[str]]] = [
            ("module", "TB.TAKE (the module)", ["TB.TAKE", k, BIG, BIG, "1"]),
            ("fcall", "clients/lua, FCALL tb_take", ["FCALL", "tb_take", "1", k, BIG, BIG, "1"]),
            ("evalsha", "clients/lua, EVALSHA ... TAKE", ["EVALSHA", sha, "1", k, "TAKE", BIG, BIG, "1"]),
        ]
        if "notes" in shas:
            workloads.append(("notes", peers["notes"][1],
                              ["EVALSHA", shas["notes"], "1", "n:__rand_int__", BIG, BIG, "1", NOW_S]))
        if "spring" in shas:
            workloads.append(("spring", peers["spring"][1] + " request_rate_limiter.lua",
                              ["EVALSHA", shas["spring"], "2", "s:__rand_int__.tokens",
                               "s:__rand_int__.timestamp", BIG, BIG, "", "1"]))
        if "upstash" in shas:
            workloads.append(("upstash", peers["upstash"][1] + " tokenBucket",
                              ["EVALSHA", shas["upstash"], "1", "u:__rand_int__", BIG, "1000",
                               BIG, NOW_MS, "1"]))
        if "redis_rate" in shas:
            workloads.append(("redis_rate", peers["redis_rate"][1] + " allowN (GCRA)",
                              ["EVALSHA", shas["redis_rate"], "1", "g:__rand_int__", BIG, BIG, "1", "1"]))
        # Each reply checked once: admitted, not an error.
        with RespClient(port) as c:
            for wid, _, argv in workloads:
                r = c.call(*[a.replace("__rand_int__", "check") for a in argv])
                if not isinstance(r, list) or r[0] in (0, -1):
                    raise SetupError(f"{wid}: unexpected reply {r!r}")
        for _, _, argv in workloads:  # warm: every key created
            bench_once(proc.pid, port, argv, args.requests // 4)
        results: dict[str, list[tuple[float, float]]] = {w[0]: [] for w in workloads}
        for _ in range(args.rounds):
            for wid, _, argv in workloads:
                results[wid].append(bench_once(proc.pid, port, argv, args.requests))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)

    def ratio(wid: str, base: str, i: int) -> float:
        return statistics.median(results[wid][r][i] / results[base][r][i] for r in range(args.rounds))

    lines = [
        "# The script backend against the module and the scripts people run instead",
        "",
        f"`make bench-scripts` (`python3 bench/scripts.py --requests {args.requests} --rounds {args.rounds}`), "
        f"Redis {redis_version}, {platform.machine()}, server and redis-benchmark (`-c 4`, "
        f"{KEYS:,} keys) on one core each, {args.rounds} interleaved rounds, medians; ratios "
        "taken within a round. Every call takes 1 token of a bucket of 1,000,000 (all "
        "admitted, all write). Server CPU from /proc/<pid>/stat over each timed run.",
        "",
        "| workload | server CPU µs/call | x module | x clients/lua EVALSHA | calls/s | module's calls/s ÷ this |",
        "|---|---|---|---|---|---|",
    ]
    for wid, label, _ in workloads:
        cpu = statistics.median(r[1] for r in results[wid])
        rps = statistics.median(r[0] for r in results[wid])
        lines.append(f"| {label} | {cpu:.2f} | {ratio(wid, 'module', 1):.1f} | "
                     f"{ratio(wid, 'evalsha', 1):.2f} | {rps:,.0f} | {1 / ratio(wid, 'module', 0):.2f} |")
    lines += ["", "What each does per call (why the costs differ):", "",
              "- TB.TAKE: the module's take, in C and Rust; no script machinery.",
              "- clients/lua: the module's rules to the bit (its number texts, expiry plan, "
              "owner checks, corrupt-state refusals); FCALL keeps the library built, EVALSHA "
              "builds its core and the bucket part on every call.",
              "- the notes' script: HMGET, the refill, HSET, EXPIRE; the caller's now.",
              "- Spring: two GETs and two SETEXs on two keys; TIME.",
              "- @upstash/ratelimit: HMGET, a refill in whole intervals, HSET, PEXPIRE; the caller's now (ms).",
              "- redis_rate: GET, GCRA arithmetic on TIME, SET EX.",
              "",
              "Throughput is one client machine's: redis-benchmark and the server share this "
              "two-core host, so calls/s mostly tracks round trips; server CPU per call is the "
              "cost a server pays.", ""]
    if notes or missing:
        lines += ["Notes:", ""]
        lines += [f"- {n}" for n in notes]
        lines += [f"- {name}: not run ({why})" for name, why in missing.items()]
        lines.append("")
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as e:
        print(f"bench/scripts.py: {e}", file=sys.stderr)
        sys.exit(2)
