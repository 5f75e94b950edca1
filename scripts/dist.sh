#!/usr/bin/env bash
# dist.sh: everything a release publishes, into dist/ (or $DIST_DIR), with SHA256SUMS:
#
#   redis-tb-<v>-linux-x86_64.so, redis-tb-<v>-linux-aarch64.so   the module, glibc >= 2.17
#   redis_tb-<v>-py3-none-any.whl, redis_tb-<v>.tar.gz              the Python package
#   redis-tb-<v>.tgz                                                the npm package (npm pack)
#   redis-tb-client-<v>.crate                                       the Rust client (cargo package)
#   redis-tb-{core,lettuce,jedis,spring-boot-starter,spring-cloud-gateway}-<v>.jar and .pom,
#   redis-tb-parent-<v>.pom                                          the Java client (mvn package)
#
# The modules are built with cargo-zigbuild: Zig's linker and glibc stubs of version 2.17
# (the glibc of RHEL/CentOS 7, the oldest still found in production), so a module built
# on this Debian 12 loads on any distribution with glibc 2.17 or newer, on both CPUs.
# Zig and cargo-zigbuild come from PyPI (pinned) into a venv outside the repository
# ($DIST_VENV, default ~/.cache/redis-tb/dist-venv): Zig reports its library folder as a
# path relative to the working directory when it is under it, and bindgen (in the
# redis-module crate's build script, which runs elsewhere) then finds no libc headers.
# The aarch64 standard library comes from rustup (`rustup target add`). The module builds
# go to $DIST_TARGET_DIR (default ~/.cache/redis-tb/dist-target), kept between runs.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
out=${DIST_DIR:-$repo/dist}
venv=${DIST_VENV:-$HOME/.cache/redis-tb/dist-venv}
target_dir=${DIST_TARGET_DIR:-$HOME/.cache/redis-tb/dist-target}
glibc=2.17
# What the venv holds, pinned; a change reinstalls.
tools="ziglang==0.17.1 cargo-zigbuild==0.24.1 build==1.6.1 hatchling==1.33.0"

step() { echo "== dist: $*" >&2; }

# A package's version, from the one place it is stated.
cargo_version() { sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$1" | head -1; }
module_version=$(cargo_version Cargo.toml)
crate_version=$(cargo_version clients/rust/Cargo.toml)
python_version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' clients/python/src/redis_tb/__init__.py)
node_version=$(node -p 'require("./clients/node/package.json").version')

case "$venv" in
  "$repo"/*) echo "dist.sh: DIST_VENV must be outside the repository (see the header)" >&2; exit 2 ;;
esac
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.tools" 2>/dev/null)" != "$tools" ]; then
  step "venv $venv: $tools"
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $tools
  echo "$tools" > "$venv/.tools"
fi
export PATH="$venv/bin:$PATH"

if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  step "rustup target add aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi

rm -rf "$out"
mkdir -p "$out"

for arch in x86_64 aarch64; do
  step "module for $arch-linux-gnu, glibc $glibc"
  CARGO_TARGET_DIR="$target_dir" cargo zigbuild --release --locked --quiet -p redis-tb --lib \
    --target "$arch-unknown-linux-gnu.$glibc"
  cp "$target_dir/$arch-unknown-linux-gnu/release/libredis_tb.so" \
    "$out/redis-tb-$module_version-linux-$arch.so"
done

step "Python wheel and sdist"
build_dir=$(mktemp -d)
trap 'rm -rf "$build_dir"' EXIT
# A copy, so the build leaves nothing in the tree (and never packs a stale build/).
cp -r clients/python "$build_dir/python"
# beside it, as in the repository: the build copies tb.lua and functions.lua from ../lua into
# the package (clients/python/hatch_build.py, SPEC E2)
cp -r clients/lua "$build_dir/lua"
rm -rf "$build_dir/python/.mypy_cache" "$build_dir/python/build"
"$venv/bin/python" -m build --no-isolation --sdist --wheel --outdir "$out" "$build_dir/python" >/dev/null

step "npm package (npm pack; prepack builds dist/)"
(
  cd clients/node
  if [ ! -f node_modules/.package-lock.json ] || ! cmp -s package-lock.json node_modules/.redis-tb-lock; then
    npm ci --no-audit --no-fund --loglevel=error
    cp package-lock.json node_modules/.redis-tb-lock
  fi
  npm pack --silent --pack-destination "$out" >/dev/null
)

step "Rust client crate (cargo package)"
# --no-verify: make test-dist builds the packed crate in a fresh project, outside the
# workspace, which is the check a verify would make, and the one that matters.
cargo package --quiet --locked --no-verify --allow-dirty -p redis-tb-client
cp "target/package/redis-tb-client-$crate_version.crate" "$out/"

step "Java client jars and POMs (mvn package, clients/java)"
java_version=$(sed -n '0,/<version>/s/.*<version>\(.*\)<\/version>.*/\1/p' clients/java/pom.xml)
mvn -B -q -ntp -f clients/java/pom.xml package -DskipTests \
  -pl :redis-tb-core,:redis-tb-lettuce,:redis-tb-jedis,:redis-tb-spring-boot-starter,:redis-tb-spring-cloud-gateway
cp clients/java/pom.xml "$out/redis-tb-parent-$java_version.pom"
java_jars=()
for m in core lettuce jedis spring-boot-starter spring-cloud-gateway; do
  cp "clients/java/$m/target/redis-tb-$m-$java_version.jar" "$out/"
  cp "clients/java/$m/pom.xml" "$out/redis-tb-$m-$java_version.pom"
  java_jars+=("redis-tb-$m-$java_version.jar" "redis-tb-$m-$java_version.pom")
done

for f in "${java_jars[@]}" "redis-tb-parent-$java_version.pom" "redis-tb-$module_version-linux-x86_64.so" "redis-tb-$module_version-linux-aarch64.so" \
  "redis_tb-$python_version-py3-none-any.whl" "redis_tb-$python_version.tar.gz" \
  "redis-tb-$node_version.tgz" "redis-tb-client-$crate_version.crate"; do
  [ -f "$out/$f" ] || { echo "dist.sh: $f was not produced; dist/ has: $(ls "$out")" >&2; exit 1; }
done
(cd "$out" && sha256sum -- * > SHA256SUMS)
step "done: $out"
cat "$out/SHA256SUMS"
