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

/// Which bytes of a tag or identity are written `%XX` (SPEC K2): all but visible ASCII
/// (0x21..0x7E), and `%`, `{`, `}`. A table, so that the byte loops below are a load and
/// a test a byte.
static ESCAPED: [bool; 256] = escape_table(b"%{}");

/// The same for a route, which also escapes `:` and `@` (SPEC K2).
static ESCAPED_IN_ROUTE: [bool; 256] = escape_table(b"%{}:@");

const fn escape_table(also: &[u8]) -> [bool; 256] {
    let mut table = [true; 256];
    let mut b = 0x21;
    while b <= 0x7e {
        table[b] = false;
        b += 1;
    }
    let mut i = 0;
    while i < also.len() {
        table[also[i] as usize] = true;
        i += 1;
    }
    table
}

/// Whether `rule` escapes byte `b`.
#[inline]
fn escapes(rule: &[bool; 256], b: u8) -> bool {
    rule[usize::from(b)]
}

/// The escaped length of `bytes` under `rule` (`%XX` for an escaped byte).
#[inline]
fn escaped_len(bytes: &[u8], rule: &[bool; 256]) -> usize {
    let n = bytes.iter().filter(|&&b| escapes(rule, b)).count();
    bytes.len().saturating_add(n.saturating_mul(2))
}

/// Appends a run of bytes that need no escaping: visible ASCII (0x21..0x7E) by the tables
/// above. Checked here all the same (a word at a time, cheaper than a UTF-8 validation of
/// a short run); a byte that is not ASCII, which no caller passes, is written `%XX`.
#[inline]
fn push_run(out: &mut String, run: &[u8]) {
    if run.is_ascii() {
        // SAFETY: ASCII bytes are valid UTF-8.
        out.push_str(unsafe { std::str::from_utf8_unchecked(run) });
    } else {
        for &b in run {
            push_hex_escape(out, b);
        }
    }
}

/// Appends `%XX` for byte `b`.
#[inline]
fn push_hex_escape(out: &mut String, b: u8) {
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0x0f)]));
}

/// Appends `bytes` escaped under `rule` (SPEC K2), the plain runs between escaped bytes
/// copied whole.
fn push_escaped(out: &mut String, bytes: &[u8], rule: &[bool; 256]) {
    let mut rest = bytes;
    while let Some(i) = rest.iter().position(|&b| escapes(rule, b)) {
        let Some((run, tail)) = rest.split_at_checked(i) else {
            break;
        };
        push_run(out, run);
        let Some((&b, tail)) = tail.split_first() else {
            break;
        };
        push_hex_escape(out, b);
        rest = tail;
    }
    push_run(out, rest);
}

/// Appends a tag or identity: escaped, or `%h` + 32 hex digits of the SHA-256 of its raw
/// bytes when the escaped form is longer than [`MAX_PART`] (SPEC K3; `%h` never comes
/// out of K2, since `%` is always escaped).
fn push_part(out: &mut String, bytes: &[u8]) {
    // The common case: short, and nothing to escape.
    if bytes.len() <= MAX_PART && !bytes.iter().any(|&b| escapes(&ESCAPED, b)) {
        push_run(out, bytes);
        return;
    }
    if escaped_len(bytes, &ESCAPED) <= MAX_PART {
        push_escaped(out, bytes, &ESCAPED);
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
    let bytes = route.as_bytes();
    let mut out = String::with_capacity(1 + escaped_len(bytes, &ESCAPED_IN_ROUTE));
    out.push('@');
    push_escaped(&mut out, bytes, &ESCAPED_IN_ROUTE);
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
    fn escape_tables_are_the_k2_rule_for_every_byte() {
        for b in 0..=255u8 {
            let visible = (0x21..=0x7e).contains(&b);
            let identity = !visible || matches!(b, b'%' | b'{' | b'}');
            let route = identity || matches!(b, b':' | b'@');
            assert_eq!(escapes(&ESCAPED, b), identity, "byte {b:#04x}");
            assert_eq!(
                escapes(&ESCAPED_IN_ROUTE, b),
                route,
                "byte {b:#04x} in a route"
            );
        }
        // Runs between escaped bytes are copied whole, an escape at either end included.
        assert_eq!(key("rl", None, "u", None, b" a%b "), "rl:u:%20a%25b%20");
        assert_eq!(key("rl", None, "u", None, b"Bearer x"), "rl:u:Bearer%20x");
    }

    #[test]
    fn prefixes() {
        assert!(valid_prefix("myapp:rl"));
        for bad in ["", "{rl}", "a b", "rl\n", &"a".repeat(65)] {
            assert!(!valid_prefix(bad), "{bad:?}");
        }
    }
}
