"""The store's backend (SPEC E): the module's TB.* commands, or the same calls to the script
library (clients/lua) where the module cannot be loaded.

- E1: chosen once, at startup, by ``COMMAND INFO tb.take`` (or forced by ``backend``); a
  degraded start chooses before its first call that reaches Redis;
- E2: ``FUNCTION LOAD REPLACE`` of the Functions build, else ``SCRIPT LOAD`` of tb.lua with
  the SHA-1 checked; a failed load at startup is :class:`ScriptLoadError`;
- E3: ``NOSCRIPT`` / ``ERR Function not found``: one reload and one retry per call;
- E4: a grant's ``ID`` from :mod:`secrets`, one retry with a fresh one on a collision;
- E5: ``now`` / ``NOW`` from the client's clock where the server refuses TIME in scripts;
- E6: the one line of the choice (:attr:`Chosen.line`).

The rules are written once, as generators of the commands to send (``*_steps``: each
yields ``(command, tb)``, ``tb`` true when the reply is a TB.* reply for the caller's
reader, and is sent the reply or thrown the error reply); :mod:`redis_tb.client` runs
them over ``redis.asyncio`` and over ``redis``."""

from __future__ import annotations

import re
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Generator, Literal, Sequence, TypeVar

import redis.exceptions

from .errors import ModuleNotLoadedError, ScriptLoadError
from .lua import LuaSources, lua_sources
from .replies import UnexpectedReplyError

__all__ = [
    "Backend", "BackendName", "BackendSetting", "Chosen", "ScriptsVia", "backend_setting", "fresh_id", "reply_text",
]

#: SPEC E1: the setting (``auto``, the default, chooses by ``COMMAND INFO tb.take``)
BackendSetting = Literal["auto", "module", "scripts"]
#: SPEC E6: the backend in use
BackendName = Literal["module", "scripts"]
#: SPEC E2: how the scripts are called
ScriptsVia = Literal["functions", "evalsha"]

T = TypeVar("T")
#: one command of a step, and whether its reply is a TB.* reply
Step = tuple[list[Any], bool]
Steps = Generator[Step, Any, T]

MODULE_PROBE = ["COMMAND", "INFO", "tb.take"]  # SPEC U1, E1
TIME_PROBE = ["EVAL", "return redis.call('TIME')", "0"]  # SPEC E5

_SETTINGS = ("auto", "module", "scripts")


def backend_setting(value: object) -> BackendSetting:
    """SPEC E1: a ``backend`` setting, checked (a configuration error names the value)."""
    if value == "auto" or value == "module" or value == "scripts":
        return value
    raise ValueError(f"backend must be auto, module or scripts, got {value!r}")


def reply_text(exc: BaseException) -> str:
    """An error reply's whole text, its code included (redis-py cuts the code off the
    message of the errors it knows: ``NOPERM``, ``NOSCRIPT``, ``ERR``)."""
    text = str(exc)
    code = getattr(exc, "status_code", None)  # redis-py 6 on
    if isinstance(code, str) and code:
        return f"{code} {text}"
    if isinstance(exc, redis.exceptions.NoPermissionError):
        return f"NOPERM {text}"
    if isinstance(exc, redis.exceptions.NoScriptError):
        return f"NOSCRIPT {text}"
    first = text.split(" ", 1)[0]
    return text if first.isupper() and first.isalpha() and len(first) > 2 else f"ERR {text}"


#: SPEC E3: the library is gone from the server
_GONE = re.compile(r"^(NOSCRIPT\b|ERR Function not found)")
#: SPEC E4: the grant's id is taken on the key
_ID_HELD = re.compile(r"^ERR ID is already held on this key")


def fresh_id() -> str:
    """SPEC E4: 8 bytes of the CSPRNG, 16 lowercase hex digits, fresh for every call."""
    return secrets.token_hex(8)


def module_found(info: Any) -> bool:
    """SPEC U1, E1: ``COMMAND INFO tb.take`` has an entry for the command."""
    return isinstance(info, (list, tuple)) and bool(info) and info[0] is not None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else str(value)


#: the calls that carry ``NOW`` (E5) rather than a positional ``now``: leases and holds
_LEASE_WORDS = frozenset(("ACQUIRE", "RELEASE", "RENEW", "HOLD", "SETTLE"))
#: the bucket and window calls' arguments after the key before ``now`` (E5)
_BEFORE_NOW = {"TAKE": 3, "RESERVE": 4, "PEEK": 2, "REFUND": 3, "WINDOW": 3}
_MODES = frozenset(("FIXED", "SLIDING", "LOG"))


@dataclass(frozen=True)
class Chosen:
    """How a chosen backend calls the server."""

    name: BackendName
    via: ScriptsVia | None
    #: SPEC E5: the server refuses TIME in scripts; the client's clock goes with every call
    client_clock: bool
    #: SPEC E6's line
    line: str


class Backend:
    """The backend of one client (SPEC E): chosen once (E1), then every TB.* call goes
    through :meth:`call_steps` when it is the scripts. ``wall``: the limiter's wall clock,
    epoch seconds (SPEC T1; E5's ``now``)."""

    def __init__(self, setting: BackendSetting, server: str, wall: Callable[[], float] = time.time) -> None:
        self.setting = backend_setting(setting)
        self.server = server
        self.wall = wall
        self._chosen: Chosen | None = None
        self._listeners: list[Callable[[Chosen], None]] = []
        self._lock = threading.Lock()

    @classmethod
    def scripts(cls, server: str, via: ScriptsVia, client_clock: bool, wall: Callable[[], float] = time.time) -> Backend:
        """A backend chosen already as the scripts (a test's scripted store, or a caller
        that knows)."""
        b = cls("scripts", server, wall)
        b._chosen = Chosen("scripts", via, client_clock, b._line("forced by backend=scripts", via, client_clock))
        return b

    @property
    def chosen(self) -> Chosen | None:
        """The choice, or None until it is made."""
        return self._chosen

    def on_chosen(self, listener: Callable[[Chosen], None]) -> None:
        """``listener`` is told of the choice once: now if it is made, else when it is."""
        with self._lock:
            chosen = self._chosen
            if chosen is None:
                self._listeners.append(listener)
        if chosen is not None:
            listener(chosen)

    def choose(self, chosen: Chosen) -> Chosen:
        """Keep ``chosen`` (the first choice made wins) and tell the listeners, once."""
        with self._lock:
            if self._chosen is not None:
                return self._chosen
            self._chosen = chosen
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener(chosen)
        return chosen

    def sources(self) -> LuaSources:
        return lua_sources()

    def _line(self, why: str, via: ScriptsVia, client_clock: bool) -> str:
        how = "Functions" if via == "functions" else "EVALSHA"
        return f"redis-tb: backend scripts on {self.server} ({why}, {how}{', client clock' if client_clock else ''})"

    # -- SPEC E1, E2, E5: the choice ---------------------------------------------------

    def choose_steps(self) -> Steps[Chosen]:
        """The calls of the choice; the caller keeps it with :meth:`choose`. A missing
        module when forced is :class:`ModuleNotLoadedError`, a refused load
        :class:`ScriptLoadError`; other error replies (``NOPERM`` on COMMAND INFO) and
        connection errors are passed through."""
        if self.setting == "scripts":
            why = "forced by backend=scripts"
        else:
            info = yield (MODULE_PROBE, False)
            if module_found(info):
                why = "forced by backend=module" if self.setting == "module" else "tb.take found"
                return Chosen("module", None, False, f"redis-tb: backend module on {self.server} ({why})")
            if self.setting == "module":
                raise ModuleNotLoadedError(self.server)
            why = "tb.take not found"
        via = yield from self.load_steps(None, at_start=True)
        client_clock = False
        try:
            yield (TIME_PROBE, False)
        except redis.exceptions.ResponseError:
            client_clock = True  # SPEC E5: the server refuses TIME in scripts
        return Chosen("scripts", via, client_clock, self._line(why, via, client_clock))

    def load_steps(self, via: ScriptsVia | None, *, at_start: bool) -> Steps[ScriptsVia]:
        """SPEC E2: load the library; ``via`` the way chosen already (a reload, E3), or
        None at the choice (FUNCTION LOAD REPLACE where accepted, else SCRIPT LOAD). At
        the start, a refused last load is :class:`ScriptLoadError`; on a call (E3) the
        error reply itself (a store error, judged by B)."""
        lua = self.sources()
        if via != "evalsha":
            try:
                yield (["FUNCTION", "LOAD", "REPLACE", lua.functions], False)
                return "functions"
            except redis.exceptions.ResponseError as exc:
                if via == "functions":
                    if not at_start:
                        raise
                    raise ScriptLoadError(self.server, reply_text(exc)) from exc
        try:
            sha = yield (["SCRIPT", "LOAD", lua.script], False)
        except redis.exceptions.ResponseError as exc:
            if not at_start:
                raise
            raise ScriptLoadError(self.server, reply_text(exc)) from exc
        got = _text(sha)
        if got.lower() != lua.sha:
            why = f"SCRIPT LOAD answered {got}, not tb.lua's SHA-1 {lua.sha}"
            if not at_start:
                raise UnexpectedReplyError(why)
            raise ScriptLoadError(self.server, why)
        return "evalsha"

    # -- SPEC E2-E5: one call ------------------------------------------------------------

    def call_steps(self, command: Sequence[Any]) -> Steps[Any]:
        """One TB.* call (the module's words) through the scripts (E2), with E3's reload
        and E4's fresh id, each retried once; returns the reply."""
        chosen = self._chosen
        assert chosen is not None and chosen.via is not None, "call_steps before the scripts were chosen"
        word = _text(command[0]).upper().removeprefix("TB.")
        granted = word in ("ACQUIRE", "HOLD")
        argv = self.script_argv(chosen, word, command, fresh_id() if granted else None)
        reloaded = redrawn = False
        while True:
            try:
                return (yield (argv, True))
            except redis.exceptions.ResponseError as exc:
                text = reply_text(exc)
                if not reloaded and _GONE.match(text):
                    reloaded = True  # SPEC E3: once, never a loop
                    yield from self.load_steps(chosen.via, at_start=False)
                    continue
                if granted and not redrawn and _ID_HELD.match(text):
                    redrawn = True  # SPEC E4: once, with a fresh id
                    argv = self.script_argv(chosen, word, command, fresh_id())
                    continue
                raise

    def script_argv(self, chosen: Chosen, word: str, command: Sequence[Any], id_: str | None) -> list[Any]:
        """clients/lua/README.md's calling convention for ``command`` (the module's words)."""
        args = list(command)
        take_at = 0
        if word == "ACQUIRE" and len(args) > 5 and _text(args[4]).upper() == "TAKE":
            take_at = int(_text(args[5]))
        if take_at > 0:
            # TB.ACQUIRE key limit lease_ms TAKE numkeys bucket... triples: the buckets are keys
            keys = [args[1], *args[6 : 6 + take_at]]
            rest = [*args[2:5], *args[6 + take_at :]]
        elif word == "MTAKE":
            n = int(_text(args[1]))
            keys = args[2 : 2 + n]
            rest = args[2 + n :]
        else:
            keys = [args[1]]
            rest = args[2:]
        if id_ is not None:
            rest += ["ID", id_]
        of_slots = word == "PEEK" and bool(rest) and _text(rest[0]).upper() in ("LEASES", "HOLDS")
        if chosen.client_clock:  # SPEC E5
            if word in _LEASE_WORDS or of_slots:
                rest += ["NOW", self.wall()]
            else:
                before = 3 * len(keys) if word == "MTAKE" else _BEFORE_NOW.get(word)
                if before is not None and (len(rest) == before or (
                    word == "WINDOW" and len(rest) == before + 1 and _text(rest[before]).upper() in _MODES
                )):
                    rest.insert(before, self.wall())
        if chosen.via == "functions":
            return ["FCALL_RO" if word == "PEEK" else "FCALL", f"tb_{word.lower()}", str(len(keys)), *keys, *rest]
        return ["EVALSHA", self.sources().sha, str(len(keys)), *keys, word, *rest]
