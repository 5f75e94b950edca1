#!/usr/bin/env python3
"""Instructions per request of the before/after servers, counted by callgrind.

Wall time on a shared machine swings by a third from phase to phase; callgrind counts
the same instructions for the same binary and inputs. This runs each server that
`--bin before_after` built (today's and the baseline's, under the temporary
directory) under `valgrind --tool=callgrind`, sends it N and then N + 1000 sequential
keep-alive `GET /` requests, and prints the difference over 1000: the instructions of
the whole server process (hyper, axum, the layer, the redis crate) per request, startup
and connection setup cancelled out. The count is not quite fixed: tokio's timer wheel does
more or less work as more or less wall time passes under valgrind, so a build's counts
fall into two or three levels several hundred instructions apart, more often the busier
the machine. `--reps` alternates the two builds that many times and prints each build's
median and lowest count.

    OVERHEAD_BASELINE=88fc3cc cargo run --release -p redis-tb-bench-integrations --bin before_after
    python3 bench/integrations/rust/instructions.py --baseline 88fc3cc
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
REQUEST = b"GET / HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer alice-token\r\n\r\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answer(sock: socket.socket, buf: bytes) -> bytes:
    """Reads one response (status 200 required); returns what follows it."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("the server closed the connection")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"not a 200: {head[:80]!r}")
    match = re.search(rb"\r\ncontent-length: *(\d+)", head, re.I)
    length = int(match.group(1)) if match else 0
    while len(rest) < length:
        rest += sock.recv(65536)
    return rest[length:]


def count(binary: Path, variant: str, url: str, requests: int, out: Path) -> int:
    """Total instructions of `binary variant url` serving `requests` requests."""
    proc = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", str(binary), variant, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None and proc.stdin is not None
    line = proc.stdout.readline().decode()
    if not line.startswith("listening "):
        proc.kill()
        raise RuntimeError(f"{binary} {variant}: {line!r}")
    host, port = line.split()[1].rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        buf = b""
        for _ in range(requests):
            sock.sendall(REQUEST)
            buf = answer(sock, buf)
    proc.stdin.close()
    proc.wait(timeout=120)
    for text in out.read_text().splitlines():
        if text.startswith(("summary:", "totals:")):
            return int(text.split()[1])
    raise RuntimeError(f"no totals in {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the revision before_after was run with")
    parser.add_argument("--requests", type=int, default=200, help="the smaller count (N)")
    parser.add_argument("--variants", default="one,three")
    parser.add_argument("--reps", type=int, default=1, help="alternating counts of each build")
    args = parser.parse_args()
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{args.baseline}^{{commit}}"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    target = Path(tempfile.gettempdir()) / f"redis-tb-rust-baseline-{sha[:12]}" / "target" / "release"
    builds = {"now": target / "serve-now", "base": target / "serve-base"}
    for path in builds.values():
        if not path.exists():
            print(f"{path} is missing: run --bin before_after with OVERHEAD_BASELINE={args.baseline}", file=sys.stderr)
            return 1
    module = os.environ.get("REDIS_TB_MODULE", str(ROOT / "target/release/libredis_tb.so"))
    port = free_port()
    redis = subprocess.Popen(
        [os.environ.get("REDIS_SERVER", "redis-server"), "--port", str(port), "--save", "",
         "--appendonly", "no", "--loadmodule", module],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        url = f"redis://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory() as tmp:
            for variant in args.variants.split(","):
                per: dict[str, list[float]] = {name: [] for name in builds}
                for _ in range(args.reps):
                    for name, binary in builds.items():
                        small = count(binary, variant, url, args.requests, Path(tmp) / "small")
                        large = count(binary, variant, url, args.requests + 1000, Path(tmp) / "large")
                        per[name].append((large - small) / 1000)
                now, base = statistics.median(per["now"]), statistics.median(per["base"])
                line = (f"{variant}: today {now:,.0f} instructions/request, "
                        f"{args.baseline} {base:,.0f} ({now / base:.3f}x)")
                if args.reps > 1:
                    low_now, low_base = min(per["now"]), min(per["base"])
                    line += (f", medians of {args.reps}; lowest {low_now:,.0f} against "
                             f"{low_base:,.0f} ({low_now / low_base:.3f}x)")
                print(line, flush=True)
    finally:
        redis.kill()
        redis.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
