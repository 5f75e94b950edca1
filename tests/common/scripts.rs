//! The script backend (clients/lua): its sources, loading them into a server without the
//! module (SCRIPT LOAD, FUNCTION LOAD), and a module command (`TB.TAKE key ...`) turned
//! into the same call to the scripts, so one list of commands drives both backends.

use super::{Conn, Options, Reply, Server};

/// The library as EVAL runs it.
pub const LIBRARY: &str = include_str!("../../clients/lua/tb.lua");
/// The Functions build's entry (clients/lua/functions.lua).
pub const FUNCTIONS_ENTRY: &str = include_str!("../../clients/lua/functions.lua");
/// The line that starts tb.lua's EVAL entry: the library is everything above it.
pub const EVAL_ENTRY: &str = "-- EVAL entry:";

/// The Functions library built from `source` (tb.lua's text) as clients/lua/README.md says:
/// `#!lua name=tb`, the library part, functions.lua.
pub fn functions_library(source: &str) -> String {
    let end = source
        .find(EVAL_ENTRY)
        .expect("tb.lua has its EVAL entry line");
    format!("#!lua name=tb\n{}{}", &source[..end], FUNCTIONS_ENTRY)
}

/// How a call reaches a server.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// TB.* commands of the module.
    Module,
    /// EVALSHA of the script with this SHA.
    Eval(String),
    /// FCALL of the Functions library (FCALL_RO for TB.PEEK).
    Function,
}

/// The script's command word for a module command name (`TB.TAKE` -> `TAKE`).
fn word(name: &str) -> String {
    let upper = name.to_ascii_uppercase();
    upper.strip_prefix("TB.").unwrap_or(&upper).to_string()
}

impl Backend {
    /// `command` (the module's words: `TB.TAKE key capacity rate n [now]`, `TB.MTAKE
    /// numkeys key ... [now]`) as this backend's call.
    pub fn argv(&self, command: &[String]) -> Vec<String> {
        self.argv_with(command, None)
    }

    /// `argv`, with `id` as the id a TB.ACQUIRE or TB.HOLD grant gets through the scripts
    /// (`ID id` after the module's arguments; a fresh random one when `None`).
    pub fn argv_with(&self, command: &[String], id: Option<&str>) -> Vec<String> {
        // The module's own commands go through; anything else (HSET, DEL) is not one.
        if *self == Backend::Module || !command[0].to_ascii_uppercase().starts_with("TB.") {
            return command.to_vec();
        }
        let name = word(&command[0]);
        let mut take_keys: Vec<String> = Vec::new();
        let mut take_rest: Vec<String> = Vec::new();
        let (keys, rest): (&[String], &[String]) = if name == "ACQUIRE"
            && command.len() > 6
            && command[4].eq_ignore_ascii_case("TAKE")
            && let Some(n) = command[5]
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1 && 6 + n <= command.len())
        {
            // TB.ACQUIRE key limit lease_ms TAKE numkeys bucket... triples: the buckets are
            // KEYS after the lease key, and numkeys is EVALSHA's.
            take_keys.push(command[1].clone());
            take_keys.extend(command[6..6 + n].iter().cloned());
            take_rest.extend(command[2..5].iter().cloned());
            take_rest.extend(command[6 + n..].iter().cloned());
            (&take_keys, &take_rest)
        } else if name == "MTAKE" {
            let n = command
                .get(1)
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0)
                .min(command.len().saturating_sub(2));
            (&command[2..2 + n], &command[2 + n..])
        } else if command.len() >= 2 {
            (&command[1..2], &command[2..])
        } else {
            (&[], &[])
        };
        let mut out = match self {
            Backend::Eval(sha) => vec!["EVALSHA".to_string(), sha.clone()],
            Backend::Function if name == "PEEK" => {
                vec!["FCALL_RO".to_string(), "tb_peek".to_string()]
            }
            Backend::Function => vec!["FCALL".to_string(), format!("tb_{}", name.to_lowercase())],
            Backend::Module => unreachable!(),
        };
        out.push(keys.len().to_string());
        out.extend(keys.iter().cloned());
        if matches!(self, Backend::Eval(_)) {
            out.push(name.clone());
        }
        out.extend(rest.iter().cloned());
        if name == "ACQUIRE" || name == "HOLD" {
            out.push("ID".to_string());
            out.push(id.map_or_else(random_id, str::to_string));
        }
        out
    }

    /// Sends `command` through this backend and reads the reply.
    pub fn call(&self, c: &mut Conn, command: &[String]) -> Reply {
        c.cmd(&self.argv(command))
    }

    /// `line` (whitespace-separated module words) through this backend.
    pub fn q(&self, c: &mut Conn, line: &str) -> Reply {
        let words: Vec<String> = line.split_whitespace().map(String::from).collect();
        self.call(c, &words)
    }
}

/// A fresh id as a client draws it for the scripts (16 hex digits; here from the process's
/// randomly keyed hasher: a test needs ids that differ, not a CSPRNG).
pub fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", h.finish())
}

/// SCRIPT LOAD of `source`; its SHA.
pub fn load_script(c: &mut Conn, source: &str) -> String {
    match c.cmd(&["SCRIPT", "LOAD", source]) {
        Reply::Bulk(sha) => String::from_utf8(sha).unwrap(),
        other => panic!("SCRIPT LOAD: {other:?}"),
    }
}

/// FUNCTION LOAD REPLACE of the Functions build of `source`.
pub fn load_functions(c: &mut Conn, source: &str) {
    let r = c.cmd(&["FUNCTION", "LOAD", "REPLACE", &functions_library(source)]);
    assert_eq!(r, Reply::Bulk(b"tb".to_vec()), "FUNCTION LOAD");
}

/// A server without the module, started with `extra` options, with `source` loaded as a
/// script; the server and the script's backend.
pub fn start_script_server_with(source: &str, extra: &[&str]) -> (Server, Backend) {
    let server = Server::start_with(Options {
        with_module: false,
        extra: extra.iter().map(|s| s.to_string()).collect(),
    });
    let sha = load_script(&mut server.conn(), source);
    (server, Backend::Eval(sha))
}

/// `start_script_server_with`, the process given `env` (a shared test clock's).
pub fn start_script_server_env(
    source: &str,
    extra: &[&str],
    env: Vec<(String, String)>,
) -> (Server, Backend) {
    let server = Server::start_with_env(
        Options {
            with_module: false,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        },
        env,
    );
    let sha = load_script(&mut server.conn(), source);
    (server, Backend::Eval(sha))
}

/// A server without the module, the library loaded (SCRIPT LOAD).
pub fn start_script_server() -> (Server, Backend) {
    start_script_server_with(LIBRARY, &[])
}

/// A connection that sends the module's commands through a backend (and anything else as
/// it is), so a test written against the module runs against the scripts unchanged.
/// Everything else a `Conn` does is reached through it.
pub struct Client {
    pub conn: Conn,
    pub backend: Backend,
}

impl Client {
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        let words: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8(a.as_ref().to_vec()).expect("UTF-8 arguments"))
            .collect();
        self.backend.call(&mut self.conn, &words)
    }

    pub fn q(&mut self, line: &str) -> Reply {
        self.backend.q(&mut self.conn, line)
    }

    /// TB.TAKE with text arguments, decoded.
    pub fn take(
        &mut self,
        key: &str,
        capacity: &str,
        rate: &str,
        n: &str,
        now: Option<&str>,
    ) -> super::Take {
        let mut args = vec!["TB.TAKE", key, capacity, rate, n];
        args.extend(now);
        super::Take::from_reply(&self.cmd(&args))
    }
}

impl std::ops::Deref for Client {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Client {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}
