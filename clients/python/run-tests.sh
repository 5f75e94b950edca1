#!/usr/bin/env bash
# run-tests.sh: the Python integration's checks, from any directory.
#
# Creates the venv .venv/python at the repo root (or $REDIS_TB_VENV) when missing (python3 -m venv),
# installs the pinned requirements-test.txt and this package (no build isolation:
# the pinned hatchling builds it, nothing else is fetched), lints (lint.sh: ruff, and
# mypy --strict), then runs pytest over clients/python/tests, examples/fastapi,
# examples/shell, examples/flask, examples/slowapi, examples/django and the bench reports' test
# of bench/integrations/python (the harness: testing/python) against real redis-server, uvicorn and gunicorn
# processes.
#
# Needs the module built (target/release/libredis_tb.so, or REDIS_TB_MODULE) and
# redis-server/redis-cli on PATH (or REDIS_SERVER). Extra arguments go to pytest.
# Exits non-zero when anything fails, and when no test ran.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${REDIS_TB_VENV:-$repo/.venv/python}"
module=${REDIS_TB_MODULE:-$repo/target/release/libredis_tb.so}

if [ ! -f "$module" ]; then
    echo "run-tests.sh: $module is missing: build it first (cargo build --release)" >&2
    exit 1
fi

# The venv, then the lint (ruff and mypy --strict over the package, tests and examples).
"$here/lint.sh"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
REDIS_TB_MODULE="$module" "$venv/bin/python" -m pytest \
    -c "$here/pyproject.toml" --rootdir "$repo" --import-mode=importlib -p no:cacheprovider \
    "$here/tests" "$repo/examples/fastapi" "$repo/examples/shell" "$repo/examples/flask" "$repo/examples/slowapi" "$repo/examples/django" \
    "$repo/bench/integrations/python" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
if ! grep -Eq '[1-9][0-9]* passed' "$log"; then
    echo "run-tests.sh: no test ran" >&2
    exit 1
fi

# limits' own storage and strategy tests against redis_tb.limits (redis+tb://)
REDIS_TB_MODULE="$module" "$here/tests/limits_upstream/run.sh" "$venv"
