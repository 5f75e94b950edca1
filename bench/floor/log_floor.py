"""The LOG floor measurement (bench/floor/log.sh runs it): TB.WINDOW LOG, as `make bench`
times it, against the module API calls a LOG call cannot avoid, and the design notes'
sliding log script.

usage: log_floor.py ROUNDS real.so floor.so floor-must.so

Every round starts one server per module (persistence off, server and redis-benchmark
pinned to separate cores where there are two), prepares 100,000 LOG keys exactly as
`make bench`'s LOG workload leaves them (5 entries older than the window, 15 inside it, in
whole microseconds), times `TB.WINDOW key 100 60 1 <fixed now> LOG` (500,000 pipelined
calls, -c 50 -P 16 -r 100000), and on the real module's server also 100,000 keys of the
notes' script at the same instant in ms. Prints req/s and server CPU per call, and the
medians of the per-round ratios to the script.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# bench/commands: the shared harness (tb_bench)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "commands"))
from tb_bench.common import seed_log_script  # noqa: E402
from tb_bench.resp import RespClient  # noqa: E402
from tb_bench.server import RedisServer, cpu_pinning  # noqa: E402

KEYS = 100_000
REQUESTS = 500_000
NOW = "1764456268.123456"
NOW_MS = "1764456268123"
STALE_US, FRESH_US = 1_764_456_193_123_456, 1_764_456_238_123_456  # 75 s and 30 s before
STALE, FRESH = 5, 15
SERVER_PIN, BENCH_PIN, _ = cpu_pinning()


class Server:
    """One variant's server (tb_bench's RedisServer: persistence off, pinned, stopped on
    exit) and the calls this measurement makes on it."""

    def __init__(self, module: str, workdir: Path) -> None:
        self.server = RedisServer("redis-server", Path(module), workdir, SERVER_PIN)
        self.server.__enter__()
        self.port = self.server.port

    def cli(self, *args: str, stdin: bytes | None = None) -> str:
        return subprocess.run(["redis-cli", "-p", str(self.port), *args], input=stdin,
                              capture_output=True).stdout.decode().strip()

    def pipe(self, commands: list[list[str]]) -> None:
        out = b"".join(RespClient.encode(c) for c in commands)
        subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input=out,
                       capture_output=True, check=True)

    def bench(self, command: list[str]) -> tuple[float, float]:
        before = self.server.cpu_seconds()
        out = subprocess.run(
            [*BENCH_PIN, "redis-benchmark", "-p", str(self.port), "-n", str(REQUESTS),
             "-c", "50", "-P", "16", "-r", str(KEYS), "-q", "--csv", *command],
            capture_output=True, text=True, check=True).stdout
        rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
        return rps, (self.server.cpu_seconds() - before) / REQUESTS * 1e6

    def stop(self) -> None:
        self.server.stop()


def log_entries() -> list[str]:
    """The ZADD arguments of a prepared LOG key: what TB.WINDOW leaves after one call of 5
    at the stale instant and one of 15 at the fresh one (checked against the real module)."""
    entries = [(STALE_US, f"{STALE_US}-{k}") for k in range(STALE)]
    entries += [(FRESH_US, f"{FRESH_US}-{STALE + k}") for k in range(FRESH)]
    return [x for score, member in entries for x in (str(score), member)]


def check_layout(server: Server) -> None:
    """The prepared keys are exactly what the real module writes for the same two calls."""
    server.cli("TB.WINDOW", "check", "100", "60", str(STALE), str(STALE_US / 1e6), "LOG")
    server.cli("TB.WINDOW", "check", "100", "60", str(FRESH), str(FRESH_US / 1e6), "LOG")
    server.pipe([["ZADD", "want", *log_entries()]])
    got = server.cli("ZRANGE", "check", "0", "-1", "WITHSCORES")
    want = server.cli("ZRANGE", "want", "0", "-1", "WITHSCORES")
    if got != want:
        raise SystemExit(f"prepared LOG keys differ from the module's own:\n{got}\n{want}")
    server.cli("FLUSHALL")


def prepare(server: Server, script: bool) -> None:
    server.cli("FLUSHALL")
    entries = log_entries()
    ms = [STALE_US // 1000 + i for i in range(STALE)] + [FRESH_US // 1000 + i for i in range(FRESH)]
    commands: list[list[str]] = []
    for i in range(KEYS):
        key = f"tb:{i:012d}"
        commands += [["ZADD", "l" + key, *entries], ["EXPIRE", "l" + key, "600"]]
        if script:
            commands += [["ZADD", "s" + key, *[str(x) for t in ms for x in (t, t)]],
                         ["EXPIRE", "s" + key, "600"]]
    server.pipe(commands)


def main() -> None:
    rounds, real, floor, must = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    variants = [("real", real), ("floor", floor), ("floor+must", must)]
    log = ["TB.WINDOW", "ltb:__rand_int__", "100", "60", "1", NOW, "LOG"]
    ratios: dict[str, list[float]] = {name: [] for name, _ in variants}
    cpus: dict[str, list[float]] = {name: [] for name, _ in variants + [("script", "")]}
    for r in range(1, rounds + 1):
        results: dict[str, tuple[float, float]] = {}
        for name, module in variants:
            workdir = tempfile.TemporaryDirectory(prefix="redis-tb-log-floor-")
            server = Server(module, Path(workdir.name))
            try:
                if name == "real":
                    check_layout(server)
                    sha = server.cli("SCRIPT", "LOAD", seed_log_script())
                prepare(server, script=name == "real")
                results[name] = server.bench(log)
                if name == "real":
                    results["script"] = server.bench(
                        ["EVALSHA", sha, "1", "stb:__rand_int__", NOW_MS, "60000", "100"])
            finally:
                server.stop()
                workdir.cleanup()
        script_rps = results["script"][0]
        for name, (rps, cpu) in results.items():
            cpus[name].append(cpu)
            if name != "script":
                ratios[name].append(rps / script_rps)
            print(f"round {r}  {name:10}  {rps:9.0f} req/s  {cpu:5.2f} us/call"
                  + ("" if name == "script" else f"  {rps / script_rps:.2f}x the script"),
                  flush=True)
    for name, values in ratios.items():
        print(f"{name:10}  median {statistics.median(values):.2f}x the notes' script "
              f"(rounds {min(values):.2f} .. {max(values):.2f}), "
              f"{statistics.median(cpus[name]):.2f} us/call")
    print(f"{'script':10}  {statistics.median(cpus['script']):.2f} us/call")


if __name__ == "__main__":
    main()
