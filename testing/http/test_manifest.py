"""examples/manifest.json is what the suite says it is: every example can be started
from it, and every deviation cites checks that exist, says what differs and where."""

from __future__ import annotations

import inspect
import json
import re

import pytest

import test_examples
import test_identity
import test_startup
import test_streams
from conftest import MANIFEST
from tbhttp.procs import REPO

PLACEHOLDERS = {"port", "redis_url", "trusted_proxies", "python", "repo"}
CHECKS = (test_examples, test_streams, test_startup, test_identity)  # the files whose checks deviations may cite


def case_names() -> list[str]:
    seen: list[str] = []
    for module in CHECKS:
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if name.startswith("test_") and fn.__module__ == module.__name__:
                seen += [m.args[0] for m in getattr(fn, "pytestmark", []) if m.name == "case"]
    return seen


def known_cases() -> set[str]:
    return {"route:" + r["id"] for r in MANIFEST["demo"]["routes"]} | set(case_names())


def test_cases_are_unique_per_check() -> None:
    seen = case_names()
    assert len(seen) == len(set(seen)) and seen


@pytest.mark.parametrize("name", list(MANIFEST["examples"]))
def test_example_entry(name: str) -> None:
    e = MANIFEST["examples"][name]
    assert (REPO / e["dir"]).is_dir()
    assert (REPO / e["start"]["cwd"]).is_dir()
    assert e["build"] and e["start"]["argv"]
    used = set()
    for text in [*e["start"]["argv"], *e["start"].get("env", {}).values(), e["start"]["cwd"]]:
        used |= set(re.findall(r"\{(\w+)\}", text))
    assert used <= PLACEHOLDERS, used - PLACEHOLDERS
    assert {"port", "redis_url", "trusted_proxies"} <= used, f"{name} cannot be started on a free port against the suite's Redis"
    assert e["ready"]["path"].startswith("/")
    ids = [d["id"] for d in e["deviations"]]
    assert len(ids) == len(set(ids)), ids
    for d in e["deviations"]:
        assert d["what"] and d["where"] and d["converge"], d
        unknown = set(d["cases"]) - known_cases()
        assert not unknown, f"{name}'s deviation {d['id']!r} cites unknown checks {sorted(unknown)}"


def test_demo_is_consistent() -> None:
    demo = MANIFEST["demo"]
    policies = {p["name"]: p for p in demo["policies"]}
    for lim in demo["limiters"]:
        for p in lim["policies"]:
            assert policies[p]["limiter"] == lim["name"]
    for p in demo["policies"]:
        if "in_flight" in p:  # SPEC N1: a limit and a lease, no rate
            assert p["in_flight"]["limit"] >= 1 and p["in_flight"]["lease_seconds"] > 0, p["name"]
            continue
        if "window" in p:  # SPEC W1: per is the window
            assert p["window"]["seconds"] == p["per"] and p["window"]["mode"] in ("sliding", "fixed"), p["name"]
            continue
        limits = p["tiers"].values() if "tiers" in p else [p]
        for lim in limits:
            assert abs(lim["capacity"] / lim["rate"] - lim["per"]) < 1e-6, p["name"]
    for lim in demo["limiters"]:  # SPEC C10
        kinds = [("window" if "window" in policies[n] else "in_flight" if "in_flight" in policies[n] else "bucket")
                 for n in lim["policies"]]
        assert kinds.count("in_flight") <= 1, lim["name"]
        assert "window" not in kinds or len(kinds) == 1, lim["name"]
    assert [p for p in demo["policies"] if p["shadow"]], "the demo has a shadow policy"
    assert [lim for lim in demo["limiters"] if not lim["fail_open"]], "the demo has a fail-closed limiter"


def test_stream_bounds_and_bad_query() -> None:
    """The stream's query bounds (issue 39, L3) are whole-number ranges holding each
    default, and 'bad_query' is a 400 problem body whose only placeholders are {name},
    {min} and {max} (test_streams fills them)."""
    stream = next(r for r in MANIFEST["demo"]["routes"] if "stream" in r)["stream"]
    assert set(stream["bounds"]) == set(stream["query"]), stream["bounds"]
    for name, (lo, hi) in stream["bounds"].items():
        assert isinstance(lo, int) and isinstance(hi, int) and lo <= stream["query"][name] <= hi, name
    bad = stream["bad_query"]
    assert bad["status"] == 400 and bad["content_type"] == "application/problem+json"
    fields = set(re.findall(r"\{(\w+)\}", bad["body"]))
    assert fields == {"name", "min", "max"}, fields
    filled = bad["body"].replace("{name}", "tokens").replace("{min}", "0").replace("{max}", "1")
    assert list(json.loads(filled)) == ["type", "title", "status", "detail"]  # SPEC P6's order


def test_in_flight_and_startup() -> None:
    """SPEC N7: max_duration outlasts a lease (else no stream lives past its first
    renewal); SPEC U4: the startup's exit status and setting are given."""
    for p in MANIFEST["demo"]["policies"]:
        if "in_flight" in p:
            f = p["in_flight"]
            assert f["max_duration_seconds"] > f["lease_seconds"] > 0, p["name"]
    startup = MANIFEST["demo"]["startup"]
    assert isinstance(startup["exit_status"], int) and startup["exit_status"] not in (0, 1), startup
    assert re.fullmatch(r"[A-Z][A-Z0-9_]*", startup["start_degraded_env"]), startup
