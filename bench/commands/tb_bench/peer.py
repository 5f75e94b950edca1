"""redis-cell, the peer of issue 12 (and of issue 18: the current release, 0.5.0), built
from its release source outside the repository, cached, and loaded into the same server as
the module.

The source is the release tarball (its repository at the 0.5.0 commit, LICENSE inside):

    ${REDIS_CELL_TARBALL:-<checkout>/../shared/peers/redis-cell-0.5.0.tar.gz}

The crate registry only carries 0.2.2 (2018), which is slower and behaves differently
(rounding, corrupt values, no replication), so it is not the peer users run; see
bench/results/redis-cell-0.5.0.md.

The tarball is unpacked into a cache directory keyed by its sha256,

    ${REDIS_TB_CACHE:-~/.cache/redis-tb}/redis-cell-0.5.0-<first 16 hex of sha256>/

and built there with `cargo build --release --locked` (the tarball's own Cargo.lock; its
dependencies come from crates.io through cargo's normal configuration) into a target
directory of its own. The .so is kept at <cache>/libredis_cell.so and later runs use it
without building (delete the directory to rebuild); a changed tarball gets a directory of
its own. A failed build is not cached: the next run tries again.

REDIS_CELL_MODULE overrides all this: a path to a libredis_cell.so to load as is, or
`off` to run without the peer. Nothing here raises: a failure comes back as a message for
the report, and the benchmark goes on without redis-cell.

`python3 -m tb_bench.peer` (from bench/commands/) builds or finds it and prints the .so's path
(bench/floor/run.sh and bench/commands/cell_facts.py use this).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from .common import REPO_ROOT

REDIS_CELL_VERSION = "0.5.0"
DEFAULT_TARBALL = REPO_ROOT.parent / "shared" / "peers" / f"redis-cell-{REDIS_CELL_VERSION}.tar.gz"
BUILD_TIMEOUT_S = 900


@dataclass
class Peer:
    """What the benchmark knows about redis-cell before the server starts."""
    path: Path | None   # the .so to load, or None (then `error` says why)
    how: str            # where it came from (cached, built just now, REDIS_CELL_MODULE)
    error: str = ""     # why there is no .so: a failed build, or switched off
    version: str = REDIS_CELL_VERSION


def tarball() -> Path:
    return Path(os.environ.get("REDIS_CELL_TARBALL") or DEFAULT_TARBALL).expanduser()


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_dir(digest: str) -> Path:
    root = os.environ.get("REDIS_TB_CACHE") or str(Path.home() / ".cache" / "redis-tb")
    return Path(root) / f"redis-cell-{REDIS_CELL_VERSION}-{digest[:16]}"


def _tail(text: str, lines: int = 6) -> str:
    """The gist of cargo's output on one line: its first error lines, else its last lines."""
    all_lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in all_lines if ln.startswith("error")]
    return " | ".join(errors[:4] or all_lines[-lines:])


class _Failed(Exception):
    pass


def _run(argv: list[str], cwd: Path, env: dict[str, str], log) -> str:
    """Runs one cargo step in `cwd`, logging it; raises _Failed with its last lines."""
    log.write(f"\n$ (cd {cwd} && {' '.join(argv)})\n")
    log.flush()
    try:
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise _Failed(f"`{' '.join(argv)}` took over {BUILD_TIMEOUT_S} s") from None
    log.write(proc.stderr)
    if proc.returncode != 0:
        raise _Failed(f"`{' '.join(argv)}` failed ({proc.returncode}): "
                      f"{_tail(proc.stderr + proc.stdout)}")
    return proc.stdout


def _unpack(archive: Path, dest: Path) -> Path:
    """The tarball unpacked into `dest` (no member may leave it); the directory holding
    its Cargo.toml, checked to be redis-cell REDIS_CELL_VERSION."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            target = (dest / m.name).resolve()
            if not (m.isfile() or m.isdir()) or not str(target).startswith(str(dest.resolve())):
                raise _Failed(f"{archive}: refusing member {m.name!r} (not a plain file or "
                              "directory inside the archive's folder)")
        tar.extractall(dest)
    manifests = sorted(dest.glob("*/Cargo.toml")) + sorted(dest.glob("Cargo.toml"))
    if not manifests:
        raise _Failed(f"{archive} holds no Cargo.toml")
    text = manifests[0].read_text()
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M)
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if not name or name.group(1) != "redis-cell" or not version \
            or version.group(1) != REDIS_CELL_VERSION:
        raise _Failed(f"{archive} is not redis-cell {REDIS_CELL_VERSION} "
                      f"({name and name.group(1)} {version and version.group(1)})")
    return manifests[0].parent


def _build(cache: Path, so: Path, archive: Path, digest: str) -> None:
    if not shutil.which("cargo"):
        raise _Failed("cargo not found on PATH")
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = str(cache / "target")
    env.pop("RUSTFLAGS", None)  # the crate builds with warnings: a -D warnings would fail it
    with open(cache / "build.log", "w") as log:
        log.write(f"tarball: {archive}\nsha256: {digest}\n")
        src = _unpack(archive, cache / "src")
        # --locked: the versions of the release's own Cargo.lock, or fail.
        _run(["cargo", "build", "--release", "--locked"], src, env, log)
        built = cache / "target" / "release" / "libredis_cell.so"
        if not built.is_file():
            raise _Failed(f"cargo build --release did not produce {built}")
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True)
        tmp = so.with_suffix(".so.tmp")
        shutil.copy2(built, tmp)
        os.replace(tmp, so)
        (cache / "BUILT_WITH").write_text(
            f"{rustc.stdout.strip()}\nfrom {archive.name} sha256 {digest}\n")


def redis_cell() -> Peer:
    """The redis-cell module to load beside ours: cached, built now, or why not."""
    env = os.environ.get("REDIS_CELL_MODULE", "").strip()
    if env.lower() in ("off", "none", "0", "no"):
        return Peer(None, "", f"switched off (REDIS_CELL_MODULE={env})")
    if env:
        path = Path(env).expanduser().resolve()
        if not path.is_file():
            return Peer(None, "", f"REDIS_CELL_MODULE={env} does not exist")
        return Peer(path, f"REDIS_CELL_MODULE={env} (version not checked)", version="?")
    archive = tarball()
    if not archive.is_file():
        return Peer(None, "", f"the redis-cell {REDIS_CELL_VERSION} source {archive} does not "
                              "exist (set REDIS_CELL_TARBALL, or REDIS_CELL_MODULE to a built "
                              ".so)")
    try:
        digest = sha256(archive)
    except OSError as e:
        return Peer(None, "", f"cannot read {archive}: {e}")
    cache = cache_dir(digest)
    so = cache / "libredis_cell.so"
    built_with = lambda: ((cache / "BUILT_WITH").read_text().strip().replace("\n", ", ")
                          if (cache / "BUILT_WITH").is_file() else "rustc ?")
    if so.is_file():
        return Peer(so, f"cached build ({built_with()}) in {cache}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent run builds once
            if so.is_file():
                return Peer(so, f"built by a concurrent run ({built_with()}) in {cache}")
            print(f"bench: building redis-cell {REDIS_CELL_VERSION} from {archive} in {cache} "
                  "(once; cached) ...", file=sys.stderr)
            _build(cache, so, archive, digest)
        return Peer(so, f"built from the release source just now ({built_with()}) in {cache}")
    except (_Failed, OSError, ValueError, tarfile.TarError) as e:
        return Peer(None, "", f"redis-cell {REDIS_CELL_VERSION} could not be built: {e} "
                              f"(log: {cache / 'build.log'})")


if __name__ == "__main__":
    p = redis_cell()
    if p.path is None:
        print(f"no redis-cell: {p.error}", file=sys.stderr)
        sys.exit(1)
    print(p.path)
