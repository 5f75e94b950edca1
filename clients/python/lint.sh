#!/usr/bin/env bash
# lint.sh: the Python integration's lint, from any directory (`make lint-python`).
#
# Creates the venv .venv/python at the repo root (or $REDIS_TB_VENV) when missing,
# installs the pinned requirements-test.txt and this package (no build isolation),
# then runs ruff (pinned in requirements-test.txt, configured in pyproject.toml) and
# mypy --strict over the package, its tests, the Python examples, the shared test harness
# (testing/python), the integration benchmarks (bench/integrations/python) and the
# vectors' generator (clients/vectors/scripts_form.py).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${REDIS_TB_VENV:-$repo/.venv/python}"
examples=("$repo/examples/fastapi" "$repo/examples/shell" "$repo/examples/flask" "$repo/examples/slowapi" "$repo/examples/django")
# the shared test harness (testing/python) and the integration benchmarks
harness="$repo/testing/python"
benches="$repo/bench/integrations/python"
# the vectors' generator (clients/vectors/scripts_form.py, `make vectors`)
vectors="$repo/clients/vectors"

"$here/venv.sh"

"$venv/bin/ruff" check --config "$here/pyproject.toml" "$here" "${examples[@]}" "$harness" "$benches" "$vectors"

# The package, then the harness, tests, examples and benchmarks (separately: module names
# such as app.py repeat across them).
mypy=("$venv/bin/python" -m mypy --strict --cache-dir "$venv/.mypy_cache")
"${mypy[@]}" "$here/src/redis_tb"
"${mypy[@]}" "$vectors/scripts_form.py"
MYPYPATH="$harness" "${mypy[@]}" "$harness/redis_tb_testing"
MYPYPATH="$harness" "${mypy[@]}" "$here/tests"
MYPYPATH="$harness" "${mypy[@]}" "$repo/examples/fastapi"
MYPYPATH="$harness" "${mypy[@]}" "$repo/examples/shell"
MYPYPATH="$harness" "${mypy[@]}" "$repo/examples/flask"
MYPYPATH="$harness" "${mypy[@]}" "$repo/examples/slowapi"
MYPYPATH="$harness" "${mypy[@]}" "$repo/examples/django"
MYPYPATH="$harness" "${mypy[@]}" "$benches"

