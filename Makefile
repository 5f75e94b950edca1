# redis-tb: `make run` builds and starts redis-server with the module; `make test` runs
# the whole test suite. Both install missing system packages first.

MODULE := target/release/libredis_tb.so
REDIS_SERVER ?= redis-server

.PHONY: all build run test unit integration lint fmt bench test-compat deps help clean

all: build

help:
	@echo "make          build $(MODULE)"
	@echo "make run      build, then start redis-server on redis.conf.example (port 6380)"
	@echo "make test     the whole test suite (unit, property, integration against a real redis-server)"
	@echo "make lint     cargo fmt --check and clippy -D warnings"
	@echo "make bench    side-by-side throughput/latency/memory benchmark (writes bench/results/)"
	@echo "make test-compat  the integration suite on Redis 8.0 and Valkey 8.1 (built from Debian sources, cached)"

deps:
	@scripts/install-deps.sh

build: deps
	cargo build --release

$(MODULE): build

run: build
	$(REDIS_SERVER) redis.conf.example

test: build
	cargo test --release

unit:
	cargo test --release --lib

lint:
	cargo fmt --check
	cargo clippy --all-targets --release -- -D warnings

fmt:
	cargo fmt

bench: build
	python3 bench/bench.py

# The integration suite, unchanged, on each newer server (fetched from Debian trixie
# source packages and built once; cached under ~/.cache/redis-tb). A server that cannot be
# fetched or built fails the run: scripts/servers.sh exits non-zero.
COMPAT_SERVERS ?= redis valkey
test-compat: build
	@set -e; for name in $(COMPAT_SERVERS); do \
	  bin=$$(scripts/servers.sh $$name); \
	  echo "== integration suite on $$($$bin --version)"; \
	  REDIS_SERVER=$$bin cargo test --release --test '*'; \
	done

clean:
	cargo clean
