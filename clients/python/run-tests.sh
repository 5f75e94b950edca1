#!/usr/bin/env bash
# run-tests.sh: the Python integration's checks, from any directory.
#
# Creates the venv .venv/python at the repo root (or $REDIS_TB_VENV) when missing (python3 -m venv),
# installs the pinned requirements-test.txt and this package (no build isolation:
# the pinned hatchling builds it, nothing else is fetched), type-checks the package
# (mypy --strict), then runs pytest over clients/python/tests, examples/fastapi,
# examples/shell and examples/django against real redis-server, uvicorn and gunicorn
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

if [ ! -x "$venv/bin/python" ]; then
    "${PYTHON:-python3}" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
stamp="$venv/.requirements-test.txt"
if ! cmp -s "$here/requirements-test.txt" "$stamp"; then
    "${pip[@]}" install -r "$here/requirements-test.txt"
    cp "$here/requirements-test.txt" "$stamp"
fi
"${pip[@]}" install --no-deps --no-build-isolation --force-reinstall "$here"

# The package, then the tests and examples (separately: each has a conftest.py).
mypy=("$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy_cache")
"${mypy[@]}" "$here/src/redis_tb"
MYPYPATH="$here/tests" "${mypy[@]}" "$here/tests"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/fastapi"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/shell"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/flask"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/slowapi"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/django"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
REDIS_TB_MODULE="$module" "$venv/bin/python" -m pytest \
    -c "$here/pyproject.toml" --rootdir "$repo" --import-mode=importlib -p no:cacheprovider \
    "$here/tests" "$repo/examples/fastapi" "$repo/examples/shell" "$repo/examples/flask" "$repo/examples/slowapi" "$repo/examples/django" "$@" 2>&1 | tee "$log"
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
