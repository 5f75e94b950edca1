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
  __lua_sha__   the SHA1 of bench/token_bucket.lua after SCRIPT LOAD.
  __seed_sha__  the SHA1 of bench/seed_token_bucket.lua (the design notes' own script).

Every workload belongs to a suite: "core" (TB.TAKE and the other TB.* commands against
HSET, PING and the Lua script) or "issue12" (redis-cell side by side, two bucket shapes).
`make bench` runs both; `bench.py --suite issue12` runs one (HSET always comes along).
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """The design notes' own script (bench/seed_token_bucket.lua), with the same explicit now."""
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
    suite: str = "core"  # "core" or "issue12" (see the module docstring)
    shape: str = ""      # issue 12: the bucket shape (SHAPES) it runs on
    # A run sends at most this many requests per key (None: no cap): the small shape's
    # keys live only seconds, so its runs must be short (see SHAPES).
    max_calls_per_key: float | None = None
    # A command (KEY = one key number) whose reply, or element `probe_index` of it, is the
    # tokens a bucket has left; sampled after every run: none may have run dry. For
    # commands with no denial counter in INFO tb (redis-cell, the Lua scripts).
    probe: list[str] = field(default_factory=list)
    probe_index: int | None = None

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
             note="bench/token_bucket.lua with the same explicit now; one bucket per call"),
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
                 note="bench/seed_token_bucket.lua, the design notes' own script, with the "
                      "same explicit now", **common),
        Workload(f"lua_{s}", f"Lua EVALSHA (now), {s}", lua(KEY, TAKE_N, c, r),
                 [lua(KEY, shape.prefill, c, r)], peers=[f"seed_{s}"], probe=tokens,
                 note="bench/token_bucket.lua (TB.TAKE's exact semantics), same now",
                 **common),
    ]


WORKLOADS += [w for shape in SHAPES for w in issue12(shape)]
SUITES = ("core", "issue12")


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
]
