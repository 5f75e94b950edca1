"""Paths and the one error type every part of the benchmark raises."""

from __future__ import annotations

import os
from pathlib import Path

# bench/commands/, where this package and the scripts it measures against live
COMMANDS_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = COMMANDS_DIR.parents[1]
# Every benchmark's reports, whichever question it answers (bench/README.md)
RESULTS_DIR = REPO_ROOT / "bench" / "results"
DEFAULT_MODULE = REPO_ROOT / "target" / "release" / "libredis_tb.so"
LUA_SCRIPT = COMMANDS_DIR / "token_bucket.lua"
# The design notes' own token-bucket script is read from the notes themselves at run time
# (never copied into the repository): ../shared/seeds/000_*.txt beside the checkout, or
# the folder REDIS_TB_SEEDS names.
SEEDS_DIR = Path(os.environ.get("REDIS_TB_SEEDS", REPO_ROOT.parent / "shared" / "seeds"))
# The design notes' fixed window counter (INCR + EXPIRE on the first hit) as a script
# (issue 11); the notes give it as two commands, so the script is ours. Their sliding log
# script is read from the notes (`seed_log_script`).
WINDOW_FIXED_SCRIPT = COMMANDS_DIR / "window_fixed.lua"


class SetupError(Exception):
    """Something the benchmark needs is missing or broken, or a run did not measure what it
    claims; the message says what."""


def _seed_lua(pattern: str, first_line: str, last_return: str) -> str:
    """The lines of the first SEEDS_DIR/<pattern> holding a script from `first_line` to the
    `end` that closes the branch after the line containing `last_return`."""
    for path in sorted(SEEDS_DIR.glob(pattern)):
        lines = path.read_text(encoding="utf-8").splitlines()
        try:
            start = lines.index(first_line)
            last = next(i for i in range(start, len(lines)) if last_return in lines[i])
            end = lines.index("end", last)
        except (ValueError, StopIteration):
            continue
        return "\n".join(lines[start:end + 1]) + "\n"
    raise SetupError(f"the design notes' script {first_line!r} was not found in "
                     f"{SEEDS_DIR}/{pattern} (set REDIS_TB_SEEDS to the folder holding the notes)")


def seed_log_script() -> str:
    """The design notes' sliding window log script, as the notes have it
    (SEEDS_DIR/002_*.txt): ZREMRANGEBYSCORE 0 now-window, ZCARD, and below the limit ZADD
    now now + EXPIRE. Its member is the timestamp itself, so requests in the same
    millisecond collapse into one entry (the flaw TB.WINDOW LOG fixes); `now` is the
    caller's, in ms."""
    return _seed_lua("002_*.txt", "-- sliding_window_rate_limit.lua", "return 0")


def seed_script() -> str:
    """The design notes' own token bucket script, as the notes have it: the lines of
    SEEDS_DIR/000_*.txt from `-- token_bucket.lua` to the `end` that closes its last
    branch (the one after its refusal's `return {0, ...}`)."""
    return _seed_lua("000_*.txt", "-- token_bucket.lua", "return {0")
