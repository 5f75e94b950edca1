"""GET /stream against careless and hostile clients (issue 39, rows L3, L4, L5, L7), on
every example of the manifest: query bounds (a 400 before anything is held), backpressure
(a client that stops reading stops the writer), a client that goes away (the stream stops
and its hold is settled with what was sent), a slow client next to a live one (renewals
on time), max_duration (SPEC N7) and a full hold table (G6).

These checks read Redis directly where the HTTP answer cannot show what happened (a hold
still live, a lease still counted): by SPEC K1's keys with the default prefix (C4), the
identity being the client address the suite sends (`rl:tokens:<address>`,
`rl:streams:<address>`; neither policy is per-route). TB.PEEK reads them without changing
anything (docs/commands.md): the module's command, or the script library's PEEK where the
suite's Redis has no module (HTTP_BACKEND=scripts; `RedisServer.tb`).
"""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from conftest import PROXY, Stack
from test_examples import (
    DEMO,
    POLICIES,
    ROUTES,
    STREAM,
    limit,
    policy_item,
    problem_pairs,
    scrape,
    stream_path,
    until,
)
from tbhttp import http, prom, tcpq
from tbhttp.stream import Stream

case = pytest.mark.case
SPEC_STREAM = STREAM["stream"]
BOUNDS: dict[str, list[int]] = SPEC_STREAM["bounds"]
IN_FLIGHT = POLICIES["streams"]["in_flight"]
SLOTS = int(IN_FLIGHT["limit"])
LEASE = float(IN_FLIGHT["lease_seconds"])
MAX_DURATION = float(IN_FLIGHT["max_duration_seconds"])
HEALTHZ = ROUTES["GET /healthz"]
HOLD_TABLE = 100  # SPEC G6: the module's live holds per bucket
ABANDONED = 4  # clients that leave a stream of the longest allowed size after one event (L4)
SMALL_WINDOW = 4096  # bytes of receive buffer for a client that stops reading (Stream rcvbuf)
ETHERNET_MSS = 1460  # the segment size such a client announces (test_stream_backpressure says why)
CLIENT_READ_BUFFER = 8192  # what http.client may have read past the head (io.DEFAULT_BUFFER_SIZE)
WRITE_AHEAD = 64 * 1024  # the most a server may buffer for a client that reads nothing


def key(policy: str, ip: str) -> str:
    """SPEC K1 without a tag, default prefix: `rl:<policy>:<identity>` (the suite's
    addresses need no K2 escaping)."""
    return f"rl:{policy}:{ip}"


def holds(stack: Stack, ip: str) -> int:
    """The live holds on the client's 'tokens' bucket (TB.PEEK key HOLDS: [holds, amount, ms])."""
    reply = stack.redis.tb("TB.PEEK", key("tokens", ip), "HOLDS")
    assert isinstance(reply, list), reply
    return int(reply[0])  # type: ignore[arg-type]


def leases(stack: Stack, ip: str) -> int:
    """The live leases of the client's 'streams' slots (TB.PEEK key LEASES: [in_flight, ms])."""
    reply = stack.redis.tb("TB.PEEK", key("streams", ip), "LEASES")
    assert isinstance(reply, list), reply
    return int(reply[0])  # type: ignore[arg-type]


def spent(stack: Stack, ip: str) -> float:
    """What the client's 'tokens' bucket is down by: capacity - remaining (TB.PEEK key
    capacity rate; its refill during a check, 1000 an hour, is under a token a second)."""
    capacity, rate = limit("tokens")
    reply = stack.redis.tb("TB.PEEK", key("tokens", ip), repr(capacity), repr(rate))
    assert isinstance(reply, list), reply
    return capacity - float(reply[1])  # type: ignore[arg-type]


def open_stream(stack: Stack, ip: str, *, rcvbuf: int | None = None, mss: int | None = None, timeout: float = 30,
                **q: int | str) -> Stream:
    return Stream(stack.app.base, stream_path(**q), headers={"x-forwarded-for": ip}, source=PROXY, timeout=timeout,
                  rcvbuf=rcvbuf, mss=mss)


def event_bytes(tokens: int) -> int:
    """The size of the manifest's stream body for `tokens` events ('data: ...' and a blank line each)."""
    return sum(len(SPEC_STREAM["event"].format(i=i)) + 2 for i in range(1, tokens + 1)) + len(SPEC_STREAM["done"]) + 2


def close_all(streams: list[Stream]) -> None:
    for s in streams:
        s.close()


# -- L3: the query's bounds ------------------------------------------------------------


def bad_values(lo: int, hi: int) -> list[str]:
    """Outside [lo, hi], or not a whole number: above the maximum, below the minimum,
    negative, a fraction."""
    return list(dict.fromkeys([str(hi + 1), str(lo - 1), "-1", "2.5"]))


@case("stream_bad_query")
def test_stream_bad_query(stack: Stack) -> None:
    """L3: a query value outside the manifest's bounds, or not a whole number, is the
    manifest's 400 with its exact problem body, answered before anything is held (the
    client's 'tokens' bucket is never touched); the bounds themselves are accepted."""
    bad = SPEC_STREAM["bad_query"]
    wrong = []
    for name, (lo, hi) in BOUNDS.items():
        for value in bad_values(lo, hi):
            ip = stack.fresh_ip()  # its own 'ip' bucket: ten a second per address
            try:
                s = Stream(stack.app.base, stream_path(**{name: value}), headers={"x-forwarded-for": ip},
                           source=PROXY, timeout=2)
            except TimeoutError:
                # taken as valid: a stream whose head waits for its first event
                # (delay_ms=10001 before it, on Fastify)
                wrong.append(f"{name}={value}: no head within 2 s (a stream)")
                continue
            try:
                # taken as valid, a stream may run for minutes: its head is enough
                text = s.rest().decode(errors="replace") if s.head.status == bad["status"] else "(a stream)"
            finally:
                s.close()
            body = bad["body"].replace("{name}", name).replace("{min}", str(lo)).replace("{max}", str(hi))
            got = (s.head.status, s.head.media_type(), text, stack.redis.call("EXISTS", key("tokens", ip)) == 1)
            if got != (bad["status"], bad["content_type"], body, False):
                wrong.append(f"{name}={value}: {got[0]} {got[1]} {got[2][:120]!r}, a 'tokens' bucket made: {got[3]}")
    assert not wrong, "not the manifest's bad_query 400 (or a hold was taken):\n" + "\n".join(wrong)
    # the edges are in range: no events, the longest delay (never waited: it is between
    # events), the smallest estimate
    edges = {"tokens": BOUNDS["tokens"][0], "delay_ms": BOUNDS["delay_ms"][1], "max_tokens": BOUNDS["max_tokens"][0]}
    s = open_stream(stack, stack.fresh_ip(), **edges)
    try:
        assert s.head.status == 200, s.head.describe()
        assert s.event() == SPEC_STREAM["done"]
    finally:
        s.close()


# -- L3: backpressure and a client that goes away --------------------------------------


@case("stream_backpressure")
def test_stream_backpressure(stack: Stack) -> None:
    """L3: the longest allowed stream, opened by as many clients as one client has slots
    (each its own address, so that one stream's settlement does not refuse the next
    one's hold), each reading nothing past the head: the server writes no further ahead
    of its client than a bounded buffer of its own, and /healthz is answered within a
    second each time meanwhile.

    How far ahead it wrote: after a second, a stream whose hold is still live has a
    writer waiting for its client (good); one whose hold was settled counted every
    event as sent, and of those bytes the kernel holds what /proc/net/tcp shows (the
    server socket's tx_queue, the client socket's rx_queue) plus at most the client's
    read buffer (8 KB); the rest is in the server's own memory, and must be under
    WRITE_AHEAD (64 KB, asyncio's high-water mark, the largest of the servers' own
    write buffers: Node's is 16 KB, hyper's a few).

    Why not the process's RSS, as first planned: a stream is at most 189 KB (the
    manifest's bound on tokens), and over loopback the kernel takes most or all of it,
    so what a server keeps for a stalled client is tens of KB; RSS moves by far more for
    other reasons (Express and Fastify grew by 0 to 57 MB for 8 such streams depending
    on whether V8's heap had grown before, the same on a Node server that waits for
    'drain'). The client announces a 4 KB window and an Ethernet MSS (1460), so the
    kernel's share stays near 110 KB (its send buffer autotunes from the MSS; 4 MB with
    loopback's 64 KB MSS): the stream does not fit, and a writer has to wait."""
    tokens = BOUNDS["tokens"][1]
    clients = [stack.fresh_ip() for _ in range(SLOTS)]
    streams: list[Stream] = []
    wrong: list[str] = []
    try:
        for ip in clients:
            streams.append(open_stream(stack, ip, rcvbuf=SMALL_WINDOW, mss=ETHERNET_MSS, tokens=tokens, delay_ms=0))
            assert streams[-1].head.status == 200, streams[-1].head.describe()
        slowest = 0.0
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            t = time.monotonic()
            r = http.request(stack.app.base, "GET", HEALTHZ["path"], timeout=5)
            slowest = max(slowest, time.monotonic() - t)
            assert r.status == HEALTHZ["status"], r.describe()
            time.sleep(0.05)
        for ip, s in zip(clients, streams):
            if holds(stack, ip) == 1:
                continue  # its writer waits for the client
            client, server = s.endpoints()
            tx, _ = tcpq.queues(server, client)
            _, rx = tcpq.queues(client, server)
            sent = event_bytes(round(spent(stack, ip)))
            ahead = sent - (tx + rx + CLIENT_READ_BUFFER)
            if ahead > WRITE_AHEAD:
                wrong.append(
                    f"{ip}: settled as sent {sent} bytes of events while the kernel held {tx} + {rx}:"
                    f" {ahead} bytes were in the server's memory, waiting for a client that reads nothing")
    finally:
        close_all(streams)
    assert not wrong, "a stream written without waiting for its client (backpressure):\n" + "\n".join(wrong)
    assert slowest < 1.0, f"/healthz took {slowest:.2f} s while the streams waited"


@case("stream_disconnect")
def test_stream_disconnect(stack: Stack) -> None:
    """L3, L4: a client that goes away mid-stream stops it: within about a second (1.5 s
    here, for a busy machine) its hold on 'tokens' is settled (TB.PEEK HOLDS: no live
    hold), and the bucket was charged what was sent: at least the events the client read,
    at most those plus what the stream could send until the settlement was seen (one
    event per delay_ms), never the whole stream."""
    tokens, delay_ms, read = BOUNDS["tokens"][1], 10, 20
    ip = stack.fresh_ip()
    s = open_stream(stack, ip, tokens=tokens, delay_ms=delay_ms)
    try:
        assert s.head.status == 200, s.head.describe()
        for _ in range(read):
            assert s.event() is not None
        assert holds(stack, ip) == 1, "the stream runs without a hold"
        last_read = time.monotonic()
    finally:
        s.close()
    gone = time.monotonic()
    deadline = gone + 1.5
    while holds(stack, ip) and time.monotonic() < deadline:
        time.sleep(0.02)
    settled = time.monotonic()
    assert holds(stack, ip) == 0, f"the hold is still live {settled - gone:.1f} s after the client went away"
    most = read + (settled - last_read) * 1000 / delay_ms + 2
    charged = spent(stack, ip)
    assert read - 1 <= charged <= most, (
        f"charged {charged:.1f} tokens for a client that read {read} events and left"
        f" (at most {most:.0f} could be sent before the settlement; the stream has {tokens})")


# -- L4: one slow or gone client does not starve another's renewal --------------------


@case("stream_renewal_not_starved")
def test_stream_renewal_not_starved(stack: Stack) -> None:
    """L4: while a client holds one slot with a stream it does not read and other clients
    abandon the longest allowed streams right after their first event, that client's
    second stream, 2.25 leases long (under max_duration), keeps its lease: every half
    second a third stream of that client is refused by 'streams' and TB.PEEK LEASES
    counts 2 (a renewal that came late lost the lease: 1); the second stream completes.
    (The stalled stream is slow, 100 events a second: over loopback the kernel takes a
    whole stream of the allowed size, so a fast one would end, and free its slot, at
    once; its tokens stay under the bucket's capacity for the check's length.)"""
    delay_ms = 100
    duration = min(2.25 * LEASE, MAX_DURATION - 1)
    n = math.ceil(duration * 1000 / delay_ms) + 1
    ip = stack.fresh_ip()
    opened: list[Stream] = []
    wrong: list[str] = []
    events: list[str] = []
    try:
        stalled = open_stream(stack, ip, tokens=BOUNDS["tokens"][1], delay_ms=10)
        opened.append(stalled)
        assert stalled.head.status == 200, stalled.head.describe()
        for _ in range(ABANDONED):
            gone = open_stream(stack, stack.fresh_ip(), rcvbuf=SMALL_WINDOW, mss=ETHERNET_MSS, tokens=BOUNDS["tokens"][1], delay_ms=0)
            opened.append(gone)
            assert gone.head.status == 200, gone.head.describe()
            assert gone.event() is not None
            gone.close()
        start = time.monotonic()
        live = open_stream(stack, ip, tokens=n, delay_ms=delay_ms)
        opened.append(live)
        assert live.head.status == 200, live.head.describe()
        next_check = start + 0.5
        while (e := live.event()) is not None:
            events.append(e)
            now = time.monotonic()
            # not in the last events: the stream then ends, and frees its slot, any moment
            if now < next_check or len(events) > n - 3:
                continue
            next_check = now + 0.5
            at = f"{now - start:.1f} s"
            third = stack.call("GET", stream_path(tokens=1), ip=ip)
            if third.status != 429 or dict(problem_pairs(third)).get("violated_policies") != ["streams"]:
                wrong.append(f"{at}: a third stream got {third.status} {third.body[:100]!r}")
            if (n_leases := leases(stack, ip)) != SLOTS:
                wrong.append(f"{at}: TB.PEEK LEASES counts {n_leases}")
        took = time.monotonic() - start
    finally:
        close_all(opened)
    expected = [SPEC_STREAM["event"].format(i=i) for i in range(1, n + 1)] + [SPEC_STREAM["done"]]
    assert events == expected, f"the second stream ended after {len(events)} of {len(expected)} events"
    assert took >= 2 * LEASE, f"the stream took {took:.1f} s, not past two leases: the check means nothing"
    assert not wrong, "the running stream lost its lease while a client stalled and others left:\n" + "\n".join(wrong)


# -- L5 / N7: max_duration ---------------------------------------------------------------


@case("stream_max_duration")
def test_stream_max_duration(stack: Stack) -> None:
    """L5, SPEC N7: streams whose client reads nothing, every slot of one client, are
    ended at max_duration: the server closes each connection no sooner than
    max_duration after the request and within a second after it, the leases are gone
    (TB.PEEK LEASES), a new stream is admitted, and redis_tb_leases_timed_out_total
    counts each (the api limiter's label, policy 'streams')."""
    label = next(lim["metrics_limiter_label"] for lim in DEMO["limiters"] if "streams" in lim["policies"])
    delay_ms = 100
    tokens = BOUNDS["tokens"][1]
    assert tokens * delay_ms / 1000 > 2 * MAX_DURATION, "the stream would end by itself"
    ip = stack.fresh_ip()
    before = scrape(stack)
    sent = time.monotonic()
    streams: list[Stream] = []
    closed: dict[int, float] = {}
    try:
        for _ in range(SLOTS):
            streams.append(open_stream(stack, ip, tokens=tokens, delay_ms=delay_ms))
            assert streams[-1].head.status == 200, streams[-1].head.describe()
        headed = time.monotonic()
        deadline = headed + MAX_DURATION + 1.0
        while len(closed) < SLOTS and time.monotonic() < deadline:
            for i, s in enumerate(streams):
                if i not in closed and s.closed_by_server():
                    closed[i] = time.monotonic() - sent
            time.sleep(0.05)
    finally:
        close_all(streams)
    assert len(closed) == SLOTS, (
        f"{SLOTS - len(closed)} of {SLOTS} streams still open {deadline - sent:.1f} s after the request"
        f" (max_duration {MAX_DURATION} s); closed: {closed}")
    assert min(closed.values()) >= MAX_DURATION - 0.05, f"closed before max_duration: {closed}"
    until(lambda: True if leases(stack, ip) == 0 else None, "the timed-out leases released", seconds=1)
    again = open_stream(stack, ip, tokens=1)
    try:
        assert again.head.status == 200, again.head.describe()
    finally:
        again.close()
    after = scrape(stack)
    name = "redis_tb_leases_timed_out_total"
    grown = prom.value(after, name, limiter=label, policy="streams") - prom.value(before, name, limiter=label, policy="streams")
    assert grown == SLOTS, f"{name}{{limiter={label!r},policy='streams'}} went up by {grown}, not {SLOTS}"


# -- L7 / G6: a full hold table ------------------------------------------------------------


@case("stream_hold_table_full")
def test_stream_hold_table_full(stack: Stack) -> None:
    """L7, SPEC G6: with the client's 'tokens' bucket holding the module's 100 live holds
    (made directly with TB.HOLD on the key the example uses, or the scripts' HOLD), GET /stream is a 429 naming
    'tokens' with P1's body and Retry-After (G2), never a stream without a hold."""
    ip = stack.fresh_ip()
    capacity, rate = limit("tokens")
    # each at the price of a place (SPEC G1: a hold costs at least capacity / 100): the
    # table is full whether the module charges tiny holds that much or refuses them
    place = capacity / HOLD_TABLE
    for i in range(HOLD_TABLE):
        reply: Any = stack.redis.tb("TB.HOLD", key("tokens", ip), repr(capacity), repr(rate), repr(place), "60000")
        assert isinstance(reply, list) and reply[0] == 1, (i, reply)
    r = stack.call("GET", stream_path(tokens=1), ip=ip)
    assert r.status == 429, f"a stream past a full hold table:\n{r.describe()}"
    body = dict(problem_pairs(r))
    assert body["violated_policies"] == ["tokens"], r.body
    wait = r.header("retry-after")
    assert body["retry_after"] is not None and wait is not None, r.describe()
    assert int(wait) == max(1, math.ceil(body["retry_after"])), r.describe()
    assert body["detail"] == f"rate limit exceeded for 'tokens': retry after {wait} s", r.body
    assert policy_item("tokens") in r.policy(), r.describe()
    assert holds(stack, ip) == HOLD_TABLE
