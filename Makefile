# redis-tb: `make run` builds and starts redis-server with the module; `make test` runs
# the whole test suite. Both install missing system packages first.

MODULE := target/release/libredis_tb.so
REDIS_SERVER ?= redis-server

.PHONY: all build run test test-examples bench-accuracy unit integration lint fmt fuzz bench bench-floor bench-floor-log bench-log-advancing soak test-compat test-valgrind deps help clean

all: build

help:
	@echo "make          build $(MODULE)"
	@echo "make run      build, then start redis-server on redis.conf.example (port 6380)"
	@echo "make test     the whole test suite (unit, property, integration against a real redis-server), then make test-examples"
	@echo "make test-examples  the integrations end to end: Python (FastAPI, Flask/slowapi, Django, shell), Rust (axum), Node (Express, Fastify)"
	@echo "make test-http  one black-box HTTP suite over every example of examples/manifest.json (testing/http)"
	@echo "make lint     cargo fmt --check and clippy -D warnings"
	@echo "make fuzz     long property-based fuzz run (FUZZ_CASES=...)"
	@echo "make bench    side-by-side throughput/latency/memory benchmark (writes bench/results/)"
	@echo "make bench-accuracy  SLIDING vs LOG decisions and rate error on synthetic traffic (bench/results/window-accuracy.md)"
	@echo "make bench-floor  TB.TAKE vs the same module API calls with no parsing/math/formatting (bench/floor/)"
	@echo "make bench-floor-log  TB.WINDOW LOG vs the module API calls it cannot avoid, and the notes' script (bench/floor/)"
	@echo "make bench-log-advancing  TB.WINDOW LOG vs the notes' script with an advancing now (bench/results/log-advancing.md)"
	@echo "make test-valgrind  the integration suite under valgrind (MALLOC=libc Redis 8.0); fails on a leak or memory error in the module"
	@echo "make soak     10-minute mixed load: memory and latency over time (bench/results/soak.md)"
	@echo "make test-compat  the integration suite on Redis 8.0, Valkey 8.1 and Valkey 9.1 (built from Debian sources, cached)"

deps:
	@scripts/install-deps.sh

build: deps
	cargo build --release

$(MODULE): build

run: build
	$(REDIS_SERVER) redis.conf.example

test: build
	cargo test --release
	$(MAKE) test-examples

# The integrations, end to end against a real redis-server with the module and real HTTP
# servers: the Python package (a venv at .venv/python with pinned dependencies) with the
# FastAPI, Flask/slowapi (the `limits` storages and limits' own suite), Django and shell
# examples; the Rust client crate with the axum example; the Node package (npm ci from its
# lockfile) with the Express and Fastify examples.
test-examples: build
	clients/python/run-tests.sh
	cargo test -p redis-tb-client -p redis-tb-axum-example
	clients/node/run-tests.sh
	examples/express/run-tests.sh
	examples/fastify/run-tests.sh

# One black-box HTTP suite for every example app (testing/http, pytest): each example of
# examples/manifest.json built (npm ci + build, cargo build), started on a free port against
# its own redis-server with the module, and driven over real HTTP from the manifest; an
# example's listed deviations are xfail(strict=True) checks.
.PHONY: test-http
test-http: build
	testing/http/run-tests.sh

unit:
	cargo test --release --lib

lint:
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --release -- -D warnings

fmt:
	cargo fmt

# Property-based fuzzing of the parser, stored-state decoder and math with arbitrary bytes
# and extreme numbers. CI runs a short pass; `make fuzz` a long one. A failure prints the
# minimal input and proptest records it in proptest-regressions/ (commit that file: it
# is replayed first on every later run).
FUZZ_CASES ?= 3000000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) cargo test --release --lib fuzz_

bench: build
	python3 bench/bench.py

# SLIDING against LOG on the same synthetic traffic: share of requests decided differently
# and the error of the estimated rate (deterministic; writes bench/results/window-accuracy.md).
bench-accuracy:
	cargo test --release --lib window_accuracy_report -- --ignored --nocapture --quiet \
	  | sed -n '/^# Window accuracy/,/^test result:/p' | sed -e '/^test result:/d' -e '/^\.$$/d' \
	  > bench/results/window-accuracy.md

bench-floor: deps
	bench/floor/run.sh

bench-floor-log: deps
	bench/floor/log.sh

# LOG against the notes' script with a `now` that advances 1 ms per request (redis-cli --pipe),
# where the script's ZADD inserts as LOG's does (bench/results/log-advancing.md).
bench-log-advancing: build
	python3 bench/log_advancing.py

# The integration suite once with every server under valgrind memcheck, on Redis built with
# MALLOC=libc (scripts/servers.sh redis-libc, built once and cached): a leak is invisible
# through jemalloc. Fails on any leak or memory error with a stack frame in the module.
# Logs and test output in target/valgrind/. Not in CI (about 3 minutes).
test-valgrind: build
	scripts/valgrind.sh run

# Ten minutes of steady mixed load; writes bench/results/soak.md (not in CI).
soak: build
	python3 scripts/soak.py

# The integration suite, unchanged, on each newer server: Redis 8.0 and Valkey 8.1 from
# Debian trixie source packages, Valkey 9.1 from Debian unstable (sid) ones; each built once
# and cached under ~/.cache/redis-tb (see scripts/servers.sh). A server that cannot be
# fetched or built fails the run: scripts/servers.sh exits non-zero.
COMPAT_SERVERS ?= redis valkey valkey9
test-compat: build
	@set -e; for name in $(COMPAT_SERVERS); do \
	  bin=$$(scripts/servers.sh $$name); \
	  echo "== integration suite on $$($$bin --version)"; \
	  REDIS_SERVER=$$bin cargo test --release --test '*'; \
	done

clean:
	cargo clean
