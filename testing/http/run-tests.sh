#!/usr/bin/env bash
# run-tests.sh: the HTTP suite over every example of examples/manifest.json, from any directory.
#
# Builds what the examples need, then runs pytest over testing/http:
#   - Python (fastapi, django): the venv .venv/python at the repo root (or $REDIS_TB_VENV),
#     created and filled the way clients/python/run-tests.sh does (python3 -m venv, the
#     pinned clients/python/requirements-test.txt, the package with --no-build-isolation),
#     plus this suite's pinned requirements.txt;
#   - Node (express, fastify): npm ci and npm run build in clients/node,
#     examples/node-test-support and each example (their lockfiles);
#   - Rust (axum): cargo build -p redis-tb-axum-example;
#   - Java (spring): mvn package of the example's jar (clients/java's reactor).
# SKIP_BUILD=1 skips the Node and Rust builds (the venv is still checked).
# HTTP_EXAMPLES=fastapi,axum runs a subset. Extra arguments go to pytest.
# HTTP_BACKEND=scripts runs every check against redis-servers without the module (the apps
# choose the script library themselves, SPEC E1; HTTP_APP_BACKEND=scripts forces it).
#
# Needs the module built (target/release/libredis_tb.so, or REDIS_TB_MODULE; not under
# HTTP_BACKEND=scripts) and redis-server on PATH (or REDIS_SERVER). Exits non-zero when
# anything fails (an example's deviation that was fixed, an XPASS, is a failure: remove it
# from the manifest), and when no test ran.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv="${REDIS_TB_VENV:-$repo/.venv/python}"
module=${REDIS_TB_MODULE:-$repo/target/release/libredis_tb.so}
py="$repo/clients/python"

if [ "${HTTP_BACKEND:-module}" = module ] && [ ! -f "$module" ]; then
    echo "run-tests.sh: $module is missing: build it first (cargo build --release)" >&2
    exit 1
fi
command -v "${REDIS_SERVER:-redis-server}" >/dev/null || { echo "run-tests.sh: redis-server not found" >&2; exit 1; }

# The Python examples' venv, made by the Python package's own venv.sh.
REDIS_TB_VENV="$venv" "$py/venv.sh"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
stamp="$venv/.requirements-http.txt"
if ! cmp -s "$here/requirements.txt" "$stamp"; then
    "${pip[@]}" install -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi

if [ -z "${SKIP_BUILD:-}" ]; then
    for pkg in clients/node examples/node-test-support examples/express examples/fastify; do
        (cd "$repo/$pkg" && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build)
    done
    (cd "$repo" && cargo build -p redis-tb-axum-example)
    # Java (spring): the starter and the example's executable jar (Maven, versions pinned)
    (cd "$repo" && mvn -B -q -f clients/java/pom.xml package -DskipTests -pl :redis-tb-spring-example -am)
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
REDIS_TB_MODULE="$module" "$venv/bin/python" -m pytest -c "$here/pytest.ini" --rootdir "$here" "$here" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
    exit "$rc"
fi
if ! grep -Eq '[1-9][0-9]* passed' "$log"; then
    echo "run-tests.sh: no test ran" >&2
    exit 1
fi
