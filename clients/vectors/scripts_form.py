#!/usr/bin/env python3
"""Writes limiter-scripts.json: every case of limiter.json that runs on the module, run on
the script backend instead (SPEC E), through Functions and through EVALSHA. Issue 42 asks
that the vectors run on both backends; this makes the second run one more file every
runner already knows how to read, from one translation rather than one per language.

The translation (README.md, "The same cases on the scripts"):

- the limiter gains ``backend: {"kind": "scripts", "via": ...}``;
- each module call becomes the library's call (clients/lua/README.md's calling
  convention): ``TB.X key args...`` -> ``FCALL tb_x numkeys keys... args...`` or
  ``EVALSHA {sha} numkeys keys... X args...``; TB.ACQUIRE with TAKE declares its buckets
  after the lease key and drops its ``numkeys``; TB.ACQUIRE and TB.HOLD end in
  ``ID {id:x}`` (E4: the client draws the id);
- each id a module reply granted becomes ``{id:x}`` wherever the case names it (the
  grant's own call, later calls, replies and expectations); a grant that was refused,
  failed or never answered still sent an id of its own;
- in replies, the four numbers of a bucket or window answer (remaining, retry_after,
  reset_after; TB.SETTLE's remaining, charged, reset_after) become the decimal text the
  scripts answer (E7); counts, flags, milliseconds and ids stay as they are.

``python3 clients/vectors/scripts_form.py`` writes the file; ``--check`` fails (exit 1)
when the committed file is not what limiter.json gives (make lint runs it)."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "limiter.json"
TARGET = HERE / "limiter-scripts.json"
VIAS = (("functions", "f"), ("evalsha", "e"))

#: module command -> (Functions name, EVALSHA word)
LIBRARY = {
    "TB.TAKE": ("tb_take", "TAKE"),
    "TB.MTAKE": ("tb_mtake", "MTAKE"),
    "TB.RESERVE": ("tb_reserve", "RESERVE"),
    "TB.REFUND": ("tb_refund", "REFUND"),
    "TB.WINDOW": ("tb_window", "WINDOW"),
    "TB.ACQUIRE": ("tb_acquire", "ACQUIRE"),
    "TB.RELEASE": ("tb_release", "RELEASE"),
    "TB.RENEW": ("tb_renew", "RENEW"),
    "TB.HOLD": ("tb_hold", "HOLD"),
    "TB.SETTLE": ("tb_settle", "SETTLE"),
}
#: where a granted id sits in a module reply
ID_AT = {"TB.ACQUIRE": 2, "TB.HOLD": 4}


class Untranslatable(ValueError):
    """A case this translation cannot carry over (fails the generator: fix the case or
    teach the translation, never skip it)."""


def text(n: Any) -> Any:
    """A reply number as the scripts' bulk string (E7); anything else as it is (a reply
    a case gives malformed stays malformed)."""
    if isinstance(n, bool) or not isinstance(n, (int, float)):
        return n
    return str(int(n)) if isinstance(n, float) and n.is_integer() else str(n)


def four(reply: Any) -> Any:
    """A bucket or window answer ``[allowed, remaining, retry_after, reset_after]``."""
    if not isinstance(reply, list):
        return reply
    return [text(v) if 1 <= i <= 3 else v for i, v in enumerate(reply)]


def reply_of(command: str, reply: Any, ids: dict[str, str]) -> Any:
    if not isinstance(reply, list):
        return reply
    if command in ("TB.TAKE", "TB.REFUND", "TB.WINDOW", "TB.RESERVE", "TB.SETTLE"):
        return four(reply)
    if command == "TB.MTAKE":
        out = four(reply[:4]) + reply[4:]
        if len(out) > 4 and isinstance(out[4], list):
            out[4] = [four(r) for r in out[4]]
        return out
    if command == "TB.HOLD":
        out = four(reply[:4]) + reply[4:]
        return [named(v, ids) if i == 4 else v for i, v in enumerate(out)]
    if command == "TB.ACQUIRE":
        out = list(reply)
        if len(out) > 2:
            out[2] = named(out[2], ids)
        if len(out) > 4:
            out[4] = four(out[4])
        if len(out) > 5 and isinstance(out[5], list):
            out[5] = [four(r) for r in out[5]]
        return out
    return reply  # TB.RELEASE, TB.RENEW: counts and milliseconds


def named(v: Any, ids: dict[str, str]) -> Any:
    return f"{{id:{ids[v]}}}" if isinstance(v, str) and v in ids else v


def call_of(call: list[Any], via: str, ids: dict[str, str], drawn: str | None) -> list[Any]:
    """A module call in the library's form; ``drawn`` is the name of the id a grant sends."""
    if not call or call[0] not in LIBRARY:
        raise Untranslatable(f"no script counterpart for {call[:1]}")
    command, args = call[0], [named(a, ids) for a in call[1:]]
    function, word = LIBRARY[command]
    if command == "TB.MTAKE":
        n = args[0]
        keys, rest = args[1:1 + n], args[1 + n:]
    elif command == "TB.ACQUIRE" and len(args) > 3 and str(args[3]).upper() == "TAKE":
        n = args[4]
        keys, rest = [args[0], *args[5:5 + n]], [args[1], args[2], "TAKE", *args[5 + n:]]
    else:
        keys, rest = args[:1], args[1:]
    if command in ID_AT:
        rest = [*rest, "ID", f"{{id:{drawn}}}"]
    head = ["FCALL", function] if via == "functions" else ["EVALSHA", "{sha}"]
    return [*head, len(keys), *keys, *([] if via == "functions" else [word]), *rest]


def translate(case: dict[str, Any], via: str, suffix: str) -> dict[str, Any]:
    out = copy.deepcopy(case)
    out["id"] = f"{case['id']}-{suffix}"
    out["title"] = f"{case['title']} (the scripts, {'Functions' if via == 'functions' else 'EVALSHA'})"
    out["limiter"]["backend"] = {"kind": "scripts", "via": via}
    held: dict[str, str] = {}  # a held call's name -> its command
    answers = {st["release"]: st.get("reply") for st in case["steps"] if "release" in st}
    ids: dict[str, str] = {}  # a module id -> its name (the latest grant of it)
    fresh = 0
    for step in out["steps"]:
        for entry in step.get("redis") or []:
            command = entry["call"][0] if entry["call"] else None
            drawn = granted = None
            if command in ID_AT:
                reply = entry.get("reply", answers.get(entry.get("hold", ""), None))
                granted = reply[ID_AT[command]] if isinstance(reply, list) and len(reply) > ID_AT[command] else None
                fresh += 1
                drawn = f"g{fresh}" if isinstance(granted, str) else f"n{fresh}"
            entry["call"] = call_of(entry["call"], via, ids, drawn)
            if isinstance(granted, str) and drawn is not None:
                ids[granted] = drawn  # from here on the case's name for it
            if "reply" in entry:
                entry["reply"] = reply_of(command or "", entry["reply"], ids)
            if "hold" in entry:
                held[entry["hold"]] = command or ""
        if "release" in step and "reply" in step:
            step["reply"] = reply_of(held.get(step["release"], ""), step["reply"], ids)
        if "expect" in step:
            step["expect"] = ids_in(step["expect"], ids)
    return out


def ids_in(v: Any, ids: dict[str, str]) -> Any:
    """Expectations with each granted id by its name."""
    if isinstance(v, dict):
        return {k: ids_in(x, ids) for k, x in v.items()}
    if isinstance(v, list):
        return [ids_in(x, ids) for x in v]
    return named(v, ids)


def build() -> str:
    source = json.loads(SOURCE.read_text())
    cases = [
        translate(case, via, suffix)
        for case in source["cases"] if "backend" not in case["limiter"]
        for via, suffix in VIAS
    ]
    doc = {
        "file": "limiter-scripts",
        "description": "Generated by scripts_form.py from limiter.json (edit that file, then run "
        "`make vectors`): every case that runs on the module, on the script backend (SPEC E) "
        "through Functions (-f) and EVALSHA (-e): the same decisions, headers and counters "
        "from the library's calls and replies.",
        "cases": cases,
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    made = build()
    if argv[1:] == ["--check"]:
        if not TARGET.exists() or TARGET.read_text() != made:
            print(f"{TARGET.name} is not what {SOURCE.name} gives: run `make vectors`", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print("usage: scripts_form.py [--check]", file=sys.stderr)
        return 2
    TARGET.write_text(made)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
