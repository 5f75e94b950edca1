#!/usr/bin/env bash
# End-to-end tests of the Express example (node:test): the app as its own process against a real
# redis-server with the module (REDIS_TB_MODULE, default target/release/libredis_tb.so),
# Redis stopped and restarted mid-run. Builds clients/node first when its dist is missing
# or older than its sources (with its own scripts), installs this example's pinned
# dependencies (npm ci: redis-tb is copied from ../../clients/node), compiles, runs.
# Exits non-zero on a failure, and when no test ran.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
export REDIS_TB_MODULE="${REDIS_TB_MODULE:-$root/target/release/libredis_tb.so}"
[ -f "$REDIS_TB_MODULE" ] || { echo "$0: module not built: $REDIS_TB_MODULE (make build)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "$0: redis-server not found" >&2; exit 1; }

pkg="$root/clients/node"
if [ ! -d "$pkg/node_modules" ]; then (cd "$pkg" && npm ci); fi
if [ ! -f "$pkg/dist/esm/index.js" ] || [ -n "$(find "$pkg/src" "$pkg/package.json" -newer "$pkg/dist/esm/index.js" -print -quit)" ]; then
  (cd "$pkg" && npm run build)
fi

cd "$here"
npm ci
npm run build
tap="$(mktemp)"
trap 'rm -f "$tap"' EXIT
status=0
node --test --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" dist/test/*.test.js || status=$?
tests="$(sed -n 's/^# tests \([0-9]*\)$/\1/p' "$tap" | tail -1)"
if [ "${tests:-0}" -eq 0 ]; then
  echo "$0: no test ran" >&2
  exit 1
fi
exit "$status"
