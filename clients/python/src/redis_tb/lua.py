"""The script library (clients/lua, SPEC E2) as the package ships it: ``tb.lua`` for
``SCRIPT LOAD``, its SHA-1 as the client computes it, and the Functions build made from
the two files as clients/lua/README.md says (``#!lua name=tb``, tb.lua above its EVAL
entry, then functions.lua). Read once, on first use.

The wheel and the sdist carry the two files in ``redis_tb/lua/``, copied there at build
time from clients/lua, their one source (``hatch_build.py``); a source checkout run
without a build (``PYTHONPATH=clients/python/src``) reads clients/lua itself."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LuaSources", "functions_library", "lua_dir", "lua_sources"]

FILES = ("tb.lua", "functions.lua")

#: the line that starts tb.lua's EVAL entry: the library is everything above it
EVAL_ENTRY = "-- EVAL entry:"


@dataclass(frozen=True)
class LuaSources:
    #: tb.lua's text (SCRIPT LOAD)
    script: str
    #: its SHA-1, 40 lowercase hex digits
    sha: str
    #: the Functions library's text (FUNCTION LOAD REPLACE)
    functions: str


def functions_library(script: str, entry: str) -> str:
    """The Functions build of ``script`` (tb.lua's text) with ``entry`` (functions.lua's)."""
    if script.startswith(EVAL_ENTRY):
        end = 0
    else:
        end = script.find("\n" + EVAL_ENTRY)
        if end < 0:
            raise ValueError("tb.lua has no EVAL entry line")
        end += 1
    return f"#!lua name=tb\n{script[:end]}{entry}"


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def lua_dir() -> Path:
    """The folder of the two files: the installed package's ``lua/``, else (a source
    checkout) clients/lua."""
    here = Path(__file__).resolve().parent
    for d in (here / "lua", here.parents[2] / "lua"):
        if all((d / f).is_file() for f in FILES):
            return d
    raise FileNotFoundError(f"redis-tb: the script library ({', '.join(FILES)}) is not in this package ({here / 'lua'})")


_lock = threading.Lock()
_cached: LuaSources | None = None


def lua_sources(directory: Path | None = None) -> LuaSources:
    """The library's texts, from ``directory`` (default :func:`lua_dir`, read once)."""
    global _cached
    if directory is None and _cached is not None:
        return _cached
    d = lua_dir() if directory is None else directory
    # the bytes as shipped (no newline translation), so the SHA-1 is the file's
    script = (d / "tb.lua").read_bytes().decode("utf-8")
    out = LuaSources(script, sha1(script), functions_library(script, (d / "functions.lua").read_bytes().decode("utf-8")))
    if directory is None:
        with _lock:
            _cached = out
    return out
