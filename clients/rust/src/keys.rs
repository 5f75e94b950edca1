//! The one key builder (SPEC K1-K5): every path that makes a bucket key (the limiter, its
//! refunds, the deny cache) goes through a policy's `Head`, prepared once when the limiter
//! is built; [`key`] is the same builder for one key.
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

/// How many bytes of `bytes` `rule` escapes.
#[inline]
fn escaped_count(bytes: &[u8], rule: &[bool; 256]) -> usize {
    bytes.iter().map(|&b| usize::from(escapes(rule, b))).sum()
}

/// A key (or route segment) under construction, as bytes that are always UTF-8: it is
/// given whole `str`s (the prefix, the policy name, an escaped route) and single ASCII
/// bytes, and the unescaped bytes of a part are visible ASCII (both tables escape every
/// byte outside 0x21..0x7E); so it becomes a `String` without a UTF-8 check.
struct KeyBuf(Vec<u8>);

impl KeyBuf {
    fn with_capacity(n: usize) -> KeyBuf {
        KeyBuf(Vec::with_capacity(n))
    }

    fn push_str(&mut self, s: &str) {
        self.0.extend_from_slice(s.as_bytes());
    }

    fn push(&mut self, b: u8) {
        debug_assert!(b.is_ascii());
        self.0.push(b);
    }

    /// `bytes` escaped under `rule` (SPEC K2); `escaped` is their [`escaped_count`].
    fn push_escaped(&mut self, bytes: &[u8], rule: &[bool; 256], escaped: usize) {
        if escaped == 0 {
            // Visible ASCII only: copied whole.
            self.0.extend_from_slice(bytes);
            return;
        }
        self.0.reserve(bytes.len() + 2 * escaped);
        // The runs between escaped bytes are copied whole.
        let mut run = 0;
        for (i, &b) in bytes.iter().enumerate() {
            if escapes(rule, b) {
                self.0
                    .extend_from_slice(bytes.get(run..i).unwrap_or_default());
                self.0.extend_from_slice(&[
                    b'%',
                    HEX[usize::from(b >> 4)],
                    HEX[usize::from(b & 0x0f)],
                ]);
                run = i + 1;
            }
        }
        self.0
            .extend_from_slice(bytes.get(run..).unwrap_or_default());
    }

    /// A tag or identity: escaped, or `%h` + 32 hex digits of the SHA-256 of its raw
    /// bytes when the escaped form is longer than [`MAX_PART`] (SPEC K3; `%h` never comes
    /// out of K2, since `%` is always escaped).
    fn push_part(&mut self, bytes: &[u8]) {
        let escaped = escaped_count(bytes, &ESCAPED);
        if bytes.len().saturating_add(escaped.saturating_mul(2)) <= MAX_PART {
            self.push_escaped(bytes, &ESCAPED, escaped);
            return;
        }
        let digest = Sha256::digest(bytes);
        self.0.extend_from_slice(b"%h");
        for &b in digest.iter().take(16) {
            self.0.push(HEX_LOWER[usize::from(b >> 4)]);
            self.0.push(HEX_LOWER[usize::from(b & 0x0f)]);
        }
    }

    fn into_string(self) -> String {
        debug_assert!(std::str::from_utf8(&self.0).is_ok());
        // SAFETY: the buffer holds whole `str`s and ASCII bytes only (see the type's
        // comment), and their concatenation is valid UTF-8.
        unsafe { String::from_utf8_unchecked(self.0) }
    }
}

/// The escaped route segment `@<route>` (SPEC K1, K2, K5); routes are configuration, never
/// hashed.
pub fn route_segment(route: &str) -> String {
    let bytes = route.as_bytes();
    let escaped = escaped_count(bytes, &ESCAPED_IN_ROUTE);
    let mut out = KeyBuf::with_capacity(1 + bytes.len() + 2 * escaped);
    out.push(b'@');
    out.push_escaped(bytes, &ESCAPED_IN_ROUTE, escaped);
    out.into_string()
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
    /// A [`crate::Key::fixed`] policy's identity and its whole key without tag or route,
    /// built once: the key is the same on every request.
    fixed: Option<(Box<[u8]>, String)>,
}

impl Head {
    pub(crate) fn new(prefix: &str, policy: &str) -> Head {
        Head {
            prefix: prefix.to_owned(),
            policy: policy.to_owned(),
            plain: format!("{prefix}:{policy}:"),
            fixed: None,
        }
    }

    /// The same, for a policy whose identity is always `identity`.
    pub(crate) fn with_fixed(mut self, identity: Option<&[u8]>) -> Head {
        self.fixed = identity.map(|id| (Box::from(id), self.key(None, None, id)));
        self
    }

    /// The key; `route` is the escaped route segment (`@...`, from [`route_segment`]).
    pub(crate) fn key(&self, tag: Option<&[u8]>, route: Option<&str>, identity: &[u8]) -> String {
        let tag = tag.filter(|t| !t.is_empty());
        if let (Some((id, key)), None, None) = (&self.fixed, tag, route)
            && **id == *identity
        {
            return key.clone();
        }
        let mut out = KeyBuf::with_capacity(
            self.plain.len() + route.map_or(0, str::len) + identity.len().min(MAX_PART) + 2,
        );
        match (tag, route) {
            (None, None) => out.push_str(&self.plain),
            _ => {
                out.push_str(&self.prefix);
                out.push(b':');
                if let Some(tag) = tag {
                    out.push(b'{');
                    out.push_part(tag);
                    out.push_str("}:");
                }
                out.push_str(&self.policy);
                if let Some(route) = route {
                    out.push_str(route);
                }
                out.push(b':');
            }
        }
        out.push_part(identity);
        out.into_string()
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

    /// SPEC K2 and K3 written the plain way, one byte at a time.
    fn reference_part(bytes: &[u8], route: bool) -> String {
        let mut out = String::new();
        for &b in bytes {
            let visible = (0x21..=0x7e).contains(&b);
            let special = matches!(b, b'%' | b'{' | b'}') || (route && matches!(b, b':' | b'@'));
            if visible && !special {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        if !route && out.len() > MAX_PART {
            let digest = Sha256::digest(bytes);
            let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
            return format!("%h{hex}");
        }
        out
    }

    #[test]
    fn keys_match_the_rule_written_byte_by_byte() {
        // A small deterministic generator: lengths around the K3 bound, bytes from
        // every class (plain, escaped, >= 0x80, route-only specials).
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let alphabet: Vec<u8> = b"aZ09-_.:@%{} ~"
            .iter()
            .copied()
            .chain([0, 0x7f, 0x80, 0xc3, 0xff])
            .collect();
        for _ in 0..3000 {
            let len = usize::try_from(next() % 140).unwrap();
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 3 {
                    0 => u8::try_from(next() % 256).unwrap(),
                    _ => alphabet[usize::try_from(next()).unwrap() % alphabet.len()],
                })
                .collect();
            assert_eq!(
                key("rl", None, "p", None, &bytes),
                format!("rl:p:{}", reference_part(&bytes, false)),
                "{bytes:?}"
            );
            assert_eq!(
                key("rl", Some(&bytes), "p", None, b"x"),
                if bytes.is_empty() {
                    "rl:p:x".to_owned()
                } else {
                    format!("rl:{{{}}}:p:x", reference_part(&bytes, false))
                },
                "{bytes:?}"
            );
            if let Ok(text) = std::str::from_utf8(&bytes) {
                assert_eq!(
                    route_segment(text),
                    format!("@{}", reference_part(&bytes, true)),
                    "{text:?}"
                );
            }
        }
    }

    #[test]
    fn a_fixed_identity_has_its_key_built_once_and_the_same() {
        let head = Head::new("rl", "all").with_fixed(Some(b"every one"));
        assert_eq!(head.key(None, None, b"every one"), "rl:all:every%20one");
        // Another identity, a tag or a route is built as any other key.
        assert_eq!(head.key(None, None, b"other"), "rl:all:other");
        assert_eq!(
            head.key(Some(b"t"), None, b"every one"),
            "rl:{t}:all:every%20one"
        );
        assert_eq!(
            head.key(None, Some("@GET%20/x"), b"every one"),
            "rl:all@GET%20/x:every%20one"
        );
        assert_eq!(
            head.key(Some(b""), None, b"every one"),
            "rl:all:every%20one"
        );
    }

    #[test]
    fn prefixes() {
        assert!(valid_prefix("myapp:rl"));
        for bad in ["", "{rl}", "a b", "rl\n", &"a".repeat(65)] {
            assert!(!valid_prefix(bad), "{bad:?}");
        }
    }
}
