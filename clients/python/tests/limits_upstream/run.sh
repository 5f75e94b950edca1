#!/usr/bin/env bash
# run.sh: limits' own storage and strategy tests against redis_tb.limits (redis+tb://).
#
# Usage: run.sh VENV [pytest args]. VENV has the pinned requirements-test.txt and redis-tb
# installed (run-tests.sh does that, then calls this). The sdist of the installed limits
# version is fetched once with pip (`pip download --no-binary :all:`) into
# VENV/limits-upstream/, never into the repo; its tests/ is extracted afresh each run and
# tb_conftest.py replaces its docker-based tests/conftest.py. REDIS_TB_MODULE must name
# the built module.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
venv=${1:?usage: run.sh VENV [pytest args]}
shift
py="$venv/bin/python"
version=$("$py" -c 'import importlib.metadata as m; print(m.version("limits"))')
cache="$venv/limits-upstream"
sdist="$cache/limits-$version.tar.gz"
if [ ! -f "$sdist" ]; then
    mkdir -p "$cache"
    "$py" -m pip --disable-pip-version-check --quiet download --no-deps --no-binary :all: \
        --dest "$cache" "limits==$version"
fi
work="$cache/limits-$version"
rm -rf "$work"
tar -xzf "$sdist" -C "$cache" "limits-$version/tests"
cp "$here/tb_conftest.py" "$work/tests/conftest.py"
cp "$here/pytest-upstream.ini" "$work/pytest.ini"

# the suite imports `tests.utils`: run from the extracted root, with the installed limits
# (not the sdist's source, which is not extracted)
cd "$work"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
"$py" -m pytest -c pytest.ini --rootdir "$work" -p no:cacheprovider \
    tests/test_storage.py tests/test_strategy.py tests/storage/test_redis.py \
    tests/aio/test_storage.py tests/aio/test_strategy.py tests/aio/storage/test_redis.py \
    "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
if ! grep -Eq '[1-9][0-9]* passed' "$log"; then
    echo "limits_upstream/run.sh: no test ran" >&2
    exit 1
fi
