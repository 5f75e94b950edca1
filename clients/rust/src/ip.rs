//! Who is asking: the client address behind trusted proxies (walking `X-Forwarded-For` or
//! `Forwarded` from right to left), and the identity it is limited under (IPv6 grouped by
//! prefix, /64 by default).
//!
//! The rules are SPEC A1-A9 (the walk, the entry syntax of `X-Forwarded-For` and
//! `Forwarded`, mapped addresses, zone ids, the identity) and C5 (trusted proxies).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use crate::error::BuildError;

/// Which header trusted proxies write the client chain into.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (the default).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:443"`.
    Forwarded,
}

impl std::str::FromStr for ForwardedHeader {
    type Err = BuildError;

    /// `x-forwarded-for` or `forwarded`, any case (SPEC C6).
    fn from_str(s: &str) -> Result<Self, BuildError> {
        if s.eq_ignore_ascii_case("x-forwarded-for") {
            Ok(ForwardedHeader::XForwardedFor)
        } else if s.eq_ignore_ascii_case("forwarded") {
            Ok(ForwardedHeader::Forwarded)
        } else {
            Err(BuildError::InvalidForwardedHeader(s.to_owned()))
        }
    }
}

impl ForwardedHeader {
    fn name(self) -> HeaderName {
        match self {
            ForwardedHeader::XForwardedFor => HeaderName::from_static("x-forwarded-for"),
            ForwardedHeader::Forwarded => http::header::FORWARDED,
        }
    }
}

/// The client address and the identity it is limited under; the layer puts it in the
/// request extensions before running key functions, so they (and handlers) can read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIp {
    /// The client address (after the trusted-proxy walk).
    pub addr: IpAddr,
    /// The identity: the address, or its network for grouped prefixes (`2001:db8::/64`).
    pub identity: String,
}

/// How the client address is found and grouped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientIpConfig {
    trusted: Vec<IpNet>,
    header: ForwardedHeader,
    v4_prefix: u8,
    v6_prefix: u8,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        ClientIpConfig {
            trusted: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
            v4_prefix: 32,
            v6_prefix: 64,
        }
    }
}

impl ClientIpConfig {
    /// No trusted proxy, `X-Forwarded-For`, IPv4 /32, IPv6 /64.
    pub fn new() -> Self {
        ClientIpConfig::default()
    }

    /// The proxies whose forwarding headers are believed: CIDRs (`10.0.0.0/8`,
    /// `2001:db8::/32`) or single addresses.
    pub fn trusted_proxies<I, S>(mut self, cidrs: I) -> Result<Self, BuildError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.trusted = cidrs
            .into_iter()
            .map(|s| parse_cidr(s.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// Which header to walk (default `X-Forwarded-For`).
    pub fn header(mut self, header: ForwardedHeader) -> Self {
        self.header = header;
        self
    }

    /// IPv4 addresses are limited per `/prefix` network (default 32: per address).
    pub fn ipv4_prefix(mut self, prefix: u8) -> Result<Self, BuildError> {
        if prefix > 32 {
            return Err(BuildError::InvalidPrefix(prefix));
        }
        self.v4_prefix = prefix;
        Ok(self)
    }

    /// IPv6 addresses are limited per `/prefix` network (default 64: one customer site;
    /// an attacker holds a whole /64 and rotates through it).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Result<Self, BuildError> {
        if prefix > 128 {
            return Err(BuildError::InvalidPrefix(prefix));
        }
        self.v6_prefix = prefix;
        Ok(self)
    }

    /// Whether `ip` is inside a trusted CIDR.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }

    /// The client address for a request from `peer` carrying `headers`.
    pub fn client_addr(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut last_good = peer;
        let lines: Vec<_> = headers.get_all(self.header.name()).iter().collect();
        for line in lines.iter().rev() {
            let Ok(text) = line.to_str() else {
                return last_good;
            };
            let entries = match self.header {
                ForwardedHeader::XForwardedFor => {
                    text.split(',').map(parse_xff_entry).collect::<Vec<_>>()
                }
                ForwardedHeader::Forwarded => split_quoted(text, ',')
                    .into_iter()
                    .map(parse_forwarded_element)
                    .collect(),
            };
            for entry in entries.into_iter().rev() {
                let Some(ip) = entry else {
                    return last_good;
                };
                let ip = canonical(ip);
                if !self.is_trusted(ip) {
                    return ip;
                }
                last_good = ip;
            }
        }
        last_good
    }

    /// The identity `ip` is limited under: the address itself at a full-length prefix,
    /// else `network/prefix` (`2001:db8:0:1::/64`, `203.0.113.0/24`).
    pub fn identity(&self, ip: IpAddr) -> String {
        match canonical(ip) {
            IpAddr::V4(v4) if self.v4_prefix >= 32 => ipv4_text(v4),
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(u32::from(32 - self.v4_prefix))
                    .unwrap_or(0);
                format!(
                    "{}/{}",
                    Ipv4Addr::from(u32::from(v4) & mask),
                    self.v4_prefix
                )
            }
            IpAddr::V6(v6) if self.v6_prefix >= 128 => v6.to_string(),
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(u32::from(128 - self.v6_prefix))
                    .unwrap_or(0);
                format!(
                    "{}/{}",
                    Ipv6Addr::from(u128::from(v6) & mask),
                    self.v6_prefix
                )
            }
        }
    }

    /// [`ClientIpConfig::client_addr`] and [`ClientIpConfig::identity`] together.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> ClientIp {
        let addr = self.client_addr(peer, headers);
        ClientIp {
            addr,
            identity: self.identity(addr),
        }
    }
}

/// `a.b.c.d`, as `Ipv4Addr`'s `Display` writes it, without the formatting machinery (this
/// runs for every request keyed by client address).
fn ipv4_text(v4: Ipv4Addr) -> String {
    let mut s = String::with_capacity(15);
    for (i, o) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if o >= 100 {
            s.push(char::from(b'0' + o / 100));
        }
        if o >= 10 {
            s.push(char::from(b'0' + (o / 10) % 10));
        }
        s.push(char::from(b'0' + o % 10));
    }
    s
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is IPv4.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// A peer address as text, a zone id dropped (SPEC A8: `fe80::1%eth0` is `fe80::1`).
pub fn parse_peer(s: &str) -> Option<IpAddr> {
    let addr = s.split_once('%').map_or(s, |(a, _)| a);
    addr.parse::<IpAddr>().ok()
}

/// A trusted proxy (SPEC C5): an address or CIDR, host bits masked, IPv4-mapped ranges
/// unmapped (`::ffff:10.0.0.0/104` is `10.0.0.0/8`).
pub fn parse_trusted_proxy(s: &str) -> Result<IpNet, BuildError> {
    let invalid = || BuildError::InvalidProxy(s.to_owned());
    let net = s
        .parse::<IpNet>()
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| invalid())?
        .trunc();
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.network().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map(IpNet::V4)
                .map_err(|_| invalid()),
            None => Ok(net),
        },
        _ => Ok(net),
    }
}

fn parse_cidr(s: &str) -> Result<IpNet, BuildError> {
    parse_trusted_proxy(s)
}

/// One `X-Forwarded-For` entry (SPEC A4): `a.b.c.d`, `a.b.c.d:port`, an IPv6 address,
/// `[IPv6]` or `[IPv6]:port`; anything else is malformed.
fn parse_xff_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim_matches([' ', '\t']);
    if let Some(rest) = entry.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(valid_port)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(ip);
    }
    let (addr, port) = entry.split_once(':')?;
    if !valid_port(port) {
        return None;
    }
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// Splits on `sep` outside double-quoted strings (which may hold `\"` escapes).
fn split_quoted(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The `for=` node of one `Forwarded` element, or `None` if the element has none, has two,
/// or its node is not an address (`unknown`, `_hidden`, garbage).
fn parse_forwarded_element(element: &str) -> Option<IpAddr> {
    let mut found = None;
    for pair in split_quoted(element, ';') {
        let pair = pair.trim_matches([' ', '\t']);
        let (name, value) = pair.split_once('=')?;
        if !name.eq_ignore_ascii_case("for") {
            continue;
        }
        if found.is_some() {
            return None;
        }
        // An IPv6 node is quoted and bracketed (SPEC A5): `for=[2001:db8::1]` and
        // `for=2001:db8::1` are malformed.
        let quoted = value.starts_with('"');
        let node = unquote(value)?;
        if node.starts_with('[') && !quoted {
            return None;
        }
        found = Some(parse_forwarded_node(&node)?);
    }
    found
}

fn unquote(value: &str) -> Option<String> {
    let Some(inner) = value.strip_prefix('"') else {
        return (!value.contains('"')).then(|| value.to_owned());
    };
    let inner = inner.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    Some(out)
}

/// `192.0.2.1`, `192.0.2.1:8080`, `[2001:db8::1]`, `[2001:db8::1]:443`.
fn parse_forwarded_node(node: &str) -> Option<IpAddr> {
    if let Some(rest) = node.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(valid_port)) {
            return None;
        }
        return addr.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    let (addr, port) = match node.split_once(':') {
        Some((addr, port)) => (addr, Some(port)),
        None => (node, None),
    };
    if port.is_some_and(|p| !valid_port(p)) {
        return None;
    }
    addr.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

fn valid_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn headers(name: &str, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    fn behind(proxies: &[&str]) -> ClientIpConfig {
        ClientIpConfig::new().trusted_proxies(proxies).unwrap()
    }

    #[test]
    fn untrusted_peer_ignores_a_spoofed_x_forwarded_for() {
        let cfg = behind(&["10.0.0.0/8"]);
        let h = headers("x-forwarded-for", &["203.0.113.9"]);
        assert_eq!(cfg.client_addr(ip("198.51.100.7"), &h), ip("198.51.100.7"));
        // No trusted proxy at all: the peer, whatever the header says.
        let h = headers("x-forwarded-for", &["1.1.1.1, 2.2.2.2"]);
        assert_eq!(
            ClientIpConfig::new().client_addr(ip("127.0.0.1"), &h),
            ip("127.0.0.1")
        );
    }

    #[test]
    fn trusted_peer_uses_the_rightmost_untrusted_entry_not_the_leftmost() {
        let cfg = behind(&["10.0.0.0/8", "192.168.1.1"]);
        // The client forged "6.6.6.6"; our proxy appended the real address it saw.
        let h = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.9, 10.1.2.3"]);
        assert_eq!(cfg.client_addr(ip("192.168.1.1"), &h), ip("203.0.113.9"));
        let h = headers("x-forwarded-for", &["203.0.113.9"]);
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("203.0.113.9"));
    }

    #[test]
    fn every_entry_trusted_uses_the_leftmost() {
        let cfg = behind(&["10.0.0.0/8"]);
        let h = headers("x-forwarded-for", &["10.0.0.5, 10.0.0.6"]);
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("10.0.0.5"));
        // No header from a trusted peer: the peer.
        assert_eq!(
            cfg.client_addr(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn several_header_lines_are_one_list_in_order() {
        let cfg = behind(&["10.0.0.0/8"]);
        let h = headers("x-forwarded-for", &["6.6.6.6, 203.0.113.9", "10.0.0.9"]);
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("203.0.113.9"));
    }

    #[test]
    fn malformed_entries_stop_the_walk_at_the_last_good_address() {
        let cfg = behind(&["10.0.0.0/8"]);
        for (value, expect) in [
            ("203.0.113.9, garbage", "10.0.0.1"),
            ("203.0.113.9, 10.0.0.7, nonsense", "10.0.0.1"),
            ("nonsense, 10.0.0.7", "10.0.0.7"),
            ("203.0.113.9,,10.0.0.7", "10.0.0.7"),
            ("", "10.0.0.1"),
            ("203.0.113.9:1234", "203.0.113.9"),
            ("[2001:db8::1]:443", "2001:db8::1"),
            ("203.0.113.9:", "10.0.0.1"),
            ("unknown", "10.0.0.1"),
            ("fe80::1%eth0", "10.0.0.1"),
            ("999.1.1.1", "10.0.0.1"),
            ("203.0.113.9 , \t10.0.0.7 ", "203.0.113.9"),
        ] {
            let h = headers("x-forwarded-for", &[value]);
            assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip(expect), "{value:?}");
        }
        // Bytes that are not visible ASCII: the header is not believed.
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"203.0.113.9\xff").unwrap(),
        );
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_header_is_walked_right_to_left() {
        let cfg = behind(&["10.0.0.0/8"]).header(ForwardedHeader::Forwarded);
        let h = headers(
            "forwarded",
            &[
                r#"for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, For=10.0.0.3;by=10.0.0.1"#,
            ],
        );
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("2001:db8:cafe::17"));
        let h = headers("forwarded", &[r#"for="192.0.2.43:47011""#]);
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("192.0.2.43"));
        // X-Forwarded-For is not read when Forwarded is configured.
        let h = headers("x-forwarded-for", &["203.0.113.9"]);
        assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn forwarded_malformed_or_hidden_nodes_stop_the_walk() {
        let cfg = behind(&["10.0.0.0/8"]).header(ForwardedHeader::Forwarded);
        for (value, expect) in [
            ("for=unknown", "10.0.0.1"),
            ("for=_hidden, for=10.0.0.8", "10.0.0.8"),
            ("proto=https", "10.0.0.1"),
            ("for=1.2.3.4;for=5.6.7.8", "10.0.0.1"),
            (r#"for="[2001:db8::1"#, "10.0.0.1"),
            ("for=[2001:db8::1]:x", "10.0.0.1"),
            ("for=2001:db8::1", "10.0.0.1"),
            ("for=\"1.2.3.4", "10.0.0.1"),
            ("for=203.0.113.9;proto=\"a,b\"", "203.0.113.9"),
        ] {
            let h = headers("forwarded", &[value]);
            assert_eq!(cfg.client_addr(ip("10.0.0.1"), &h), ip(expect), "{value:?}");
        }
    }

    #[test]
    fn ipv6_is_grouped_by_64_by_default() {
        let cfg = ClientIpConfig::new();
        assert_eq!(cfg.identity(ip("2001:db8::1")), "2001:db8::/64");
        assert_eq!(cfg.identity(ip("2001:db8::2")), "2001:db8::/64");
        assert_eq!(cfg.identity(ip("2001:db8:0:1::2")), "2001:db8:0:1::/64");
        assert_eq!(cfg.identity(ip("203.0.113.9")), "203.0.113.9");
        let cfg = cfg.ipv6_prefix(48).unwrap().ipv4_prefix(24).unwrap();
        assert_eq!(cfg.identity(ip("2001:db8:1:2::3")), "2001:db8:1::/48");
        assert_eq!(cfg.identity(ip("203.0.113.9")), "203.0.113.0/24");
        let cfg = cfg.ipv6_prefix(128).unwrap().ipv4_prefix(0).unwrap();
        assert_eq!(cfg.identity(ip("2001:db8::1")), "2001:db8::1");
        assert_eq!(cfg.identity(ip("203.0.113.9")), "0.0.0.0/0");
        assert!(ClientIpConfig::new().ipv6_prefix(129).is_err());
        assert!(ClientIpConfig::new().ipv4_prefix(33).is_err());
    }

    #[test]
    fn ipv4_mapped_ipv6_is_ipv4() {
        let cfg = behind(&["10.0.0.0/8"]);
        assert_eq!(cfg.identity(ip("::ffff:203.0.113.9")), "203.0.113.9");
        // A mapped peer inside a trusted IPv4 network is trusted.
        let h = headers("x-forwarded-for", &["::ffff:203.0.113.9"]);
        assert_eq!(
            cfg.client_addr(ip("::ffff:10.0.0.1"), &h),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn trusted_ipv6_proxies_and_bad_cidrs() {
        let cfg = behind(&["2001:db8:ffff::/48"]);
        let h = headers("x-forwarded-for", &["2001:db8::1"]);
        assert_eq!(
            cfg.client_addr(ip("2001:db8:ffff::1"), &h),
            ip("2001:db8::1")
        );
        assert_eq!(
            ClientIpConfig::new().trusted_proxies(["10.0.0.0/33"]),
            Err(BuildError::InvalidProxy("10.0.0.0/33".into()))
        );
        assert!(
            ClientIpConfig::new()
                .trusted_proxies(["proxy.local"])
                .is_err()
        );
        // Host bits are dropped: 10.1.2.3/8 is 10.0.0.0/8.
        assert!(behind(&["10.1.2.3/8"]).is_trusted(ip("10.200.0.1")));
    }

    #[test]
    fn ipv4_text_is_the_display_text() {
        for a in [0u8, 1, 9, 10, 42, 99, 100, 109, 199, 200, 255] {
            for b in [0u8, 7, 10, 100, 255] {
                let ip = Ipv4Addr::new(a, b, 255 - a, b.wrapping_mul(3));
                assert_eq!(ipv4_text(ip), ip.to_string());
            }
        }
    }
}
