"""Memory per bucket: the same typical bucket stored by each method of
workloads.MEMORY_METHODS, measured from INFO memory once the keyspace holds still."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from .common import SetupError
from .resp import RedisError, RespClient, encode_batches
from .runner import fill, substitute
from .server import RedisServer
from .workloads import KEY, MemoryMethod

SETTLE_TIMEOUT_S = 20.0
MEMORY_PASSES = 2  # measured passes, after one discarded warm-up pass


@dataclass
class MemoryResult:
    label: str
    per_bucket: float      # used_memory delta / buckets (smallest over measured passes)
    memory_usage: int      # MEMORY USAGE of a sample key (median of a few)
    sample: str            # HGETALL of a sample key (a string's value, a sorted set's size)
    repeat_diff: float     # largest difference between measured passes, B/bucket
    keys: int = 0          # keys measured


def wait_settled(ctl: RespClient) -> int:
    """Waits until the keyspace dicts are not rehashing and the data's memory holds still,
    so a half-finished rehash (two tables allocated) is not counted. Returns used_memory
    minus mem_clients_normal: client buffers are resized by serverCron on its own schedule
    (tens of KB here), which is noise, not bucket memory."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    last, stable = None, 0
    while time.monotonic() < deadline:
        try:
            rehashing = "rehashing" in ctl.call("DEBUG", "HTSTATS", "0")
        except RedisError:
            rehashing = False  # DEBUG disabled: rely on stability alone
        mem = ctl.info("memory")
        used = int(mem["used_memory"]) - int(mem.get("mem_clients_normal", 0))
        stable = stable + 1 if (used == last and not rehashing) else 0
        if stable >= 3:
            return used
        last = used
        time.sleep(0.1)
    raise SetupError(f"used_memory did not settle within {SETTLE_TIMEOUT_S:.0f} s")


def populate_keys(server: RedisServer, what: str, commands: list[list[str]], keys: int) -> None:
    """Runs the commands for every key number, pipelined on a connection of its own that
    is closed afterwards (its buffers must not be counted)."""
    with RespClient(server.port) as pop:
        errors = pop.send_batches(encode_batches(
            fill(c, i) for i in range(keys) for c in commands))
    if errors:
        raise SetupError(f"{what}: {len(errors)} errors, first: {errors[0]}")


def measure_memory(ctl: RespClient, server: RedisServer, shas: dict[str, str], keys: int,
                   methods: list[MemoryMethod], warm_up: bool = True) -> list[MemoryResult]:
    """Bytes per bucket for the same typical bucket stored by each method.

    A whole discarded pass runs first: on a fresh server the first few 100k-key
    populations read up to ~0.7 B/bucket high (transient allocations outside the dataset,
    seen in MEMORY STATS as dataset.bytes only), which would be charged to whichever
    method came first. Then every method is measured MEMORY_PASSES times; such noise only
    ever adds bytes, so the smallest delta is the estimate and the spread is reported."""
    variants = [(m.label, [substitute(c, shas) for c in m.commands],
                 min(keys, m.keys) if m.keys else keys) for m in methods]
    per_pass: dict[str, list[float]] = {label: [] for label, _, _ in variants}
    results: dict[str, MemoryResult] = {}
    for n in range(0 if warm_up else 1, 1 + MEMORY_PASSES):
        for label, commands, count in variants:
            ctl.call("FLUSHALL", "SYNC")
            base = wait_settled(ctl)
            populate_keys(server, f"memory {label}", commands, count)
            if ctl.call("DBSIZE") != count:
                raise SetupError(f"memory {label}: expected {count} keys")
            used = wait_settled(ctl)
            if ctl.call("DBSIZE") != count:  # the small bucket shape's keys live seconds
                raise SetupError(f"memory {label}: keys expired while memory settled")
            if n == 0:
                continue  # warm-up pass
            per_pass[label].append((used - base) / count)
            step = max(1, count // 10)
            usages = [ctl.call("MEMORY", "USAGE", fill([KEY], i)[0], "SAMPLES", "0")
                      for i in range(0, count, step)]
            values = per_pass[label]
            results[label] = MemoryResult(label, min(values), int(statistics.median(usages)),
                                          " ".join(sample_of(ctl, fill([KEY], 0)[0])),
                                          max(values) - min(values), count)
    ctl.call("FLUSHALL", "SYNC")
    return [results[label] for label, _, _ in variants]


def sample_of(ctl: RespClient, key: str) -> list[str]:
    """What a sample key holds, for the report: a hash's fields, a string's value
    (redis-cell's theoretical arrival time in ns, the notes' counter), a sorted set's size
    and newest entry."""
    kind = ctl.call("TYPE", key)
    if kind == "hash":
        return ctl.call("HGETALL", key)
    if kind == "zset":
        newest = ctl.call("ZRANGE", key, "-1", "-1", "WITHSCORES")
        size = ctl.call("ZCARD", key)
        return ["(zset)", f"{size} {'entry' if size == 1 else 'entries'}, newest", *newest]
    return [f"({kind})", str(ctl.call("GET", key))]
