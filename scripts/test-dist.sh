#!/usr/bin/env bash
# test-dist.sh: the artifacts of `make dist` (dist/, or $DIST_DIR) as a user gets them,
# each outside the repository, in a fresh temporary folder:
#
#   1. SHA256SUMS matches; each module is an ELF of its CPU whose highest glibc symbol
#      version is at most 2.17 (readelf, so both CPUs are read on this one).
#   2. The x86_64 module loads into this machine's redis-server; the aarch64 module into an
#      arm64 redis-server (Debian's redis-tools:arm64 and its libraries, unpacked into a
#      sysroot cached in ~/.cache/redis-tb) run under qemu-user; both answer TB.TAKE with
#      the exact reply and report the Cargo version in MODULE LIST and INFO.
#   3. The wheel installs into a fresh venv (its dependencies from PyPI) and the sdist
#      builds a wheel; the README's "The client" block runs against a server with the module;
#      both carry clients/lua's tb.lua and functions.lua, which the installed package finds.
#   4. The npm tarball installs into a fresh project; the README's import block and its
#      "Connecting" block run as ESM, and the same names load with require() (CommonJS).
#   5. The crate, unpacked, is the dependency of a fresh cargo project whose main runs the
#      README's first block (the axum layer) and gets a rate-limited answer over HTTP.
#
# Needs dist/ (make dist), redis-server and redis-cli, python3 with venv, node >= 20, cargo.
# Installs qemu-user and the arm64 packages when missing (apt, as root or with sudo).
# Prints "N passed, 0 failed" at the end; exits non-zero on any failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "${DIST_DIR:-$repo/dist}" && pwd)
cache=${REDIS_TB_CACHE:-$HOME/.cache/redis-tb}
baseline=2.17
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
passed=0
ok() { passed=$((passed + 1)); echo "ok $passed - $*"; }
fail() { echo "not ok - $*" >&2; echo "$passed passed, 1 failed"; exit 1; }

cargo_version() { sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$1" | head -1; }
version=$(cargo_version "$repo/Cargo.toml")
crate_version=$(cargo_version "$repo/clients/rust/Cargo.toml")
python_version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$repo/clients/python/src/redis_tb/__init__.py")
node_version=$(node -p "require('$repo/clients/node/package.json').version")
IFS=. read -r major minor patch <<<"$version"
module_ver=$((major * 10000 + minor * 100 + patch))

sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo

# ---- 1. checksums, CPU and glibc baseline ---------------------------------------------
(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "SHA256SUMS does not match dist/"
ok "SHA256SUMS matches $(wc -l <"$dist/SHA256SUMS") files"
for arch in x86_64 aarch64; do
  so="$dist/redis-tb-$version-linux-$arch.so"
  machine=$(readelf -h "$so" | sed -n 's/^ *Machine: *//p')
  case "$arch:$machine" in
    x86_64:*X86-64* | aarch64:*AArch64*) ;;
    *) fail "$so: machine is $machine" ;;
  esac
  highest=$(readelf -W -V "$so" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  [ -n "$highest" ] || fail "$so: no glibc version needed (not read?)"
  [ "$(printf '%s\n%s\n' "$highest" "$baseline" | sort -V | tail -1)" = "$baseline" ] ||
    fail "$so needs GLIBC_$highest, above the $baseline baseline"
  ok "$arch module: $machine, highest glibc symbol version $highest <= $baseline"
done

# ---- 2. the modules in real servers -----------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts a server (the command line in "$@") on $port and waits for PING.
start_server() {
  local log=$1; shift
  "$@" >"$log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 300); do
    redis-cli -p "$port" PING >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$log" >&2; fail "server exited: $*"; }
    sleep 0.1
  done
  cat "$log" >&2
  fail "server did not answer on $port: $*"
}

# TB.TAKE's exact reply with a client clock, the version in MODULE LIST and INFO tb.
check_module() {
  local what=$1 got
  got=$(redis-cli -p "$port" TB.TAKE dist:k 10 1 1 1764456268.5 | tr '\n' ' ')
  [ "$got" = "1 9 0 1 " ] || fail "$what: TB.TAKE dist:k 10 1 1 answered '$got'"
  got=$(redis-cli -p "$port" TB.TAKE dist:k 10 1 20 1764456268.5 | tr '\n' ' ')
  [ "$got" = "0 9 -1 1 " ] || fail "$what: TB.TAKE dist:k 10 1 20 answered '$got'"
  got=$(redis-cli -p "$port" MODULE LIST | tr '\n' ' ')
  [[ "$got" == "name tb ver $module_ver "* ]] || fail "$what: MODULE LIST says '$got'"
  got=$(redis-cli -p "$port" INFO tb | tr -d '\r' | sed -n 's/^tb_version://p')
  [ "$got" = "$version" ] || fail "$what: INFO tb says version '$got'"
  ok "$what: TB.TAKE exact, MODULE LIST ver $module_ver, INFO tb_version $version"
}

port=$(free_port)
start_server "$work/x86.log" redis-server --port "$port" --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$work" --loadmodule "$dist/redis-tb-$version-linux-x86_64.so"
check_module "x86_64 module in $(redis-server --version | cut -d' ' -f1-3)"
redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true

# The arm64 server: Debian's packages for the architecture, unpacked (never installed).
arm_packages="redis-server redis-tools libc6 libgcc-s1 libstdc++6 libatomic1 liblzf1 libjemalloc2
  libsystemd0 libssl3 libcap2 libgcrypt20 libgpg-error0 liblzma5 libzstd1 liblz4-1"
sysroot="$cache/arm64-sysroot"
if [ "$(cat "$sysroot/.packages" 2>/dev/null)" != "$arm_packages" ]; then
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
  fi
  if ! apt-cache show redis-tools:arm64 >/dev/null 2>&1; then
    $sudo apt-get update -qq
  fi
  rm -rf "$sysroot" "$work/debs"
  mkdir -p "$sysroot" "$work/debs"
  # shellcheck disable=SC2086
  (cd "$work/debs" && apt-get download -qq -o APT::Sandbox::User=root $(printf '%s:arm64 ' $arm_packages))
  for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
  echo "$arm_packages" > "$sysroot/.packages"
fi
if ! command -v qemu-aarch64 >/dev/null 2>&1; then
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
fi
port=$(free_port)
start_server "$work/arm.log" qemu-aarch64 -L "$sysroot" "$sysroot/usr/bin/redis-server" \
  --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  --loadmodule "$dist/redis-tb-$version-linux-aarch64.so"
arm_version=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^redis_version://p')
arm_arch=$(redis-cli -p "$port" INFO server | tr -d '\r' | sed -n 's/^arch_bits://p')
check_module "aarch64 module in arm64 redis-server $arm_version ($arm_arch-bit, qemu-aarch64)"
redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true

# One server with the x86_64 module for the packages' quick-starts.
port=$(free_port)
start_server "$work/quick.log" redis-server --port "$port" --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$work" --loadmodule "$dist/redis-tb-$version-linux-x86_64.so"

# The first fenced block (of the language given) after a heading, from a README.
block_after() {
  awk -v heading="$2" -v lang="$3" '
    $0 == heading { found = 1; next }
    found && !inside && $0 == "```" lang { inside = 1; next }
    inside && $0 == "```" { exit }
    inside { print }' "$1"
}

# ---- 3. Python ------------------------------------------------------------------------
py_block=$(block_after "$repo/clients/python/README.md" "## The client" python)
[ -n "$py_block" ] || fail "clients/python/README.md: no python block after '## The client'"
"${PYTHON:-python3}" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip --quiet --disable-pip-version-check)
"${pip[@]}" install "$dist/redis_tb-$python_version-py3-none-any.whl"
{
  echo "import asyncio"
  echo "async def main():"
  sed -e "s/localhost:6379/127.0.0.1:$port/g" -e 's/^/    /' <<<"$py_block"
  echo "    assert r.allowed and m.allowed and q.remaining >= 0 and w.wait >= 0, (r, m, q, w)"
  echo "    print('python quick-start:', r)"
  echo "asyncio.run(main())"
} >"$work/quick.py"
(cd "$work" && "$work/venv/bin/python" quick.py) || fail "the Python README's client block"
installed=$("$work/venv/bin/python" -c 'import redis_tb; print(redis_tb.__version__)')
[ "$installed" = "$python_version" ] || fail "the wheel installs redis_tb $installed"
ok "wheel $python_version in a fresh venv: the README's client block ran against the module"
# SPEC E2: the script library, copied from clients/lua at build time, in the wheel and the
# sdist byte for byte, and found by the installed package outside the repository
"$work/venv/bin/python" - "$repo/clients/lua" "$dist/redis_tb-$python_version-py3-none-any.whl" \
  "$dist/redis_tb-$python_version.tar.gz" "redis_tb-$python_version" <<'PY' || fail "the Python artifacts' script library"
import sys, tarfile, zipfile
from pathlib import Path
lua, wheel, sdist, top = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
with zipfile.ZipFile(wheel) as z, tarfile.open(sdist) as t:
    for f in ("tb.lua", "functions.lua"):
        want = (lua / f).read_bytes()
        assert z.read(f"redis_tb/lua/{f}") == want, f"wheel: redis_tb/lua/{f}"
        assert t.extractfile(f"{top}/src/redis_tb/lua/{f}").read() == want, f"sdist: src/redis_tb/lua/{f}"
PY
sha=$(cd "$work" && "$work/venv/bin/python" -c 'import pathlib, redis_tb.lua as l; assert l.lua_dir() == pathlib.Path(l.__file__).resolve().parent / "lua"; print(l.lua_sources().sha)')
[ "$sha" = "$(sha1sum "$repo/clients/lua/tb.lua" | cut -d' ' -f1)" ] || fail "the installed package's tb.lua SHA-1 is $sha"
ok "wheel and sdist $python_version carry clients/lua's tb.lua and functions.lua; the installed package finds them (SHA-1 $sha)"
"${pip[@]}" wheel --no-deps -w "$work/from-sdist" "$dist/redis_tb-$python_version.tar.gz"
[ -f "$work/from-sdist/redis_tb-$python_version-py3-none-any.whl" ] || fail "the sdist built no wheel"
ok "sdist $python_version builds a wheel"

# ---- 4. Node.js -----------------------------------------------------------------------
mkdir "$work/node"
cd "$work/node"
npm init -y >/dev/null
# node-redis 5, as the README connects, and the optional peers the import block names.
npm install --no-audit --no-fund --loglevel=error "$dist/redis-tb-$node_version.tgz" \
  redis@5.12.1 express@5.3.0 fastify@5.12.8 express-rate-limit@8.7.5 prom-client@15.1.3 >/dev/null
imports=$(block_after "$repo/clients/node/README.md" "## Public API at a glance" ts)
connect=$(block_after "$repo/clients/node/README.md" "### Connecting: your client, no second connection" ts)
[ -n "$imports" ] && [ -n "$connect" ] || fail "clients/node/README.md: quick-start blocks not found"
{
  echo "$imports"
  sed "s/127.0.0.1:6379/127.0.0.1:$port/g" <<<"$connect"
  echo "const r = await tb.take('dist:node', 10, 2);"
  echo "if (!r.allowed || r.remaining !== 9) throw new Error('take: ' + JSON.stringify(r));"
  echo "if (typeof rateLimit !== 'function' || typeof fastifyRateLimit !== 'function' || typeof PrometheusMetrics !== 'function') throw new Error('exports');"
  echo "console.log('node ESM quick-start:', JSON.stringify(r));"
  echo "await redis.quit();"
} >quick.mjs
node quick.mjs || fail "the Node README's blocks as ESM"
cat >quick.cjs <<EOF
const { TbClient, RateLimiter } = require('redis-tb');
const { rateLimit } = require('redis-tb/express');
const { fastifyRateLimit } = require('redis-tb/fastify');
const { createClient } = require('redis');
(async () => {
  const redis = await createClient({ url: 'redis://127.0.0.1:$port', disableOfflineQueue: true }).connect();
  const tb = new TbClient(redis);
  await tb.checkModule();
  const r = await tb.take('dist:node', 10, 2);
  if (!r.allowed || typeof RateLimiter !== 'function' || typeof rateLimit !== 'function' || typeof fastifyRateLimit !== 'function') throw new Error(JSON.stringify(r));
  console.log('node CommonJS:', JSON.stringify(r));
  await redis.quit();
})().catch((e) => { console.error(e); process.exit(1); });
EOF
node quick.cjs || fail "the npm package with require()"
ok "npm tarball $node_version in a fresh project: README blocks as ESM, require() as CommonJS"
cd "$repo"

# ---- 5. Rust --------------------------------------------------------------------------
rs_block=$(awk '/^```rust$/ { inside = 1; next } inside && /^```$/ { exit } inside { print }' \
  "$repo/clients/rust/README.md")
[ -n "$rs_block" ] || fail "clients/rust/README.md: no rust block"
mkdir -p "$work/rust/src"
tar -xzf "$dist/redis-tb-client-$crate_version.crate" -C "$work"
# SPEC E2: the crate carries the script library as files (its lua/ entries are links to
# clients/lua, which cargo package stores as their contents): the same bytes as the source.
for f in tb.lua functions.lua; do
  cmp -s "$work/redis-tb-client-$crate_version/lua/$f" "$repo/clients/lua/$f" ||
    fail "the crate's lua/$f is not clients/lua/$f"
done
cat >"$work/rust/Cargo.toml" <<EOF
[package]
name = "quick-start"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
redis-tb-client = { path = "../redis-tb-client-$crate_version" }
axum = { version = "0.8.9", default-features = false, features = ["http1", "tokio"] }
tokio = { version = "1.54.1", features = ["io-util", "macros", "net", "rt-multi-thread"] }
EOF
{
  # What the README's block leaves to the reader: the app's User type (its plan a tier
  # name), a listener.
  cat <<'EOF'
#![allow(dead_code, unused_imports, unused_variables)]
use tokio::io::{AsyncReadExt, AsyncWriteExt};
#[derive(Clone)]
struct User { id: String, plan: String }
type Error = Box<dyn std::error::Error + Send + Sync>;

async fn app(listener: tokio::net::TcpListener) -> Result<(), Error> {
EOF
  sed "s#redis://127.0.0.1:6379/#redis://127.0.0.1:$port/#" <<<"$rs_block"
  cat <<'EOF'
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { app(listener).await.expect("the README's app") });
    for attempt in 0.. {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(mut s) => {
                s.write_all(b"GET /items/1 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await?;
                let mut response = String::new();
                s.read_to_string(&mut response).await?;
                println!("rust quick-start: {}", response.lines().next().unwrap_or(""));
                assert!(response.starts_with("HTTP/1.1 200"), "{response}");
                assert!(response.to_ascii_lowercase().contains("\r\nratelimit: "), "{response}");
                return Ok(());
            }
            Err(_) if attempt < 100 => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
EOF
} >"$work/rust/src/main.rs"
# The workspace's lock file pins the same dependency versions the repository tests with.
cp "$repo/Cargo.lock" "$work/rust/Cargo.lock"
(cd "$work/rust" && CARGO_TARGET_DIR="$cache/dist-quick-start-target" cargo run --quiet) ||
  fail "the Rust README's block in a fresh cargo project"
ok "crate $crate_version in a fresh cargo project: the README's axum block answered over HTTP"

echo "$passed passed, 0 failed"
