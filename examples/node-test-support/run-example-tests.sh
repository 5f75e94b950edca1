#!/usr/bin/env bash
# End-to-end tests of one Node example (node:test), the one in the folder given as the only
# argument (examples/express/run-tests.sh and examples/fastify/run-tests.sh call this): the
# app as its own process against a real redis-server with the module (REDIS_TB_MODULE,
# default target/release/libredis_tb.so), Redis stopped and restarted mid-run.
# Builds clients/node and this test-support package first when a dist is missing or older
# than its sources (each with its own scripts), installs the example's pinned dependencies
# (npm ci: redis-tb and this package are copied in from their folders), compiles, and runs
# the tests from the example's folder. Exits non-zero on a failure, and when no test ran.
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1/package.json" ] || { echo "usage: $0 EXAMPLE_DIR (a folder with a package.json)" >&2; exit 2; }
example="$(cd "$1" && pwd)"
support="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$support/../.." && pwd)"
export REDIS_TB_MODULE="${REDIS_TB_MODULE:-$root/target/release/libredis_tb.so}"
[ -f "$REDIS_TB_MODULE" ] || { echo "$0: module not built: $REDIS_TB_MODULE (make build)" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "$0: redis-server not found" >&2; exit 1; }

# Installs a local package's dependencies when it has none, and builds it when its
# built entry point is missing or older than its sources.
build_local() {
  local pkg="$1" entry="$2"
  if [ ! -d "$pkg/node_modules" ]; then (cd "$pkg" && npm ci); fi
  if [ ! -f "$pkg/$entry" ] || [ -n "$(find "$pkg/src" "$pkg/package.json" -newer "$pkg/$entry" -print -quit)" ]; then
    (cd "$pkg" && npm run build)
  fi
}
build_local "$root/clients/node" dist/esm/index.js
build_local "$support" dist/index.js

cd "$example"
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
