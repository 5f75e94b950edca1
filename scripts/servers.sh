#!/usr/bin/env bash
# Provide Redis / Valkey server binaries for compatibility tests.
#
# Usage: scripts/servers.sh redis|valkey|valkey9|redis-libc
#
#   redis       Redis 8.x (8.0.x in trixie), default allocator (jemalloc)
#   valkey      Valkey 8.x (8.1.x in trixie), default allocator (jemalloc)
#   valkey9     Valkey 9.x (9.1.x in unstable/sid), default allocator (jemalloc)
#   redis-libc  the same Redis 8 built with MALLOC=libc, for scripts/valgrind.sh:
#               memcheck only sees allocations made through malloc(), and
#               jemalloc carves the module's memory out of its own arenas, so
#               through a jemalloc build a leak in the module is invisible.
#
# Prints the absolute path of a working redis-server / valkey-server as the
# only line on stdout; all progress goes to stderr. Exits non-zero with a
# clear message if the server cannot be fetched or built.
#
# Why build from Debian *source* packages: the machine runs bookworm (Redis
# 7.0 only), the only network we have is the package registries, trixie
# carries Redis 8.0.x and Valkey 8.1.x, and unstable (sid) carries Valkey
# 9.1.x. Binary trixie/sid packages would drag in a newer libc, whereas the
# upstream source builds against bookworm.
#
# Each name pins one suite and one major version line: redis and valkey come
# from trixie and must be 8.x, valkey9 comes from unstable and must be 9.x. A
# suite that moves on to another major line makes the fetch fail loudly
# instead of handing out a different server under the same name.
#
# The result is cached in ${REDIS_TB_CACHE:-$HOME/.cache/redis-tb}/servers/
# <package>-<upstream version>[-<variant>]/ (redis-8.0.2, redis-8.0.2-libc,
# valkey-8.1.1, valkey-9.1.2), outside the clone, so CI and later sessions on
# the same machine reuse it without network or build. valkey and valkey9
# share the valkey-<version> naming; the pinned major keeps them apart.
#
# Environment:
#   REDIS_TB_CACHE          cache root (default $HOME/.cache/redis-tb)
#   REDIS_TB_DEBIAN_MIRROR  Debian mirror URI (default: the first .../debian
#                           URI in this machine's apt sources, one-line or
#                           deb822; with neither, the script stops and asks
#                           for this variable)
#   REDIS_TB_JOBS           make -j value (default: nproc)

set -euo pipefail

# Keep stdout clean for the final path: everything else goes to stderr.
exec 3>&1 1>&2

prog=servers.sh
log() { printf '%s: %s\n' "$prog" "$*"; }
die() {
    printf '\n%s: ERROR: %s\n\n' "$prog" "$*"
    exit 1
}

usage() {
    echo "usage: $0 redis|valkey|valkey9|redis-libc" >&2
    exit 2
}

[[ $# -eq 1 ]] || usage
name=$1
# pkg: the Debian source package (and upstream tarball) to build from.
# suite: the Debian suite whose deb-src index it comes from.
# major: the upstream major version this name stands for; only a cached or
# fetched <pkg>-<major>.x is accepted (valkey and valkey9 share a package).
# variant: suffix of the cache dir, so each build configuration has its own.
# make_extra: what the variant changes in the build.
# want_malloc: the allocator `--version` must report, so a cached binary
# built otherwise (or a build that ignored MALLOC=) is never handed out.
variant='' make_extra=() want_malloc=''
case "$name" in
    redis) pkg=redis bin=redis-server suite=trixie major=8 ;;
    valkey) pkg=valkey bin=valkey-server suite=trixie major=8 ;;
    valkey9) pkg=valkey bin=valkey-server suite=unstable major=9 ;;
    redis-libc)
        pkg=redis bin=redis-server suite=trixie major=8 variant=libc
        make_extra=(MALLOC=libc) want_malloc=libc
        ;;
    *) usage ;;
esac
suffix=${variant:+-$variant}

cache_root="${REDIS_TB_CACHE:-$HOME/.cache/redis-tb}/servers"

# Whether a binary runs and (for a variant that asks) uses the right allocator.
usable() {
    local version
    version=$("$1" --version 2>/dev/null) || return 1
    [[ -z $want_malloc || $version == *" malloc=$want_malloc "* ]]
}

# Print the path of the newest cached binary that actually runs, if any.
find_cached() {
    local candidate dir best=''
    # sort -V so that e.g. redis-8.0.10 wins over redis-8.0.2.
    while IFS= read -r candidate; do
        [[ -n $candidate ]] || continue
        # The glob also matches other variants' dirs (redis-8.0.2-libc for
        # redis) and other major lines (valkey-9.1.2 for valkey): only
        # <pkg>-<major>.<rest of version><suffix> exactly is ours.
        dir=$(basename "$(dirname "$candidate")")
        [[ $dir =~ ^$pkg-$major(\.[0-9]+)+$suffix$ ]] || continue
        if usable "$candidate"; then
            best=$candidate
        fi
    done < <(compgen -G "$cache_root/$pkg-*/$bin" | sort -V)
    [[ -n $best ]] && printf '%s\n' "$best"
}

emit() {
    log "$("$1" --version)"
    printf '%s\n' "$1" >&3
    exit 0
}

# Fast path, lock-free: binaries are only ever renamed into place whole.
if cached=$(find_cached); then
    log "using cached $cached"
    emit "$cached"
fi

mkdir -p "$cache_root" || die "cannot create cache dir $cache_root"

# Serialise builds of the same server; a second caller waits, then finds the
# first caller's result in the cache.
lock="$cache_root/.$name.lock"
exec 4>"$lock" || die "cannot open lock file $lock"
if ! flock -n 4; then
    log "another $prog $name is running; waiting for $lock"
    flock -w 1800 4 || die "timed out waiting for $lock"
fi
if cached=$(find_cached); then
    log "using cached $cached (built by a concurrent run)"
    emit "$cached"
fi

# Work dir under the cache root (not /tmp) so it shares a filesystem with
# the final location and the install is an atomic rename.
work=$(mktemp -d "$cache_root/.work-$name.XXXXXX") || die "cannot create work dir"
trap 'rm -rf "$work"' EXIT

# --- build prerequisites ----------------------------------------------------

# Redis/Valkey need a C and C++ compiler (fast_float is C++) and make; the
# trixie valkey tarball is .xz. pkg-config is only probed, so it is not required.
# (tar, flock, unshare and apt-get come with every Debian system.)
missing=()
for tool_pkg in cc:build-essential c++:build-essential make:build-essential \
    xz:xz-utils; do
    command -v "${tool_pkg%%:*}" >/dev/null || missing+=("${tool_pkg#*:}")
done
if ((${#missing[@]})); then
    mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
    [[ $(id -u) -eq 0 ]] ||
        die "missing build tools; as root run: apt-get install -y ${missing[*]}"
    log "installing missing packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" ||
        die "apt-get install ${missing[*]} failed (the machine's apt lists may need 'apt-get update')"
fi

# --- fetch the upstream tarball via a private apt configuration ------------

# Reuse the host this machine already reaches Debian through (a mirror or
# proxy may be the only way out), but never touch the machine's own apt
# sources, lists or caches: everything apt writes stays in $work/apt.
detect_mirror() {
    local f uri
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        # deb822 "URIs: a b" and one-line "deb [opts] uri suite ..." forms.
        uri=$(sed -nE \
            -e 's/^[[:space:]]*URIs:[[:space:]]*//p' \
            -e 's/^[[:space:]]*deb(-src)?[[:space:]]+(\[[^]]*\][[:space:]]+)?([^[:space:]]+).*/\3/p' \
            "$f" | tr ' ' '\n' | grep -E '^https?://[^[:space:]]+/debian/?$' | head -n1) || true
        if [[ -n $uri ]]; then
            printf '%s\n' "${uri%/}"
            return 0
        fi
    done
    return 1
}
if [[ -n ${REDIS_TB_DEBIAN_MIRROR:-} ]]; then
    mirror=${REDIS_TB_DEBIAN_MIRROR%/}
elif ! mirror=$(detect_mirror); then
    die "no Debian mirror found: none of this machine's apt sources" \
        "(/etc/apt/sources.list, /etc/apt/sources.list.d/*.list, *.sources)" \
        "has a deb/deb-src line or URIs: field ending in /debian." \
        "Name one: set REDIS_TB_DEBIAN_MIRROR=<your Debian mirror URI>" \
        "and run $prog $name again."
fi

mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/dl"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
signed_by=''
[[ -r $keyring ]] && signed_by="[signed-by=$keyring] "
printf 'deb-src %s%s %s main\n' "$signed_by" "$mirror" "$suite" >"$work/apt/sources.list"

apt_opts=(
    -q
    -o "Dir::Etc::SourceList=$work/apt/sources.list"
    -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$work/apt/lists"
    -o "Dir::Cache=$work/apt/cache"
)
# $cache_root usually sits under a home dir the _apt sandbox user cannot
# enter; download as root rather than warn about it.
[[ $(id -u) -eq 0 ]] && apt_opts+=(-o APT::Sandbox::User=root)

log "fetching $suite source index from $mirror"
apt-get "${apt_opts[@]}" update ||
    die "apt-get update of the private $suite deb-src list ($mirror) failed"
# apt-get update exits 0 when the mirror is unreachable, so look for the index.
compgen -G "$work/apt/lists/*_${suite}_main_source_Sources*" >/dev/null ||
    die "could not download the $suite Sources index from $mirror (no network to it?); see apt output above"

log "fetching $pkg source package from $suite"
# apt's exit code is ignored on purpose: the latest trixie security
# revision's .dsc/.debian.tar.xz can 404 on mirrors while the upstream
# tarball (which is all we use, checksum-verified by apt against the signed
# index) still arrives. The tarball's presence is the real test.
(cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only "$pkg") ||
    log "apt-get source reported errors; checking whether the upstream tarball arrived anyway"

tarballs=("$work/dl/${pkg}_"*.orig.tar.*)
[[ -f ${tarballs[0]} ]] ||
    die "no upstream tarball ${pkg}_*.orig.tar.* was downloaded from $mirror ($suite main); see apt output above"
tarball=${tarballs[0]}

# redis_8.0.2.orig.tar.gz -> 8.0.2; valkey_8.1.1+dfsg1.orig.tar.xz -> 8.1.1
# (the +dfsg/+ds suffix is Debian repacking, not part of the upstream version).
version=$(basename "$tarball")
version=${version#"${pkg}_"}
version=${version%%.orig.tar.*}
version=${version%%+*}
[[ $version =~ ^[0-9]+(\.[0-9]+)+$ ]] ||
    die "cannot read an upstream version from $(basename "$tarball")"
log "got $(basename "$tarball") (upstream $pkg $version)"
# The suite moved to another major line: building it would hand out (and
# cache) a server that find_cached then never accepts for this name.
[[ $version == "$major".* ]] ||
    die "$name stands for $pkg $major.x, but $suite now has $pkg $version;" \
        "update the $name entry in $0"

# --- build ------------------------------------------------------------------

mkdir -p "$work/src"
tar -xf "$tarball" -C "$work/src" --strip-components=1 ||
    die "cannot unpack $tarball"

jobs=${REDIS_TB_JOBS:-$(nproc)}
# BUILD_WITH_MODULES=no: Redis 8's bundled modules (search, json, ...) clone
# and download their own dependencies; only the plain server is wanted.
# USE_SYSTEMD=no: don't let the result depend on whether libsystemd-dev
# happens to be installed.
make_args=(-C "$work/src" -j"$jobs" BUILD_TLS=no BUILD_WITH_MODULES=no USE_SYSTEMD=no
    "${make_extra[@]}")
# Build without network where we can, so a build that quietly starts
# downloading things fails here instead of on a machine without network.
offline=()
if unshare --net true 2>/dev/null; then
    offline=(unshare --net)
fi
log "building $name ($pkg $version): ${offline[*]} make ${make_args[*]}"
SECONDS=0
"${offline[@]}" make "${make_args[@]}" >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log"
    die "building $name ($pkg $version) failed (last lines of the build log above)"
}
log "built in ${SECONDS}s"

built="$work/src/src/$bin"
[[ -x $built ]] || die "build finished but $built is missing"

# Guard against the tarball name and the sources disagreeing.
built_version=$("$built" --version) || die "$built does not run"
[[ $built_version == *"v=$version "* ]] ||
    die "expected $pkg $version but the built binary says: $built_version"
usable "$built" ||
    die "expected a build with malloc=$want_malloc but the built binary says: $built_version"

# --- install ----------------------------------------------------------------

dest="$cache_root/$pkg-$version$suffix"
mkdir -p "$dest"
cp "$built" "$dest/.$bin.tmp"
mv -f "$dest/.$bin.tmp" "$dest/$bin"
printf '%s\n' "$(basename "$tarball")" >"$dest/SOURCE"

"$dest/$bin" --version >/dev/null || die "installed $dest/$bin does not run"
log "installed $dest/$bin"
emit "$dest/$bin"
