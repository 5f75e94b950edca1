"""The typed clients against a real redis-server with the module (fixed ``now``
so every value is exact)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Awaitable, Iterator

import pytest
import redis.exceptions

from redis_tb import AsyncClient, Bucket, Client, ModuleNotLoadedError, Reply, Reservation
from redis_tb.replies import packed
from redis_tb_testing.servers import RedisServer

NOW = 1764456268.0


@pytest.fixture
async def aclient(redis_server: RedisServer) -> AsyncIterator[AsyncClient]:
    c = AsyncClient.from_url(redis_server.url, timeout=5)
    await c.redis.flushall()
    yield c
    await c.aclose()


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Client]:
    c = Client.from_url(redis_server.url, timeout=5)
    c.redis.flushall()
    yield c
    c.close()


async def test_async_take_until_refused(aclient: AsyncClient) -> None:
    assert await aclient.take("k", 2, 0.5, now=NOW) == Reply(True, 1, 0, 2)
    assert await aclient.take("k", 2, 0.5, now=NOW) == Reply(True, 0, 0, 4)
    denied = await aclient.take("k", 2, 0.5, now=NOW)
    assert denied == Reply(False, 0, 2, 4)
    never = await aclient.take("k", 2, 0.5, 3, now=NOW)
    assert not never.allowed and never.never


async def test_async_mtake_is_all_or_nothing(aclient: AsyncClient) -> None:
    buckets = [Bucket("a", 10, 1, 1), Bucket("b", 1, 1, 1)]
    first = await aclient.mtake(buckets, now=NOW)
    assert first.allowed and first.keys == (Reply(True, 9, 0, 1), Reply(True, 0, 0, 1))
    second = await aclient.mtake(buckets, now=NOW)
    assert not second.allowed and second.retry_after == 1
    assert second.keys[0].allowed and not second.keys[1].allowed
    assert (await aclient.peek("a", 10, 1, now=NOW)).remaining == 9  # nothing burnt


async def test_async_peek_refund_reserve(aclient: AsyncClient) -> None:
    assert await aclient.peek("p", 5, 1, now=NOW) == Reply(True, 5, 0, 0)
    await aclient.take("p", 5, 1, 3, now=NOW)
    assert (await aclient.refund("p", 5, 1, 2, now=NOW)).remaining == 4
    assert await aclient.reserve("r", 1, 2, max_wait=5, now=NOW) == Reservation(True, 0, 0, 0.5)
    waited = await aclient.reserve("r", 1, 2, max_wait=5, now=NOW)
    assert waited.allowed and waited.wait == 0.5 and waited.remaining == -1
    refused = await aclient.reserve("r", 1, 2, max_wait=0.1, now=NOW)
    assert not refused.allowed and refused.wait == 0


async def test_async_refund_many_is_one_pipeline(aclient: AsyncClient) -> None:
    await aclient.mtake([Bucket("x", 3, 1, 2), Bucket("y", 3, 1, 1)], now=NOW)
    replies = await aclient.refund_many([Bucket("x", 3, 1, 2), Bucket("y", 3, 1, 1)], now=NOW)
    assert [r.remaining for r in replies] == [3, 3]


async def test_errors_are_redis_errors_with_the_module_text(aclient: AsyncClient) -> None:
    with pytest.raises(redis.exceptions.ResponseError, match="^capacity must be > 0 and <= 9007199254740992$"):
        await aclient.take("k", 0, 1)


async def test_check_module_passes_with_the_module(aclient: AsyncClient) -> None:
    await aclient.check_module()


async def test_check_module_names_the_server_when_the_module_is_missing() -> None:
    bare = RedisServer(module=False).start()
    try:
        c = AsyncClient.from_url(bare.url, timeout=5)
        with pytest.raises(ModuleNotLoadedError) as err:
            await c.check_module()
        assert str(err.value) == (
            f"redis-tb module not loaded on 127.0.0.1:{bare.port}: load libredis_tb.so with loadmodule"
        )
        await c.redis.ping()  # the probe's connection went back to the pool in a usable state
        await c.aclose()
        s = Client.from_url(bare.url, timeout=5)
        with pytest.raises(ModuleNotLoadedError):
            s.check_module()
        s.close()
    finally:
        bare.stop()


def test_sync_twin(client: Client) -> None:
    assert client.take("s", 2, 0.5, now=NOW) == Reply(True, 1, 0, 2)
    m = client.mtake([Bucket("s", 2, 0.5, 1), Bucket("t", 2, 0.5, 2)], now=NOW)
    assert m.allowed and m.remaining == 0
    assert client.peek("s", 2, 0.5, now=NOW).remaining == 0
    assert client.refund("s", 2, 0.5, now=NOW).remaining == 1
    assert client.reserve("s", 2, 0.5, 2, max_wait=10, now=NOW).wait == 2
    assert [r.remaining for r in client.refund_many([Bucket("t", 2, 0.5, 1)], now=NOW)] == [1]
    client.check_module()


async def test_resp3_doubles_read_the_same(redis_server: RedisServer) -> None:
    c = AsyncClient.from_url(redis_server.url, timeout=5, protocol=3)
    await c.redis.flushall()
    assert await c.take("k3", 2, 0.5, now=NOW) == Reply(True, 1, 0, 2)
    m = await c.mtake([Bucket("k3", 2, 0.5, 1)], now=NOW)
    assert m.keys == (Reply(True, 0, 0, 4),)
    await c.aclose()


def test_the_glossary_names_are_the_types() -> None:
    """SPEC "Names": TbClient, SyncTbClient, Charge, Reservation, LimiterMetrics; the
    earlier names stay usable."""
    import redis_tb

    assert redis_tb.AsyncClient is redis_tb.TbClient and redis_tb.Client is redis_tb.SyncTbClient
    assert redis_tb.TbClient.__name__ == "TbClient" and redis_tb.SyncTbClient.__name__ == "SyncTbClient"
    c = redis_tb.Bucket("k", 10, 1, 3)
    assert isinstance(c, redis_tb.Charge) and c.cost == 3 and c.n == 3
    assert redis_tb.Charge("k", 10, 1).cost == 1
    assert issubclass(redis_tb.Reservation, redis_tb.Reply)
    from redis_tb.metrics import Metrics

    assert Metrics is redis_tb.LimiterMetrics


async def test_a_connection_the_server_closed_while_idle_is_not_a_failed_call() -> None:
    """A restart or failover closes every connection the request path keeps idle; the
    next call on each must go out on a fresh one, not fail on the dead socket: a lost
    TB.RELEASE holds its slot until the lease expires (the HTTP suite's
    in_flight_disconnect found it after an outage check restarted Redis). Nothing was
    sent on the closed socket, so reconnecting first can charge nothing twice."""
    server = RedisServer().start()
    c = AsyncClient.from_url(server.url, timeout=5)

    def take(i: int) -> Awaitable[Any]:  # the limiter's call: pre-encoded, the kept connections
        return c.call_tb(packed("TB.TAKE", f"k{i}", 10, 1, 1, NOW))

    try:
        # several connections idle at once: a burst of concurrent calls leaves them all kept
        await asyncio.gather(*(take(i) for i in range(4)))
        assert len(c._idle) == 4
        server.stop()
        # the same port, a fresh server: every kept connection was closed
        server = RedisServer(port=server.port).start()
        await asyncio.sleep(0.05)  # the event loop reads each closed socket's end
        for i in range(6):
            assert (await take(i))[:2] == [1, 9]  # a fresh server: each bucket's first take
    finally:
        await c.aclose()
        server.stop()
