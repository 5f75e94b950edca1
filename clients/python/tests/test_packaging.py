"""The package installs and imports without starlette for Django and `limits` users
(starlette is the `asgi` / `fastapi` extra): a subprocess in which importing starlette
or fastapi fails, as in a venv without them, imports redis_tb, redis_tb.django and
redis_tb.limits and checks a request with the sync limiter."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = r'''
import importlib.abc, sys

class NoStarlette(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("starlette", "fastapi"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoStarlette())
import redis_tb, redis_tb.limits, redis_tb.limits_async
from django.conf import settings
settings.configure(REDIS_TB={"URL": "redis://127.0.0.1:1", "POLICIES": []})
import redis_tb.django, redis_tb.django.middleware, redis_tb.django.decorators
from redis_tb import Key, Limit, Policy, SyncRateLimiter, Client
lim = SyncRateLimiter(Client.from_url("redis://127.0.0.1:1"), cooldown=60)
d = lim.check(None, [Policy("k", Limit(1, 1), key=Key.header("x-api-key"))], peer="203.0.113.9",
              headers=lambda name: ["a\x01b"])
assert d.outcome.value == "bad_request", d
assert not any(m.split(".")[0] in ("starlette", "fastapi") for m in sys.modules), sorted(sys.modules)
try:
    redis_tb.RateLimitMiddleware
except ModuleNotFoundError as exc:
    assert "starlette" in str(exc)
else:
    raise AssertionError("the ASGI middleware imported without starlette")
print("ok")
'''


def test_imports_without_starlette() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_starlette_is_an_extra_not_a_dependency() -> None:
    meta = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("starlette", "fastapi")) for d in meta["dependencies"])
    assert any(d.startswith("starlette") for d in meta["optional-dependencies"]["asgi"])


LUA = HERE.parents[1] / "lua"
FILES = ("tb.lua", "functions.lua")

INSTALLED = r'''
import sys
from pathlib import Path
import redis_tb.lua as lua
d = lua.lua_dir()
assert d == Path(lua.__file__).resolve().parent / "lua", d  # the package's own copies, not a checkout's
src = lua.lua_sources()
print(src.sha)
'''


def _wheel_files(wheel: Path) -> dict[str, bytes]:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if n.startswith("redis_tb/lua/")}


def test_the_wheel_and_the_sdist_ship_clients_lua(tmp_path: Path) -> None:
    """SPEC E2: tb.lua and functions.lua are copied from clients/lua (their one source) into
    the wheel and the sdist at build time, and a wheel built from the sdist (no clients/lua
    beside it) carries them too."""
    import tarfile

    want = {f: (LUA / f).read_bytes() for f in FILES}
    root = HERE.parent
    for target in ("wheel", "sdist"):
        subprocess.run(
            [sys.executable, "-m", "hatchling", "build", "-t", target, "-d", str(tmp_path / "dist")],
            cwd=root, check=True, capture_output=True, timeout=120,
        )
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    assert _wheel_files(wheel) == {f"redis_tb/lua/{f}": b for f, b in want.items()}
    (sdist,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {m.name.split("/", 1)[1]: m for m in t.getmembers() if "/src/redis_tb/lua/" in m.name}
        assert {n: t.extractfile(m).read() for n, m in names.items()} == {f"src/redis_tb/lua/{f}": b for f, b in want.items()}  # type: ignore[union-attr]
        t.extractall(tmp_path / "unpacked", filter="data")
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path / "again")],
        cwd=unpacked, check=True, capture_output=True, timeout=120,
    )
    (again,) = (tmp_path / "again").glob("*.whl")
    assert _wheel_files(again) == {f"redis_tb/lua/{f}": b for f, b in want.items()}


def test_the_installed_package_finds_its_lua_outside_the_repository(tmp_path: Path) -> None:
    import hashlib

    out = subprocess.run([sys.executable, "-c", INSTALLED], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == hashlib.sha1((LUA / "tb.lua").read_bytes()).hexdigest()
