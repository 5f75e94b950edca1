#!/usr/bin/env bash
# lint.sh: `make lint-node`. The Node package and its examples under strict TypeScript
# (`tsc --noEmit`: the package, its tests' declarations as ESM and CommonJS consumers,
# examples/express, examples/fastify, examples/node-test-support), and no `eslint-disable`
# comment anywhere in them (the rule of issue 24: no linter is switched off in the code).
# Installs the pinned dependencies (`npm ci`) of a package whose node_modules is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)

install() {
  [ -d "$1/node_modules" ] || (cd "$1" && npm ci --no-audit --no-fund)
}

install "$here"
(cd "$here" && npm run --silent build && npm run --silent typecheck)
install "$repo/examples/node-test-support"
(cd "$repo/examples/node-test-support" && npm run --silent build)
for ex in express fastify; do
  install "$repo/examples/$ex"
  (cd "$repo/examples/$ex" && npx tsc -p tsconfig.json --noEmit)
done

dirs=()
for d in clients/node/src clients/node/test clients/node/scripts examples/express examples/fastify examples/node-test-support bench/integrations/node; do
  dirs+=("$repo/$d")
done
if grep -rn --exclude-dir=node_modules --exclude-dir=dist --exclude=lint.sh 'eslint-disable' "${dirs[@]}"; then
  echo "lint.sh: eslint-disable comments above: fix the code instead" >&2
  exit 1
fi
echo "lint.sh: Node package and examples clean (tsc strict, no eslint-disable)"
