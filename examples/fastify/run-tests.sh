#!/usr/bin/env bash
# End-to-end tests of the Fastify example (node:test) against a real redis-server with the module
# (REDIS_TB_MODULE, default target/release/libredis_tb.so): what they need, how they run and
# what counts as a failure are in ../node-test-support/run-example-tests.sh, shared with the
# other Node example.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "$here/../node-test-support/run-example-tests.sh" "$here"
