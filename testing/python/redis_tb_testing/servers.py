"""Real processes for the tests: redis-server with the module, uvicorn apps.

Free loopback ports, bounded start-up waits, always stopped. The module path is
``target/release/libredis_tb.so`` of this repo unless ``REDIS_TB_MODULE`` says
otherwise; the server binary is ``redis-server`` unless ``REDIS_SERVER`` says so.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Mapping, Sequence

REPO = Path(__file__).resolve().parents[3]
MODULE = Path(os.environ.get("REDIS_TB_MODULE", REPO / "target" / "release" / "libredis_tb.so"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "redis-server")
START_TIMEOUT = 60.0  # seconds: generous, the CI machine may be busy


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{what} did not listen on {port} within {START_TIMEOUT} s:\n{log.read_text(errors='replace')}")


class Process:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.logdir = Path(tempfile.mkdtemp(prefix="redis-tb-test-"))
        self.log = self.logdir / "out.log"

    def stop(self) -> None:
        """Stop the process and remove its log (set KEEP_TEST_LOGS=1 to keep logs)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGCONT)  # in case a test froze it
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
            self.proc = None
        if not os.environ.get("KEEP_TEST_LOGS"):
            shutil.rmtree(self.logdir, ignore_errors=True)

    def freeze(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


class RedisServer(Process):
    """redis-server on a free loopback port, persistence off, the module loaded.
    ``cluster=True``: a single-node Redis Cluster (``cluster-enabled yes``, every slot
    assigned to it), which answers CROSSSLOT to a call whose keys are in different
    slots and ``mode cluster`` to HELLO."""

    def __init__(
        self, *, module: bool = True, port: int | None = None, cluster: bool = False, extra: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.module = module
        #: more redis-server arguments (``--rename-command TIME ""``)
        self.extra = tuple(extra)
        self.cluster = cluster
        self.port = port or free_port()
        if module and not MODULE.exists():
            raise RuntimeError(
                f"{MODULE} is missing: build it with `cargo build --release` or set REDIS_TB_MODULE"
            )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [
            REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.logdir),
        ]
        if self.module:
            args += ["--loadmodule", str(MODULE)]
        args += self.extra
        if self.cluster:
            # the bus port on a free port of its own: port + 10000 (the default) may be taken,
            # or above 65535
            args += [
                "--cluster-enabled", "yes", "--cluster-config-file", str(self.logdir / "nodes.conf"),
                "--cluster-port", str(free_port()),
            ]
        self.proc = subprocess.Popen(args, stdout=self.log.open("wb"), stderr=subprocess.STDOUT)
        _wait_port(self.port, self.proc, "redis-server", self.log)
        if self.cluster:
            self._own_every_slot()
        return self

    def _own_every_slot(self) -> None:
        if "cluster_state:ok" not in self.cli("CLUSTER", "INFO"):
            self.cli("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        deadline = time.monotonic() + START_TIMEOUT
        while "cluster_state:ok" not in self.cli("CLUSTER", "INFO"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster node on {self.port} never reached cluster_state:ok")
            time.sleep(0.05)

    def cli(self, *args: str) -> str:
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args], capture_output=True, text=True, timeout=30
        )
        return out.stdout


class Uvicorn(Process):
    """``python -m uvicorn module:app`` on a free loopback port, configured by env."""

    def __init__(self, app: str, app_dir: Path, env: Mapping[str, str], extra: Sequence[str] = ()) -> None:
        super().__init__()
        self.port = free_port()
        self.app = app
        self.app_dir = app_dir
        self.env = {**os.environ, **env}
        self.extra = list(extra)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> Uvicorn:
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "uvicorn", self.app, "--app-dir", str(self.app_dir),
                "--host", "127.0.0.1", "--port", str(self.port),
                "--no-access-log", "--log-level", "warning", "--lifespan", "on",
                # uvicorn rewrites the peer from X-Forwarded-For when the peer is in
                # --forwarded-allow-ips (default 127.0.0.1): leave that to redis-tb
                "--no-proxy-headers", *self.extra,
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        return self

    def wait_ready(self) -> Uvicorn:
        assert self.proc is not None
        _wait_port(self.port, self.proc, f"uvicorn {self.app}", self.log)
        return self

    def start(self) -> Uvicorn:
        return self.spawn().wait_ready()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Gunicorn(Process):
    """``python -m gunicorn <app>`` (one worker; ``threads`` > 0: the gthread worker) on a
    free loopback port, from ``chdir``, configured by env."""

    def __init__(self, app: str, chdir: Path, env: Mapping[str, str], threads: int = 0) -> None:
        super().__init__()
        self.port = free_port()
        self.app = app
        self.chdir = chdir
        self.env = {**os.environ, **env}
        self.threads = threads

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def spawn(self) -> Gunicorn:
        threads = ["--threads", str(self.threads)] if self.threads else []
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "gunicorn", self.app, "--chdir", str(self.chdir),
                "--bind", f"127.0.0.1:{self.port}", "--workers", "1", *threads,
                "--no-control-socket", "--log-level", "warning",
            ],
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.chdir,  # as a project runs it: gunicorn reads ./gunicorn.conf.py from here
        )
        return self

    def wait_ready(self) -> Gunicorn:
        assert self.proc is not None
        _wait_port(self.port, self.proc, f"gunicorn {self.app}", self.log)
        return self

    def start(self) -> Gunicorn:
        return self.spawn().wait_ready()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_all(servers: Sequence[Uvicorn]) -> None:
    """Start several apps at once (their imports overlap), then wait for each."""
    for s in servers:
        s.spawn()
    for s in servers:
        s.wait_ready()
