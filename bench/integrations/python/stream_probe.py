"""Issue 39's stream probes (L3, L4, L5) against the Python examples' ``GET /stream``:
what one client can cost a server by asking for a long stream and then not reading it,
or by going away mid-stream, and whether another client's lease survives meanwhile.

For each example (``fastapi``, ``django-wsgi``, ``django-asgi``, started as
examples/manifest.json says, against a redis-server with the module):

- ``stalled``: a client asks ``/stream?tokens=N`` (delay 0), reads 4 KiB and then nothing
  for ``--stall`` seconds, then reads what comes (``complete``: up to ``[DONE]``; ``cut``:
  the server closed it before; ``open``: still going after 2 s of silence);
- ``gone``: a client asks the same and closes after 4 KiB;
- ``slow-stalled``: as ``stalled`` with ``delay_ms=10`` (10000 tokens: a 100 s stream, so
  a client that reads nothing keeps it going unless the server ends it: N7's 6 s);

while a second client (another address) holds a slow stream of its own (20 tokens, 250 ms
apart: 5 s, within the examples' 6 s max_duration, renewed every second on a 2 s lease)
and a third asks ``GET /healthz`` every
100 ms. Reported per scenario: the answer's status, the app's peak RSS and CPU seconds
(the process tree: gunicorn's worker included) during the scenario and in the
``--after`` seconds after the client closed, the slowest ``/healthz`` (event-loop or
worker blocking), the lines and bytes the app logged, how the stalled stream ended, the
second client's answer (``[DONE]``, or ``cut``), and the
example's ``redis_tb_leases_expired_total`` and ``redis_tb_leases_timed_out_total`` after
it (a late renewal of the second client's lease shows as an expired lease).

    python bench/integrations/python/stream_probe.py [--repo .] [--tokens 1000000,10000] \\
        [--stall 8] [--after 5] [--examples fastapi,django-wsgi,django-asgi] \\
        [--kinds stalled,gone,slow-stalled]

``--repo`` is the checkout whose examples run (its own clients/python must be the one
installed in this Python); prints a Markdown table. Nothing here is asserted: the numbers
are for docs and reports.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2] / "testing" / "python"))

from redis_tb_testing.servers import RedisServer, free_port  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (gunicorn's master and worker)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def usage(pid: int) -> tuple[float, int]:
    """CPU seconds (user + system) and RSS bytes of the process tree."""
    cpu, rss = 0.0, 0
    for p in tree(pid):
        try:
            stat = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(stat[11]) + int(stat[12])) / TICKS
            rss += int(Path(f"/proc/{p}/statm").read_text().split()[1]) * PAGE
        except OSError:
            pass
    return cpu, rss


class Sampler(threading.Thread):
    """Peak RSS of the process tree, every 50 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, usage(self.pid)[1])


class Health(threading.Thread):
    """The slowest ``GET /healthz`` answer, one every 100 ms."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base, self.worst, self.stop = base, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            t = time.monotonic()
            try:
                urllib.request.urlopen(self.base + "/healthz", timeout=30).read()
            except OSError:
                pass
            self.worst = max(self.worst, time.monotonic() - t)


def slow_stream(port: int, source: str, out: dict[str, Any]) -> None:
    """The second client: a 5 s stream of its own, read as it comes."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as s:
            s.sendall(b"GET /stream?tokens=20&delay_ms=250&max_tokens=20 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            got = b""
            while chunk := s.recv(65536):
                got += chunk
            out["status"] = got[9:12].decode()
            out["done"] = b"[DONE]" in got
    except OSError as exc:
        out["error"] = str(exc)


def metric(base: str, name: str) -> float:
    text = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.M))


def scenario(app: subprocess.Popen[bytes], log: Path, base: str, port: int, kind: str, tokens: int,
             stall: float, after: float) -> dict[str, Any]:
    second: dict[str, Any] = {}
    other = threading.Thread(target=slow_stream, args=(port, "127.0.0.3", second), daemon=True)
    other.start()
    time.sleep(0.5)
    sampler, health = Sampler(app.pid), Health(base)
    sampler.start()
    health.start()
    logged = log.stat().st_size
    lines = log.read_text(errors="replace").count("\n")
    cpu0 = usage(app.pid)[0]
    ended = "-"
    s = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=("127.0.0.2", 0))
    delay = 10 if kind == "slow-stalled" else 0
    s.sendall(f"GET /stream?tokens={tokens}&delay_ms={delay} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    head = s.recv(4096)
    status = head[9:12].decode() or "none"
    if kind != "gone" and status == "200":
        time.sleep(stall)
        # then read: [DONE] is a complete stream; an EOF without it, a stream the
        # server ended (N7); neither within 2 s of silence, a stream still open
        s.settimeout(2)
        got, ended = head, "open"
        try:
            while True:
                chunk = s.recv(1 << 20)
                if not chunk:
                    ended = "complete" if b"[DONE]" in got[-64:] else "cut"
                    break
                got += chunk[-64:]
        except OSError:
            pass
    s.close()
    cpu1 = usage(app.pid)[0]
    time.sleep(after)
    cpu2 = usage(app.pid)[0]
    sampler.stop.set()
    health.stop.set()
    other.join(30)
    text = log.read_text(errors="replace")
    return {
        "status": status, "peak_rss_mb": sampler.peak / 2**20, "cpu_during": cpu1 - cpu0, "cpu_after": cpu2 - cpu1,
        "worst_healthz_s": health.worst, "log_lines": text.count("\n") - lines, "log_bytes": log.stat().st_size - logged,
        "ended": ended, "second": second,
        "leases_expired": metric(base, "redis_tb_leases_expired_total"),
        "leases_timed_out": metric(base, "redis_tb_leases_timed_out_total"),
    }


def start(repo: Path, name: str, redis: RedisServer, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    entry = json.loads((repo / "examples" / "manifest.json").read_text())["examples"][name]
    port = free_port()
    argv = [a.replace("{python}", sys.executable).replace("{port}", str(port)) for a in entry["start"]["argv"]]
    env = {**os.environ, **{k: v.replace("{redis_url}", redis.url).replace("{trusted_proxies}", "")
                            for k, v in entry["start"]["env"].items()}}
    app = subprocess.Popen(argv, cwd=repo / entry["start"]["cwd"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
            return app, port
        except OSError:
            time.sleep(0.1)
    app.kill()
    raise RuntimeError(f"{name} did not start:\n{log.read_text(errors='replace')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=HERE.parents[2])
    ap.add_argument("--tokens", default="1000000,10000")
    ap.add_argument("--stall", type=float, default=8.0)
    ap.add_argument("--after", type=float, default=5.0)
    ap.add_argument("--examples", default="fastapi,django-wsgi,django-asgi")
    ap.add_argument("--kinds", default="stalled,gone", help="of stalled, gone, slow-stalled")
    args = ap.parse_args()
    print("| example | tokens | client | status | peak RSS MB | CPU s during | CPU s after | worst /healthz s "
          "| log lines | log bytes | stalled stream after the stall | second stream | leases expired | timed out |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.examples.split(","):
        for tokens in (int(t) for t in args.tokens.split(",")):
            for kind in args.kinds.split(","):
                redis = RedisServer().start()
                log = redis.logdir / "app.log"
                app, port = start(args.repo.resolve(), name, redis, log)
                try:
                    r = scenario(app, log, f"http://127.0.0.1:{port}", port, kind, tokens, args.stall, args.after)
                finally:
                    app.terminate()
                    try:
                        app.wait(10)
                    except subprocess.TimeoutExpired:
                        app.kill()
                    redis.stop()
                second = r["second"]
                second_text = second.get("error") or f"{second.get('status')} {'[DONE]' if second.get('done') else 'cut'}"
                print(f"| {name} | {tokens} | {kind} | {r['status']} | {r['peak_rss_mb']:.0f} | {r['cpu_during']:.2f} "
                      f"| {r['cpu_after']:.2f} | {r['worst_healthz_s']:.3f} | {r['log_lines']} | {r['log_bytes']} "
                      f"| {r['ended']} | {second_text} | {r['leases_expired']:g} "
                      f"| {r['leases_timed_out']:g} |", flush=True)


if __name__ == "__main__":
    main()
