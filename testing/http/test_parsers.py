"""The suite's own parsers: the structured-field list subset (SPEC H1), the Prometheus
text format, RESP2 replies and /proc/net/tcp's queues. Each case is one a wrong parser
would get wrong."""

from __future__ import annotations

import io
import math

import pytest

from tbhttp import prom, resp, sf, tcpq


def test_sf_the_spec_examples() -> None:
    assert sf.parse_list('"ip";q=10;w=1, "user";q=100;w=3600') == [("ip", {"q": 10, "w": 1}), ("user", {"q": 100, "w": 3600})]
    assert sf.parse_list('"ip";r=9;t=1') == [("ip", {"r": 9, "t": 1})]


def test_sf_several_lines_are_one_list_in_order() -> None:
    assert sf.parse_lines(['"ip";q=10;w=1', '"login";q=20;w=3600']) == [("ip", {"q": 10, "w": 1}), ("login", {"q": 20, "w": 3600})]
    assert sf.parse_lines([]) == []


def test_sf_white_space_and_escapes() -> None:
    assert sf.parse_list('  "a";q=1 ,\t"b" ') == [("a", {"q": 1}), ("b", {})]
    assert sf.parse_list('"a; b";q=1') == [("a; b", {"q": 1})]
    assert sf.parse_list(r'"x\"y\\z";q=0') == [('x"y\\z', {"q": 0})]
    assert sf.parse_list('"a";q=999999999999999') == [("a", {"q": 999_999_999_999_999})]
    assert sf.parse_list('"a";q=-3') == [("a", {"q": -3})]
    assert sf.parse_list('"a";q=1;q=2') == [("a", {"q": 2})]  # RFC 8941: the last one wins
    assert sf.parse_list('"a"; q=1') == [("a", {"q": 1})]  # SP after ';' is allowed


@pytest.mark.parametrize("bad", [
    "ip;q=10",            # a token, not an sf-string
    '"ip";q=1.5',         # a decimal
    '"ip";q',             # a boolean parameter
    '"ip";q=?1',          # a boolean value
    '"ip";Q=1',           # keys are lower case
    '"ip";q=1000000000000000',  # 16 digits
    '"ip";q=',            # no value
    '"ip" "user"',        # no comma
    '"ip",',              # trailing comma
    '"ip",,"user"',       # empty member
    '"ip',                # unterminated
    '"i\\p"',             # bad escape
    '"caf\u00e9"',        # not ASCII
    '("ip")',             # an inner list
    '"ip";q=1 ;w=2',      # SP before ';'
])
def test_sf_refuses_what_is_outside_the_subset(bad: str) -> None:
    with pytest.raises(ValueError):
        sf.parse_list(bad)


def test_prom_samples_labels_escapes() -> None:
    text = "\n".join([
        "# HELP redis_tb_allowed_total Requests admitted",
        "# TYPE redis_tb_allowed_total counter",
        'redis_tb_allowed_total{limiter="api",policy="ip"} 24.0',
        'redis_tb_allowed_total{policy="user",limiter="api",} 3',
        'redis_tb_redis_call_duration_seconds_bucket{limiter="api",le="+Inf"} 27',
        'redis_tb_redis_call_duration_seconds_count{limiter="api"} 27 1700000000000',
        'weird{v="a\\"b\\\\c\\nd"} NaN',
        "no_labels 1e3",
    ])
    s = prom.parse(text)
    assert prom.value(s, "redis_tb_allowed_total", limiter="api", policy="ip") == 24
    assert prom.value(s, "redis_tb_allowed_total", policy="user", limiter="api") == 3
    assert prom.value(s, "redis_tb_allowed_total", policy="search", limiter="api") == 0
    assert prom.total(s, "redis_tb_allowed_total", limiter="api") == 27
    assert prom.value(s, "redis_tb_redis_call_duration_seconds_bucket", limiter="api", le="+Inf") == 27
    assert prom.value(s, "redis_tb_redis_call_duration_seconds_count", limiter="api") == 27
    assert math.isnan(prom.value(s, "weird", v='a"b\\c\nd'))
    assert prom.value(s, "no_labels") == 1000


@pytest.mark.parametrize("bad", [
    'm{a="x"',            # unterminated labels
    'm{a=x} 1',           # unquoted value
    "m",                  # no value
    "m 1 2 3",            # too many fields
    '9m 1',               # bad name
    'm{a="x"} 1\nm{a="x"} 2',  # a repeated sample
])
def test_prom_refuses_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        prom.parse(bad)


def test_resp_replies_nested_nil_and_errors() -> None:
    def read(data: bytes) -> resp.Reply:
        return resp.read(io.BufferedReader(io.BytesIO(data)))

    # TB.HOLD's: an integer, bulk strings, a nil id (refused)
    assert read(b"*5\r\n:0\r\n$3\r\n-10\r\n$1\r\n2\r\n$3\r\n3.5\r\n$-1\r\n") == [0, b"-10", b"2", b"3.5", None]
    assert read(b"*2\r\n*1\r\n:1\r\n*0\r\n") == [[1], []]
    assert read(b"+OK\r\n") == "OK"
    err = read(b"-ERR the bucket has 100 outstanding holds\r\n")
    assert isinstance(err, resp.Error) and err == "ERR the bucket has 100 outstanding holds"
    assert read(b"$4\r\na\r\nb\r\n") == b"a\r\nb"  # a bulk string is read by length, not by line
    assert read(b"*-1\r\n") is None
    with pytest.raises(ConnectionError):
        read(b"*2\r\n:1\r\n")
    with pytest.raises(ConnectionError):
        read(b"$10\r\nshort\r\n")


def test_resp_encodes_bulk_strings() -> None:
    assert resp.encode("TB.PEEK", "k", 1000, 0.5) == b"*4\r\n$7\r\nTB.PEEK\r\n$1\r\nk\r\n$4\r\n1000\r\n$3\r\n0.5\r\n"
    assert resp.encode("SET", "k", "a b\r\n") == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\na b\r\n\r\n"


TCP_TABLE = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:1F90 0200007F:D431 01 0001ABCD:00000000 01:00000014 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0200007F:D431 0100007F:1F90 01 00000000:000015C8 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
"""


def test_tcp_queues_by_both_endpoints() -> None:
    server, client = ("127.0.0.1", 8080), ("127.0.0.2", 54321)
    assert tcpq.queues(server, client, TCP_TABLE) == (0x1ABCD, 0)  # not the listener's line
    assert tcpq.queues(client, server, TCP_TABLE) == (0, 0x15C8)
    with pytest.raises(LookupError):
        tcpq.queues(server, ("127.0.0.3", 54321), TCP_TABLE)


TCP6_TABLE = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000200007F:D431 01 00012345:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
"""


def test_tcp_queues_of_a_dual_stack_server_are_read_from_tcp6() -> None:
    """A Java server's end of an IPv4 connection is in /proc/net/tcp6 as ::ffff:127.0.0.1
    (the line above as the kernel wrote it for a dual-stack listener)."""
    server, client = ("127.0.0.1", 8080), ("127.0.0.2", 54321)
    assert tcpq.queues(server, client, TCP_TABLE + TCP6_TABLE) == (0x1ABCD, 0)
    assert tcpq.queues(server, client, TCP6_TABLE) == (0x12345, 0)
    with pytest.raises(LookupError):
        tcpq.queues(client, server, TCP6_TABLE)
