"""Paths and the one error type every part of the benchmark raises."""

from __future__ import annotations

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_MODULE = REPO_ROOT / "target" / "release" / "libredis_tb.so"
LUA_SCRIPT = BENCH_DIR / "token_bucket.lua"
SEED_LUA_SCRIPT = BENCH_DIR / "seed_token_bucket.lua"  # the design notes' own script
# The design notes' two window limiters as scripts (issue 11).
WINDOW_FIXED_SCRIPT = BENCH_DIR / "window_fixed.lua"  # INCR + EXPIRE on the first hit
WINDOW_LOG_SCRIPT = BENCH_DIR / "window_log.lua"      # sorted set of request times


class SetupError(Exception):
    """Something the benchmark needs is missing or broken, or a run did not measure what it
    claims; the message says what."""
