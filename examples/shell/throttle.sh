#!/bin/sh
# throttle.sh: run a command under a redis-tb token bucket shared by every host
# that runs it (cron jobs, CI steps, batch scripts), with nothing but redis-cli.
#
#   throttle.sh -k KEY [-c CAPACITY] [-r RATE] [-n COST] [-w MAX_WAIT] [-m reserve|take] [-C] -- COMMAND [ARG...]
#
# reserve (default): TB.RESERVE takes the tokens now, or books them if they will be
#   there within MAX_WAIT seconds; the script sleeps the wait the server gave, then runs
#   COMMAND. Callers that start together are spaced 1/RATE apart once CAPACITY is spent.
# take: TB.TAKE runs COMMAND now or not at all.
#
# Exit status: COMMAND's own; 75 (EX_TEMPFAIL) when refused (stderr says when to
# retry); 69 (EX_UNAVAILABLE) when Redis is unreachable and -C (fail closed) is set;
# 2 for usage errors, a bucket that can never hold COST, or a server without the module.
# Without -C an unreachable Redis is logged and COMMAND runs (fail open).
#
# Environment: REDIS_URL (default redis://127.0.0.1:6379), REDIS_CLI (default
# redis-cli), TB_TIMEOUT (seconds for the Redis call, default 5; needs timeout(1)).
set -eu

me=throttle
usage() {
    echo "usage: $me -k KEY [-c CAPACITY] [-r RATE] [-n COST] [-w MAX_WAIT] [-m reserve|take] [-C] -- COMMAND [ARG...]" >&2
    exit 2
}

key='' capacity=1 rate=1 cost=1 max_wait=3600 mode=reserve fail_open=1
while getopts k:c:r:n:w:m:Ch opt; do
    case $opt in
        k) key=$OPTARG ;;
        c) capacity=$OPTARG ;;
        r) rate=$OPTARG ;;
        n) cost=$OPTARG ;;
        w) max_wait=$OPTARG ;;
        m) mode=$OPTARG ;;
        C) fail_open=0 ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ -n "$key" ] && [ $# -gt 0 ] || usage
case $mode in reserve | take) ;; *) usage ;; esac

url=${REDIS_URL:-redis://127.0.0.1:6379}
cli=${REDIS_CLI:-redis-cli}
bound=''
command -v timeout >/dev/null 2>&1 && bound="timeout ${TB_TIMEOUT:-5}"

errfile=$(mktemp)
trap 'rm -f "$errfile"' EXIT
if [ "$mode" = reserve ]; then
    reply=$($bound $cli -u "$url" -e --raw TB.RESERVE "$key" "$capacity" "$rate" "$cost" "$max_wait" 2>"$errfile") || true
else
    reply=$($bound $cli -u "$url" -e --raw TB.TAKE "$key" "$capacity" "$rate" "$cost" 2>"$errfile") || true
fi
err=$(cat "$errfile")

allowed=$(printf '%s\n' "$reply" | sed -n 1p)
retry=$(printf '%s\n' "$reply" | sed -n 3p)

case $allowed in
    0 | 1) ;;
    *)
        case $err in
            *"unknown command"*)
                echo "$me: redis-tb module not loaded on $url: load libredis_tb.so with loadmodule" >&2
                exit 2 ;;
            ERR* | WRONGTYPE*)
                echo "$me: $err" >&2
                exit 2 ;;
        esac
        # No reply at all: Redis is down, unreachable or too slow.
        if [ "$fail_open" = 1 ]; then
            echo "$me: store error on $url (${err:-no answer}); failing open: running unthrottled" >&2
            exec "$@"
        fi
        echo "$me: store error on $url (${err:-no answer}); failing closed: not running" >&2
        exit 69 ;;
esac

if [ "$allowed" = 0 ]; then
    case $retry in
        -*)
            echo "$me: $key can never hold $cost tokens (capacity $capacity)" >&2
            exit 2 ;;
    esac
    # whole seconds, rounded up, at least 1: never earlier than the bucket allows
    secs=$(awk -v r="$retry" 'BEGIN { s = int(r); if (s < r) s++; if (s < 1) s = 1; print s }')
    echo "$me: $key is over its limit; retry after $secs s" >&2
    exit 75
fi

if [ "$mode" = reserve ] && [ "$retry" != 0 ]; then
    echo "$me: $key reserved; waiting $retry s" >&2
    sleep "$retry"
fi
exec "$@"
