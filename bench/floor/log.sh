#!/bin/bash
# The LOG floor: how fast could TB.WINDOW LOG be on `make bench`'s LOG workload if the
# module's own work cost nothing, against the notes' sliding log script (the issue's
# target is LOG >= 2x the script)? Builds, from HEAD in a temporary worktree with its own
# target directory (the repository's target/ is never touched):
#   real        the module as it is,
#   floor       only the module API calls a LOG call of that workload cannot avoid
#               (log-floor.patch: OpenKey, ValueLength, removing the workload's 5 stale
#               entries by name on a key's first call + Replicate, ZsetAdd of one member +
#               Replicate, GetAbsExpire, the 4-element reply; constant texts),
#   floor+must  the floor plus what LOG must also do to be correct: parse its arguments,
#               ask whether any entry is later than its time and whether any has left
#               the window (two score-range probes),
# then runs log_floor.py: FLOOR_ROUNDS interleaved rounds (3 by default), one server per
# variant and round. Not part of CI; about 5 minutes plus three builds.
#
# If the patch stops applying: apply it by hand in a worktree of HEAD, fix the conflict,
# and regenerate it with `git diff --full-index -U1`.
#
# usage: bench/floor/log.sh            (from the repository root; `make bench-floor-log`)
set -euo pipefail
source "$(dirname "$0")/worktree.sh"
ROUNDS=${FLOOR_ROUNDS:-3}
build real
git -C "$WORK/src" apply --3way "$ROOT/bench/floor/log-floor.patch"
build floor
sed -i 's/^    const MUST: bool = false;/    const MUST: bool = true;/' "$WORK/src/src/commands/window.rs"
grep -q '^    const MUST: bool = true;' "$WORK/src/src/commands/window.rs"
build floor-must
python3 "$ROOT/bench/floor/log_floor.py" "$ROUNDS" "$WORK/real.so" "$WORK/floor.so" "$WORK/floor-must.so"
