"""redis-cell, the peer of issue 12: built from its published crate source, cached outside
the repository, loaded into the same server as the module.

The crate is fetched from the Rust package registry the ordinary way: a throwaway cargo
project in the cache depends on `redis-cell = "=VERSION"` and `cargo fetch` unpacks the
crate's source into cargo's registry cache (its path comes from `cargo metadata`). That
source is copied into the cache (cargo's own copy is never written to) with the throwaway
project's Cargo.lock, so the dependency versions are the ones just resolved, and built
there with `cargo build --release` and a target directory of its own. The .so is kept at

    ${REDIS_TB_CACHE:-~/.cache/redis-tb}/redis-cell-VERSION/libredis_cell.so

and later runs use it without building (delete the directory to rebuild). A failed build
is not cached: the next run tries again.

REDIS_CELL_MODULE overrides all this: a path to a libredis_cell.so to load as is, or
`off` to run without the peer. Nothing here raises: a failure comes back as a message for
the report, and the benchmark goes on without redis-cell.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REDIS_CELL_VERSION = "0.2.2"
BUILD_TIMEOUT_S = 900


@dataclass
class Peer:
    """What the benchmark knows about redis-cell before the server starts."""
    path: Path | None   # the .so to load, or None (then `error` says why)
    how: str            # where it came from (cached, built just now, REDIS_CELL_MODULE)
    error: str = ""     # why there is no .so: a failed build, or switched off
    version: str = REDIS_CELL_VERSION


def cache_dir() -> Path:
    root = os.environ.get("REDIS_TB_CACHE") or str(Path.home() / ".cache" / "redis-tb")
    return Path(root) / f"redis-cell-{REDIS_CELL_VERSION}"


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


def _crate_source(fetch_dir: Path, env: dict[str, str], log) -> Path:
    """The unpacked crate source that `cargo fetch` left in cargo's registry cache."""
    meta = json.loads(_run(["cargo", "metadata", "--format-version", "1", "--offline"],
                           fetch_dir, env, log))
    for pkg in meta.get("packages", []):
        if pkg.get("name") == "redis-cell" and pkg.get("version") == REDIS_CELL_VERSION:
            return Path(pkg["manifest_path"]).parent
    # Fall back to the usual layout: $CARGO_HOME/registry/src/<index>/redis-cell-VERSION.
    cargo_home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    found = sorted(cargo_home.glob(f"registry/src/*/redis-cell-{REDIS_CELL_VERSION}"))
    if found:
        return found[-1]
    raise _Failed(f"cargo fetch did not unpack redis-cell {REDIS_CELL_VERSION} "
                  "(not in cargo metadata, nor under $CARGO_HOME/registry/src)")


def _build(cache: Path, so: Path) -> None:
    if not shutil.which("cargo"):
        raise _Failed("cargo not found on PATH")
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = str(cache / "target")
    env.pop("RUSTFLAGS", None)  # the crate builds with warnings: a -D warnings would fail it
    fetch_dir, src_dir = cache / "fetch", cache / "src"
    with open(cache / "build.log", "w") as log:
        (fetch_dir / "src").mkdir(parents=True, exist_ok=True)
        (fetch_dir / "Cargo.toml").write_text(
            "# Throwaway project: only here so that `cargo fetch` unpacks the crate.\n"
            '[package]\nname = "redis-cell-fetch"\nversion = "0.0.0"\nedition = "2021"\n'
            "publish = false\n\n[dependencies]\n"
            f'redis-cell = "={REDIS_CELL_VERSION}"\n')
        (fetch_dir / "src" / "lib.rs").write_text("")
        _run(["cargo", "fetch"], fetch_dir, env, log)
        source = _crate_source(fetch_dir, env, log)
        log.write(f"\ncrate source: {source}\n")
        if src_dir.exists():
            shutil.rmtree(src_dir)
        shutil.copytree(source, src_dir)
        shutil.copy2(fetch_dir / "Cargo.lock", src_dir / "Cargo.lock")
        _run(["cargo", "build", "--release"], src_dir, env, log)
        built = cache / "target" / "release" / "libredis_cell.so"
        if not built.is_file():
            raise _Failed(f"cargo build --release did not produce {built}")
        rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True)
        tmp = so.with_suffix(".so.tmp")
        shutil.copy2(built, tmp)
        os.replace(tmp, so)
        (cache / "BUILT_WITH").write_text(rustc.stdout.strip() + "\n")


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
    cache = cache_dir()
    so = cache / "libredis_cell.so"
    built_with = lambda: ((cache / "BUILT_WITH").read_text().strip()
                          if (cache / "BUILT_WITH").is_file() else "rustc ?")
    if so.is_file():
        return Peer(so, f"cached build ({built_with()}) in {cache}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent run builds once
            if so.is_file():
                return Peer(so, f"built by a concurrent run ({built_with()}) in {cache}")
            print(f"bench: building redis-cell {REDIS_CELL_VERSION} from its crate source "
                  f"in {cache} (once; cached) ...", file=sys.stderr)
            _build(cache, so)
        return Peer(so, f"built from the crate source just now ({built_with()}) in {cache}")
    except (_Failed, OSError, ValueError) as e:
        return Peer(None, "", f"redis-cell {REDIS_CELL_VERSION} could not be built: {e} "
                              f"(log: {cache / 'build.log'})")
