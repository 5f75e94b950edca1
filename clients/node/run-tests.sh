#!/usr/bin/env bash
# run-tests.sh: the Node.js package's checks (clients/node, npm `redis-tb`), from any directory.
#
# Installs the pinned dev dependencies with `npm ci` when node_modules is missing or older
# than package-lock.json, builds the ESM and CommonJS outputs, type-checks the package and
# its declarations as ESM and CommonJS consumers see them, then runs `npm test` (node:test)
# against real redis-server processes and real HTTP servers on loopback.
#
# Needs the module built (target/release/libredis_tb.so, or REDIS_TB_MODULE) and
# redis-server on PATH (or REDIS_SERVER), and node >= 20 with npm.
# Exits non-zero when anything fails, and when no test ran.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
module=${REDIS_TB_MODULE:-$repo/target/release/libredis_tb.so}
export REDIS_TB_MODULE="$module"
export REDIS_SERVER="${REDIS_SERVER:-redis-server}"

if [ ! -f "$module" ]; then
    echo "run-tests.sh: $module is missing: build it first (cargo build --release)" >&2
    exit 1
fi
if ! command -v "$REDIS_SERVER" >/dev/null 2>&1; then
    echo "run-tests.sh: $REDIS_SERVER not found (set REDIS_SERVER)" >&2
    exit 1
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    echo "run-tests.sh: node >= 20 needed, found $(node --version)" >&2
    exit 1
fi

cd "$here"
stamp=node_modules/.package-lock.json
if [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || ! cmp -s package-lock.json node_modules/.redis-tb-lock; then
    npm ci --no-audit --no-fund
    cp package-lock.json node_modules/.redis-tb-lock
fi

npm run --silent build
npm run --silent typecheck

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
npm test --silent -- "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
# node:test closes with "# pass N" (TAP) or "ℹ pass N" (spec)
if ! grep -Eq '^(# |ℹ )pass [1-9][0-9]*' "$log"; then
    echo "run-tests.sh: no test ran" >&2
    exit 1
fi
