#!/usr/bin/env bash
# venv.sh: the Python integration's venv, from any directory: creates .venv/python at the
# repo root (or $REDIS_TB_VENV) when missing, installs the pinned requirements-test.txt
# when it changed, and this package (no build isolation: the pinned hatchling builds it).
# Used by lint.sh (and so run-tests.sh) and testing/http/run-tests.sh.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${REDIS_TB_VENV:-$repo/.venv/python}"

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
