#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks to build and test redis-tb: the distribution's
# redis-server (and redis-cli / redis-benchmark), and the two libclang packages bindgen
# needs when the redis-module crate builds, python3-venv, and Node.js with npm. Does nothing
# when all are present.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
dpkg -s libclang1-14 >/dev/null 2>&1 || missing+=(libclang1-14)
dpkg -s libclang-common-14-dev >/dev/null 2>&1 || missing+=(libclang-common-14-dev)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The Python integration's tests run in a venv (Debian's python3 needs python3-venv).
python3 -m venv --help >/dev/null 2>&1 || missing+=(python3-venv)
# The Node.js integration (clients/node, examples/express, examples/fastify): node >= 20 and npm.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "installing: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
# The package starts a system redis on 6379 where systemd runs; we never use it, and the
# examples and tests pick their own ports.
