//! The store's backend (SPEC E): the module's TB.* commands, or the same calls to the
//! script library (clients/lua) where the module cannot be loaded. This file holds what a
//! choice is and how a module command becomes the scripts' call; the calls themselves
//! (the choice, the loads, E3's reload and E4's retry) are `scripts.rs`'.
//!
//! - E1: [`BackendSetting`], `auto` (the default), `module` or `scripts`;
//! - E2: [`ScriptsVia`], `FCALL tb_<word>` or `EVALSHA <sha>` with the word, keys declared;
//! - E4: [`fresh_id`], 8 bytes of the operating system's CSPRNG (`getrandom`);
//! - E5: the client's clock as `now` / `NOW`;
//! - E6: [`Chosen::line`].

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// SPEC E1: the `backend` setting (`auto`, the default, chooses by `COMMAND INFO tb.take`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackendSetting {
    /// The module where `COMMAND INFO tb.take` finds it, else the scripts.
    #[default]
    Auto,
    /// The module; a server without it fails the start with U1's line.
    Module,
    /// The scripts; the module is not asked for.
    Scripts,
}

impl BackendSetting {
    /// The setting's word: `auto`, `module` or `scripts`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendSetting::Auto => "auto",
            BackendSetting::Module => "module",
            BackendSetting::Scripts => "scripts",
        }
    }
}

impl FromStr for BackendSetting {
    type Err = String;

    /// `auto`, `module` or `scripts`; anything else is an error naming the value.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(BackendSetting::Auto),
            "module" => Ok(BackendSetting::Module),
            "scripts" => Ok(BackendSetting::Scripts),
            other => Err(format!(
                "backend must be auto, module or scripts, got {other:?}"
            )),
        }
    }
}

impl fmt::Display for BackendSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// SPEC E6: the backend in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The module's TB.* commands.
    Module,
    /// The script library (clients/lua).
    Scripts,
}

impl Backend {
    /// `module` or `scripts` (`stats.backend`, the gauge's `backend` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Module => "module",
            Backend::Scripts => "scripts",
        }
    }
}

/// SPEC E2: how the scripts are called.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptsVia {
    /// `FCALL tb_<word>` of the Functions library (`FUNCTION LOAD REPLACE`).
    Functions,
    /// `EVALSHA <sha>` of tb.lua (`SCRIPT LOAD`).
    Evalsha,
}

/// A backend chosen (SPEC E1): how a client's TB.* calls reach the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The module or the scripts.
    pub backend: Backend,
    /// How the scripts are called (`None` for the module).
    pub via: Option<ScriptsVia>,
    /// SPEC E5: the server refuses TIME in scripts; the client's clock goes with each call.
    pub client_clock: bool,
    /// SPEC E6's line, `redis-tb: backend <module|scripts> on <host:port> (<why>)`.
    pub line: String,
}

impl Chosen {
    /// The module, `why` as E6 words it (`tb.take found`, `forced by backend=module`).
    pub(crate) fn module(addr: &str, why: &str) -> Chosen {
        Chosen {
            backend: Backend::Module,
            via: None,
            client_clock: false,
            line: format!("redis-tb: backend module on {addr} ({why})"),
        }
    }

    /// The scripts, called `via`, with the client's clock or not.
    pub fn scripts(addr: &str, why: &str, via: ScriptsVia, client_clock: bool) -> Chosen {
        let how = match via {
            ScriptsVia::Functions => "Functions",
            ScriptsVia::Evalsha => "EVALSHA",
        };
        let clock = if client_clock { ", client clock" } else { "" };
        Chosen {
            backend: Backend::Scripts,
            via: Some(via),
            client_clock,
            line: format!("redis-tb: backend scripts on {addr} ({why}, {how}{clock})"),
        }
    }
}

/// SPEC E4: 8 bytes of the operating system's CSPRNG as 16 lowercase hex digits, fresh for
/// every call.
pub(super) fn fresh_id() -> Result<String, Error> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| Error::NoRandomness {
        reason: e.to_string(),
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The error reply's text (`NOSCRIPT No matching script...`), `None` for any other error.
pub(super) fn reply_text(e: &Error) -> Option<String> {
    let Error::Server { source, .. } = e else {
        return None;
    };
    Some(match (source.code(), source.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_owned(),
        (None, Some(detail)) => detail.to_owned(),
        (None, None) => source.to_string(),
    })
}

/// SPEC E3: the library is gone from the server (`NOSCRIPT`, `ERR Function not found`).
pub(super) fn library_gone(e: &Error) -> bool {
    reply_text(e)
        .is_some_and(|t| t.starts_with("NOSCRIPT") || t.starts_with("ERR Function not found"))
}

/// SPEC E4: the grant's id is already held on the key.
pub(super) fn id_held(e: &Error) -> bool {
    reply_text(e).is_some_and(|t| t.starts_with("ERR ID is already held on this key"))
}

/// The command word of a module command (`TB.TAKE` -> `TAKE`), upper case.
pub(super) fn word(name: &[u8]) -> String {
    let upper = String::from_utf8_lossy(name).to_ascii_uppercase();
    match upper.strip_prefix("TB.") {
        Some(w) => w.to_owned(),
        None => upper,
    }
}

/// Whether the scripts' call for `word` is a grant that carries `ID` (E4).
pub(super) fn is_grant(word: &str) -> bool {
    word == "ACQUIRE" || word == "HOLD"
}

const MODES: [&[u8]; 3] = [b"FIXED", b"SLIDING", b"LOG"];

/// clients/lua/README.md's calling convention for `args` (the module's words, name
/// first): the keys declared, the module's arguments after them, `ID id` after a grant's
/// (E4), and with `now` (E5) the client's clock as the positional `now` of a bucket or
/// window call that has none, or `NOW t` after a lease or hold call's arguments.
pub(super) fn script_args(
    via: ScriptsVia,
    args: &[Vec<u8>],
    id: Option<&str>,
    now: Option<&str>,
) -> Vec<Vec<u8>> {
    let Some((name, rest)) = args.split_first() else {
        return Vec::new();
    };
    let w = word(name);
    let count = |i: usize| -> usize {
        rest.get(i)
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    let take_at = if w == "ACQUIRE" && rest.get(3).is_some_and(|t| t.eq_ignore_ascii_case(b"TAKE"))
    {
        count(4).min(rest.len().saturating_sub(5))
    } else {
        0
    };
    let (keys, mut tail): (Vec<&[u8]>, Vec<Vec<u8>>) = if take_at > 0 {
        // TB.ACQUIRE key limit lease_ms TAKE numkeys bucket... triples: the buckets are
        // keys after the lease key, and numkeys is the call's.
        let mut keys = vec![rest[0].as_slice()];
        keys.extend(rest[5..5 + take_at].iter().map(Vec::as_slice));
        let mut tail: Vec<Vec<u8>> = rest[1..4].to_vec();
        tail.extend(rest[5 + take_at..].iter().cloned());
        (keys, tail)
    } else if w == "MTAKE" {
        let n = count(0).min(rest.len().saturating_sub(1));
        (
            rest[1..1 + n].iter().map(Vec::as_slice).collect(),
            rest[1 + n..].to_vec(),
        )
    } else {
        match rest.split_first() {
            Some((key, tail)) => (vec![key.as_slice()], tail.to_vec()),
            None => (Vec::new(), Vec::new()),
        }
    };
    if let Some(id) = id {
        tail.push(b"ID".to_vec());
        tail.push(id.as_bytes().to_vec());
    }
    if let Some(now) = now {
        add_now(&w, keys.len(), &mut tail, now);
    }
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(tail.len() + keys.len() + 4);
    match via {
        ScriptsVia::Functions => {
            out.push(if w == "PEEK" {
                b"FCALL_RO".to_vec()
            } else {
                b"FCALL".to_vec()
            });
            out.push(format!("tb_{}", w.to_ascii_lowercase()).into_bytes());
        }
        ScriptsVia::Evalsha => {
            out.push(b"EVALSHA".to_vec());
            out.push(super::lua::sha().as_bytes().to_vec());
        }
    }
    out.push(keys.len().to_string().into_bytes());
    out.extend(keys.iter().map(|k| k.to_vec()));
    if via == ScriptsVia::Evalsha {
        out.push(w.into_bytes());
    }
    out.extend(tail);
    out
}

/// SPEC E5: the client's clock in `tail` (the arguments after the keys): `NOW t` after a
/// lease or hold call's, else the positional `now` where the call has none (before
/// TB.WINDOW's mode word).
fn add_now(w: &str, keys: usize, tail: &mut Vec<Vec<u8>>, now: &str) {
    let peek_of = w == "PEEK"
        && tail
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"LEASES") || a.eq_ignore_ascii_case(b"HOLDS"));
    if peek_of || matches!(w, "ACQUIRE" | "RELEASE" | "RENEW" | "HOLD" | "SETTLE") {
        tail.push(b"NOW".to_vec());
        tail.push(now.as_bytes().to_vec());
        return;
    }
    // The arguments a call has without its `now`.
    let without = match w {
        "TAKE" | "REFUND" => 3,
        "PEEK" => 2,
        "RESERVE" => 4,
        "MTAKE" => 3 * keys,
        "WINDOW" => 3,
        _ => return,
    };
    if w == "WINDOW" {
        let has_mode = tail
            .last()
            .is_some_and(|m| MODES.iter().any(|x| m.eq_ignore_ascii_case(x)));
        let numbers = tail.len() - usize::from(has_mode);
        if numbers == without {
            tail.insert(numbers, now.as_bytes().to_vec());
        }
    } else if tail.len() == without {
        tail.push(now.as_bytes().to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<Vec<u8>> {
        s.split(' ').map(|w| w.as_bytes().to_vec()).collect()
    }

    fn text(v: &[Vec<u8>]) -> String {
        v.iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn module_commands_become_the_library_calls() {
        let f = ScriptsVia::Functions;
        let cases = [
            ("TB.TAKE k 10 1 1", None, None, "FCALL tb_take 1 k 10 1 1"),
            (
                "TB.TAKE k 10 1 1",
                None,
                Some("5.5"),
                "FCALL tb_take 1 k 10 1 1 5.5",
            ),
            (
                "TB.MTAKE 2 a b 1 2 3 4 5 6",
                None,
                Some("7"),
                "FCALL tb_mtake 2 a b 1 2 3 4 5 6 7",
            ),
            ("TB.PEEK k 10 1", None, None, "FCALL_RO tb_peek 1 k 10 1"),
            (
                "TB.PEEK k LEASES",
                None,
                Some("7"),
                "FCALL_RO tb_peek 1 k LEASES NOW 7",
            ),
            (
                "TB.WINDOW k 5 60 1 SLIDING",
                None,
                Some("7"),
                "FCALL tb_window 1 k 5 60 1 7 SLIDING",
            ),
            (
                "TB.WINDOW k 5 60 1 3 SLIDING",
                None,
                Some("7"),
                "FCALL tb_window 1 k 5 60 1 3 SLIDING",
            ),
            (
                "TB.RESERVE k 10 1 1 2",
                None,
                Some("7"),
                "FCALL tb_reserve 1 k 10 1 1 2 7",
            ),
            (
                "TB.ACQUIRE k 2 300",
                Some("ab"),
                Some("7"),
                "FCALL tb_acquire 1 k 2 300 ID ab NOW 7",
            ),
            (
                "TB.ACQUIRE k 2 300 TAKE 2 a b 1 2 3 4 5 6",
                Some("ab"),
                None,
                "FCALL tb_acquire 3 k a b 2 300 TAKE 1 2 3 4 5 6 ID ab",
            ),
            (
                "TB.RELEASE k ab",
                None,
                Some("7"),
                "FCALL tb_release 1 k ab NOW 7",
            ),
            (
                "TB.SETTLE k 10 1 ab 3 4",
                None,
                None,
                "FCALL tb_settle 1 k 10 1 ab 3 4",
            ),
        ];
        for (module, id, now, want) in cases {
            assert_eq!(
                text(&script_args(f, &words(module), id, now)),
                want,
                "{module}"
            );
        }
        let e = script_args(
            ScriptsVia::Evalsha,
            &words("TB.HOLD k 10 1 4 60000"),
            Some("ab"),
            None,
        );
        assert_eq!(
            text(&e),
            format!(
                "EVALSHA {} 1 k HOLD 10 1 4 60000 ID ab",
                super::super::lua::sha()
            )
        );
    }

    #[test]
    fn ids_are_fresh_lowercase_hex() {
        let a = fresh_id().unwrap();
        let b = fresh_id().unwrap();
        assert_eq!(a.len(), 16);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        );
        assert_ne!(a, b);
    }

    #[test]
    fn settings_parse_and_name_a_bad_value() {
        assert_eq!("scripts".parse(), Ok(BackendSetting::Scripts));
        assert_eq!(BackendSetting::default(), BackendSetting::Auto);
        let err = "Module".parse::<BackendSetting>().unwrap_err();
        assert!(err.contains("\"Module\""), "{err}");
    }
}
