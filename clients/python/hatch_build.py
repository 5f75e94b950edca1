"""The build hook of the wheel and the sdist (SPEC E2): the script library's two files,
clients/lua/tb.lua and functions.lua, copied into the package at build time as
``redis_tb/lua/`` (the sdist: ``src/redis_tb/lua/``), so an installed package finds them
outside the repository. clients/lua is their one source: nothing is committed twice. A
wheel built from the sdist (no clients/lua beside it) takes the sdist's copies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

FILES = ("tb.lua", "functions.lua")


class LuaFiles(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        repo = root.parent / "lua"
        shipped = root / "src" / "redis_tb" / "lua"
        if all((repo / f).is_file() for f in FILES):
            source = repo
        elif all((shipped / f).is_file() for f in FILES):
            return  # an unpacked sdist: its copies are in the package folder already
        else:
            raise FileNotFoundError(f"redis-tb: the script library ({', '.join(FILES)}) is in neither {repo} nor {shipped}")
        into = "redis_tb/lua" if self.target_name == "wheel" else "src/redis_tb/lua"
        for f in FILES:
            build_data["force_include"][str(source / f)] = f"{into}/{f}"
