"""What is measured: the bucket parameters, the workload table, the memory methods and the
targets. Everything here is data; how it is run lives in runner.py, memory.py and stats.py.

Adding a workload is one row in WORKLOADS (and, if it is graded, one row in TARGETS):

    Workload("peek", "TB.PEEK (now)",                     # id, label
             ["TB.PEEK", KEY, CAPACITY, RATE, FIXED_NOW],  # the timed command
             prepare=[take(KEY, PREFILL_TAKE)],            # run once per key before each run
             peers=["tb_now"], note="...")                 # compared against, and why

Placeholders, filled in by the runner:
  __rand_int__  the key number. redis-benchmark replaces every occurrence in the timed
                command with its own random number (12 digits, 0 .. r-1; two occurrences in
                one command get two independent numbers); `prepare` is run once per key
                number with every occurrence replaced by that number, so it creates exactly
                the keys the timed command can hit.
  __lua_sha__   the SHA1 of bench/commands/token_bucket.lua after SCRIPT LOAD.
  __seed_sha__  the SHA1 of the design notes' own script (read from ../shared/seeds at run time).
  __wfixed_sha__, __wlog_sha__  the SHA1s of bench/commands/window_fixed.lua and of the notes' sliding
                log script (read from ../shared/seeds/002_*.txt at run time)
                (the notes' fixed window counter and sliding window log, issue 11).

Every workload belongs to a suite: "core" (TB.TAKE and the other TB.* commands against
HSET, PING and the Lua script), "issue12" (redis-cell side by side, two bucket shapes) or
"issue11" (TB.WINDOW's three modes against the notes' two window scripts and TB.TAKE) or
"layered" (issue 18: one TB.MTAKE over three buckets against three CL.THROTTLE calls).
`make bench` runs all four; `bench.py --suite issue12` runs one, `--suite issue12,layered`
two (HSET and the workloads its rows are compared with always come along).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

# ---------------------------------------------------------------------------------------
# Bucket parameters (see the report's "Parameters" section for the reasoning).
#
# Keys must stay alive for the whole run (a key that expires comes back as a *new* full
# bucket: the workload would silently turn into key creation), every call must be allowed
# (a denied call writes nothing and would flatter the write path), and the module should
# be measured in the state a busy bucket is normally in.
#
# * capacity 1e9: no bucket can run dry (each key sees ~10 takes per run).
# * Each key is populated with one take of PREFILL_TAKE = 1000 tokens, then every timed
#   call takes n = 1. The bucket is then 1000 tokens short: time-to-full 1000 s at rate 1,
#   so the key's TTL is ~1000 s and nothing expires during a run (the gaps between hits on
#   one key are seconds), whether `now` is fixed or the server clock (which refills only a
#   few tokens per key during a run).
# * rate 1: one take moves time-to-full by 1 s, small against the TTL the module keeps
#   (it only rewrites a TTL that no longer covers time-to-full within its margin): the
#   steady state of a limited key. The "fresh buckets" workload shows the other regime.
# ---------------------------------------------------------------------------------------
CAPACITY = "1000000000"
RATE = "1"
TAKE_N = "1"
PREFILL_TAKE = "1000"
# A fixed, realistic epoch time for the calls with an explicit `now`. With `now` fixed no
# time passes for the buckets: they only drain (by n per call), hence the large capacity.
FIXED_NOW = "1764456268.123456"
# The values a populated bucket holds (capacity - PREFILL_TAKE, FIXED_NOW): the plain HSET
# workloads write exactly these, so every variant stores the same typical values.
TYPICAL_TOKENS = str(int(CAPACITY) - int(PREFILL_TAKE))
# "Fresh buckets" regime: one take of 1 at rate 0.001 leaves time-to-full at 1000 s (the
# key lives), but each further take pushes it another 1000 s out, beyond the module's TTL
# margin, so (almost) every call re-sets and replicates the expiry: the module's worst path.
FRESH_RATE = "0.001"
# TTL given to the keys of the HSET-on-keys-with-a-TTL workload and of the HSET+PEXPIRE
# memory baseline: what the Lua script sets for the typical state (ceil(1000 s) + 1 s).
TYPICAL_TTL_MS = str(int(PREFILL_TAKE) * 1000 // int(RATE) + 1000)
# TB.RESERVE's max_wait. The buckets hold ~1e9 tokens, so every reservation is served from
# tokens already there (wait 0, the balance never goes negative): the timed path is
# "admitted immediately", the one a reservation takes whenever it can. A small max_wait
# bounds the damage if that ever stopped holding (at rate 1: a debt of at most 1 token),
# and the runner checks sample balances after each run.
RESERVE_MAX_WAIT = "1"
# TB.MTAKE's keys: one per role, all with the same parameters.
MTAKE_ROLES = ("a", "b", "c")

KEY_PREFIX = "tb:"
KEY = KEY_PREFIX + "__rand_int__"
LUA_SHA = "__lua_sha__"
SEED_SHA = "__seed_sha__"
CLIENTS = 50
PIPELINES = (16, 1)  # pipelined first: it is the headline comparison


# ---------------------------------------------------------------------------------------
# Command builders (the table below reads as the commands themselves).
# ---------------------------------------------------------------------------------------
def hset(key: str) -> list[str]:
    return ["HSET", key, "tokens", TYPICAL_TOKENS, "last_refill_time", FIXED_NOW]


def lua(key: str, n: str, capacity: str = CAPACITY, rate: str = RATE) -> list[str]:
    return ["EVALSHA", LUA_SHA, "1", key, capacity, rate, n, FIXED_NOW]


def seed_lua(key: str, n: str, capacity: str, rate: str) -> list[str]:
    """The design notes' own script (read from the notes at run time), with the same explicit now."""
    return ["EVALSHA", SEED_SHA, "1", key, capacity, rate, n, FIXED_NOW]


def take(key: str, n: str, rate: str = RATE, now: str | None = FIXED_NOW,
         capacity: str = CAPACITY) -> list[str]:
    return ["TB.TAKE", key, capacity, rate, n, *([now] if now else [])]


def mtake(keys: list[str], n: str, now: str | None = FIXED_NOW) -> list[str]:
    return ["TB.MTAKE", str(len(keys)), *keys, *[CAPACITY, RATE, n] * len(keys),
            *([now] if now else [])]


def reserve(key: str, n: str, now: str | None = FIXED_NOW) -> list[str]:
    return ["TB.RESERVE", key, CAPACITY, RATE, n, RESERVE_MAX_WAIT, *([now] if now else [])]


def peek(key: str, now: str | None = FIXED_NOW) -> list[str]:
    return ["TB.PEEK", key, CAPACITY, RATE, *([now] if now else [])]


MTAKE_KEYS = [f"{KEY}:{role}" for role in MTAKE_ROLES]


@dataclass
class Workload:
    """One command benchmarked with redis-benchmark over the keyspace."""

    id: str
    label: str
    command: list[str]   # the timed command, as redis-benchmark sends it
    prepare: list[list[str]] = field(default_factory=list)  # per key number, before each run
    peers: list[str] = field(default_factory=list)  # ids it is compared against, per unit
    units: int = 1       # buckets one call serves: per-bucket figures are per call / units
    note: str = ""       # why it is here
    suite: str = "core"  # "core", "issue12" or "issue11" (see the module docstring)
    shape: str = ""      # issue 12: the bucket shape (SHAPES) it runs on
    # A run sends at most this many requests per key (None: no cap): the small shape's
    # keys live only seconds, so its runs must be short (see SHAPES).
    max_calls_per_key: float | None = None
    # A command (KEY = one key number) whose reply, or element `probe_index` of it, is the
    # tokens a bucket has left; sampled after every run: none may have run dry. For
    # commands with no denial counter in INFO tb (redis-cell, the Lua scripts).
    probe: list[str] = field(default_factory=list)
    probe_index: int | None = None
    # Calls per request (issue 18, layered limits): a request of the "layered" suite is
    # checked against three buckets, by one TB.MTAKE or by three single-bucket calls sent
    # together in one round trip. redis-benchmark then runs this workload at -P depth x
    # pipeline_factor, so at each depth every workload has the same number of requests in
    # flight per connection (at -P 1: one TB.MTAKE, or three CL.THROTTLE in one write).
    pipeline_factor: int = 1

    def keyed(self) -> bool:
        return bool(self.prepare)

    def key_patterns(self) -> list[str]:
        """The distinct keys the timed command names (each a __rand_int__ pattern)."""
        return list(dict.fromkeys(a for a in self.command if "__rand_int__" in a))

    def key_numbers(self, keys: int) -> int:
        """redis-benchmark's -r: every keyed workload holds the same number of live keys
        (`keys`), however many its command names (a 3-key command gets keys/3 numbers per
        role, rounded up)."""
        return -(-keys // max(1, len(self.key_patterns())))

    def module_commands(self) -> set[str]:
        """The module commands (ours: TB.*, redis-cell's: CL.*) this workload needs (lower
        case)."""
        commands = (self.command, *self.prepare, *([self.probe] if self.probe else []))
        return {c[0].lower() for c in commands if c[0].upper().startswith(MODULE_PREFIXES)}

    def requests(self, requests: int, keys: int) -> int:
        """Requests of a run (`requests` as configured for its depth), within
        max_calls_per_key."""
        if self.max_calls_per_key is None:
            return requests
        return max(1, min(requests, int(self.max_calls_per_key * self.key_numbers(keys))))


MODULE_PREFIXES = ("TB.", "CL.")


# ---------------------------------------------------------------------------------------
# The interleaved set, in run order (every round runs each of these at each depth in
# PIPELINES). Every keyed workload's keys are put in the state its own command leaves them
# in (FLUSHALL, then `prepare` once per key number), so no run pays for creating keys or
# growing the keyspace dict while another does not.
# ---------------------------------------------------------------------------------------
WORKLOADS: list[Workload] = [
    Workload("ping", "PING", ["PING"], note="the server's ceiling"),
    Workload("hset", "HSET", hset(KEY), [hset(KEY)],
             note="a plain two-field hash write: the floor of TB.TAKE"),
    Workload("hset_ttl", "HSET (key has TTL)", hset(KEY),
             [hset(KEY), ["PEXPIRE", KEY, TYPICAL_TTL_MS]], peers=["hset"],
             note="the same HSET on keys given a TTL beforehand (HSET keeps it)"),
    Workload("lua", "Lua EVALSHA (now)", lua(KEY, TAKE_N), [lua(KEY, PREFILL_TAKE)],
             note="bench/commands/token_bucket.lua with the same explicit now; one bucket per call"),
    Workload("tb_now", "TB.TAKE (now)", take(KEY, TAKE_N), [take(KEY, PREFILL_TAKE)],
             peers=["lua"], note="explicit, fixed now"),
    Workload("tb_clock", "TB.TAKE (server clock)", take(KEY, TAKE_N, now=None),
             [take(KEY, PREFILL_TAKE, now=None)], peers=["tb_now"], note="now omitted"),
    Workload("tb_fresh", "TB.TAKE (now, fresh buckets)", take(KEY, TAKE_N, rate=FRESH_RATE),
             [take(KEY, TAKE_N, rate=FRESH_RATE)], peers=["tb_now"],
             note="rate 0.001 after a single take: the TTL is re-set on nearly every "
                  "call (the module's worst path); informational, not graded"),
    Workload("mtake", "TB.MTAKE (3 keys, now)", mtake(MTAKE_KEYS, TAKE_N),
             [mtake(MTAKE_KEYS, PREFILL_TAKE)], peers=["tb_now", "lua"], units=3,
             note="three buckets all-or-nothing in one call, each exactly as TB.TAKE (now) "
                  "would take it; against three TB.TAKE (now) calls and three EVALSHA "
                  "(the seed script's way), compared per bucket"),
    Workload("peek", "TB.PEEK (now)", peek(KEY), [take(KEY, PREFILL_TAKE)], peers=["tb_now"],
             note="read-only, on the buckets TB.TAKE (now) runs on (PEEK writes nothing, "
                  "so they are prepared by TB.TAKE)"),
    Workload("reserve", "TB.RESERVE (now)", reserve(KEY, TAKE_N),
             [reserve(KEY, PREFILL_TAKE)], peers=["tb_now"],
             note=f"max_wait {RESERVE_MAX_WAIT} s on TB.TAKE (now)'s buckets: the tokens "
                  "are always there, so every call is admitted immediately (wait 0)"),
]

# ---------------------------------------------------------------------------------------
# Issue 12: redis-cell side by side, on two bucket shapes.
#
# The same bucket is asked of every command: capacity C refilling at r tokens/s is
# TB.TAKE key C r n [now], the Lua scripts' (C, r, n, now), and CL.THROTTLE / TB.THROTTLE
# key (C - 1) count period n with count / period = r (GCRA with burst b admits what a
# bucket of capacity b + 1 admits). Each key is prefilled by one call of its own command
# taking `prefill` tokens (so every method holds the same bucket, in its own format), then
# every timed call takes 1:
#
# * small (capacity 100, 10/s), prefill 85: 15 tokens left, 8.5 s from full. A bucket
#   this small is full again within 10 s, and a key lives only until then (redis-cell's
#   TTL is exactly time-to-full; the module's and the scripts' a little longer), so the
#   key must be populated and the run finished within ~8 s or keys expire mid-run (the
#   run then aborts: the keyspace changed). Runs are therefore capped at 2 requests per
#   key (200,000 pipelined at 100,000 keys, instead of 500,000; a few seconds even for the
#   Lua scripts on a busy machine), and 15 tokens cover every call with a fixed `now` (no
#   refill): a key would need 16 of ~2 expected calls in one run. On the server clock the buckets
#   refill 10/s, so they only fill up during a run, never run dry.
# * large (capacity 1,000,000, 0.001/s), prefill 1000: 999,000 tokens left, 1e6 s from
#   full: nothing expires, nothing runs dry (a key sees ~5 calls per run); every take
#   moves time-to-full 1000 s, which the module's TTL slack absorbs (a busy quota-like
#   bucket).
#
# Admission is checked after every run: INFO tb's denial counters for the module's
# commands, and a sample of buckets (`probe`) for redis-cell and the scripts, which keep
# no such count.
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Shape:
    id: str
    title: str
    capacity: str
    rate: str
    max_burst: str  # CL.THROTTLE's form of the same bucket: capacity - 1,
    count: str      # count per period,
    period: str     # period (s): count / period = rate
    prefill: str    # tokens taken by the one call that prepares each key
    max_calls_per_key: float | None  # cap on a run's requests per key


SHAPES = [
    Shape("small", "small fast bucket: capacity 100, 10 per second", "100", "10",
          "99", "10", "1", "85", 2.0),
    Shape("large", "large slow bucket: capacity 1,000,000, 0.001 per second", "1000000",
          "0.001", "999999", "1", "1000", "1000", None),
]


def cell(key: str, shape: Shape, q: str, command: str = "CL.THROTTLE") -> list[str]:
    return [command, key, shape.max_burst, shape.count, shape.period, q]


def issue12(shape: Shape) -> list[Workload]:
    """The side-by-side set on one shape, in run order."""
    s, c, r = shape.id, shape.capacity, shape.rate
    common = dict(suite="issue12", shape=s, max_calls_per_key=shape.max_calls_per_key)
    tokens = ["HGET", KEY, "tokens"]
    return [
        Workload(f"cell_{s}", f"CL.THROTTLE (redis-cell), {s}", cell(KEY, shape, TAKE_N),
                 [cell(KEY, shape, shape.prefill)], probe=cell(KEY, shape, "0"),
                 probe_index=2, note="the peer, on the server clock (it has no `now`)",
                 **common),
        Workload(f"throttle_{s}", f"TB.THROTTLE, {s}",
                 cell(KEY, shape, TAKE_N, "TB.THROTTLE"),
                 [cell(KEY, shape, shape.prefill, "TB.THROTTLE")], peers=[f"cell_{s}"],
                 probe=cell(KEY, shape, "0", "TB.THROTTLE"), probe_index=2,
                 note="the drop-in: same arguments and reply, server clock", **common),
        Workload(f"clock_{s}", f"TB.TAKE (server clock), {s}", take(KEY, TAKE_N, r, None, c),
                 [take(KEY, shape.prefill, r, None, c)], peers=[f"cell_{s}", f"seed_{s}"],
                 note="now omitted: the main path", **common),
        Workload(f"now_{s}", f"TB.TAKE (now), {s}", take(KEY, TAKE_N, r, FIXED_NOW, c),
                 [take(KEY, shape.prefill, r, FIXED_NOW, c)],
                 peers=[f"cell_{s}", f"seed_{s}"], note="explicit, fixed now", **common),
        Workload(f"seed_{s}", f"Seed's Lua script (now), {s}", seed_lua(KEY, TAKE_N, c, r),
                 [seed_lua(KEY, shape.prefill, c, r)], probe=tokens,
                 note="the design notes' own script (read from ../shared/seeds), with the "
                      "same explicit now", **common),
        Workload(f"lua_{s}", f"Lua EVALSHA (now), {s}", lua(KEY, TAKE_N, c, r),
                 [lua(KEY, shape.prefill, c, r)], peers=[f"seed_{s}"], probe=tokens,
                 note="bench/commands/token_bucket.lua (TB.TAKE's exact semantics), same now",
                 **common),
    ]


WORKLOADS += [w for shape in SHAPES for w in issue12(shape)]


# ---------------------------------------------------------------------------------------
# Issue 11: TB.WINDOW's three modes, the design notes' two window scripts (EVALSHA of
# bench/commands/window_fixed.lua and the notes' own sliding log script) and TB.TAKE (the core suite's tb_now
# and tb_clock, declared as peers so they run in the same rounds), side by side.
#
# * FIXED and SLIDING: limit 1e9 per 3600 s window (a busy key of an hourly quota that no
#   run can exhaust), each key prepared by one call counting WIN_PREFILL = 1000 requests,
#   then every timed call counts 1 and rewrites one field (`count`), as TB.TAKE (now)
#   rewrites `tokens`. With the fixed `now` the window is [1764453600, 1764457200): a
#   FIXED key lives 932 s (it expires with its window), a SLIDING key 4532 s (both windows
#   over). SLIDING also runs on the server clock: its key lives at least a window, so
#   nothing expires mid-run (crossing the top of an hour only rolls the window). FIXED
#   does not: its key expires with its window, and a run straddling the top of the hour
#   would lose keys mid-run (the runner aborts when the keyspace changes).
# * The notes' INCR + EXPIRE script: the window lives in the key name (the caller's
#   rate:{user}:{window}), so with one window per run the key is tb:N. Prepared by the
#   script's first call (count 1, EXPIRE 3600) plus INCRBY 999: the same count as FIXED's
#   keys; every timed call is then one INCR (no EXPIRE after the first hit).
# * LOG and the notes' ZSET script: the notes' own example, limit 100 per 60 s. Each key
#   starts with LOG_STALE entries older than the window and LOG_FRESH inside it; every
#   timed call is at the same fixed instant (LOG: FIXED_NOW in seconds; the script: the
#   same instant in ms), so a key's first call in a run removes the stale entries and adds
#   one, and every later call adds one (LOG: a new member `<now>-k` at the same score; the
#   script: the member is the timestamp, already there, so ZADD changes nothing and its set
#   stays put: the notes' flaw, which makes its timed calls cheaper, not dearer). A run
#   sends at most LOG_MAX_CALLS_PER_KEY requests per key (500,000 at 100,000 keys: about 5
#   per key, Poisson, the busiest ~17; 10 per key at most: the busiest ~27), so a log
#   never holds more than ~LOG_FRESH + 28 < 100 entries and no call is denied (checked).
#   With ~5 calls per key, a pipelined run removes on average one entry per entry added,
#   as a log in steady state does, but all in the key's first call. Key lifetime: 60 s
#   from the prepare (both methods), far longer than a run. LOG on the server clock is
#   shown too (informational): distinct microsecond scores, LOG_FRESH entries prepared at
#   one instant, no removal (a 60 s window outlives the run, and the module cannot be
#   handed stale entries after fresh ones: a `now` behind the log records at its newest).
# ---------------------------------------------------------------------------------------
WFIXED_SHA = "__wfixed_sha__"
WLOG_SHA = "__wlog_sha__"
WIN_BIG_LIMIT = CAPACITY   # 1e9
WIN_LONG = "3600"          # seconds: FIXED and SLIDING
WIN_PREFILL = PREFILL_TAKE
LOG_LIMIT = "100"
LOG_WINDOW = "60"
LOG_STALE, LOG_FRESH = 5, 15
LOG_STALE_AGE, LOG_FRESH_AGE = 75, 30   # seconds before FIXED_NOW
LOG_MAX_CALLS_PER_KEY = 10.0
_NOW = Decimal(FIXED_NOW)


def now_minus(seconds: Decimal | int) -> str:
    """FIXED_NOW - seconds, as text with FIXED_NOW's six decimals."""
    return str(_NOW - Decimal(seconds))


def ms(seconds_text: str) -> int:
    """An epoch time in seconds (text) as the notes' scripts take it: whole milliseconds."""
    return int(Decimal(seconds_text) * 1000)


FIXED_NOW_MS = str(ms(FIXED_NOW))
LOG_STALE_AT, LOG_FRESH_AT = now_minus(LOG_STALE_AGE), now_minus(LOG_FRESH_AGE)
# The notes' script keeps one entry per distinct millisecond: its keys get the same
# entries at distinct milliseconds from those instants (ZADD, checked to be what the
# script's own calls leave).
LOG_SCRIPT_ENTRIES = ([ms(LOG_STALE_AT) + i for i in range(LOG_STALE)]
                      + [ms(LOG_FRESH_AT) + i for i in range(LOG_FRESH)])


def window(key: str, limit: str, win: str, n: str, now: str | None, mode: str) -> list[str]:
    return ["TB.WINDOW", key, limit, win, n, *([now] if now else []), mode]


def notes_fixed(key: str, limit: str, win: str = WIN_LONG) -> list[str]:
    return ["EVALSHA", WFIXED_SHA, "1", key, limit, win]


def notes_log(key: str, now_ms: str, win_ms: str, limit: str) -> list[str]:
    return ["EVALSHA", WLOG_SHA, "1", key, now_ms, win_ms, limit]


def log_script_prepare(key: str) -> list[list[str]]:
    """The state the notes' script leaves after admitting LOG_SCRIPT_ENTRIES, one call per
    millisecond: those timestamps as score and member, and EXPIRE window (s)."""
    return [["ZADD", key, *[str(x) for t in LOG_SCRIPT_ENTRIES for x in (t, t)]],
            ["EXPIRE", key, LOG_WINDOW]]


def left_probe(script: str, key: str, limit: str) -> list[str]:
    """An EVAL answering limit - (what the key has counted): >= 1 means no call of the run
    found the limit reached."""
    return ["EVAL", f"return tonumber(ARGV[1]) - {script}", "1", key, limit]


_LOG_WIN_MS = str(int(LOG_WINDOW) * 1000)
_I11 = dict(suite="issue11")
WORKLOADS += [
    Workload("win_fixed", "TB.WINDOW FIXED (now)",
             window(KEY, WIN_BIG_LIMIT, WIN_LONG, TAKE_N, FIXED_NOW, "FIXED"),
             [window(KEY, WIN_BIG_LIMIT, WIN_LONG, WIN_PREFILL, FIXED_NOW, "FIXED")],
             peers=["tb_now", "notes_fixed"],
             note="limit 1e9 per 3600 s, 1000 already counted; each call counts 1", **_I11),
    Workload("win_sliding", "TB.WINDOW SLIDING (now)",
             window(KEY, WIN_BIG_LIMIT, WIN_LONG, TAKE_N, FIXED_NOW, "SLIDING"),
             [window(KEY, WIN_BIG_LIMIT, WIN_LONG, WIN_PREFILL, FIXED_NOW, "SLIDING")],
             peers=["tb_now", "notes_log"],
             note="as FIXED (now), weighted over the previous window", **_I11),
    Workload("win_sliding_clock", "TB.WINDOW SLIDING (server clock)",
             window(KEY, WIN_BIG_LIMIT, WIN_LONG, TAKE_N, None, "SLIDING"),
             [window(KEY, WIN_BIG_LIMIT, WIN_LONG, WIN_PREFILL, None, "SLIDING")],
             peers=["tb_clock", "notes_log"], note="now omitted: the main path", **_I11),
    Workload("win_log", "TB.WINDOW LOG (now)",
             window(KEY, LOG_LIMIT, LOG_WINDOW, TAKE_N, FIXED_NOW, "LOG"),
             [window(KEY, LOG_LIMIT, LOG_WINDOW, str(LOG_STALE), LOG_STALE_AT, "LOG"),
              window(KEY, LOG_LIMIT, LOG_WINDOW, str(LOG_FRESH), LOG_FRESH_AT, "LOG")],
             peers=["notes_log", "tb_now"], max_calls_per_key=LOG_MAX_CALLS_PER_KEY,
             note=f"the notes' limit 100 per 60 s; {LOG_STALE} stale and {LOG_FRESH} live "
                  "entries per key; a key's first call removes the stale ones, every call "
                  "adds one", **_I11),
    Workload("win_log_clock", "TB.WINDOW LOG (server clock)",
             window(KEY, LOG_LIMIT, LOG_WINDOW, TAKE_N, None, "LOG"),
             [window(KEY, LOG_LIMIT, LOG_WINDOW, str(LOG_FRESH), None, "LOG")],
             peers=["notes_log"], max_calls_per_key=LOG_MAX_CALLS_PER_KEY,
             note=f"{LOG_FRESH} live entries per key, one new score per call, no removal; "
                  "informational, not graded", **_I11),
    Workload("notes_fixed", "Notes' INCR+EXPIRE script",
             notes_fixed(KEY, WIN_BIG_LIMIT),
             [notes_fixed(KEY, WIN_BIG_LIMIT), ["INCRBY", KEY, str(int(WIN_PREFILL) - 1)]],
             probe=left_probe("redis.call('GET', KEYS[1])", KEY, WIN_BIG_LIMIT),
             note="bench/commands/window_fixed.lua: INCR, EXPIRE on the first hit; 1000 already "
                  "counted, so each call is one INCR", **_I11),
    Workload("notes_log", "Notes' ZSET log script (now)",
             notes_log(KEY, FIXED_NOW_MS, _LOG_WIN_MS, LOG_LIMIT), log_script_prepare(KEY),
             probe=left_probe("redis.call('ZCARD', KEYS[1])", KEY, LOG_LIMIT),
             max_calls_per_key=LOG_MAX_CALLS_PER_KEY,
             note="the notes' sliding log script at the same instant (ms): ZREMRANGEBYSCORE, ZCARD, "
                  "ZADD now now, EXPIRE; the same entries at distinct ms, so the first call "
                  "removes the stale ones; later calls re-add the same member", **_I11),
]


# ---------------------------------------------------------------------------------------
# Issue 18: layered limits, the way users face them. One request is checked against three
# buckets (say per second, per minute, per day; all-or-nothing is TB.MTAKE's, redis-cell
# has no such call): one TB.MTAKE over the three, or three CL.THROTTLE calls (redis-cell
# 0.5.0), either sent together in one round trip (pipelined: redis-benchmark -P 3 per
# request in flight) or one after another (three round trips: -P 1). All on the server
# clock (CL.THROTTLE has no `now`), all on the large slow bucket shape (1,000,000 at
# 0.001/s, 1,000 taken when prepared: nothing expires, nothing is refused), all over the
# same number of live keys. A request is three buckets, so the report's per-bucket
# figures (units) are per request / 3: TB.MTAKE serves 3 buckets a call, each
# CL.THROTTLE 1. At -P 16 the two CL.THROTTLE rows both send 16 calls per round trip
# (the "one round trip" row 48: the same 16 requests as TB.MTAKE's 16 calls); only at
# -P 1 do they differ, which is where the round trips show.
# ---------------------------------------------------------------------------------------
LAYER_SHAPE = SHAPES[1]
LAYER_KEYS = [f"{KEY}:{role}" for role in MTAKE_ROLES]


def layer_mtake(n: str) -> list[str]:
    sh = LAYER_SHAPE
    return ["TB.MTAKE", str(len(LAYER_KEYS)), *LAYER_KEYS,
            *[sh.capacity, sh.rate, n] * len(LAYER_KEYS)]


_L = dict(suite="layered")
WORKLOADS += [
    Workload("layer_mtake", "Layered: TB.MTAKE over 3 buckets (server clock)",
             layer_mtake(TAKE_N), [layer_mtake(LAYER_SHAPE.prefill)],
             peers=["layer_cell_1rt", "layer_cell_3rt"], units=3,
             note="one call per request, all-or-nothing over three buckets", **_L),
    Workload("layer_cell_1rt", "Layered: 3 CL.THROTTLE, one round trip",
             cell(KEY, LAYER_SHAPE, TAKE_N), [cell(KEY, LAYER_SHAPE, LAYER_SHAPE.prefill)],
             probe=cell(KEY, LAYER_SHAPE, "0"), probe_index=2, pipeline_factor=3,
             note="three calls per request written together (-P 3 per request in flight); "
                  "not all-or-nothing: a refusal by the third leaves the first two taken",
             **_L),
    Workload("layer_cell_3rt", "Layered: 3 CL.THROTTLE, three round trips",
             cell(KEY, LAYER_SHAPE, TAKE_N), [cell(KEY, LAYER_SHAPE, LAYER_SHAPE.prefill)],
             probe=cell(KEY, LAYER_SHAPE, "0"), probe_index=2,
             note="three calls per request, each waiting for the previous reply (-P 1); at "
                  "-P 16 the same as the one-round-trip row", **_L),
]
SUITES = ("core", "issue12", "issue11", "layered")


# ---------------------------------------------------------------------------------------
# Memory per bucket: the same typical bucket stored by each method (the first row is the
# baseline the module's memory targets compare with). Issue 12's rows are each workload's
# own prepared key (one prefill call), per shape.
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryMethod:
    label: str
    commands: list[list[str]]  # run once per key
    suite: str = "core"
    workload: str = ""         # issue 12: the workload whose prepared key this is
    keys: int | None = None    # measure over at most this many keys (big keys: fewer)
    limit: str = ""            # issue 11: the limit (capacity) the key is shaped for
    state: str = ""            # issue 11: what the key holds, for the report

    def module_commands(self) -> set[str]:
        return {c[0].lower() for c in self.commands if c[0].upper().startswith(MODULE_PREFIXES)}


_TYPICAL = ["tokens", TYPICAL_TOKENS, "last_refill_time", FIXED_NOW]
MEMORY_BASELINE = "HSET + PEXPIRE"
MEMORY_METHODS: list[MemoryMethod] = [
    MemoryMethod(MEMORY_BASELINE,
                 [["HSET", KEY, *_TYPICAL], ["PEXPIRE", KEY, TYPICAL_TTL_MS]]),
    MemoryMethod("Lua EVALSHA (now)", [lua(KEY, PREFILL_TAKE)]),
    MemoryMethod("TB.TAKE (now)", [take(KEY, PREFILL_TAKE)]),
    MemoryMethod("TB.TAKE (server clock)", [take(KEY, PREFILL_TAKE, now=None)]),
    MemoryMethod("HSET, no TTL (reference)", [["HSET", KEY, *_TYPICAL]]),
    # (not the heavier script: it stores exactly what TB.TAKE (now) stores, checked)
    *[MemoryMethod(w.label, w.prepare, "issue12", w.id) for w in WORKLOADS
      if w.suite == "issue12" and not w.id.startswith("lua_")],
]
MEMORY_GRADED = ("TB.TAKE (now)", "TB.TAKE (server clock)")  # each <= the baseline


# Issue 11: memory per key of each mode at limit 100 and 10,000, beside TB.TAKE holding
# the same quota as a bucket (capacity = limit, refilling limit per window, half used) and
# the notes' two scripts. All at FIXED_NOW with a 3600 s window, so no key expires while
# it is measured. Full logs hold `limit` entries at distinct milliseconds (as requests
# arriving over time leave them; LOG members are `<score>-<k>`, k the log's size when the
# entry was added), built by `limit` calls
# per key, over fewer keys: WINDOW_LOG_KEYS[limit].
WINDOW_LIMITS = ("100", "10000")
WINDOW_LOG_KEYS = {"100": 2_000, "10000": 20}


def _spread(limit: int) -> list[str]:
    """`limit` instants one millisecond apart, the last at FIXED_NOW, oldest first."""
    return [now_minus(Decimal(limit - 1 - i) / 1000) for i in range(limit)]


def window_memory(limit: str) -> list[MemoryMethod]:
    lim, half, w = int(limit), str(int(limit) // 2), WIN_LONG
    rate = f"{lim / int(w):.15g}"
    full = _spread(lim)
    common = dict(suite="issue11", limit=limit)
    return [
        MemoryMethod(f"TB.TAKE (now), capacity {lim:,}",
                     [take(KEY, half, rate, FIXED_NOW, limit)],
                     state=f"bucket of {lim:,} refilling {lim:,} per {w} s, {int(half):,} "
                           "taken",
                     **common),
        MemoryMethod(f"TB.WINDOW FIXED, limit {lim:,}",
                     [window(KEY, limit, w, limit, FIXED_NOW, "FIXED")],
                     state=f"count {lim:,}: the window used up", **common),
        MemoryMethod(f"TB.WINDOW SLIDING, limit {lim:,}",
                     [window(KEY, limit, w, half, now_minus(int(w)), "SLIDING"),
                      window(KEY, limit, w, half, FIXED_NOW, "SLIDING")],
                     state=f"previous {int(half):,}, count {int(half):,}", **common),
        MemoryMethod(f"TB.WINDOW LOG, limit {lim:,}, full",
                     [window(KEY, limit, w, "1", t, "LOG") for t in full],
                     keys=WINDOW_LOG_KEYS[limit],
                     state=f"{lim:,} entries, 1 ms apart", **common),
        MemoryMethod(f"Notes' INCR+EXPIRE, limit {lim:,}",
                     [notes_fixed(KEY, limit, w), ["INCRBY", KEY, str(lim - 1)]],
                     state=f"counter {lim:,}", **common),
        MemoryMethod(f"Notes' ZSET log, limit {lim:,}, full",
                     [notes_log(KEY, str(ms(t)), str(int(w) * 1000), limit) for t in full],
                     keys=WINDOW_LOG_KEYS[limit],
                     state=f"{lim:,} entries, 1 ms apart", **common),
    ]


MEMORY_METHODS += [
    *[m for limit in WINDOW_LIMITS for m in window_memory(limit)],
    MemoryMethod("TB.WINDOW LOG, 1 entry", [window(KEY, LOG_LIMIT, WIN_LONG, "1", FIXED_NOW,
                                                   "LOG")],
                 suite="issue11", limit="any", state="1 entry"),
    MemoryMethod("Notes' ZSET log, 1 entry",
                 [notes_log(KEY, FIXED_NOW_MS, str(int(WIN_LONG) * 1000), LOG_LIMIT)],
                 suite="issue11", limit="any", state="1 entry"),
]


@dataclass(frozen=True)
class MemoryTarget:
    """a's bytes per key <= b's, measured one way (`metric`: per_bucket = used_memory
    delta, memory_usage = MEMORY USAGE)."""
    text: str
    a: str
    b: str
    metric: str


MEMORY_TARGETS = [
    t for limit in WINDOW_LIMITS for t in (
        MemoryTarget(f"TB.WINDOW SLIDING bytes/key (used_memory) <= TB.TAKE's, limit "
                     f"{int(limit):,}", f"TB.WINDOW SLIDING, limit {int(limit):,}",
                     f"TB.TAKE (now), capacity {int(limit):,}", "per_bucket"),
        MemoryTarget(f"TB.WINDOW SLIDING MEMORY USAGE <= TB.TAKE's, limit {int(limit):,}",
                     f"TB.WINDOW SLIDING, limit {int(limit):,}",
                     f"TB.TAKE (now), capacity {int(limit):,}", "memory_usage"),
    )
]


# ---------------------------------------------------------------------------------------
# Targets (from the issues): the median over rounds of the within-round ratio
# a.metric / b.metric at one pipeline depth, within [low, high]. Metrics are RunResult
# attributes: rps, cpu_us, p99_ms (per call) and units_per_s, cpu_us_per_unit (per bucket).
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetSpec:
    text: str
    a: str
    b: str
    pipeline: int
    metric: str
    low: float | None = None
    high: float | None = None

    def threshold(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{self.low:g} .. {self.high:g}"
        return f">= {self.low:g}" if self.low is not None else f"<= {self.high:g}"

    def ok(self, ratio: float) -> bool:
        return ((self.low is None or ratio >= self.low)
                and (self.high is None or ratio <= self.high))


_TB = (("tb_now", "TB.TAKE (now)"), ("tb_clock", "TB.TAKE (server clock)"))
TARGETS: list[TargetSpec] = [
    # Issue: TB.TAKE. Both variants are held to each target.
    *[TargetSpec(f"{name} req/s >= 0.65x HSET, pipelined (-P 16)", tb, "hset", 16, "rps", low=0.65)
      for tb, name in _TB],
    *[TargetSpec(f"TB.TAKE without now within 15% of with now, -P {p} (req/s ratio)",
                 "tb_clock", "tb_now", p, "rps", low=0.85, high=1.15) for p in PIPELINES],
    *[TargetSpec(f"{name} req/s >= 2.8x Lua script, pipelined (-P 16)", tb, "lua", 16, "rps", low=2.8)
      for tb, name in _TB],
    *[TargetSpec(f"{name} p99 <= 1.2x HSET's p99, unpipelined (-P 1)", tb, "hset", 1, "p99_ms",
                 high=1.2) for tb, name in _TB],
    # Issue 10: the four new commands.
    TargetSpec("TB.MTAKE (3 keys) server CPU per bucket <= TB.TAKE (now)'s, i.e. per call "
               "<= 3 TB.TAKE calls, pipelined (-P 16)", "mtake", "tb_now", 16,
               "cpu_us_per_unit", high=1.0),
    TargetSpec("TB.MTAKE (3 keys) buckets/s >= 3x the Lua script's (three EVALSHA per "
               "3-bucket request), pipelined (-P 16)", "mtake", "lua", 16, "units_per_s",
               low=3.0),
    TargetSpec("TB.PEEK req/s >= 1.1x TB.TAKE (now), pipelined (-P 16)", "peek", "tb_now", 16,
               "rps", low=1.1),
    TargetSpec("TB.RESERVE req/s within 10% of TB.TAKE (now) (ratio >= 0.9), pipelined (-P 16)",
               "reserve", "tb_now", 16, "rps", low=0.9),
    # Issue 12: against redis-cell and the design notes' own script, on both shapes.
    *[t for shape in SHAPES for t in (
        TargetSpec(f"TB.TAKE (server clock) req/s >= 1.2x redis-cell's CL.THROTTLE, "
                   f"{shape.id} bucket, -P 16", f"clock_{shape.id}", f"cell_{shape.id}", 16,
                   "rps", low=1.2),
        TargetSpec(f"TB.THROTTLE req/s >= 1.15x redis-cell's CL.THROTTLE, {shape.id} "
                   "bucket, -P 16", f"throttle_{shape.id}", f"cell_{shape.id}", 16, "rps",
                   low=1.15),
        *[TargetSpec(f"{name} req/s >= 2.5x the seed's own Lua script, {shape.id} bucket, "
                     "-P 16", f"{v}_{shape.id}", f"seed_{shape.id}", 16, "rps", low=2.5)
          for v, name in (("clock", "TB.TAKE (server clock)"), ("now", "TB.TAKE (now)"))],
    )],
    # Issue 11: TB.WINDOW against TB.TAKE on the same clock, and LOG against the notes'
    # sorted-set script.
    *[TargetSpec(f"{name} req/s within 10% of {ref_name} (ratio >= 0.9), -P 16", a, ref,
                 16, "rps", low=0.9)
      for a, name, ref, ref_name in (
          ("win_fixed", "TB.WINDOW FIXED (now)", "tb_now", "TB.TAKE (now)"),
          ("win_sliding", "TB.WINDOW SLIDING (now)", "tb_now", "TB.TAKE (now)"),
          ("win_sliding_clock", "TB.WINDOW SLIDING (server clock)", "tb_clock",
           "TB.TAKE (server clock)"))],
    TargetSpec("TB.WINDOW LOG (now) req/s >= 2x the notes' ZSET log script (now), -P 16",
               "win_log", "notes_log", 16, "rps", low=2.0),
]
