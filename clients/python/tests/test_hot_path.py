"""The request path's fast paths give the same answers as the general ones: the
TB.MTAKE reader against the general RESP reader (RESP2 and RESP3, every prefix of a
reply, error replies), ClientIP's IPv4 fast path against the general walk, the
cached header items against http_sfv's serializer, and the raw connection path
against a real redis-server (both protocols, a timeout mid-call, a dead server)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import random
import re
import tomllib
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import redis
import redis.exceptions
from http_sfv.item import Item
from http_sfv.list import List

from redis_tb import AsyncClient, ClientIP, InFlightLimit, Limit, Outcome, Policy, RateLimiter, WindowLimit, per_hour
from redis_tb.headers import ratelimit, ratelimit_policy
from redis_tb.decision import PolicyResult
from redis_tb.replies import IncompleteReply, RespError, UnexpectedReplyError, mtake_reader, mtake_values, read_resp
from redis_tb_testing.servers import RedisServer

PEER: dict[str, Any] = {"peer": "203.0.113.40"}

RESP3 = b"*5\r\n:0\r\n,1.5\r\n,2\r\n,0.5\r\n*2\r\n*4\r\n:1\r\n,3\r\n,0\r\n,1\r\n*4\r\n:0\r\n,1.5\r\n,2\r\n,0.5\r\n"
RESP2 = (
    b"*5\r\n:0\r\n$3\r\n1.5\r\n$1\r\n2\r\n$3\r\n0.5\r\n*2\r\n"
    b"*4\r\n:1\r\n$1\r\n3\r\n$1\r\n0\r\n$1\r\n1\r\n*4\r\n:0\r\n$3\r\n1.5\r\n$1\r\n2\r\n$3\r\n0.5\r\n"
)
EXPECTED = (False, [(True, 3.0, 0.0, 1.0), (False, 1.5, 2.0, 0.5)])


@pytest.mark.parametrize("data", [RESP3, RESP2])
def test_mtake_reader_reads_both_protocols_like_the_general_reader(data: bytes) -> None:
    assert mtake_reader(2)(data) == EXPECTED
    assert mtake_values(read_resp(data), 2) == EXPECTED
    # every proper prefix is incomplete, never misread
    for cut in range(len(data)):
        with pytest.raises(IncompleteReply):
            mtake_reader(2)(data[:cut])


def test_mtake_reader_hands_errors_and_odd_replies_to_the_general_reader() -> None:
    err = mtake_reader(1)(b"-ERR unknown command 'TB.MTAKE'\r\n")
    assert isinstance(err, RespError) and "unknown command" in err
    with pytest.raises(UnexpectedReplyError):
        mtake_reader(1)(RESP3)  # two keys where one was asked
    with pytest.raises(UnexpectedReplyError):
        mtake_reader(2)(RESP3.replace(b",1.5", b",nan"))
    with pytest.raises(UnexpectedReplyError):
        mtake_reader(2)(RESP3 + b"+OK\r\n")
    # a marker in the wrong place is not read by position
    with pytest.raises(UnexpectedReplyError):
        mtake_reader(2)(RESP3.replace(b"*4\r\n:1\r\n,3", b"*4\r\n+yes\r\n,3"))


def test_client_ip_fast_path_equals_the_general_walk() -> None:
    rnd = random.Random(21)
    pool = ["10.0.0.1", "10.1.2.3", "127.0.0.2", "198.51.100.7", "203.0.113.9", "2001:db8::1", "::ffff:10.0.0.9",
            "1.2.3.4:80", "[2001:db8::2]:443", "unknown", "", " 198.51.100.8 ", "01.2.3.4", "300.1.1.1", "_hidden"]
    configs = [ClientIP(), ClientIP(["10.0.0.0/8", "127.0.0.0/8"]), ClientIP(["10.0.0.0/8"], ipv4_prefix=24),
               ClientIP(["10.0.0.0/8", "2001:db8::/32"], header="forwarded"), ClientIP(["0.0.0.0/0"])]
    for _ in range(3000):
        peer = rnd.choice(pool + [None])
        values = [", ".join(rnd.choice(pool) for _ in range(rnd.randint(0, 4))) for _ in range(rnd.choice([0, 1, 1, 2]))]
        def get(name: str, values: list[str] = values) -> list[str]:
            return values

        for c in configs:
            assert c.of(peer, get) == c.identity(peer, values if c.trusted else []), (peer, values)


def test_cached_header_items_equal_the_serializer() -> None:
    rnd = random.Random(11)
    for _ in range(500):
        results = [
            PolicyResult(rnd.choice(["ip", "user", "a-b_c9"]), "k", rnd.choice([1, 10, 2.5, 2**53]),
                         rnd.choice([0.001, 1, 1 / 3, 1e-9]), 1, True,
                         rnd.choice([0.0, 0.5, 7.99, -3.0, 1e300]), 0, rnd.choice([0.0, 0.2, 17.0, 17.2, 1e300]))
            for _ in range(rnd.randint(1, 3))
        ]
        state = List()
        for r in results:
            item = Item(r.name)
            item.params["r"] = max(0, min(int(r.remaining // 1), 999_999_999_999_999))
            t = -(-r.reset_after // 1)
            item.params["t"] = max(0, min(int(t), 999_999_999_999_999))
            state.append(item)
        assert ratelimit(results) == str(state)
        parsed = List()
        parsed.parse(ratelimit_policy(results).encode())
        assert [m.value for m in parsed] == [r.name for r in results]


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
async def limiter(request: pytest.FixtureRequest, redis_server: RedisServer) -> AsyncIterator[RateLimiter]:
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5, protocol=request.param), timeout=5)
    await lim.client.redis.flushall()
    yield lim
    await lim.aclose()


def test_only_a_fixed_bucket_policy_takes_the_fixed_path() -> None:
    assert per_hour("ip", 100)._fixed == (100.0, 100 / 3600, 1)
    assert Policy("c", Limit(5, 1), cost=2.5)._fixed == (5, 1, 2.5)
    # each of these resolves its limit or cost per request, or is not charged by the check
    assert Policy("f", lambda r: Limit(5, 1))._fixed is None
    assert Policy("g", Limit(5, 1), cost=lambda r: 2)._fixed is None
    assert Policy("s", Limit(5, 1), settle_later=True)._fixed is None
    assert Policy("w", WindowLimit(10, 60))._fixed is None
    assert Policy("n", InFlightLimit(3, lease=1.0))._fixed is None
    assert dataclasses.replace(per_hour("ip", 100), cost=3)._fixed == (100.0, 100 / 3600, 3)


async def test_the_fixed_path_charges_what_the_general_path_charges(limiter: RateLimiter) -> None:
    # The same limits and costs, once fixed (the fast path) and once from functions
    # (the general path), on keys of the same names: the same results, shadow included.
    def fixed() -> list[Policy]:
        return [Policy("a", Limit(10, 1)), Policy("b", Limit(7, 2), cost=3, shadow=True)]

    def general() -> list[Policy]:
        return [Policy("a", lambda r: Limit(10, 1)), Policy("b", lambda r: Limit(7, 2), cost=lambda r: 3, shadow=True)]

    got = {}
    for name, build in (("fixed", fixed), ("general", general)):
        await limiter.client.redis.flushall()
        got[name] = [await limiter.check(object(), build(), **PEER) for _ in range(4)]
    for f, g in zip(got["fixed"], got["general"], strict=True):
        assert (f.outcome, f.shadow_limited) == (g.outcome, g.shadow_limited)
        assert [(r.key, r.capacity, r.rate, r.cost, r.shadow, r.allowed) for r in f.results] == [
            (r.key, r.capacity, r.rate, r.cost, r.shadow, r.allowed) for r in g.results
        ]
        assert [r.remaining for r in f.results] == pytest.approx([r.remaining for r in g.results], abs=0.05)
    assert got["fixed"][2].shadow_limited == ("b",)


async def test_the_raw_path_under_both_protocols(limiter: RateLimiter) -> None:
    policies = [per_hour("ip", 100), Policy("two", Limit(2, 0.5))]
    got = [await limiter.check(object(), policies, **PEER) for _ in range(3)]
    assert [d.outcome for d in got] == [Outcome.ALLOWED, Outcome.ALLOWED, Outcome.LIMITED]
    assert [r.remaining for r in got[1].results] == [pytest.approx(98, abs=0.01), pytest.approx(0, abs=0.01)]
    assert got[2].violated == ("two",) and 0 < (got[2].retry_after or 0) <= 2
    # an error reply is redis-py's exception, and the connection stays usable
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
        await limiter.client.call_packed(b"*1\r\n$9\r\nTB.NOSUCH\r\n")
    assert (await limiter.check(object(), [per_hour("ip", 100)], **PEER)).allowed


async def test_a_timed_out_call_never_leaves_its_late_reply_for_the_next(redis_server: RedisServer) -> None:
    lim = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=0.2, cooldown=0)
    await lim.client.redis.flushall()
    policy = [Policy("count", Limit(100, 1e-6))]
    assert (await lim.check(object(), policy, **PEER)).results[0].remaining == pytest.approx(99)
    redis_server.freeze()
    try:
        frozen = await lim.check(object(), policy, **PEER)
    finally:
        redis_server.thaw()
    assert frozen.outcome is Outcome.STORE_ERROR and frozen.error is not None
    # the frozen call's command ran when the server woke (it had been sent): 98 left;
    # the next call reads its own reply (97), not the stale one
    after = await lim.check(object(), policy, **PEER)
    assert after.outcome is Outcome.ALLOWED and after.results[0].remaining == pytest.approx(97)
    await lim.aclose()


async def test_the_redis_py_internals_the_raw_path_relies_on(redis_server: RedisServer) -> None:
    """AsyncClient.call_packed reads and writes redis-py's asyncio connection streams
    (``Connection._reader`` / ``_writer``, ``connect()``, ``disconnect(nowait=True)``,
    ``_parser.parse_error``): no public interface of redis-py reaches its speed (one
    write and one read per call, no pool lock or response callbacks; the public path,
    ``send_packed_command`` + ``read_response`` through the pool, costs about 4x the
    client CPU per call, see docs/performance.md). The supported redis-py versions are
    pinned in pyproject.toml; this test fails when those internals change, and the
    client falls back to the public path (``_raw`` False) when the fields are gone."""
    meta = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    (pin,) = [d for d in meta["dependencies"] if d.startswith("redis")]
    low, high = re.fullmatch(r"redis>=([\d.]+),<([\d.]+)", pin).groups()  # type: ignore[union-attr]
    version = tuple(int(x) for x in redis.__version__.split(".")[:2])
    assert tuple(int(x) for x in low.split(".")[:2]) <= version < tuple(int(x) for x in high.split(".")[:2]), redis.__version__
    client = AsyncClient.from_url(redis_server.url, timeout=5)
    try:
        await client.call_packed(b"*1\r\n$4\r\nPING\r\n")
        assert client._raw, "redis-py's connection lost _reader/_writer: the raw path is off"
        (conn,) = client._idle
        assert isinstance(conn._reader, asyncio.StreamReader) and isinstance(conn._writer, asyncio.StreamWriter)
        assert "nowait" in inspect.signature(conn.disconnect).parameters
        assert isinstance(conn._parser.parse_error("NOPERM no"), redis.exceptions.NoPermissionError)
        await conn.disconnect(nowait=True)
        assert conn._writer is None  # what call_packed checks before reconnecting
        assert await client.call_packed(b"*1\r\n$4\r\nPING\r\n") == b"PONG"
    finally:
        await client.aclose()
