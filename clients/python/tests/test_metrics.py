"""Per-policy Prometheus metrics (issue 21), read back from a prometheus_client registry;
a real redis-server with the module (and a dead port for the failure counters)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from redis_tb import AsyncClient, Client, Limit, Policy, RateLimiter, SyncRateLimiter, per_hour
from redis_tb.metrics import BUCKETS, PrometheusMetrics
from redis_tb_testing.servers import RedisServer, free_port

PEER: dict[str, Any] = {"peer": "203.0.113.30"}


class Req:
    pass


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


async def test_counters_per_policy_and_the_call_histogram(redis_server: RedisServer) -> None:
    registry = CollectorRegistry()
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5), timeout=5,
        metrics=PrometheusMetrics(registry, limiter="api"),
    )
    await lim.client.redis.flushall()
    policies = [per_hour("ip", 100), Policy("user", Limit(2, 1e-6)), Policy("watch", Limit(1, 1e-6), shadow=True)]
    first = await lim.check(Req(), policies, **PEER)       # charged on all three
    second = await lim.check(Req(), policies, **PEER)      # 'watch' (shadow) refuses: through, uncharged
    assert first.allowed and second.allowed and second.shadow_limited == ("watch",)
    assert await first.refund()                           # gives back ip, user and watch
    third = await lim.check(Req(), policies, **PEER)       # charged on all three again
    fourth = await lim.check(Req(), policies, **PEER)      # 'watch' refuses again
    assert third.allowed and not third.shadow_limited and fourth.shadow_limited == ("watch",)
    no_watch = policies[:2]
    assert (await lim.check(Req(), no_watch, **PEER)).allowed   # user's last token
    assert (await lim.check(Req(), no_watch, **PEER)).violated == ("user",)
    both = await lim.check(Req(), policies, **PEER)        # 'user' and 'watch' refuse: 429
    assert both.violated == ("user",) and both.shadow_limited == ("watch",)

    def v(name: str, policy: str) -> float:
        return value(registry, name, limiter="api", policy=policy)

    assert [v("redis_tb_allowed_total", p) for p in ("ip", "user", "watch")] == [3, 3, 2]
    # the same in the limiter's stats: three requests admitted (charged), two went on
    # through a shadow refusal uncharged, two got a 429
    assert (lim.stats.allowed, lim.stats.shadow_limited, lim.stats.limited) == (3, 3, 2)
    assert v("redis_tb_shadow_limited_total", "watch") == 3
    assert v("redis_tb_limited_total", "user") == 2 and v("redis_tb_limited_total", "watch") == 0
    assert v("redis_tb_limited_total", "ip") == 0
    assert [v("redis_tb_refunded_total", p) for p in ("ip", "user", "watch")] == [1, 1, 1]
    # eight Redis calls: seven TB.MTAKE and one refund pipeline
    assert value(registry, "redis_tb_redis_call_duration_seconds_count", limiter="api") == 8
    assert value(registry, "redis_tb_redis_call_duration_seconds_bucket", limiter="api", le="+Inf") == 8
    # labels are limiter and policy names only: never a client identity
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            assert set(sample.labels) <= {"limiter", "policy", "le"}
            assert "203.0.113.30" not in str(sample.labels.values())
    await lim.aclose()


def test_failures_are_counted_and_limiters_share_a_registry() -> None:
    registry = CollectorRegistry()
    dead = f"redis://127.0.0.1:{free_port()}"
    a = SyncRateLimiter(Client.from_url(dead), cooldown=60, metrics=PrometheusMetrics(registry, limiter="a"))
    b = SyncRateLimiter(Client.from_url(dead), cooldown=60, metrics=PrometheusMetrics(registry, limiter="b"))
    for _ in range(3):
        a.check(Req(), [per_hour("ip", 10)], **PEER)
    b.check(Req(), [per_hour("ip", 10)], **PEER)
    assert value(registry, "redis_tb_store_errors_total", limiter="a") == 1  # then the cool-down
    assert value(registry, "redis_tb_degraded_total", limiter="a") == 3
    assert value(registry, "redis_tb_degraded_total", limiter="b") == 1
    # the failed call was observed too
    assert value(registry, "redis_tb_redis_call_duration_seconds_count", limiter="a") == 1
    buckets = [s.labels["le"] for f in text_string_to_metric_families(generate_latest(registry).decode())
               if f.name == "redis_tb_redis_call_duration_seconds" for s in f.samples
               if s.name.endswith("_bucket") and s.labels["limiter"] == "a"]
    assert [float(x) for x in buckets[:-1]] == list(BUCKETS) and buckets[-1] == "+Inf"
    a.close()
    b.close()


def test_no_metrics_object_by_default() -> None:
    lim: Any = SyncRateLimiter(Client.from_url("redis://127.0.0.1:1"))
    assert lim.metrics is None
    lim.close()


def test_the_default_registry_is_prometheus_clients_global_one() -> None:
    from prometheus_client import REGISTRY

    m = PrometheusMetrics(limiter="global-test")
    m.allowed("p")
    assert REGISTRY.get_sample_value("redis_tb_allowed_total", {"limiter": "global-test", "policy": "p"}) == 1
    with pytest.raises(ValueError):  # prometheus_client itself refuses a second family
        from prometheus_client import Counter

        Counter("redis_tb_allowed", "dup", ["limiter", "policy"])


async def test_lease_gauge_and_expired_counter(redis_server: RedisServer) -> None:
    """SPEC M2 against the module: the gauge is up at a grant and down when the lease
    ends (N4), the counter counts a release answered 0 (the lease had expired), and the
    limiter's stats say the same; window and hold calls against the real module too."""
    registry = CollectorRegistry()
    lim = RateLimiter(
        AsyncClient.from_url(redis_server.url, timeout=5), timeout=5,
        metrics=PrometheusMetrics(registry, limiter="api"),
    )
    await lim.client.redis.flushall()
    conc = [Policy("conc", Limit.in_flight(2, lease=30)), Policy("ip", Limit(10, 1e-6))]
    a = await lim.check(Req(), conc, **PEER)
    b = await lim.check(Req(), conc, **PEER)
    refused = await lim.check(Req(), conc, **PEER)
    assert a.lease is not None and b.lease is not None and a.lease.id != b.lease.id
    assert refused.violated == ("conc",) and refused.lease is None
    assert [round(r.remaining, 3) for r in b.results] == [0, 8]  # the slot, and the bucket charged twice

    def v(name: str) -> float:
        return value(registry, name, limiter="api", policy="conc")

    assert v("redis_tb_leases_in_flight") == 2 and lim.stats.leases_in_flight == 2
    await a.finish()
    await a.finish()  # once (N4)
    assert v("redis_tb_leases_in_flight") == 1 and v("redis_tb_leases_expired_total") == 0
    await lim.client.redis.execute_command("TB.RELEASE", b.lease.key, b.lease.id)  # type: ignore[no-untyped-call]  # as if it expired
    assert not await b.renew()  # lost: counted, renewals stop, no release (N5)
    await b.finish()
    assert v("redis_tb_leases_in_flight") == 0 and v("redis_tb_leases_expired_total") == 1
    assert (lim.stats.leases_in_flight, lim.stats.leases_expired) == (0, 1)

    window = await lim.check(Req(), [Policy("login", Limit.window(2, 3600))], **PEER)
    assert window.allowed and window.results[0].remaining == 1 and window.results[0].window == 3600
    assert not await window.refund()  # F3: a window is never refunded

    held = await lim.check(Req(), [Policy("llm", Limit(1000, 1e-9), settle_later=True)], **PEER)
    hold = await held.hold("llm", 100)
    assert hold.allowed and hold.id is not None and hold.remaining == pytest.approx(900, abs=1e-3)
    settled = await hold.settle(30)
    assert settled.settled and settled.charged == pytest.approx(-70)
    assert not (await hold.settle(30)).settled  # once (G3)
    assert (lim.stats.holds, lim.stats.settlements) == (1, 1)
    await lim.aclose()


def test_sync_leases_and_holds_against_the_module(redis_server: RedisServer) -> None:
    lim = SyncRateLimiter(Client.from_url(redis_server.url, timeout=5), timeout=5)
    lim.client.redis.flushall()
    conc = [Policy("conc", Limit.in_flight(1, lease=30))]
    a = lim.check(Req(), conc, **PEER)
    assert a.lease is not None and not lim.check(Req(), conc, **PEER).allowed
    assert a.renew_sync()
    a.finish_sync()
    assert lim.check(Req(), conc, **PEER).allowed  # the slot is back
    held = lim.check(Req(), [Policy("llm", Limit(1000, 1e-9), settle_later=True)], **PEER)
    hold = held.hold_sync("llm", 100)
    assert hold.settle_sync(150).charged == pytest.approx(50)
    lim.close()
