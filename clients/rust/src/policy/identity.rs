//! Keys (SPEC I1, I2): whose bucket a request draws from, a key function's answer, and a
//! header's identity.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use http::HeaderName;
use http::request::Parts;

use crate::ip::ClientIp;

/// A boxed, sendable future (what async key functions return).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

type SyncKeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type AsyncKeyFn = dyn Fn(&Parts) -> BoxFuture<Option<String>> + Send + Sync;
/// Whose bucket a request draws from. A key function returning `None` skips the policy
/// for that request (for example a per-user policy on an anonymous request).
#[derive(Clone)]
pub struct Key(KeyKind);

#[derive(Clone)]
enum KeyKind {
    ClientIp,
    Header(HeaderName),
    Fixed(Arc<str>),
    Sync(Arc<SyncKeyFn>),
    Async(Arc<AsyncKeyFn>),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            KeyKind::ClientIp => f.write_str("Key::client_ip()"),
            KeyKind::Header(h) => write!(f, "Key::header({h})"),
            KeyKind::Fixed(s) => write!(f, "Key::fixed({s:?})"),
            KeyKind::Sync(_) => f.write_str("Key::from_fn(..)"),
            KeyKind::Async(_) => f.write_str("Key::from_async_fn(..)"),
        }
    }
}

impl Key {
    /// The client address (peer, or behind trusted proxies), IPv6 grouped by prefix. The
    /// default. `None` when the server does not provide `ConnectInfo<SocketAddr>` (serve with
    /// `into_make_service_with_connect_info::<SocketAddr>()`).
    pub fn client_ip() -> Key {
        Key(KeyKind::ClientIp)
    }

    /// The value of a request header (an API key), SPEC I2: its lines joined with `, `,
    /// optional white space trimmed; absent or empty skips the policy; bytes >= 0x80 are
    /// kept (and escaped in the key, SPEC K2); a control byte is a 400.
    pub fn header(name: HeaderName) -> Key {
        Key(KeyKind::Header(name))
    }

    /// One bucket for everybody (a global limit). An empty value is a configuration error
    /// (SPEC I3), found when the limiter is built.
    pub fn fixed(identity: &str) -> Key {
        Key(KeyKind::Fixed(Arc::from(identity)))
    }

    /// A synchronous function of the request head (read extensions set by auth, headers...).
    pub fn from_fn<F>(f: F) -> Key
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Key(KeyKind::Sync(Arc::new(f)))
    }

    /// An async function of the request head: copy what it needs out of `&Parts`, then
    /// return a future (a user id from a session store, a tenant from a token).
    pub fn from_async_fn<F, Fut>(f: F) -> Key
    where
        F: Fn(&Parts) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Option<String>> + Send + 'static,
    {
        Key(KeyKind::Async(Arc::new(move |parts| Box::pin(f(parts)))))
    }

    /// The identity for this request (SPEC I1, I2), borrowed from the request (or the key)
    /// when it can be.
    pub async fn identity<'a>(&'a self, parts: &'a Parts) -> Identity<'a> {
        match &self.0 {
            KeyKind::Async(f) => owned_identity(f(parts).await),
            _ => self.identity_now(parts, None),
        }
    }

    /// The identity without an await: `resolved` is what an async key's function gave
    /// for this request (the limiter awaits those first, so that a request with no async
    /// key builds its plan without a future of its own).
    pub(crate) fn identity_now<'a>(
        &'a self,
        parts: &'a Parts,
        resolved: Option<Option<String>>,
    ) -> Identity<'a> {
        match &self.0 {
            KeyKind::ClientIp => match parts.extensions.get::<ClientIp>() {
                Some(c) => Identity::Value(Cow::Borrowed(c.identity.as_bytes())),
                None => Identity::Skip,
            },
            KeyKind::Header(name) => {
                header_identity(parts.headers.get_all(name).iter().map(|v| v.as_bytes()))
            }
            KeyKind::Fixed(s) => Identity::Value(Cow::Borrowed(s.as_bytes())),
            KeyKind::Sync(f) => owned_identity(f(parts)),
            KeyKind::Async(_) => owned_identity(resolved.flatten()),
        }
    }

    /// The async key function's answer for this request; `None` for any other key.
    pub(crate) async fn resolve_async(&self, parts: &Parts) -> Option<Option<String>> {
        match &self.0 {
            KeyKind::Async(f) => Some(f(parts).await),
            _ => None,
        }
    }

    /// A [`Key::fixed`]'s identity.
    pub(crate) fn fixed_identity(&self) -> Option<&[u8]> {
        match &self.0 {
            KeyKind::Fixed(s) => Some(s.as_bytes()),
            _ => None,
        }
    }

    pub(crate) fn is_async(&self) -> bool {
        matches!(self.0, KeyKind::Async(_))
    }

    /// The header a [`Key::header`] reads.
    pub(crate) fn header_name(&self) -> Option<&HeaderName> {
        match &self.0 {
            KeyKind::Header(name) => Some(name),
            _ => None,
        }
    }

    /// `Key::fixed("")` (SPEC I3).
    pub(crate) fn is_empty_fixed(&self) -> bool {
        matches!(&self.0, KeyKind::Fixed(s) if s.is_empty())
    }

    pub(crate) fn uses_client_ip(&self) -> bool {
        matches!(self.0, KeyKind::ClientIp)
    }
}

/// A key function's answer: absent or empty skips the policy (SPEC I1).
fn owned_identity<'a>(s: Option<String>) -> Identity<'a> {
    match s {
        Some(s) if !s.is_empty() => Identity::Value(Cow::Owned(s.into_bytes())),
        _ => Identity::Skip,
    }
}

/// What a key gives for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity<'a> {
    /// No identity: the policy is skipped for this request (SPEC I1).
    Skip,
    /// The identity's bytes (escaped and bounded by the key builder, SPEC K2, K3).
    Value(Cow<'a, [u8]>),
    /// A header identity with a control byte: a bad request (SPEC I2).
    BadRequest,
}

/// A control byte of SPEC I2: 0x00-0x08, 0x0A-0x1F, 0x7F (a tab is kept).
fn control(b: u8) -> bool {
    (b < 0x20 && b != b'\t') || b == 0x7f
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// The identity of a header's lines, in the order received (SPEC I2): joined with `, `,
/// optional white space trimmed at both ends; none or empty skips; a control byte in any
/// line is [`Identity::BadRequest`].
pub fn header_identity<'a, I>(lines: I) -> Identity<'a>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut lines = lines.into_iter();
    let Some(first) = lines.next() else {
        return Identity::Skip;
    };
    if first.iter().any(|&b| control(b)) {
        return Identity::BadRequest;
    }
    let mut joined: Option<Vec<u8>> = None;
    for line in lines {
        if line.iter().any(|&b| control(b)) {
            return Identity::BadRequest;
        }
        let buf = joined.get_or_insert_with(|| first.to_vec());
        buf.extend_from_slice(b", ");
        buf.extend_from_slice(line);
    }
    let value = match joined {
        None => Cow::Borrowed(trim_ows(first)),
        Some(buf) => Cow::Owned(trim_ows(&buf).to_vec()),
    };
    if value.is_empty() {
        Identity::Skip
    } else {
        Identity::Value(value)
    }
}
