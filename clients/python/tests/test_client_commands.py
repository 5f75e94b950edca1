"""The typed clients' other commands (issue 40: the same twelve in every language):
TB.WINDOW, TB.THROTTLE, TB.ACQUIRE with and without TAKE, TB.RELEASE, TB.RENEW,
TB.PEEK key LEASES / HOLDS, TB.HOLD and TB.SETTLE, async and sync, against a real
redis-server with the module. Values are exact where the command takes a ``now`` or
answers whole numbers; the rest are bounded."""

from __future__ import annotations

from typing import AsyncIterator, Iterator

import pytest
import redis.exceptions

from redis_tb import (
    Acquired,
    AsyncClient,
    Bucket,
    Client,
    HoldReply,
    HoldsPeek,
    LeaseReply,
    LeasesPeek,
    Reply,
    SettleReply,
    Throttle,
)
from redis_tb_testing.servers import RedisServer

NOW = 1764456299.0  # 22:44:59 UTC, the last second of a minute


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


# -- TB.WINDOW --------------------------------------------------------------------------


async def test_async_window_fixed_refuses_then_admits_in_the_next_window(aclient: AsyncClient) -> None:
    assert await aclient.window("w", 2, 60, now=NOW, mode="FIXED") == Reply(True, 1, 0, 1)
    assert await aclient.window("w", 2, 60, now=NOW, mode="FIXED") == Reply(True, 0, 0, 1)
    assert await aclient.window("w", 2, 60, now=NOW, mode="FIXED") == Reply(False, 0, 1, 1)
    assert await aclient.window("w", 2, 60, now=NOW + 1, mode="FIXED") == Reply(True, 1, 0, 60)
    never = await aclient.window("w", 2, 60, 3, now=NOW + 1, mode="FIXED")
    assert not never.allowed and never.never
    with pytest.raises(redis.exceptions.ResponseError, match="limit must be > 0"):
        await aclient.window("w", 0, 60)


def test_sync_window_default_sliding_and_log(client: Client) -> None:
    assert client.window("s", 100, 60, now=NOW + 31) == Reply(True, 99, 0, 90)
    assert client.window("l", 3, 60, 3, now=NOW, mode="LOG") == Reply(True, 0, 0, 60)
    assert client.window("l", 3, 60, now=NOW + 1, mode="LOG") == Reply(False, 0, 59, 59)
    with pytest.raises(redis.exceptions.ResponseError, match="holds a FIXED window"):
        client.window("f", 3, 60, now=NOW, mode="FIXED")
        client.window("f", 3, 60, now=NOW, mode="SLIDING")


# -- TB.THROTTLE: redis-cell's CL.THROTTLE fields, in its order ---------------------------


async def test_async_throttle_fields_are_redis_cells(aclient: AsyncClient) -> None:
    # docs/commands.md's session, checked on redis-cell 0.5.0
    first = await aclient.throttle("user123", 15, 30, 60, 1)
    assert first == Throttle(limited=False, limit=16, remaining=15, retry_after=-1, reset_after=2)
    assert first.allowed
    over = await aclient.throttle("user123", 15, 30, 60, 16)
    assert over == Throttle(limited=True, limit=16, remaining=15, retry_after=2, reset_after=2)
    assert not over.allowed
    with pytest.raises(redis.exceptions.ResponseError, match="period must be > 0"):
        await aclient.throttle("user123", 15, 30, 0)


def test_sync_throttle_negative_quantity_refunds(client: Client) -> None:
    assert client.throttle("api:key7", 99, 2500, 1) == Throttle(False, 100, 99, -1, 1)
    assert client.throttle("api:key7", 99, 2500, 1, -1) == Throttle(False, 100, 100, -1, 0)


# -- TB.ACQUIRE, TB.RELEASE, TB.RENEW, TB.PEEK key LEASES -------------------------------


async def test_async_acquire_until_the_limit_then_release_and_renew(aclient: AsyncClient) -> None:
    assert await aclient.peek_leases("jobs") == LeasesPeek(0, 0)
    first = await aclient.acquire("jobs", 2, 30000)
    assert first.granted and first.in_flight == 1 and first.take is None
    assert first.id is not None and len(first.id) == 16 and 30000 <= first.ms <= 30001
    second = await aclient.acquire("jobs", 2, 30000)
    assert second.granted and second.in_flight == 2 and second.id != first.id
    refused = await aclient.acquire("jobs", 2, 30000)
    assert not refused.granted and refused.id is None and refused.in_flight == 2
    assert 0 < refused.ms <= 30001
    peeked = await aclient.peek_leases("jobs")
    assert peeked.in_flight == 2 and 29000 < peeked.ms <= 30001
    renewed = await aclient.renew("jobs", first.id, 60000)
    assert renewed.ok and renewed.in_flight == 2 and 60000 <= renewed.ms <= 60001
    assert await aclient.release("jobs", first.id) == LeaseReply(True, 1)
    assert await aclient.release("jobs", first.id) == LeaseReply(False, 1)  # twice is safe
    assert await aclient.renew("jobs", first.id, 60000) == LeaseReply(False, 1, 0)
    with pytest.raises(redis.exceptions.ResponseError, match="limit must be a whole number"):
        await aclient.acquire("jobs", 0, 30000)


def test_sync_acquire_release_of_an_unknown_id_and_renew(client: Client) -> None:
    assert client.release("jobs", "0123456789abcdef") == LeaseReply(False, 0)
    lease = client.acquire("jobs", 1, 30000)
    assert lease.granted and lease.id is not None
    refused = client.acquire("jobs", 1, 30000)
    assert refused == Acquired(False, 1, None, refused.ms) and refused.ms > 0
    assert client.release("jobs", "0123456789abcdef") == LeaseReply(False, 1)
    assert client.peek_leases("jobs").in_flight == 1
    assert client.renew("jobs", lease.id, 5000).ms in (5000, 5001)
    assert client.release("jobs", lease.id) == LeaseReply(True, 0)
    assert client.peek_leases("jobs") == LeasesPeek(0, 0)
    with pytest.raises(redis.exceptions.ResponseError, match="lease_id must be the 16 hex"):
        client.release("jobs", "nope")


async def test_async_acquire_with_take_is_all_or_nothing(aclient: AsyncClient) -> None:
    buckets = [Bucket("rl:{u7}:s", 10, 1, 1), Bucket("rl:{u7}:m", 1, 0.1, 1)]
    first = await aclient.acquire("jobs:{u7}", 4, 30000, buckets)
    assert first.granted and first.take is not None
    assert first.take.allowed and [k.remaining for k in first.take.keys] == [9, 0]
    refused = await aclient.acquire("jobs:{u7}", 4, 30000, buckets)
    assert not refused.granted and refused.id is None and refused.ms == 0
    assert refused.in_flight == 1  # the slot was free: a bucket refused
    assert refused.take is not None and not refused.take.allowed
    assert refused.take.keys[0].allowed and not refused.take.keys[1].allowed
    assert (await aclient.peek("rl:{u7}:s", 10, 1)).remaining < 9.5  # nothing charged twice


def test_sync_acquire_with_take(client: Client) -> None:
    got = client.acquire("jobs:{u8}", 1, 30000, [Bucket("rl:{u8}:s", 5, 1, 2)])
    assert got.granted and got.take is not None and len(got.take.keys) == 1
    assert got.take.keys[0] == Reply(True, 3, 0, 2)
    at_limit = client.acquire("jobs:{u8}", 1, 30000, [Bucket("rl:{u8}:s", 5, 1, 2)])
    assert not at_limit.granted and at_limit.ms > 0 and at_limit.take is not None


# -- TB.HOLD, TB.SETTLE, TB.PEEK key HOLDS, TB.RENEW of a hold --------------------------


async def test_async_hold_renew_settle(aclient: AsyncClient) -> None:
    assert await aclient.peek_holds("llm") == HoldsPeek(0, 0, 0)
    held = await aclient.hold("llm", 100000, 50, 4000, 60000)
    assert held == HoldReply(True, 96000, 0, 80, held.id)
    assert held.id is not None and len(held.id) == 16
    peeked = await aclient.peek_holds("llm")
    assert peeked.holds == 1 and peeked.amount == 4000 and 59000 < peeked.ms <= 60001
    renewed = await aclient.renew("llm", held.id, 120000)
    assert renewed.ok and renewed.in_flight == 1 and 119000 < renewed.ms <= 120001
    settled = await aclient.settle("llm", 100000, 50, held.id, 2500)
    assert settled.settled and settled.charged == -1500 and 97500 <= settled.remaining < 97600
    assert 0 < settled.reset_after <= 50
    again = await aclient.settle("llm", 100000, 50, held.id, 2500)
    assert not again.settled and again.charged == 0
    assert await aclient.peek_holds("llm") == HoldsPeek(0, 0, 0)
    assert await aclient.renew("llm", held.id, 1000) == LeaseReply(False, 0, 0)


def test_sync_hold_refused_and_settle_with_max_wait(client: Client) -> None:
    refused = client.hold("small", 10, 0.001, 20, 60000)
    assert refused.allowed is False and refused.id is None and refused.retry_after == -1
    held = client.hold("b", 10, 0.001, 10, 60000)
    assert held.allowed and held.id is not None and held.remaining == 0
    peeked = client.peek_holds("b")
    assert peeked == HoldsPeek(1, 10, peeked.ms) and 59000 < peeked.ms <= 60001
    # an excess of 100 with max_wait 1000 s at 0.001/s: at most 1 token of debt
    settled = client.settle("b", 10, 0.001, held.id, 110, max_wait=1000)
    assert settled == SettleReply(True, settled.remaining, settled.charged, settled.reset_after)
    assert -1.01 < settled.remaining < -0.99 and 0.99 < settled.charged < 1.01
    with pytest.raises(redis.exceptions.ResponseError, match="hold_id must be the 16 hex"):
        client.settle("b", 10, 0.001, "nope", 1)
    with pytest.raises(redis.exceptions.ResponseError, match="estimate must be > 0"):
        client.hold("b", 10, 0.001, 0, 60000)


def test_sync_commands_under_resp3(redis_server: RedisServer) -> None:
    # RESP3 answers doubles as floats and nil as None: the same typed replies
    c = Client.from_url(redis_server.url, timeout=5, protocol=3)
    try:
        c.redis.flushall()
        held = c.hold("h", 100, 1, 40, 60000)
        assert held.allowed and held.remaining == 60 and held.id is not None
        assert c.peek_holds("h").amount == 40
        assert c.settle("h", 100, 1, held.id, 10).charged == -30
        assert c.throttle("t", 1, 1, 1) == Throttle(False, 2, 1, -1, 1)
        assert c.window("w", 1, 60, now=NOW, mode="FIXED") == Reply(True, 0, 0, 1)
        lease = c.acquire("l", 1, 1000)
        assert lease.granted and c.acquire("l", 1, 1000).id is None
    finally:
        c.close()
