# redis-tb: `make run` builds and starts redis-server with the module; `make test` runs
# the whole test suite. Both install missing system packages first.

MODULE := target/release/libredis_tb.so
REDIS_SERVER ?= redis-server
# `make run`'s port (the one every client snippet uses): `make run PORT=6380` for another.
PORT ?= 6379
# Node.js 20 from PyPI, where scripts/install-deps.sh put it because the machine's node is
# missing or older than 20 (the folder exists only then); first on PATH for every recipe.
export PATH := $(HOME)/.cache/redis-tb/node20/bin:$(PATH)

.PHONY: all build run dist test-dist test test-examples test-python lint-python test-node lint-node test-java lint-java test-rust-client test-http test-http-scripts bench-accuracy lint fmt vectors fuzz bench bench-scripts test-scripts bench-leases bench-floor bench-floor-log bench-floor-leases bench-log-advancing soak test-compat test-valgrind deps help clean

all: build

help:
	@echo "make          build $(MODULE)"
	@echo "make build    the same"
	@echo "make run      build, then start redis-server on redis.conf.example (port 6379, PORT=... for another; with the CL.THROTTLE alias)"
	@echo "make deps     install what a fresh Debian machine lacks (redis-server, libclang, python3-venv, Node.js 20+); every build runs it"
	@echo "make clean    cargo clean"
	@echo "make help     this list"
	@echo "make dist     every release artifact in dist/ with SHA256SUMS (modules for x86_64 and aarch64 on glibc 2.17, wheel, sdist, npm tarball, crate)"
	@echo "make test-dist  make dist, then each artifact installed outside the repository and its README quick-start run (aarch64 under qemu)"
	@echo "make test     the whole test suite (unit, property, integration against a real redis-server), then make test-examples"
	@echo "make test-examples  the integrations end to end: Python (FastAPI, Flask/slowapi, Django, shell), Rust (axum), Node (Express, Fastify)"
	@echo "make test-python  the Python package (clients/python, with the shared vectors) and the FastAPI, Flask, slowapi, Django and shell examples"
	@echo "make lint-python  ruff and mypy --strict over the Python package, its tests, examples, test harness and benchmarks"
	@echo "make lint     limiter-scripts.json current, cargo fmt --check and clippy -D warnings, then make lint-node, lint-python and lint-java"
	@echo "make fmt      cargo fmt (the formatting make lint checks)"
	@echo "make vectors  clients/vectors/limiter-scripts.json written again from limiter.json (every case on the script backend; make lint checks it is current)"
	@echo "make test-node  the Node package (clients/node, with the shared vectors) and the Express and Fastify examples"
	@echo "make lint-node  tsc --noEmit (strict) over the Node package and examples, and no eslint-disable comments"
	@echo "make test-java  the Java client (clients/java: core with the shared vectors, Lettuce and Jedis stores, Spring Boot starter, gateway limiter), the Spring examples, and the Java bench apps built (bench/integrations/java)"
	@echo "make lint-java  google-java-format (spotless:check) and javac -Xlint:all -Werror over clients/java, the Spring examples and bench/integrations/java"
	@echo "make test-rust-client  the Rust client crate (vectors included, with and without axum) and the axum example"
	@echo "make test-http  one black-box HTTP suite over every example of examples/manifest.json (testing/http)"
	@echo "make test-http-scripts  the same suite against redis-servers without the module: every example on the script backend (clients/lua, SPEC E)"
	@echo "make fuzz     long property-based fuzz run (FUZZ_CASES=...)"
	@echo "make bench    every command against HSET, PING, the Lua scripts and redis-cell 0.5.0, then make bench-leases (bench/README.md; writes bench/results/)"
	@echo "make bench-scripts  the script backend (clients/lua) vs the module, the notes' script, Spring Cloud Gateway's, @upstash/ratelimit's and redis_rate's (bench/results/scripts.md)"
	@echo "make bench-leases  TB.ACQUIRE/RELEASE vs redis-semaphore, combined call, hold+settle, bytes per lease"
	@echo "make bench-accuracy  SLIDING vs LOG decisions and rate error on synthetic traffic (bench/results/window-accuracy.md)"
	@echo "make bench-floor  TB.TAKE vs the same module API calls with no parsing/math/formatting (bench/floor/)"
	@echo "make bench-floor-log  TB.WINDOW LOG vs the module API calls it cannot avoid, and the notes' script (bench/floor/)"
	@echo "make bench-floor-leases  TB.ACQUIRE + TB.RELEASE and redis-semaphore vs two PINGs and the least module pairs (bench/floor/)"
	@echo "make bench-log-advancing  TB.WINDOW LOG vs the notes' script with an advancing now (bench/results/log-advancing.md)"
	@echo "make test-valgrind  the integration suite under valgrind (MALLOC=libc Redis 8.0); fails on a leak or memory error in the module"
	@echo "make soak     10-minute mixed load: memory and latency over time (bench/results/soak.md)"
	@echo "make test-compat  the integration suite on Redis 8.0, Valkey 8.1 and Valkey 9.1 (built from Debian sources, cached)"
	@echo "make test-scripts  the script backend (clients/lua) against the module: differential run, hostile inputs, replica, AOF, no-TIME servers, cluster"

deps:
	@scripts/install-deps.sh

build: deps
	cargo build --release

run: build
	$(REDIS_SERVER) redis.conf.example --port $(PORT)

# Everything a release publishes, into dist/ with SHA256SUMS (scripts/dist.sh says how:
# cargo-zigbuild and Zig from PyPI in a venv under ~/.cache/redis-tb, the aarch64 std from
# rustup). `make test-dist` checks the artifacts as a user gets them (scripts/test-dist.sh).
dist: deps
	scripts/dist.sh

test-dist: dist
	scripts/test-dist.sh

# `cargo test --release` runs every tests/*.rs, `make test-scripts`'s included.
test: build
	cargo test --release
	$(MAKE) test-examples

# The integrations, end to end against a real redis-server with the module and real HTTP
# servers: the Python package (a venv at .venv/python with pinned dependencies) with the
# FastAPI, Flask/slowapi (the `limits` storages and limits' own suite), Django and shell
# examples; the Rust client crate with the axum example; the Node package (npm ci from its
# lockfile) with the Express and Fastify examples; then one black-box HTTP suite over every
# example (testing/http, driven by examples/manifest.json), with the module and then
# without it (make test-http-scripts: every app on the script backend, issue 42).
test-examples: build
	$(MAKE) test-python
	$(MAKE) test-rust-client
	$(MAKE) test-node
	$(MAKE) test-java
	testing/http/run-tests.sh
	SKIP_BUILD=1 HTTP_BACKEND=scripts testing/http/run-tests.sh

# The Java client (clients/java, one Maven reactor with every version pinned): the core's
# tests with every file of clients/vectors, the Lettuce and Jedis stores against real
# redis-server processes with the module, the Spring Boot starter and the gateway limiter,
# and the Spring examples (examples/spring, examples/spring-gateway) built and tested.
test-java: build
	mvn -B -ntp -f clients/java/pom.xml verify

lint-java:
	mvn -B -q -f clients/java/pom.xml spotless:check test-compile

# The Node package (node:test against real redis-server processes, the shared vectors of
# clients/vectors) and the two Node examples end to end (npm ci from their lockfiles).
test-node: build
	clients/node/run-tests.sh
	examples/express/run-tests.sh
	examples/fastify/run-tests.sh

lint-node:
	clients/node/scripts/lint.sh

# The Rust client crate (its unit tests, the shared vectors of clients/vectors, the doc
# example) and the axum example end to end; then the crate without its default `axum`
# feature, built and run (the core and the tower layer do not need axum).
test-rust-client: build
	cargo test -p redis-tb-client -p redis-tb-axum-example
	cargo test -p redis-tb-client --no-default-features --lib --test vectors --test tower --test tower_leases

# One black-box HTTP suite for every example app (testing/http, pytest): each example of
# examples/manifest.json built (npm ci + build, cargo build), started on a free port against
# its own redis-server with the module, and driven over real HTTP from the manifest; an
# example's listed deviations are xfail(strict=True) checks.
test-http: build
	testing/http/run-tests.sh

# The same suite with no module on any of its redis-servers (HTTP_BACKEND=scripts): each
# app must choose the script library itself (SPEC E1, its default backend auto), and the
# checks that read or plant state in Redis call the library (clients/lua/tb.lua) instead of
# the module's commands (testing/http/README.md).
test-http-scripts: build
	HTTP_BACKEND=scripts testing/http/run-tests.sh

lint:
	python3 clients/vectors/scripts_form.py --check
	cargo fmt --all --check
	cargo clippy --workspace --all-targets --release -- -D warnings
	$(MAKE) lint-node
	$(MAKE) lint-python
	$(MAKE) lint-java

# The Python package (clients/python: the vectors of clients/vectors, unit and end-to-end
# tests, limits' own suite) and its examples (FastAPI, Flask, slowapi, Django, shell),
# against real redis-server, uvicorn and gunicorn processes; its lint alone: ruff and
# mypy --strict (both pinned in clients/python/requirements-test.txt).
test-python: build
	clients/python/run-tests.sh

lint-python:
	clients/python/lint.sh

fmt:
	cargo fmt

# clients/vectors/limiter-scripts.json: limiter.json's cases on the script backend (SPEC E),
# made by one translation (clients/vectors/README.md) that every runner reads as data.
vectors:
	python3 clients/vectors/scripts_form.py

# Property-based fuzzing of the parser, stored-state decoder and math with arbitrary bytes
# and extreme numbers. CI runs a short pass; `make fuzz` a long one. A failure prints the
# minimal input and proptest records it in proptest-regressions/ (commit that file: it
# is replayed first on every later run).
FUZZ_CASES ?= 3000000
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) cargo test --release --lib fuzz_

bench: build
	python3 bench/commands/bench.py
	python3 bench/commands/leases.py
	python3 bench/commands/leases_callgrind.py --out bench/results/leases-callgrind.md

# The script backend against the module and the scripts people run instead (issue 42): each
# peer's script from its current release through npm, the Go module proxy and Maven (into
# ~/.cache/redis-tb/peers, never the repository), server CPU per call and throughput side by
# side (writes bench/results/scripts.md).
bench-scripts: build
	python3 bench/commands/scripts.py

# In-flight limits and holds (issue 25): TB.ACQUIRE + TB.RELEASE against redis-semaphore
# (installed by npm into ~/.cache/redis-tb), the combined call, hold + settle, bytes per
# lease (writes bench/results/leases.md); then the server's instructions per acquire +
# release against redis-semaphore's under callgrind (bench/results/leases-callgrind.md).
bench-leases: build
	python3 bench/commands/leases.py
	python3 bench/commands/leases_callgrind.py --out bench/results/leases-callgrind.md

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

# Issue 25's server-CPU target against its floors: two PINGs and the least module pairs of
# bench/floor/lease_floor.c (built with gcc), one at a time and pipelined, beside TB and
# redis-semaphore (writes bench/results/lease-floor.md).
bench-floor-leases: build
	python3 bench/floor/lease_floor.py

# LOG against the notes' script with a `now` that advances 1 ms per request (redis-cli --pipe),
# where the script's ZADD inserts as LOG's does (bench/results/log-advancing.md).
bench-log-advancing: build
	python3 bench/commands/log_advancing.py

# The integration suite once with every server under valgrind memcheck, on Redis built with
# MALLOC=libc (scripts/servers.sh redis-libc, built once and cached): a leak is invisible
# through jemalloc. Fails on any leak or memory error with a stack frame in the module.
# Logs and test output in target/valgrind/. Not in CI (about 3 minutes).
test-valgrind: build
	scripts/valgrind.sh run

# Ten minutes of steady mixed load; writes bench/results/soak.md (not in CI).
soak: build
	python3 scripts/soak.py

# The script backend (clients/lua, issue 42) held to the module: 100,000 differential calls,
# keys continued by either backend, the hostile cases, replica, AOF restart, servers that
# refuse TIME in scripts, a 3+3 cluster (clients/lua/README.md). Part of `make test` and,
# on each newer server, of `make test-compat`.
test-scripts: build
	cargo test --release --test scripts_differential --test scripts_backends --test scripts_cluster --test hostile

# The integration suite, unchanged (the script backend's tests included), on each newer
# server: Redis 8.0 and Valkey 8.1 from
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
