"""Paths and the one error type every part of the benchmark raises."""

from __future__ import annotations

import os
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_MODULE = REPO_ROOT / "target" / "release" / "libredis_tb.so"
LUA_SCRIPT = BENCH_DIR / "token_bucket.lua"
# The design notes' own token-bucket script is read from the notes themselves at run time
# (never copied into the repository): ../shared/seeds/000_*.txt beside the checkout, or
# the folder REDIS_TB_SEEDS names.
SEEDS_DIR = Path(os.environ.get("REDIS_TB_SEEDS", REPO_ROOT.parent / "shared" / "seeds"))
# The design notes' two window limiters as scripts (issue 11).
WINDOW_FIXED_SCRIPT = BENCH_DIR / "window_fixed.lua"  # INCR + EXPIRE on the first hit
WINDOW_LOG_SCRIPT = BENCH_DIR / "window_log.lua"      # sorted set of request times


class SetupError(Exception):
    """Something the benchmark needs is missing or broken, or a run did not measure what it
    claims; the message says what."""


def seed_script() -> str:
    """The design notes' own Lua script, as the notes have it: the lines of
    SEEDS_DIR/000_*.txt from `-- token_bucket.lua` to the `end` that closes its last
    branch (the one after its refusal's `return {0, ...}`)."""
    for path in sorted(SEEDS_DIR.glob("000_*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            start = lines.index("-- token_bucket.lua")
            refusal = next(i for i in range(start, len(lines)) if "return {0" in lines[i])
            end = lines.index("end", refusal)
        except (ValueError, StopIteration):
            continue
        return "\n".join(lines[start:end + 1]) + "\n"
    raise SetupError(f"the design notes' token bucket script was not found in {SEEDS_DIR}/000_*.txt "
                     "(set REDIS_TB_SEEDS to the folder holding the notes)")
