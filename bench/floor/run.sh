#!/bin/bash
# The module-API floor: how fast could TB.TAKE be if the module's own code (parsing,
# bucket math, formatting) cost nothing? Builds a variant that keeps exactly the module
# API calls of a steady-state take (OpenKey, HashGet of both fields, HashSet of one field
# + notify + Replicate HSET, GetAbsExpire, CloseKey, the 4-element reply) with constant
# texts (api-floor.patch), and runs it against the real module and HSET (one server per
# variant and round, FLOOR_ROUNDS interleaved rounds, 5 by default). Not part of CI; about
# 2 minutes plus two builds.
#
# Both variants are built from HEAD (uncommitted changes are not measured) in a temporary
# worktree with its own target directory: the repository's target/ is never touched.
#
# The patch keeps the floor on the real code path: TB.TAKE's handler opens, reads, writes
# and closes through BucketKey and starts its reply through Replier, so a change to the
# API calls made there is measured by both variants; only the field decoding in
# BucketKey::read and the handler body are replaced. Its hunks carry one line of context
# and it is applied with --3way, so edits elsewhere in those files do not break it. If it
# stops applying: apply it by hand in a worktree of HEAD, fix the conflict, and regenerate
# it with `git diff --full-index -U1`.
#
# usage: bench/floor/run.sh            (from the repository root; `make bench-floor`)
#        FLOOR_ROUNDS=2 bench/floor/run.sh
#
# redis-cell 0.5.0 (issue 18) is a third column when tb_bench/peer.py can find or build it
# (FLOOR_CELL=off leaves it out): it is loaded into the real module's server, and each
# round also times CL.THROTTLE against that server's HSET, on 100,000 keys prepared by
# `CL.THROTTLE key 999999999 1 1 1000`: the same bucket as the timed TB.TAKE's (capacity
# 1e9, 1 per second, 1000 taken), on the server clock (it has no `now`).
set -euo pipefail
CELL_SO=
if [ "${FLOOR_CELL:-on}" != off ]; then
  CELL_SO=$(cd "$(dirname "$0")/../commands" && python3 -m tb_bench.peer) ||
    { echo "no redis-cell column: tb_bench.peer found or built none" >&2; CELL_SO=; }
fi
source "$(dirname "$0")/worktree.sh"
ROUNDS=${FLOOR_ROUNDS:-5}
build real
git -C "$WORK/src" apply --3way "$ROOT/bench/floor/api-floor.patch"
build floor

CPUS=$(nproc)
pin_server=(); pin_client=()
if [ "$CPUS" -ge 2 ]; then pin_server=(taskset -c 0); pin_client=(taskset -c 1); fi

populate_cell() { # port prefix
  python3 - "$2" <<'PY' | redis-cli -p "$1" --pipe >/dev/null
import sys
w = sys.stdout.write
for i in range(100000):
    a = ('CL.THROTTLE', '%s%012d' % (sys.argv[1], i), '999999999', '1', '1', '1000')
    w('*%d\r\n' % len(a) + ''.join('$%d\r\n%s\r\n' % (len(x), x) for x in a))
PY
}
populate() { # port prefix ttl_ms(0: none)
  python3 - "$2" "$3" <<'PY' | redis-cli -p "$1" --pipe >/dev/null
import sys
prefix, ttl = sys.argv[1], sys.argv[2]
w = sys.stdout.write
def cmd(*a):
    w('*%d\r\n' % len(a) + ''.join('$%d\r\n%s\r\n' % (len(x), x) for x in a))
for i in range(100000):
    k = '%s%012d' % (prefix, i)
    cmd('HSET', k, 'tokens', '999999000', 'last_refill_time', '1764456268.123456')
    if ttl != '0':
        cmd('PEXPIRE', k, ttl)
PY
}
rps() { # port args...
  local port=$1; shift
  "${pin_client[@]}" redis-benchmark -p "$port" -n 500000 -c 50 -P 16 -r 100000 -q --csv "$@" |
    tail -1 | cut -d, -f2 | tr -d '"'
}

declare -A ratios
for round in $(seq "$ROUNDS"); do
  for variant in real floor; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cell_args=()
    [ "$variant" = real ] && [ -n "$CELL_SO" ] && cell_args=(--loadmodule "$CELL_SO")
    "${pin_server[@]}" redis-server --port "$port" --bind 127.0.0.1 --loadmodule "$WORK/$variant.so" \
      "${cell_args[@]}" --save "" --appendonly no --dir "$WORK" >/dev/null 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    # Each server runs the variant it is named for: a fresh bucket of 1 taken once has 0
    # left; the floor's reply is its constant.
    want=0; [ "$variant" = floor ] && want=999998999
    got=$(redis-cli -p "$port" TB.TAKE check 1 1 1 1 | sed -n 2p)
    [ "$got" = "$want" ] || { echo "$variant: TB.TAKE replied remaining '$got', expected '$want'" >&2; exit 1; }
    redis-cli -p "$port" flushall >/dev/null
    # As in `make bench`: each command on its own 100,000 keys, flushed in between; HSET's
    # keys carry no TTL, the buckets the TTL the module gives a bucket 1000 tokens short at
    # rate 1 (time to full 1000 s, plus half its slack), so neither variant resets it.
    populate "$port" h: 0
    h=$(rps "$port" HSET h:__rand_int__ tokens 999999000 last_refill_time 1764456268.123456)
    redis-cli -p "$port" flushall >/dev/null
    populate "$port" tb: 1125500
    t=$(rps "$port" TB.TAKE tb:__rand_int__ 1000000000 1 1 1764456268.123456)
    if [ ${#cell_args[@]} -gt 0 ]; then
      redis-cli -p "$port" flushall >/dev/null
      populate_cell "$port" cl:
      [ "$(redis-cli -p "$port" dbsize)" = 100000 ] || { echo "CL.THROTTLE: expected 100000 keys" >&2; exit 1; }
      c=$(rps "$port" CL.THROTTLE cl:__rand_int__ 999999999 1 1 1)
      [ "$(redis-cli -p "$port" dbsize)" = 100000 ] || { echo "CL.THROTTLE: keys expired during the run" >&2; exit 1; }
      rc=$(python3 -c "print(f'{$c/$h:.3f}')")
      ratios[cell]="${ratios[cell]:-} $rc"
      printf 'round %d  %-5s  HSET %9.0f req/s  CL.THROTTLE (redis-cell 0.5.0) %9.0f req/s  ratio %s\n' "$round" cell "$h" "$c" "$rc"
    fi
    kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=
    r=$(python3 -c "print(f'{$t/$h:.3f}')")
    ratios[$variant]="${ratios[$variant]:-} $r"
    printf 'round %d  %-5s  HSET %9.0f req/s  TB.TAKE %9.0f req/s  ratio %s\n' "$round" "$variant" "$h" "$t" "$r"
  done
done
[ -n "$CELL_SO" ] && python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'cell   median CL.THROTTLE (redis-cell 0.5.0)/HSET {statistics.median(v):.3f}  (rounds: {min(v):.3f} .. {max(v):.3f}; same server as real)')" ${ratios[cell]}
for variant in real floor; do
  python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[2:]]; print(f'{sys.argv[1]:5}  median TB.TAKE/HSET {statistics.median(v):.3f}  (rounds: {min(v):.3f} .. {max(v):.3f})')" "$variant" ${ratios[$variant]}
done
