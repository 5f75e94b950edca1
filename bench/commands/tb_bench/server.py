"""The redis-server under test (a private copy of the module, persistence off, pinned to
one core, always stopped), the module to load, and the description of the environment."""

from __future__ import annotations

import ctypes
import datetime as dt
import hashlib
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .common import DEFAULT_MODULE, REPO_ROOT, SetupError
from .resp import RedisError, RespClient

STARTUP_TIMEOUT_S = 15.0


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
    """A redis-server child with the module loaded (and any `extra` modules after it: the
    peer, redis-cell); a context manager that always stops it."""

    def __init__(self, binary: str, module: Path, workdir: Path, pin: list[str],
                 extra: list[Path] | None = None):
        self.binary, self.module, self.workdir, self.pin = binary, module, workdir, pin
        self.extra = list(extra or [])
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.argv: list[str] = []
        self.modules: dict[str, str] = {}  # MODULE LIST: name -> ver
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
            *[a for m in self.extra for a in ("--loadmodule", str(m))],
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
                        listed = [dict(zip(m[::2], m[1::2])) for m in c.call("MODULE", "LIST")]
                        self.modules = {m.get("name"): str(m.get("ver")) for m in listed}
                        if "tb" not in self.modules:
                            raise SetupError(f"module 'tb' not loaded (loaded: "
                                             f"{sorted(self.modules)})")
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

    def user_seconds(self) -> float:
        """utime alone: the server's user-space CPU (cpu_seconds minus the kernel's)."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) / os.sysconf("SC_CLK_TCK")

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
