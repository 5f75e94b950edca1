"""A small parser for the Prometheus text exposition format (version 0.0.4): the sample
lines `name{label="value",...} value [timestamp]`, with `# HELP` / `# TYPE` comments
skipped. Enough to read SPEC M1's counters and histogram from any exporter (Python's
prometheus_client, Node's prom-client, Rust's metrics-exporter-prometheus), each of
which the examples use; independent of all three.
"""

from __future__ import annotations

import math

Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]

_NAME_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:"
_NAME_REST = _NAME_FIRST + "0123456789"


def _value(text: str) -> float:
    special = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}
    if text in special:
        return special[text]
    return float(text)


def _labels(line: str, i: int) -> tuple[Labels, int]:
    """Parses `{a="x",b="y"}` starting at the `{` at i; returns the labels and the index after `}`."""
    assert line[i] == "{"
    i += 1
    out: list[tuple[str, str]] = []
    while True:
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == "}":
            return tuple(sorted(out)), i + 1
        start = i
        while i < len(line) and (line[i] in _NAME_REST):
            i += 1
        name = line[start:i]
        if not name or line[start] not in _NAME_FIRST or name[0] == ":":
            raise ValueError(f"bad label name in {line!r}")
        if line[i : i + 2] != '="':
            raise ValueError(f"expected =\" after label {name!r} in {line!r}")
        i += 2
        value = []
        while True:
            if i >= len(line):
                raise ValueError(f"unterminated label value in {line!r}")
            c = line[i]
            if c == "\\":
                nxt = line[i + 1 : i + 2]
                value.append({"n": "\n", "\\": "\\", '"': '"'}.get(nxt, "\\" + nxt))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                value.append(c)
                i += 1
        out.append((name, "".join(value)))
        while i < len(line) and line[i] in " \t":
            i += 1
        if i < len(line) and line[i] == ",":
            i += 1
        elif i < len(line) and line[i] == "}":
            return tuple(sorted(out)), i + 1
        else:
            raise ValueError(f"expected , or }} in {line!r}")


def parse(text: str) -> Samples:
    """Every sample: (name, sorted labels) -> value. A repeated sample is an error."""
    samples: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        i = 0
        while i < len(line) and line[i] in _NAME_REST:
            i += 1
        name = line[:i]
        if not name or name[0] not in _NAME_FIRST:
            raise ValueError(f"bad metric name in {raw!r}")
        labels: Labels = ()
        if i < len(line) and line[i] == "{":
            labels, i = _labels(line, i)
        rest = line[i:].split()
        if len(rest) not in (1, 2):
            raise ValueError(f"expected a value (and maybe a timestamp) in {raw!r}")
        key = (name, labels)
        if key in samples:
            raise ValueError(f"sample {name}{dict(labels)} appears twice")
        samples[key] = _value(rest[0])
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample with exactly these labels (0 when absent: a counter not yet moved)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every sample of `name` whose labels include these."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))
