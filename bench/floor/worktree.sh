# Sourced by bench/floor/run.sh and bench/floor/log.sh: a temporary worktree of HEAD with
# its own target directory (the repository's target/ is never touched, and uncommitted
# changes are not measured), removed on exit with any server a script left in
# SERVER_PID, and build NAME: builds the worktree and keeps the module as $WORK/NAME.so.
# Every build uses the same flags, so the ones after the first rebuild only this crate.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
  git -C "$ROOT" worktree remove --force "$WORK/src" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

git worktree add --quiet --detach "$WORK/src" HEAD
echo "measuring HEAD $(git -C "$WORK/src" rev-parse --short HEAD)"
build() { # output .so name
  (cd "$WORK/src" && RUSTFLAGS="${RUSTFLAGS:-} -A warnings" \
    cargo build --release --quiet --target-dir "$WORK/target")
  cp "$WORK/target/release/libredis_tb.so" "$WORK/$1.so"
}
