"""The local deny cache (issue 21): refusals only, never an admission Redis would not
give. Redis runs on a fixed clock (the limiter's ``clock``), the cache on a clock the
test moves, so every value is exact; a real redis-server counts the calls
(INFO commandstats)."""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Iterator

import pytest
from prometheus_client import CollectorRegistry

from redis_tb import AsyncClient, Client, Decision, DenyCache, Limit, Outcome, Policy, RateLimiter, SyncRateLimiter
from redis_tb.metrics import PrometheusMetrics
from redis_tb_testing.servers import RedisServer

NOW = 1_764_456_268.0
PEER: dict[str, Any] = {"peer": "203.0.113.20"}


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Req:
    def __init__(self, cost: float = 1) -> None:
        self.cost = cost


def cost_of(req: Req) -> float:
    return req.cost


@pytest.fixture
def tb(redis_server: RedisServer) -> Iterator[Client]:
    c = Client.from_url(redis_server.url, timeout=5)
    c.redis.flushall()
    yield c
    c.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def limiter(redis_server: RedisServer, clock: Clock, tb: Client) -> AsyncIterator[RateLimiter]:
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5),
        timeout=5,
        clock=lambda: NOW,
        deny_cache=DenyCache(max_entries=100, clock=clock),
    )
    yield lim
    await lim.aclose()


def mtake_calls(tb: Client) -> int:
    """The limiter's calls: TB.TAKE for one policy, TB.MTAKE for several (SPEC L4)."""
    stats: Any = tb.redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_tb.{c}", {}).get("calls", 0)) for c in ("take", "mtake"))


# capacity 2, one token every 2 s: after two requests the third waits 2 s (reset 4 s)
POLICY = Policy("p", Limit(2, 0.5))
KEY = "rl:p:203.0.113.20"


async def test_a_hit_answers_without_redis_with_the_same_refusal_counting_down(
    limiter: RateLimiter, tb: Client, clock: Clock
) -> None:
    tb.take(KEY, 2, 0.5, 2, now=NOW)  # drained by someone else: this cache knows nothing
    from_redis = await limiter.check(Req(), [POLICY], **PEER)
    assert from_redis.limited and not from_redis.cached
    calls = mtake_calls(tb)
    same_time = await limiter.check(Req(), [POLICY], **PEER)
    assert same_time.limited and same_time.cached and same_time.outcome is Outcome.LIMITED
    # the same 429 as Redis's: headers, problem body
    assert limiter.rejection(same_time) == limiter.rejection(from_redis)
    assert dict(limiter.headers(from_redis))["Retry-After"] == "2"
    clock.t += 0.5
    half = dict(limiter.headers(await limiter.check(Req(), [POLICY], **PEER)))
    assert half["Retry-After"] == "2" and half["RateLimit"] == '"p";r=0;t=4'
    clock.t += 0.7
    later = await limiter.check(Req(), [POLICY], **PEER)
    h = dict(limiter.headers(later))
    assert h["Retry-After"] == "1" and h["RateLimit"] == '"p";r=0;t=3'
    body = json.loads((limiter.rejection(later) or (0, [], b""))[2])
    assert body["detail"] == "rate limit exceeded for 'p': retry after 1 s"
    assert body["retry_after"] == pytest.approx(0.8)
    assert mtake_calls(tb) == calls  # not one TB.MTAKE for the four cache hits
    assert limiter.stats.deny_cache_hits == 3 and limiter.stats.limited == 4
    # at deny-until the cache lets go: Redis is asked again (and, on its fixed clock, refuses)
    clock.t = 102.0
    again = await limiter.check(Req(), [POLICY], **PEER)
    assert again.limited and not again.cached and mtake_calls(tb) == calls + 1


async def test_a_smaller_cost_or_another_limit_goes_to_redis(limiter: RateLimiter, tb: Client) -> None:
    policy = Policy("c", Limit(5, 0.5), cost=cost_of)
    assert (await limiter.check(Req(4), [policy], **PEER)).allowed  # 1 token left
    refused = await limiter.check(Req(2), [policy], **PEER)
    assert refused.limited and not refused.cached
    calls = mtake_calls(tb)
    assert (await limiter.check(Req(3), [policy], **PEER)).cached  # larger cost: refused locally
    assert mtake_calls(tb) == calls
    smaller = await limiter.check(Req(1), [policy], **PEER)
    assert smaller.allowed and mtake_calls(tb) == calls + 1  # Redis admitted it
    # a different capacity for the same key (a plan change) is Redis's to judge
    bigger = Policy("c", Limit(50, 0.5), cost=cost_of)
    assert (await limiter.check(Req(2), [policy], **PEER)).cached
    changed = await limiter.check(Req(2), [bigger], **PEER)
    assert not changed.cached and mtake_calls(tb) == calls + 2


async def test_refund_through_this_limiter_drops_the_entry(limiter: RateLimiter, tb: Client) -> None:
    one = Policy("one", Limit(1, 0.5))
    first = await limiter.check(Req(), [one], **PEER)
    assert (await limiter.check(Req(), [one], **PEER)).limited
    assert len(limiter.deny_cache or ()) == 1
    assert await first.refund()
    assert len(limiter.deny_cache or ()) == 0
    after = await limiter.check(Req(), [one], **PEER)
    assert after.allowed and not after.cached


async def test_refund_by_another_instance_is_not_seen_until_deny_until(
    limiter: RateLimiter, tb: Client, clock: Clock, redis_server: RedisServer
) -> None:
    other = RateLimiter(AsyncClient.from_url(redis_server.url, timeout=5), timeout=5, clock=lambda: NOW)
    one = Policy("one", Limit(1, 0.5))
    first = await other.check(Req(), [one], **PEER)
    refused = await limiter.check(Req(), [one], **PEER)  # cached here, for 2 s
    assert first.allowed and refused.limited and refused.retry_after == pytest.approx(2.0)
    assert await first.refund()  # made on the OTHER instance
    assert tb.peek("rl:one:203.0.113.20", 1, 0.5, now=NOW).remaining == pytest.approx(1.0)
    calls = mtake_calls(tb)
    # this instance still refuses, locally: a refusal Redis would no longer give...
    clock.t += 1.9
    stale = await limiter.check(Req(), [one], **PEER)
    assert stale.limited and stale.cached and mtake_calls(tb) == calls
    # ...but only until deny-until (the retry_after Redis gave); then Redis admits
    clock.t = 102.0
    fresh = await limiter.check(Req(), [one], **PEER)
    assert fresh.allowed and not fresh.cached and mtake_calls(tb) == calls + 1
    await other.aclose()


async def test_hits_are_counted_per_cached_policy(redis_server: RedisServer, tb: Client, clock: Clock) -> None:
    registry = CollectorRegistry()
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5), timeout=5, clock=lambda: NOW,
        deny_cache=DenyCache(10, clock=clock), metrics=PrometheusMetrics(registry, limiter="api"),
    )
    a, b = Policy("a", Limit(1, 0.5)), Policy("b", Limit(1, 0.25))
    tb.take("rl:a:203.0.113.20", 1, 0.5, now=NOW)  # drained elsewhere: Redis refuses first
    tb.take("rl:b:203.0.113.20", 1, 0.25, now=NOW)
    refused = await lim.check(Req(), [a, b], **PEER)
    assert refused.violated == ("a", "b") and not refused.cached
    hit = await lim.check(Req(), [a, b], **PEER)
    assert hit.cached and hit.violated == ("a", "b") and hit.retry_after == pytest.approx(4.0)
    clock.t += 2.5  # 'a' expired in the cache, 'b' still there: only 'b' answers
    hit2 = await lim.check(Req(), [a, b], **PEER)
    assert hit2.cached and [r.name for r in hit2.results] == ["b"]
    sample = registry.get_sample_value
    assert sample("redis_tb_deny_cache_hits_total", {"limiter": "api", "policy": "a"}) == 1
    assert sample("redis_tb_deny_cache_hits_total", {"limiter": "api", "policy": "b"}) == 2
    assert sample("redis_tb_limited_total", {"limiter": "api", "policy": "b"}) == 3
    assert lim.stats.deny_cache_hits == 2
    await lim.aclose()


async def test_never_admissible_refusals_are_not_cached(limiter: RateLimiter) -> None:
    huge = Policy("huge", Limit(2, 0.5), cost=5)  # cost > capacity: retry_after -1
    d = await limiter.check(Req(), [huge], **PEER)
    assert d.limited and d.retry_after is None and len(limiter.deny_cache or ()) == 0


def test_memory_is_bounded_expired_first_then_soonest_to_expire() -> None:
    clock = Clock()
    cache = DenyCache(max_entries=3, clock=clock)
    cache.add("a", 1, 1, 1, retry_after=5, reset_after=5, now=100)
    cache.add("b", 1, 1, 1, retry_after=1, reset_after=1, now=100)
    cache.add("c", 1, 1, 1, retry_after=9, reset_after=9, now=100)
    cache.add("d", 1, 1, 1, retry_after=7, reset_after=7, now=100)  # full: 'b' expires soonest
    assert len(cache) == 3
    assert cache.lookup("b", 1, 1, 1, 100) is None
    assert all(cache.lookup(k, 1, 1, 1, 100) is not None for k in "acd")
    cache.add("e", 1, 1, 1, retry_after=1, reset_after=1, now=106)  # 'a' (until 105) expired
    assert cache.lookup("a", 1, 1, 1, 106) is None and len(cache) == 3
    for i in range(1000):  # overwrites and churn keep the heap bounded too
        cache.add(f"k{i % 5}", 1, 1, 1, retry_after=1 + i % 7, reset_after=1, now=200 + i)
    assert len(cache) <= 3 and len(cache._heap) <= 2 * 3 + 16
    with pytest.raises(ValueError):
        DenyCache(max_entries=0)


# -- single flight: one probe per expired entry ---------------------------------------


async def refused_and_cached(limiter: RateLimiter) -> None:
    for _ in range(2):
        assert (await limiter.check(Req(), [POLICY], **PEER)).allowed
    assert (await limiter.check(Req(), [POLICY], **PEER)).limited  # cached until 102


async def test_after_expiry_concurrent_requests_send_one_probe_the_rest_are_refused_locally(
    limiter: RateLimiter, tb: Client, clock: Clock
) -> None:
    await refused_and_cached(limiter)
    calls, hits = mtake_calls(tb), limiter.stats.deny_cache_hits
    clock.t = 102.0  # deny-until has passed
    decisions = await asyncio.gather(*[limiter.check(Req(), [POLICY], **PEER) for _ in range(20)])
    assert mtake_calls(tb) == calls + 1  # one TB.MTAKE: the probe (Redis refuses, fixed clock)
    probe, rest = decisions[0], decisions[1:]
    assert probe.limited and not probe.cached
    assert all(d.limited and d.cached for d in rest)
    assert limiter.stats.deny_cache_hits == hits + 19
    status, headers, body = limiter.rejection(rest[0]) or (0, [], b"")
    assert status == 429 and dict(headers)["Retry-After"] == "1"
    assert json.loads(body)["detail"] == "rate limit exceeded for 'p': retry after 1 s"
    assert all(limiter.rejection(d) == limiter.rejection(rest[0]) for d in rest)
    # the probe's refusal renewed the entry: the next request is a plain cache hit
    e = (limiter.deny_cache or DenyCache()).lookup(KEY, 2, 0.5, 1, 102.0)
    assert e is not None and e.probing == 0.0 and e.deny_until == pytest.approx(104.0)
    assert (await limiter.check(Req(), [POLICY], **PEER)).cached and mtake_calls(tb) == calls + 1


def test_sync_threads_after_expiry_send_one_probe(redis_server: RedisServer, tb: Client) -> None:
    clock = Clock()
    lim = SyncRateLimiter(
        Client.from_url(redis_server.url, timeout=5), timeout=5, clock=lambda: NOW,
        deny_cache=DenyCache(10, clock=clock),
    )
    for _ in range(2):
        assert lim.check(Req(), [POLICY], **PEER).allowed
    assert lim.check(Req(), [POLICY], **PEER).limited
    calls = mtake_calls(tb)
    clock.t = 102.0
    barrier = threading.Barrier(8)

    def one() -> Decision:
        barrier.wait()
        return lim.check(Req(), [POLICY], **PEER)

    tb.redis.client_pause(300)  # the probe's call waits in Redis
    with ThreadPoolExecutor(8) as pool:
        decisions = list(pool.map(lambda _: one(), range(8)))
    assert mtake_calls(tb) == calls + 1
    assert sum(not d.cached for d in decisions) == 1 and all(d.limited for d in decisions)
    lim.close()


async def test_a_probe_admitted_with_enough_left_removes_the_entry_else_renews_it(
    redis_server: RedisServer, tb: Client, clock: Clock
) -> None:
    redis_now = [NOW]
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5), timeout=5, clock=lambda: redis_now[0],
        deny_cache=DenyCache(10, clock=clock),
    )
    cache = lim.deny_cache
    assert cache is not None
    await refused_and_cached(lim)
    assert len(cache) == 1
    # admitted leaving enough tokens for the next request of that cost: entry gone
    clock.t, redis_now[0] = 104.0, NOW + 4  # the bucket is full again (2 tokens)
    admitted = await lim.check(Req(), [POLICY], **PEER)
    assert admitted.allowed and not admitted.cached and admitted.results[0].remaining == pytest.approx(1.0)
    assert len(cache) == 0
    # admitted leaving fewer tokens than the cost: the entry is renewed, not removed
    assert (await lim.check(Req(), [POLICY], **PEER)).allowed  # 0 left: cached until 106
    clock.t, redis_now[0] = 106.0, NOW + 6  # deny-until passed; one token is back in Redis
    probe = await lim.check(Req(), [POLICY], **PEER)
    assert probe.allowed and not probe.cached and probe.results[0].remaining == pytest.approx(0.0)
    e = cache.lookup(KEY, 2, 0.5, 1, 106.0)
    assert e is not None and e.probing == 0.0
    assert e.deny_until == pytest.approx(108.0) and e.reset_at == pytest.approx(110.0)
    await lim.aclose()


async def test_an_admission_spending_the_last_token_caches_the_next_refusal(
    limiter: RateLimiter, tb: Client, clock: Clock
) -> None:
    policy = Policy("c", Limit(5, 0.5), cost=cost_of)
    first = await limiter.check(Req(3), [policy], **PEER)  # 2 left: a cost of 3 must wait 2 s
    assert first.allowed and first.results[0].remaining == pytest.approx(2.0)
    calls = mtake_calls(tb)
    nxt = await limiter.check(Req(3), [policy], **PEER)
    assert nxt.limited and nxt.cached and mtake_calls(tb) == calls  # no TB.MTAKE
    assert nxt.retry_after == pytest.approx(2.0)  # (cost - remaining) / rate
    assert dict(limiter.headers(nxt))["Retry-After"] == "2"
    # the same refusal Redis gives that cost now
    assert tb.take("rl:c:203.0.113.20", 5, 0.5, 3, now=NOW).retry_after == pytest.approx(2.0)
    calls = mtake_calls(tb)  # that TB.TAKE counted too
    # a cost the bucket still holds is Redis's to judge
    assert (await limiter.check(Req(2), [policy], **PEER)).allowed and mtake_calls(tb) == calls + 1
    # spending the last token: the next request of cost 1 is refused locally, Retry-After 2
    one = Policy("one", Limit(1, 0.5))
    assert (await limiter.check(Req(), [one], **PEER)).allowed
    calls = mtake_calls(tb)
    hit = await limiter.check(Req(), [one], **PEER)
    assert hit.cached and mtake_calls(tb) == calls and dict(limiter.headers(hit))["Retry-After"] == "2"


async def test_a_cancelled_probe_removes_the_entry(limiter: RateLimiter, tb: Client, clock: Clock) -> None:
    await refused_and_cached(limiter)
    cache = limiter.deny_cache or DenyCache()
    clock.t = 102.0
    tb.redis.client_pause(500)
    task = asyncio.ensure_future(limiter.check(Req(), [POLICY], **PEER))
    for _ in range(100):
        await asyncio.sleep(0)
        if cache._entries.get(KEY, None) is not None and cache._entries[KEY].probing:
            break
    assert cache._entries[KEY].probing == 102.0
    while_probing = await limiter.check(Req(), [POLICY], **PEER)
    assert while_probing.cached and while_probing.retry_after == 0.0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(cache) == 0


async def test_a_stale_probing_mark_lets_the_next_request_probe(
    limiter: RateLimiter, tb: Client, clock: Clock
) -> None:
    await refused_and_cached(limiter)
    cache = limiter.deny_cache or DenyCache()
    clock.t = 102.0
    hit, lost = cache.claim(KEY, 2, 0.5, 1, clock.t)  # a probe that never comes back
    assert hit is None and lost is not None and lost.probing == 102.0
    calls = mtake_calls(tb)
    clock.t = 111.9  # younger than 2 x the call timeout (5 s): still refused locally
    assert (await limiter.check(Req(), [POLICY], **PEER)).cached and mtake_calls(tb) == calls
    clock.t = 112.0  # 2 x 5 s old: the next request probes Redis
    probe = await limiter.check(Req(), [POLICY], **PEER)
    assert probe.limited and not probe.cached and mtake_calls(tb) == calls + 1
    cache.end_probe(KEY, lost)  # the lost probe's late end leaves the renewed entry alone
    e = cache.lookup(KEY, 2, 0.5, 1, 112.0)
    assert e is not None and e.deny_until == pytest.approx(114.0)
