#!/usr/bin/env bash
# lint.sh: the Python integration's lint, from any directory (`make lint-python`).
#
# Creates the venv .venv/python at the repo root (or $REDIS_TB_VENV) when missing,
# installs the pinned requirements-test.txt and this package (no build isolation),
# then runs ruff (pinned in requirements-test.txt, configured in pyproject.toml) and
# mypy --strict over the package, its tests and the Python examples.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${REDIS_TB_VENV:-$repo/.venv/python}"
examples=("$repo/examples/fastapi" "$repo/examples/shell" "$repo/examples/flask" "$repo/examples/slowapi" "$repo/examples/django")

"$here/venv.sh"

"$venv/bin/ruff" check --config "$here/pyproject.toml" "$here" "${examples[@]}"

# The package, then the tests and examples (separately: each has a conftest.py).
mypy=("$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy_cache")
"${mypy[@]}" "$here/src/redis_tb"
MYPYPATH="$here/tests" "${mypy[@]}" "$here/tests"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/fastapi"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/shell"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/flask"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/slowapi"
MYPYPATH="$here/tests" "${mypy[@]}" "$repo/examples/django"

