//! The one key builder (SPEC K1-K5): every path that makes a bucket key (the limiter, its
//! refunds, the deny cache) goes through [`KeyBuilder`].
//!
//! `<prefix>:` then `{<tag>}:` when the request has a hash tag, then `<policy>`, then
//! `@<route>` for a per-route policy, then `:<identity>`. Tag, route and identity are
//! escaped (SPEC K2) and a tag or identity longer than [`MAX_PART`] escaped bytes is
//! replaced by `%h` and 32 hex digits of its SHA-256 (SPEC K3).

use sha2::{Digest, Sha256};

use crate::error::BuildError;

/// The longest escaped identity or tag kept as it is (SPEC K3); longer ones are hashed.
pub const MAX_PART: usize = 128;

const HEX: &[u8; 16] = b"0123456789ABCDEF";
const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";

/// Whether the key prefix is valid (SPEC C4): `[A-Za-z0-9_.:-]{1,64}`.
pub fn valid_prefix(prefix: &str) -> bool {
    (1..=64).contains(&prefix.len())
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// Checks the key prefix (SPEC C4).
pub fn check_prefix(prefix: &str) -> Result<(), BuildError> {
    if valid_prefix(prefix) {
        Ok(())
    } else {
        Err(BuildError::InvalidPrefixText(prefix.to_owned()))
    }
}

/// Whether byte `b` of a tag or identity is written `%XX` (SPEC K2).
#[inline]
fn escaped(b: u8) -> bool {
    !(0x21..=0x7e).contains(&b) || matches!(b, b'%' | b'{' | b'}')
}

/// The same for a route, which also escapes `:` and `@` (SPEC K2).
#[inline]
fn escaped_in_route(b: u8) -> bool {
    escaped(b) || matches!(b, b':' | b'@')
}

/// The escaped length of `bytes` under `rule`.
#[inline]
fn escaped_len(bytes: &[u8], rule: fn(u8) -> bool) -> usize {
    bytes.iter().fold(0usize, |n, &b| {
        n.saturating_add(if rule(b) { 3 } else { 1 })
    })
}

/// Appends `bytes` as they are when `rule` escapes none of them (every byte is then visible
/// ASCII, 0x21..0x7E: valid UTF-8 as it is); `false`, appending nothing, otherwise.
fn push_plain(out: &mut String, bytes: &[u8], rule: fn(u8) -> bool) -> bool {
    if bytes.iter().any(|&b| rule(b)) {
        return false;
    }
    match std::str::from_utf8(bytes) {
        Ok(s) => {
            out.push_str(s);
            true
        }
        Err(_) => false,
    }
}

/// Appends `bytes` escaped under `rule` (SPEC K2): a fast copy when nothing needs escaping.
fn push_escaped(out: &mut String, bytes: &[u8], rule: fn(u8) -> bool) {
    if push_plain(out, bytes, rule) {
        return;
    }
    for &b in bytes {
        if rule(b) {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0x0f)]));
        } else {
            out.push(char::from(b));
        }
    }
}

/// Appends a tag or identity: escaped, or `%h` + 32 hex digits of the SHA-256 of its raw
/// bytes when the escaped form is longer than [`MAX_PART`] (SPEC K3; `%h` never comes
/// out of K2, since `%` is always escaped).
fn push_part(out: &mut String, bytes: &[u8]) {
    // The common case in one pass: short, and nothing to escape.
    if bytes.len() <= MAX_PART && push_plain(out, bytes, escaped) {
        return;
    }
    if escaped_len(bytes, escaped) <= MAX_PART {
        push_escaped(out, bytes, escaped);
        return;
    }
    let digest = Sha256::digest(bytes);
    out.push_str("%h");
    for &b in digest.iter().take(16) {
        out.push(char::from(HEX_LOWER[usize::from(b >> 4)]));
        out.push(char::from(HEX_LOWER[usize::from(b & 0x0f)]));
    }
}

/// The escaped route segment `@<route>` (SPEC K1, K2, K5); routes are configuration, never
/// hashed.
pub fn route_segment(route: &str) -> String {
    let mut out = String::with_capacity(1 + escaped_len(route.as_bytes(), escaped_in_route));
    out.push('@');
    push_escaped(&mut out, route.as_bytes(), escaped_in_route);
    out
}

/// The key of `(tag, policy, route, identity)` under `prefix` (SPEC K1-K4). An empty tag
/// is no tag (K4). `route` is `<METHOD> <template>` (K5) for a per-route policy.
pub fn key(
    prefix: &str,
    tag: Option<&[u8]>,
    policy: &str,
    route: Option<&str>,
    identity: &[u8],
) -> String {
    let route = route.map(route_segment);
    let head = Head::new(prefix, policy);
    head.key(tag, route.as_deref(), identity)
}

/// A policy's key pieces, prepared once when the limiter is built.
#[derive(Clone, Debug)]
pub(crate) struct Head {
    prefix: String,
    policy: String,
    /// `<prefix>:<policy>:`, the whole head of a key without tag or route.
    plain: String,
}

impl Head {
    pub(crate) fn new(prefix: &str, policy: &str) -> Head {
        Head {
            prefix: prefix.to_owned(),
            policy: policy.to_owned(),
            plain: format!("{prefix}:{policy}:"),
        }
    }

    /// The key; `route` is the escaped route segment (`@...`, from [`route_segment`]).
    pub(crate) fn key(&self, tag: Option<&[u8]>, route: Option<&str>, identity: &[u8]) -> String {
        let tag = tag.filter(|t| !t.is_empty());
        let mut out = String::with_capacity(
            self.plain.len() + route.map_or(0, str::len) + identity.len().min(MAX_PART) + 2,
        );
        match (tag, route) {
            (None, None) => out.push_str(&self.plain),
            _ => {
                out.push_str(&self.prefix);
                out.push(':');
                if let Some(tag) = tag {
                    out.push('{');
                    push_part(&mut out, tag);
                    out.push_str("}:");
                }
                out.push_str(&self.policy);
                if let Some(route) = route {
                    out.push_str(route);
                }
                out.push(':');
            }
        }
        push_part(&mut out, identity);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_identities_are_copied_and_odd_bytes_escaped() {
        assert_eq!(
            key("rl", None, "ip", None, b"203.0.113.9"),
            "rl:ip:203.0.113.9"
        );
        assert_eq!(key("rl", Some(b""), "u", None, b"a b"), "rl:u:a%20b");
        assert_eq!(key("rl", Some(b"{x}"), "u", None, b"a"), "rl:{%7Bx%7D}:u:a");
        assert_eq!(
            key("rl", None, "p", Some("GET /items/:id"), b"bob"),
            "rl:p@GET%20/items/%3Aid:bob"
        );
        assert_eq!(key("rl", None, "u", None, &[0xff]), "rl:u:%FF");
    }

    #[test]
    fn long_parts_are_hashed_and_bounded() {
        let long = vec![b'a'; 100_000];
        let k = key("rl", Some(&long), "u", None, &long);
        assert_eq!(k.len(), "rl:{}:u:".len() + 2 * 34);
        assert!(k.starts_with("rl:{%h"));
    }

    #[test]
    fn prefixes() {
        assert!(valid_prefix("myapp:rl"));
        for bad in ["", "{rl}", "a b", "rl\n", &"a".repeat(65)] {
            assert!(!valid_prefix(bad), "{bad:?}");
        }
    }
}
