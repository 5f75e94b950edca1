"""SPEC E (issue 42): the script backend against real redis-server processes WITHOUT the
module (clients/lua loaded by the limiter's startup), beside one with it: the same
decisions for the same calls, leases and holds, a flushed library reloaded once (SCRIPT
FLUSH, FUNCTION FLUSH), a server that refuses TIME in scripts (``rename-command TIME ""``:
a script's ``redis.call('TIME')`` looks the command up by name, so it is refused too), a
forced module on a server without it, both paths (asyncio and sync)."""

from __future__ import annotations

import logging
from typing import Any, Iterator

import pytest
import redis
from prometheus_client import CollectorRegistry

from redis_tb import (
    AsyncClient, Client, Limit, ModuleNotLoadedError, Policy, RateLimiter, ScriptLoadError, SyncRateLimiter,
)
from redis_tb.lua import lua_sources
from redis_tb.metrics import PrometheusMetrics
from redis_tb_testing.servers import RedisServer, free_port

NOW = 1764456268.25  # a fixed `now` so both backends decide at the same time
PEER = "203.0.113.9"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, RedisServer]]:
    made = {
        "module": RedisServer(),
        "plain": RedisServer(module=False),
        # no Functions: the library goes in by SCRIPT LOAD and calls are EVALSHA (E2)
        "evalsha": RedisServer(module=False, extra=["--rename-command", "FUNCTION", ""]),
        "no_time": RedisServer(module=False, extra=["--rename-command", "TIME", ""]),
    }
    started: list[RedisServer] = []
    try:
        for s in made.values():
            started.append(s.start())
        yield made
    finally:
        for s in started:
            s.stop()


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.info: list[str] = []
        self.warn: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        (self.info if record.levelno < logging.WARNING else self.warn).append(record.getMessage())


_n = 0


def logger() -> tuple[logging.Logger, Lines]:
    global _n
    _n += 1
    log = logging.getLogger(f"redis_tb.test_backend.{_n}")
    log.propagate = False
    lines = Lines()
    log.handlers[:] = [lines]
    log.setLevel(logging.DEBUG)
    return log, lines


def limiter(server: RedisServer, **options: Any) -> RateLimiter:
    options.setdefault("logger", logger()[0])
    return RateLimiter(AsyncClient.from_url(server.url, timeout=5), timeout=5, **options)


def sync_limiter(server: RedisServer, **options: Any) -> SyncRateLimiter:
    options.setdefault("logger", logger()[0])
    return SyncRateLimiter(Client.from_url(server.url, timeout=5), timeout=5, **options)


def calls(server: RedisServer, name: str) -> int:
    """``INFO commandstats`` calls of a command or subcommand (``script|load``)."""
    for line in server.cli("INFO", "commandstats").splitlines():
        if line.startswith(f"cmdstat_{name}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def view(d: Any) -> tuple[str, list[tuple[Any, ...]]]:
    return d.outcome.value, [(r.name, r.allowed, r.remaining, r.retry_after, r.reset_after) for r in d.results]


@pytest.mark.parametrize(("which", "backend", "why"), [
    ("module", "module", "tb.take found"),
    ("plain", "scripts", "tb.take not found, Functions"),
    ("evalsha", "scripts", "tb.take not found, EVALSHA"),
])
async def test_auto_chooses_logs_once_and_exposes_the_choice(servers: dict[str, RedisServer], which: str, backend: str, why: str) -> None:
    """E1, E6: auto chooses the module where tb.take is, else the scripts (Functions or
    EVALSHA); one INFO line, stats.backend, the gauge."""
    registry = CollectorRegistry()
    log, lines = logger()
    lim = limiter(servers[which], logger=log, metrics=PrometheusMetrics(registry, limiter=which))
    await lim.startup()
    server = f"127.0.0.1:{servers[which].port}"
    assert lim.stats.backend == backend
    assert lines.info == [f"redis-tb: backend {backend} on {server} ({why})"]
    assert lines.warn == []
    assert registry.get_sample_value("redis_tb_backend", {"limiter": which, "backend": backend}) == 1
    other = "scripts" if backend == "module" else "module"
    assert registry.get_sample_value("redis_tb_backend", {"limiter": which, "backend": other}) == 0
    await lim.aclose()


def test_the_library_loaded_is_the_packages_tb_lua(servers: dict[str, RedisServer]) -> None:
    """E2: SCRIPT LOAD of the package's tb.lua, its SHA-1 the server's (sync startup)."""
    lim = sync_limiter(servers["evalsha"])
    lim.startup()
    assert lim.stats.backend == "scripts"
    assert redis.Redis(port=servers["evalsha"].port).script_exists(lua_sources().sha) == [True]
    lim.close()


KINDS = {
    "buckets": lambda: [Policy("ip", Limit(5, 0.5)), Policy("all", Limit(7, 0.25), key=lambda r: "all")],
    "sliding": lambda: [Policy("win", Limit.window(4, 60, "sliding"))],
    "fixed": lambda: [Policy("fixed", Limit.window(3, 10, "fixed"))],
}


@pytest.mark.parametrize("which", ["plain", "evalsha"])
@pytest.mark.parametrize("kind", list(KINDS))
async def test_the_scripts_take_and_deny_exactly_as_the_module(servers: dict[str, RedisServer], which: str, kind: str) -> None:
    """The same sequence on both backends gives the same replies (a fixed `now`)."""
    opts = {"redis_now": lambda: NOW, "prefix": f"cmp{which}{kind}", "hash_tag": lambda r: "t"}
    mod, scr = limiter(servers["module"], **opts), limiter(servers[which], **opts)
    await mod.startup()
    await scr.startup()
    assert (mod.stats.backend, scr.stats.backend) == ("module", "scripts")
    policies = KINDS[kind]()
    for i in range(9):
        a = await mod.check(None, policies, peer=PEER)
        b = await scr.check(None, policies, peer=PEER)
        assert view(b) == view(a), f"call {i}"
    assert (scr.stats.allowed, scr.stats.limited) == (mod.stats.allowed, mod.stats.limited)
    assert scr.stats.allowed > 0 and scr.stats.limited > 0 and scr.stats.store_errors == 0
    await mod.aclose()
    await scr.aclose()


def test_the_sync_path_takes_and_refunds_through_the_scripts(servers: dict[str, RedisServer]) -> None:
    opts = {"redis_now": lambda: NOW, "prefix": "cmpsync"}
    mod, scr = sync_limiter(servers["module"], **opts), sync_limiter(servers["evalsha"], **opts)
    mod.startup()
    scr.startup()
    policies = [Policy("ip", Limit(3, 1)), Policy("all", Limit(4, 1), key=lambda r: "all")]
    for i in range(5):
        a, b = mod.check(None, policies, peer=PEER), scr.check(None, policies, peer=PEER)
        assert view(b) == view(a), f"call {i}"
    a, b = mod.check(None, policies, peer="198.51.100.1"), scr.check(None, policies, peer="198.51.100.1")
    assert view(b) == view(a)
    assert b.refund_sync() is True and a.refund_sync() is True
    assert scr.stats.refunds == 1 and scr.stats.store_errors == 0
    mod.close()
    scr.close()


async def test_leases_and_holds_through_the_scripts(servers: dict[str, RedisServer]) -> None:
    lim = limiter(servers["plain"], prefix="leases")
    await lim.startup()
    conc = [Policy("conc", Limit.in_flight(1, 30))]
    first = await lim.check(None, conc, peer="198.51.100.1")
    assert first.outcome.value == "allowed" and first.lease is not None
    assert len(first.lease.id) == 16 and int(first.lease.id, 16) >= 0
    assert (await lim.check(None, conc, peer="198.51.100.1")).outcome.value == "limited"
    assert await first.renew() is True
    await first.finish(200)
    assert lim.stats.leases_in_flight == 0 and lim.stats.leases_expired == 0
    again = await lim.check(None, conc, peer="198.51.100.1")
    assert again.outcome.value == "allowed" and again.lease is not None and again.lease.id != first.lease.id
    await again.finish(200)

    llm = [Policy("llm", Limit(100000, 50), settle_later=True)]
    d = await lim.check(None, llm, peer="198.51.100.2")
    hold = await d.hold("llm", 4000, 60)
    assert hold.allowed and hold.id is not None and len(hold.id) == 16
    assert 95000 < hold.remaining <= 96000
    settled = await hold.settle(2500)
    assert settled.settled and settled.charged == -1500
    assert lim.stats.store_errors == 0 and lim.stats.holds == 1 and lim.stats.settlements == 1
    await lim.aclose()


def test_leases_and_holds_on_the_sync_path(servers: dict[str, RedisServer]) -> None:
    lim = sync_limiter(servers["evalsha"], prefix="syncleases")
    lim.startup()
    conc = [Policy("conc", Limit.in_flight(1, 30))]
    first = lim.check(None, conc, peer=PEER)
    assert first.outcome.value == "allowed" and first.lease is not None
    assert lim.check(None, conc, peer=PEER).outcome.value == "limited"
    first.finish_sync(200)
    assert lim.check(None, conc, peer=PEER).outcome.value == "allowed"
    d = lim.check(None, [Policy("llm", Limit(1000, 10), settle_later=True)], peer=PEER)
    hold = d.hold_sync("llm", 100, 60)
    assert hold.allowed and hold.settle_sync(40).settled
    assert lim.stats.store_errors == 0
    lim.close()


@pytest.mark.parametrize(("which", "flush", "load"), [
    ("evalsha", ("SCRIPT", "FLUSH"), "script|load"),
    ("plain", ("FUNCTION", "FLUSH"), "function|load"),
])
async def test_a_flush_mid_run_is_one_reload_and_no_store_error(
    servers: dict[str, RedisServer], which: str, flush: tuple[str, str], load: str
) -> None:
    """E3: the next call reloads once and succeeds; store_errors unchanged."""
    server = servers[which]
    lim = limiter(server, prefix=f"flush{which}")
    await lim.startup()
    policies = [Policy("ip", Limit(10, 1))]
    assert (await lim.check(None, policies, peer=PEER)).outcome.value == "allowed"
    loads = calls(server, load)
    server.cli(*flush)
    d = await lim.check(None, policies, peer=PEER)
    assert d.outcome.value == "allowed" and int(d.results[0].remaining) == 8
    assert calls(server, load) == loads + 1, "one reload"
    assert (await lim.check(None, policies, peer=PEER)).outcome.value == "allowed"
    assert calls(server, load) == loads + 1, "no more"
    assert (lim.stats.store_errors, lim.stats.degraded) == (0, 0)
    await lim.aclose()


def test_a_flush_on_the_sync_path(servers: dict[str, RedisServer]) -> None:
    server = servers["evalsha"]
    lim = sync_limiter(server, prefix="flushsync")
    lim.startup()
    policies = [Policy("ip", Limit(10, 1))]
    assert lim.check(None, policies, peer=PEER).outcome.value == "allowed"
    loads = calls(server, "script|load")
    server.cli("SCRIPT", "FLUSH")
    assert lim.check(None, policies, peer=PEER).outcome.value == "allowed"
    assert calls(server, "script|load") == loads + 1
    assert lim.stats.store_errors == 0
    lim.close()


class Wall:
    """The limiter's clock (SPEC T1), its wall clock set by the test."""

    def __init__(self, wall: float) -> None:
        self.wall = wall

    def monotonic(self) -> float:
        import time

        return time.monotonic()

    def time(self) -> float:
        return self.wall


async def test_a_server_that_refuses_time_in_scripts_gets_the_client_clock(servers: dict[str, RedisServer]) -> None:
    """E5: probed once at startup, logged with the choice; `now` / `NOW` from the limiter's clock."""
    import time

    server = servers["no_time"]
    log, lines = logger()
    clock = Wall(time.time())
    lim = limiter(server, logger=log, clock=clock, hash_tag=lambda r: "a")
    await lim.startup()
    assert lines.info == [f"redis-tb: backend scripts on 127.0.0.1:{server.port} (tb.take not found, Functions, client clock)"]
    policies = [Policy("ip", Limit(3, 1))]
    outcomes = [(await lim.check(None, policies, peer=PEER)).outcome.value for _ in range(4)]
    assert outcomes == ["allowed", "allowed", "allowed", "limited"]
    stored = redis.Redis(port=server.port).hget(f"rl:{{a}}:ip:{PEER}", "last_refill_time")
    assert stored is not None and abs(float(stored) - clock.wall) < 0.001
    clock.wall += 2  # two tokens back by the client's clock
    assert (await lim.check(None, policies, peer=PEER)).outcome.value == "allowed"
    conc = [Policy("conc", Limit.in_flight(1, 30))]
    first = await lim.check(None, conc, peer=PEER)
    assert first.outcome.value == "allowed"
    assert (await lim.check(None, conc, peer=PEER)).outcome.value == "limited"
    await first.finish(200)
    assert lim.stats.leases_expired == 0
    assert (await lim.check(None, conc, peer=PEER)).outcome.value == "allowed"
    assert lim.stats.store_errors == 0
    await lim.aclose()


async def test_forced_module_on_a_server_without_it_fails_with_u1s_line(servers: dict[str, RedisServer]) -> None:
    log, lines = logger()
    lim = limiter(servers["plain"], backend="module", logger=log)
    with pytest.raises(ModuleNotLoadedError) as err:
        await lim.startup()
    assert str(err.value) == f"redis-tb module not loaded on 127.0.0.1:{servers['plain'].port}: load libredis_tb.so with loadmodule"
    assert (lines.info, lines.warn, lim.stats.backend) == ([], [], None)
    await lim.aclose()


async def test_forced_scripts_on_a_server_with_the_module(servers: dict[str, RedisServer]) -> None:
    log, lines = logger()
    server = servers["module"]
    lim = limiter(server, backend="scripts", logger=log, prefix="forced")
    await lim.startup()
    assert lines.info == [f"redis-tb: backend scripts on 127.0.0.1:{server.port} (forced by backend=scripts, Functions)"]
    before = calls(server, "fcall")
    assert (await lim.check(None, [Policy("ip", Limit(10, 1))], peer=PEER)).outcome.value == "allowed"
    assert calls(server, "fcall") == before + 1
    await lim.aclose()


def test_a_server_that_refuses_both_loads_fails_in_one_line() -> None:
    server = RedisServer(module=False, extra=["--rename-command", "FUNCTION", "", "--rename-command", "SCRIPT", ""]).start()
    try:
        lim = sync_limiter(server)
        with pytest.raises(ScriptLoadError) as err:
            lim.startup()
        assert str(err.value).startswith(f"redis-tb: cannot load the script backend on 127.0.0.1:{server.port} (ERR unknown command 'SCRIPT'")
        assert str(err.value).endswith("): allow FUNCTION LOAD or SCRIPT LOAD, or load the module")
        assert "\n" not in str(err.value)
        lim.close()
    finally:
        server.stop()


def test_the_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="backend must be auto, module or scripts, got 'lua'"):
        RateLimiter(AsyncClient.from_url("redis://127.0.0.1:1"), backend="lua")


async def test_a_degraded_start_chooses_at_its_first_call() -> None:
    """E1: before its first call that reaches Redis, with the same calls; logged once."""
    port = free_port()
    log, lines = logger()
    lim = RateLimiter(AsyncClient.from_url(f"redis://127.0.0.1:{port}/0", timeout=2), timeout=2, start_degraded=True, logger=log)
    await lim.startup()
    assert lim.stats.backend is None and lines.info == [] and len(lines.warn) == 1
    server = RedisServer(module=False, port=port).start()
    try:
        policies = [Policy("ip", Limit(10, 1))]
        assert (await lim.check(None, policies, peer=PEER)).outcome.value == "allowed"
        assert lim.stats.backend == "scripts"
        assert lines.info == [f"redis-tb: backend scripts on 127.0.0.1:{port} (tb.take not found, Functions)"]
        assert (await lim.check(None, policies, peer=PEER)).results[0].remaining < 9
        assert len(lines.info) == 1
        await lim.aclose()
    finally:
        server.stop()


async def test_the_typed_client_goes_through_the_scripts(servers: dict[str, RedisServer]) -> None:
    lim = limiter(servers["evalsha"])
    await lim.startup()
    r = await lim.client.take("typed", 10, 1, 3, now=NOW)
    assert r.allowed and r.remaining == 7
    assert (await lim.client.peek("typed", 10, 1, now=NOW)).remaining == 7
    assert (await lim.client.refund("typed", 10, 1, 2, now=NOW)).remaining == 9
    await lim.aclose()


class Scripted(Client):
    """A store answering a list of replies (an exception is raised), the calls kept."""

    server = "h:1"

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[list[Any]] = []

    def command(self, *args: Any) -> Any:
        self.sent.append([str(a) for a in args[:3]])
        got = self.answers.pop(0)
        if isinstance(got, BaseException):
            raise got
        return got


def test_a_script_load_that_answers_another_sha_fails_the_start_in_one_line() -> None:
    """E2: the client computes tb.lua's SHA-1 and checks SCRIPT LOAD's answer."""
    other = "0123456789abcdef0123456789abcdef01234567"
    store = Scripted([[None], redis.exceptions.ResponseError("unknown command 'FUNCTION'"), other.encode()])
    lim = SyncRateLimiter(store, logger=logger()[0])
    with pytest.raises(ScriptLoadError) as err:
        lim.startup()
    assert str(err.value) == (
        f"redis-tb: cannot load the script backend on h:1 (SCRIPT LOAD answered {other}, not tb.lua's SHA-1 "
        f"{lua_sources().sha}): allow FUNCTION LOAD or SCRIPT LOAD, or load the module"
    )
    assert store.sent == [["COMMAND", "INFO", "tb.take"], ["FUNCTION", "LOAD", "REPLACE"], ["SCRIPT", "LOAD", lua_sources().script]]


def test_every_grant_id_is_fresh_16_hex_digits() -> None:
    """E4: from the CSPRNG, never the same twice."""
    from redis_tb.backend import Backend

    b = Backend.scripts("h:1", "functions", False)
    ids = set()
    for _ in range(200):
        steps = b.call_steps(["TB.ACQUIRE", "k", "10", "30000"])
        argv, _tb = next(steps)
        ids.add(argv[argv.index("ID") + 1])
    assert len(ids) == 200 and all(len(i) == 16 and int(i, 16) >= 0 and i == i.lower() for i in ids)
