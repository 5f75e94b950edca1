"""Real processes for the suite: redis-server with the module and the example apps, each on
a free loopback port, with bounded start-up waits, always stopped (the whole process
group the suite started, by its id), logs kept in a temporary folder (KEEP_TEST_LOGS=1
keeps them after the run).

The minimum of testing/python/redis_tb_testing/servers.py, copied (the suite does not import from
another package's tests), plus the manifest-driven app start.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

from . import http, resp

REPO = Path(__file__).resolve().parents[3]
MODULE = Path(os.environ.get("REDIS_TB_MODULE", REPO / "target" / "release" / "libredis_tb.so"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
# HTTP_BACKEND: `module` (default), the suite's redis-servers load the module; `scripts`,
# they do not, so each app must choose the script library itself (SPEC E1) and the checks
# that read or plant state in Redis go through clients/lua/tb.lua (RedisServer.tb).
BACKEND = os.environ.get("HTTP_BACKEND", "module")
if BACKEND not in ("module", "scripts"):
    raise RuntimeError(f"HTTP_BACKEND must be module or scripts, got {BACKEND!r}")
# HTTP_APP_BACKEND: REDIS_TB_BACKEND for every app the suite starts (auto, module or
# scripts); unset: the app's default (auto). A REDIS_TB_BACKEND in the suite's own
# environment is never passed on.
APP_BACKEND = os.environ.get("HTTP_APP_BACKEND", "")
if APP_BACKEND not in ("", "auto", "module", "scripts"):
    raise RuntimeError(f"HTTP_APP_BACKEND must be auto, module or scripts, got {APP_BACKEND!r}")
LUA = REPO / "clients" / "lua" / "tb.lua"
START_TIMEOUT = 60.0  # seconds: generous, the machine may be busy


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10000 above it) is free too: a cluster node
    refuses a port above 55535."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port > 55535:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


class Process:
    def __init__(self, name: str) -> None:
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.logdir = Path(tempfile.mkdtemp(prefix=f"redis-tb-http-{name}-"))
        self.log = self.logdir / "out.log"

    def _spawn(self, argv: Sequence[str], cwd: Path | None = None, env: Mapping[str, str] | None = None) -> None:
        with self.log.open("ab") as out:
            # its own session, so that stop() ends every process it forks (gunicorn's
            # workers) and nothing else
            self.proc = subprocess.Popen(
                list(argv), cwd=cwd, env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self, sig: int = signal.SIGTERM) -> None:
        """Ends the process group it started and waits for the leader."""
        if self.proc is None:
            return
        pid = self.proc.pid
        if self.proc.poll() is None:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self.proc.wait(10)
        # children that outlived their leader (same group, ours)
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc = None

    def close(self) -> None:
        self.kill()
        if not os.environ.get("KEEP_TEST_LOGS"):
            shutil.rmtree(self.logdir, ignore_errors=True)


class RedisServer(Process):
    """redis-server on a free loopback port, persistence off, the module loaded when
    `module` is true (default: when HTTP_BACKEND is `module`; false: a server where an app
    must choose the scripts, or refuse when forced to the module, SPEC E1, U1); `cluster`
    makes it a one-node Redis Cluster owning every slot (SPEC U3, K6)."""

    def __init__(self, *, module: bool | None = None, cluster: bool = False) -> None:
        if module is None:
            module = BACKEND == "module"
        super().__init__("redis-cluster" if cluster else "redis" if module else "redis-bare")
        if module and not MODULE.exists():
            raise RuntimeError(f"{MODULE} is missing: build it with `cargo build --release` or set REDIS_TB_MODULE")
        self.module = module
        self.cluster = cluster
        self.port = free_cluster_port() if cluster else free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            argv = [
                REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", str(self.logdir),
            ]
            if self.module:
                argv += ["--loadmodule", str(MODULE)]
            if self.cluster:
                argv += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.logdir / "nodes.conf")]
            self._spawn(argv)
            try:
                self._wait_ping(deadline)
                if self.cluster:
                    self._own_every_slot(deadline)
                return self
            except _Exited:
                # the port may still be held right after a stop: try again until the deadline
                # (a cluster node, which is never restarted, on another pair of ports)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server exited at start:\n{self.output()}") from None
                if self.cluster:
                    self.port = free_cluster_port()
                time.sleep(0.2)

    def _wait_ping(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not self.alive():
                raise _Exited()
            try:
                if self.command("PING") == b"+PONG":
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill(signal.SIGKILL)
        raise RuntimeError(f"redis-server did not answer PING on {self.port} within {START_TIMEOUT} s:\n{self.output()}")

    def _own_every_slot(self, deadline: float) -> None:
        """One node serving all 16384 slots: CLUSTER ADDSLOTSRANGE, then cluster_state:ok."""
        if self.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383") != "OK":
            raise RuntimeError(f"CLUSTER ADDSLOTSRANGE failed:\n{self.output()}")
        while time.monotonic() < deadline:
            info = self.call("CLUSTER", "INFO")
            if isinstance(info, bytes) and b"cluster_state:ok" in info:
                return
            time.sleep(0.05)
        raise RuntimeError(f"the one-node cluster on {self.port} is not ok within {START_TIMEOUT} s")

    def call(self, *args: str | int | float) -> resp.Reply:
        """One command, its whole reply parsed (an error reply as resp.Error)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(resp.encode(*args))
            with s.makefile("rb") as f:
                return resp.read(f)

    def tb(self, command: str, key: str, *args: str | int | float) -> resp.Reply:
        """A single-key TB.* command (`tb("TB.PEEK", key, "HOLDS")`): sent as it is to a
        server with the module, else as the script library's call (clients/lua/README.md:
        `EVALSHA sha 1 key WORD args...`, the same reply), TB.HOLD and TB.ACQUIRE with the
        `ID` of 16 hex digits the scripts take from the caller (SPEC E4). The library is
        loaded with SCRIPT LOAD when the server does not have it (NOSCRIPT: a new or
        restarted server)."""
        word = command.upper()
        if not word.startswith("TB."):
            raise ValueError(f"not a TB.* command: {command}")
        if self.module:
            return self.call(word, key, *args)
        argv: list[str | int | float] = [word[3:], *args]
        if word in ("TB.HOLD", "TB.ACQUIRE"):
            argv += ["ID", secrets.token_hex(8)]
        reply = self.call("EVALSHA", _LUA_SHA, 1, key, *argv)
        if isinstance(reply, resp.Error) and reply.startswith("NOSCRIPT"):
            loaded = self.call("SCRIPT", "LOAD", LUA.read_text())
            if loaded != _LUA_SHA.encode():
                raise RuntimeError(f"SCRIPT LOAD of {LUA} answered {loaded!r}, not its SHA-1 {_LUA_SHA}")
            reply = self.call("EVALSHA", _LUA_SHA, 1, key, *argv)
        return reply

    def command(self, *args: str) -> bytes:
        """One command over RESP2; the first line of the reply (enough for PING/FLUSHALL)."""
        req = f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(req.encode())
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        return buf.split(b"\r\n", 1)[0]

    def flushall(self) -> None:
        reply = self.command("FLUSHALL")
        if reply != b"+OK":
            raise RuntimeError(f"FLUSHALL answered {reply!r}")

    def stop(self) -> None:
        """Redis disappears mid-run (SIGKILL, as a crash would)."""
        self.kill(signal.SIGKILL)


_LUA_SHA = hashlib.sha1(LUA.read_bytes()).hexdigest()


class _Exited(Exception):
    pass


class App(Process):
    """An example app started from its manifest entry: `start` (argv) in `cwd` with `env`,
    the placeholders {port}, {redis_url}, {trusted_proxies}, {python} and {repo} filled."""

    def __init__(self, name: str, entry: Mapping[str, object], redis_url: str, trusted: str, python: str) -> None:
        super().__init__(name)
        self.port = free_port()
        values = {
            "port": str(self.port), "redis_url": redis_url, "trusted_proxies": trusted,
            "python": python, "repo": str(REPO),
        }

        def fill(s: str) -> str:
            return s.format(**values)

        start = entry["start"]
        assert isinstance(start, dict)
        self.argv = [fill(a) for a in start["argv"]]
        self.cwd = REPO / fill(start["cwd"])
        inherited = {k: v for k, v in os.environ.items() if k != "REDIS_TB_BACKEND"}
        self.env = {**inherited, **{k: fill(v) for k, v in start.get("env", {}).items()}}
        if APP_BACKEND:
            self.env["REDIS_TB_BACKEND"] = APP_BACKEND
        ready = entry["ready"]
        assert isinstance(ready, dict)
        self.ready_path = str(ready["path"])
        self.ready_status = int(ready["status"])

    @property
    def base(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self) -> App:
        self._spawn(self.argv, cwd=self.cwd, env=self.env)
        return self

    def wait_ready(self) -> App:
        """Polls the manifest's readiness request until it answers as the manifest says."""
        deadline = time.monotonic() + START_TIMEOUT
        last = "no answer"
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited at start ({self.argv}):\n{self.output()}")
            try:
                r = http.request(self.base, "GET", self.ready_path, timeout=2)
                if r.status == self.ready_status:
                    return self
                last = f"status {r.status}"
            except OSError as e:
                last = str(e)
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not ready within {START_TIMEOUT} s ({last}):\n{self.output()}")
