"""Statistics over the interleaved rounds: medians, within-round ratios (drift between
rounds on a shared machine cancels instead of adding to the spread), and the targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .memory import MemoryResult
from .runner import RunResult
from .workloads import (MEMORY_BASELINE, MEMORY_GRADED, MEMORY_TARGETS, PIPELINES, TARGETS,
                        TargetSpec, Workload)

Runs = list[dict[tuple[str, int], RunResult]]


def median(xs):
    return statistics.median(xs) if xs else float("nan")


@dataclass
class Summary:
    """Medians over rounds for one workload and pipeline depth, plus within-round ratios."""
    rps: float
    rps_min: float
    rps_max: float
    cpu_us: float
    busy: float
    client_busy: float
    p50_ms: float
    p99_ms: float
    rps_vs_hset: float
    cpu_vs_hset: float
    p99_vs_hset: float
    units: int
    units_per_s: float       # buckets per second
    cpu_us_per_unit: float   # server CPU per bucket
    units_vs_hset: float     # buckets/s vs HSET's keys/s (= rps_vs_hset when units is 1)


def round_ratios(runs: Runs, a: str, b: str, pipeline: int, attr: str) -> list[float]:
    """(a / b) within each round."""
    return [getattr(r[(a, pipeline)], attr) / getattr(r[(b, pipeline)], attr) for r in runs]


def round_ratio(runs: Runs, a: str, b: str, pipeline: int, attr: str) -> float:
    """Median over rounds of the within-round ratio."""
    return median(round_ratios(runs, a, b, pipeline, attr))


def summarise(runs: Runs, wl: list[Workload]) -> dict[tuple[str, int], Summary]:
    out = {}
    for w in wl:
        for p in PIPELINES:
            rs = [r[(w.id, p)] for r in runs]
            out[(w.id, p)] = Summary(
                rps=median([x.rps for x in rs]), rps_min=min(x.rps for x in rs),
                rps_max=max(x.rps for x in rs), cpu_us=median([x.cpu_us for x in rs]),
                busy=median([x.busy for x in rs]),
                client_busy=median([x.client_busy for x in rs]),
                p50_ms=median([x.p50_ms for x in rs]), p99_ms=median([x.p99_ms for x in rs]),
                rps_vs_hset=round_ratio(runs, w.id, "hset", p, "rps"),
                cpu_vs_hset=round_ratio(runs, w.id, "hset", p, "cpu_us"),
                p99_vs_hset=round_ratio(runs, w.id, "hset", p, "p99_ms"),
                units=w.units,
                units_per_s=median([x.units_per_s for x in rs]),
                cpu_us_per_unit=median([x.cpu_us_per_unit for x in rs]),
                units_vs_hset=round_ratio(runs, w.id, "hset", p, "units_per_s"))
    return out


@dataclass
class PeerRatio:
    """One workload against one of its peers at one depth, per bucket."""
    workload: Workload
    peer: Workload
    pipeline: int
    units_per_s: float   # median of within-round ratios of buckets/s
    cpu_per_unit: float  # median of within-round ratios of server CPU per bucket


def peer_ratios(runs: Runs, wl: list[Workload], pipeline: int) -> list[PeerRatio]:
    by_id = {w.id: w for w in wl}
    return [PeerRatio(w, by_id[peer], pipeline,
                      round_ratio(runs, w.id, peer, pipeline, "units_per_s"),
                      round_ratio(runs, w.id, peer, pipeline, "cpu_us_per_unit"))
            for w in wl for peer in w.peers if peer in by_id]


@dataclass
class Target:
    text: str
    measured: float
    threshold: str
    ok: bool
    fmt: str = "{:.3f}"
    rounds: str = ""   # range of the per-round values, to show how close a call it is
    ran: bool = True   # False: a workload it needs was not run (the module lacks it)
    cpu: str = ""      # throughput targets: server CPU per call of a and b, and a/b

    @property
    def verdict(self) -> str:
        return ("PASS" if self.ok else "FAIL") if self.ran else "NOT RUN"


def ratio_target(runs: Runs, spec: TargetSpec, ids: set[str]) -> Target:
    """A target on the median of per-round ratios a/b, with the per-round range."""
    if spec.a not in ids or spec.b not in ids:
        return Target(spec.text, float("nan"), spec.threshold(), False, rounds="", ran=False)
    values = round_ratios(runs, spec.a, spec.b, spec.pipeline, spec.metric)
    m = median(values)
    cpu = ""
    if spec.metric in ("rps", "units_per_s"):
        attr = "cpu_us" if spec.metric == "rps" else "cpu_us_per_unit"
        a = median([getattr(r[(spec.a, spec.pipeline)], attr) for r in runs])
        b = median([getattr(r[(spec.b, spec.pipeline)], attr) for r in runs])
        cpu = (f"{a:.2f} vs {b:.2f} us "
               f"({round_ratio(runs, spec.a, spec.b, spec.pipeline, attr):.2f}x)")
    return Target(spec.text, m, spec.threshold(), spec.ok(m),
                  rounds=f"{min(values):.2f} .. {max(values):.2f}", cpu=cpu)


def evaluate_targets(runs: Runs, wl: list[Workload], memory: list[MemoryResult],
                     chosen: set[str], chosen_memory: set[str]) -> list[Target]:
    """The issues' targets (workloads.TARGETS), measured as stated, then memory. Only the
    targets of the chosen workloads and memory methods (the suite, --only) are listed; of
    those, one whose workload could not run (the module or redis-cell lacks its command)
    reads NOT RUN."""
    ids = {w.id for w in wl}
    t = [ratio_target(runs, spec, ids) for spec in TARGETS
         if spec.a in chosen and spec.b in chosen]
    mem = {m.label: m for m in memory}
    base = mem[MEMORY_BASELINE]
    for label in MEMORY_GRADED:
        m = mem.get(label)
        if label not in chosen_memory:
            continue
        if m is None:  # its command is missing
            t += [Target(f"{label} {what} <= HSET+PEXPIRE", float("nan"), "", False, ran=False)
                  for what in ("bytes/bucket (used_memory)", "MEMORY USAGE")]
            continue
        t.append(Target(f"{label} bytes/bucket (used_memory) <= HSET+PEXPIRE "
                        f"({base.per_bucket:.2f})", m.per_bucket, f"<= {base.per_bucket:.2f}",
                        m.per_bucket <= base.per_bucket, "{:.2f}"))
        t.append(Target(f"{label} MEMORY USAGE <= HSET+PEXPIRE ({base.memory_usage})",
                        m.memory_usage, f"<= {base.memory_usage}",
                        m.memory_usage <= base.memory_usage, "{:.0f}"))
    # Issue 11: one method's key against another's, measured in the same group.
    for spec in MEMORY_TARGETS:
        if spec.a not in chosen_memory or spec.b not in chosen_memory:
            continue
        a, b = mem.get(spec.a), mem.get(spec.b)
        if a is None or b is None:  # a command is missing
            t.append(Target(spec.text, float("nan"), "", False, ran=False))
            continue
        va, vb = getattr(a, spec.metric), getattr(b, spec.metric)
        fmt = "{:.2f}" if spec.metric == "per_bucket" else "{:.0f}"
        t.append(Target(f"{spec.text} ({fmt.format(vb)})", va, f"<= {fmt.format(vb)}",
                        va <= vb, fmt))
    return t


def load_note(runs: Runs) -> str:
    """How much CPU everything else on the machine used during the timed runs: the one
    kind of noise that interleaving and per-round ratios cannot remove."""
    loads = [r.other_load for rnd in runs for r in rnd.values()]
    med, top = median(loads), max(loads)
    text = (f"other processes used a median of {med * 100:.0f}% of a CPU during the timed "
            f"runs (max {top * 100:.0f}%; /proc/stat busy time minus server and "
            "redis-benchmark).")
    if med > 0.05 or top > 0.3:
        text += (" The machine was not quiet: runs competed with other work for the two "
                 "cores, so req/s and latencies are depressed and noisier than usual; "
                 "server CPU per request suffers least.")
    return text
