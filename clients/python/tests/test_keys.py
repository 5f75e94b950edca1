"""Who is the client: peer IP, trusted proxies (right to left), spoofing, IPv6
grouping, malformed headers."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from redis_tb import ClientIP
from redis_tb.keys import parse_address

PROXIES = ["10.0.0.0/8", "2001:db8:ffff::/48"]


def ident(peer: str | None, *xff: str, trusted: list[str] | None = None, **kw: object) -> str | None:
    return ClientIP(PROXIES if trusted is None else trusted, **kw).identity(peer, list(xff))  # type: ignore[arg-type]


def test_peer_ip_by_default_even_with_headers() -> None:
    assert ClientIP().identity("203.0.113.7", ["198.51.100.1"]) == "203.0.113.7"


def test_spoofed_header_from_an_untrusted_peer_is_ignored() -> None:
    assert ident("203.0.113.7", "1.1.1.1") == "203.0.113.7"
    assert ident("203.0.113.7", "1.1.1.1, 10.0.0.1") == "203.0.113.7"


def test_trusted_peer_walks_right_to_left_to_the_first_untrusted() -> None:
    assert ident("10.0.0.1", "198.51.100.9") == "198.51.100.9"
    # the leftmost entry is whatever the client wrote: never believed
    assert ident("10.0.0.1", "6.6.6.6, 198.51.100.9") == "198.51.100.9"
    assert ident("10.0.0.1", "6.6.6.6, 198.51.100.9, 10.1.2.3, 10.9.9.9") == "198.51.100.9"


def test_all_entries_trusted_uses_the_leftmost() -> None:
    assert ident("10.0.0.1", "10.0.0.5, 10.0.0.6") == "10.0.0.5"


def test_trusted_peer_without_header_is_the_client() -> None:
    assert ident("10.0.0.1") == "10.0.0.1"


def test_several_header_lines_form_one_list_in_order() -> None:
    assert ident("10.0.0.1", "6.6.6.6", "198.51.100.9, 10.0.0.2") == "198.51.100.9"


@pytest.mark.parametrize(
    "header, expected",
    [
        ("garbage", "10.0.0.1"),  # malformed rightmost: the peer
        ("198.51.100.9, not-an-ip", "10.0.0.1"),
        ("198.51.100.9, unknown", "10.0.0.1"),
        ("6.6.6.6, garbage, 10.0.0.7", "10.0.0.7"),  # stop at the last good (trusted) hop
        ("198.51.100.9, ,", "10.0.0.1"),  # empty entries are malformed
        ("300.1.1.1", "10.0.0.1"),
        ("198.51.100.9:abc", "10.0.0.1"),
        ("fe80::1%eth0", "10.0.0.1"),
        ("[198.51.100.9]", "10.0.0.1"),  # brackets are for IPv6
        ("[2001:db8::1", "10.0.0.1"),
        ("", "10.0.0.1"),
    ],
)
def test_malformed_entries_stop_the_walk_at_the_last_good_address(header: str, expected: str) -> None:
    assert ident("10.0.0.1", header) == expected


def test_ports_and_brackets_are_accepted() -> None:
    assert ident("10.0.0.1", "198.51.100.9:4711") == "198.51.100.9"
    assert ident("10.0.0.1", "[2001:db8:1:2::5]:443") == "2001:db8:1:2::/64"
    assert ident("10.0.0.1", " 198.51.100.9 ") == "198.51.100.9"


def test_ipv6_is_grouped_by_64_by_default() -> None:
    a = ClientIP().identity("2001:db8:1:2::1", [])
    b = ClientIP().identity("2001:db8:1:2:ffff:ffff:ffff:ffff", [])
    c = ClientIP().identity("2001:db8:1:3::1", [])
    assert a == b == "2001:db8:1:2::/64"
    assert c == "2001:db8:1:3::/64"


def test_prefixes_are_configurable() -> None:
    assert ClientIP(ipv6_prefix=48).identity("2001:db8:1:2::1", []) == "2001:db8:1::/48"
    assert ClientIP(ipv6_prefix=128).identity("2001:db8::1", []) == "2001:db8::1"
    assert ClientIP(ipv4_prefix=24).identity("203.0.113.7", []) == "203.0.113.0/24"


def test_ipv4_mapped_ipv6_is_ipv4() -> None:
    assert ClientIP().identity("::ffff:203.0.113.7", []) == "203.0.113.7"
    assert ClientIP(["203.0.113.0/24"]).identity("::ffff:203.0.113.7", ["198.51.100.1"]) == "198.51.100.1"
    assert ident("10.0.0.1", "::ffff:198.51.100.9") == "198.51.100.9"


def test_trusted_ipv6_proxy_walk() -> None:
    assert ident("2001:db8:ffff::1", "2001:db8:aaaa::7, 2001:db8:ffff::2") == "2001:db8:aaaa::/64"


def test_forwarded_header_walks_for_parameters() -> None:
    c = ClientIP(PROXIES, header="forwarded")
    assert c.identity("10.0.0.1", ['for=6.6.6.6, for=198.51.100.9;proto=https;by=10.0.0.1']) == "198.51.100.9"
    assert c.identity("10.0.0.1", ['for="[2001:db8:cafe::17]:4711"']) == "2001:db8:cafe::/64"
    assert c.identity("10.0.0.1", ['For="198.51.100.9:80"']) == "198.51.100.9"
    # a quoted comma does not split an element
    assert c.identity("10.0.0.1", ['for=198.51.100.9;note="a,b"']) == "198.51.100.9"


@pytest.mark.parametrize(
    "header",
    ["for=unknown", "for=_hidden", "proto=https", "for=", 'for="', "by=10.0.0.2"],
)
def test_forwarded_malformed_or_obfuscated_stops_at_the_peer(header: str) -> None:
    c = ClientIP(PROXIES, header="forwarded")
    assert c.identity("10.0.0.1", [f"for=198.51.100.1, {header}"]) == "10.0.0.1"


def test_forwarded_mode_ignores_x_forwarded_for() -> None:
    c = ClientIP(PROXIES, header="forwarded")
    req = Request({"type": "http", "client": ("10.0.0.1", 1), "headers": [(b"x-forwarded-for", b"198.51.100.9")]})
    assert c(req) == "10.0.0.1"


def test_unknown_or_unparseable_peer_has_no_identity() -> None:
    assert ClientIP().identity(None, []) is None
    assert ClientIP().identity("not-an-ip", ["1.2.3.4"]) is None
    req = Request({"type": "http", "client": None, "headers": []})
    assert ClientIP()(req) is None


def test_request_key_function_reads_peer_and_header_lines() -> None:
    req = Request(
        {
            "type": "http",
            "client": ("10.0.0.1", 5555),
            "headers": [(b"x-forwarded-for", b"6.6.6.6"), (b"x-forwarded-for", b"198.51.100.9")],
        }
    )
    assert ClientIP(PROXIES)(req) == "198.51.100.9"
    assert ClientIP()(req) == "10.0.0.1"


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        ClientIP(["not-a-cidr"])
    with pytest.raises(ValueError):
        ClientIP(ipv6_prefix=129)
    with pytest.raises(ValueError):
        ClientIP(header="x-real-ip")  # type: ignore[arg-type]


def test_parse_address_forms() -> None:
    assert str(parse_address("1.2.3.4")) == "1.2.3.4"
    assert str(parse_address("[::1]:80")) == "::1"
    assert parse_address("1.2.3.4:80:90") is None
    assert parse_address("[::1]x") is None


@pytest.mark.parametrize(
    "identity",
    ["a", "198.18.1.2", "2001:db8::/64", "a%b", "{x}", "a b", "x" * 128, "x" * 129, "é", "~|",
     "fe80::1%eth0", "tab\there", "\x7f", "!$&z"],
)
def test_the_inline_plain_check_agrees_with_bounded(identity: str) -> None:
    # SPEC K2, K3: the limiter's hot path uses is_plain where it would call bounded(); a
    # string it accepts must be its own key part, and one it refuses must not be. Both are
    # checked against the rule as written: 1 to 128 visible ASCII characters, no % { }.
    from redis_tb.keys import bounded, is_plain

    plain = 0 < len(identity) <= 128 and all(0x21 <= ord(c) <= 0x7E and c not in "%{}" for c in identity)
    assert (is_plain(identity) is not None) == plain
    assert (bounded(identity) == identity) == plain
