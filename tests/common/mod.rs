//! Test harness: a real redis-server with the module loaded on a free loopback port, and a
//! small RESP2/RESP3 client that keeps replies exactly as sent (error texts included).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub mod clock;
pub mod differential;
pub mod scripts;

/// A reply, as sent.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Simple(String),
    Error(String),
    Array(Vec<Reply>),
    Double(f64),
    Nil,
    Other(String),
}

impl Reply {
    pub fn int(&self) -> i64 {
        match self {
            Reply::Int(v) => *v,
            other => panic!("expected an integer, got {other:?}"),
        }
    }
    pub fn text(&self) -> String {
        match self {
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Simple(s) => s.clone(),
            Reply::Int(v) => v.to_string(),
            other => panic!("expected text, got {other:?}"),
        }
    }
    pub fn array(&self) -> &[Reply] {
        match self {
            Reply::Array(v) => v,
            other => panic!("expected an array, got {other:?}"),
        }
    }
    pub fn error(&self) -> &str {
        match self {
            Reply::Error(e) => e,
            other => panic!("expected an error, got {other:?}"),
        }
    }
    /// The whole reply as readable text (bulk strings shown as text), for `contains` checks.
    pub fn flat(&self) -> String {
        match self {
            Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::Simple(s) | Reply::Error(s) | Reply::Other(s) => s.clone(),
            Reply::Int(v) => v.to_string(),
            Reply::Double(d) => d.to_string(),
            Reply::Nil => "(nil)".into(),
            Reply::Array(items) => {
                format!(
                    "[{}]",
                    items.iter().map(Reply::flat).collect::<Vec<_>>().join(" ")
                )
            }
        }
    }

    /// A number sent as RESP3 double or RESP2 bulk text.
    pub fn num(&self) -> f64 {
        match self {
            Reply::Double(d) => *d,
            Reply::Int(v) => *v as f64,
            Reply::Bulk(b) => std::str::from_utf8(b).unwrap().parse().unwrap(),
            other => panic!("expected a number, got {other:?}"),
        }
    }
}

/// TB.TAKE's reply, decoded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Take {
    pub allowed: bool,
    pub remaining: f64,
    pub retry_after: f64,
    pub reset_after: f64,
}

impl Take {
    pub fn from_reply(r: &Reply) -> Take {
        let a = r.array();
        assert_eq!(a.len(), 4, "{r:?}");
        let allowed = a[0].int();
        assert!(allowed == 0 || allowed == 1, "{r:?}");
        Take {
            allowed: allowed == 1,
            remaining: a[1].num(),
            retry_after: a[2].num(),
            reset_after: a[3].num(),
        }
    }
}

/// An expected TB.TAKE-shaped reply.
pub fn take(allowed: bool, remaining: f64, retry_after: f64, reset_after: f64) -> Take {
    Take {
        allowed,
        remaining,
        retry_after,
        reset_after,
    }
}

/// A TB.TAKE-shaped reply as RESP2 sends it: `allowed`, then the three numbers as texts.
pub fn bulk_reply(allowed: i64, texts: [&str; 3]) -> Reply {
    let mut v = vec![Reply::Int(allowed)];
    v.extend(texts.iter().map(|t| Reply::Bulk(t.as_bytes().to_vec())));
    Reply::Array(v)
}

/// A TB.TAKE-shaped reply as RESP3 sends it: `allowed`, then the three numbers as doubles.
pub fn double_reply(allowed: i64, values: [f64; 3]) -> Reply {
    let mut v = vec![Reply::Int(allowed)];
    v.extend(values.iter().map(|&d| Reply::Double(d)));
    Reply::Array(v)
}

/// The client clock most calls pass as `now` (an app server's `time.time()`), as text
/// and as a number.
pub const T0: &str = "1764456268.123456";
pub const T0F: f64 = 1764456268.123456;

/// `T0 + offset` as the shortest round-trip text, as a client computing `time.time()`
/// sends it.
pub fn at(offset: f64) -> String {
    format!("{}", T0F + offset)
}

/// The error texts several commands share.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const CORRUPT_TOKENS: &str =
    "ERR bucket state is corrupt: field 'tokens' is not a valid token count";
pub const CORRUPT_TIME: &str =
    "ERR bucket state is corrupt: field 'last_refill_time' is not a valid time in seconds";

/// A connection speaking RESP.
pub struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    pub fn connect(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// Sends one command (binary-safe arguments) and reads its reply.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Reply {
        self.send(args);
        self.read()
    }

    /// Shorthand for whitespace-separated text arguments.
    pub fn q(&mut self, line: &str) -> Reply {
        let args: Vec<&str> = line.split_whitespace().collect();
        self.cmd(&args)
    }

    pub fn send<A: AsRef<[u8]>>(&mut self, args: &[A]) {
        self.try_send(args).expect("write to redis");
    }

    /// Sends a command, or returns the I/O error (a server that died).
    pub fn try_send<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<()> {
        let mut buf = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            let a = a.as_ref();
            buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            buf.extend_from_slice(a);
            buf.extend_from_slice(b"\r\n");
        }
        self.writer.write_all(&buf)
    }

    pub fn read(&mut self) -> Reply {
        read_reply(&mut self.reader).expect("read reply from redis")
    }

    /// Sends several commands in one write (a pipeline); their replies are read with `read`.
    pub fn send_all<A: AsRef<[u8]>>(&mut self, commands: &[Vec<A>]) {
        let mut buf = Vec::new();
        for args in commands {
            buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
            for a in args {
                let a = a.as_ref();
                buf.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                buf.extend_from_slice(a);
                buf.extend_from_slice(b"\r\n");
            }
        }
        self.writer.write_all(&buf).expect("write to redis");
    }

    /// Sends a command and reads its reply, or returns the I/O error.
    pub fn try_cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> std::io::Result<Reply> {
        self.try_send(args)?;
        self.try_read()
    }

    /// Reads a reply, or the I/O error (a server that died mid-call).
    pub fn try_read(&mut self) -> std::io::Result<Reply> {
        read_reply(&mut self.reader)
    }

    /// TB.TAKE with text arguments, decoded.
    pub fn take(
        &mut self,
        key: &str,
        capacity: &str,
        rate: &str,
        n: &str,
        now: Option<&str>,
    ) -> Take {
        self.decoded(vec!["TB.TAKE", key, capacity, rate, n], now)
    }

    /// `args`, then `now` if given, sent; the TB.TAKE-shaped reply decoded.
    fn decoded<'a>(&mut self, mut args: Vec<&'a str>, now: Option<&'a str>) -> Take {
        args.extend(now);
        let r = self.cmd(&args);
        Take::from_reply(&r)
    }
}

fn read_line(r: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "short line",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let line = read_line(r)?;
    let (kind, rest) = line.split_at(1);
    let count = || rest.parse::<i64>().unwrap_or(-1);
    Ok(match kind {
        "+" => Reply::Simple(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(rest.parse().unwrap()),
        "," => Reply::Double(match rest {
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => other.parse().unwrap(),
        }),
        "_" => Reply::Nil,
        "#" | "(" => Reply::Other(line.clone()),
        "$" | "=" | "!" => {
            let n = count();
            if n < 0 {
                return Ok(Reply::Nil);
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n as usize);
            if kind == "!" {
                Reply::Error(String::from_utf8_lossy(&buf).into_owned())
            } else {
                Reply::Bulk(buf)
            }
        }
        "*" | "~" | ">" => {
            let n = count();
            if n < 0 {
                return Ok(Reply::Nil);
            }
            Reply::Array((0..n).map(|_| read_reply(r)).collect::<Result<_, _>>()?)
        }
        "%" | "|" => {
            let n = count();
            let mut items = Vec::new();
            for _ in 0..n * 2 {
                items.push(read_reply(r)?);
            }
            if kind == "|" {
                // An attribute precedes the real reply.
                return read_reply(r);
            }
            Reply::Array(items)
        }
        _ => Reply::Other(line.clone()),
    })
}

/// A deterministic pseudo-random sequence (xorshift64), so a failing run replays.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform-enough in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `items`.
    pub fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// Where the module is: $REDIS_TB_MODULE or the release build of this checkout.
pub fn module_path() -> PathBuf {
    let path = std::env::var_os("REDIS_TB_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/libredis_tb.so")
        });
    assert!(
        path.exists(),
        "module not found at {} (run `make build`, or set REDIS_TB_MODULE)",
        path.display()
    );
    path
}

/// The server binary: $REDIS_SERVER or redis-server on PATH.
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_string())
}

/// The server command every test server starts from: `port` on loopback, `dir` as its
/// directory (log in `dir/redis.log`), persistence off, in the foreground, no output; no
/// module yet (the caller adds `--loadmodule` and any other arguments).
pub fn server_command(port: u16, dir: &Path) -> Command {
    let mut cmd = Command::new(server_binary());
    cmd.arg("--port")
        .arg(port.to_string())
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg("redis.log")
        .arg("--save")
        .arg("")
        .arg("--appendonly")
        .arg("no")
        .arg("--daemonize")
        .arg("no")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The log of a server started by `server_command` on `dir` (empty when there is none).
pub fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
}

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A redis-server process, killed (and its directory removed) on drop. On a failing test
/// its log is printed, so a crash inside the module is visible in the test output.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    with_module: bool,
    /// Environment variables of the process (the shared test clock's preload).
    env: Vec<(String, String)>,
}

/// The load arguments that switch the clock bound off for every accepted `now`.
pub const NO_CLOCK_BOUND: [&str; 2] = ["max-clock-ahead-ms", "253402300800000"];

/// How to start a server.
#[derive(Clone)]
pub struct Options {
    pub with_module: bool,
    pub extra: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            with_module: true,
            extra: Vec::new(),
        }
    }
}

impl Server {
    /// A fresh server with the module loaded and persistence off.
    pub fn start() -> Server {
        Server::start_with(Options::default())
    }

    /// A server whose module is loaded with `args` after its path (`--loadmodule path
    /// ARG ...`), then the server options `extra`.
    pub fn start_with_load_args(args: &[&str], extra: &[&str]) -> Server {
        let mut all = vec![
            "--loadmodule".to_string(),
            module_path().display().to_string(),
        ];
        all.extend(args.iter().chain(extra).map(|a| a.to_string()));
        Server::start_with(Options {
            with_module: false,
            extra: all,
        })
    }

    /// A server that accepts any `now` up to the year 10000 (`max-clock-ahead-ms` at its
    /// largest), for tests of far-future times.
    pub fn start_unbounded() -> Server {
        Server::start_with_load_args(&NO_CLOCK_BOUND, &[])
    }

    pub fn start_with(options: Options) -> Server {
        Server::start_with_env(options, Vec::new())
    }

    /// `start_with`, the process given `env` as well (`clock::SharedClock::env`).
    pub fn start_with_env(options: Options, env: Vec<(String, String)>) -> Server {
        let dir = std::env::temp_dir().join(format!(
            "redis-tb-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = Server {
            port: 0,
            dir,
            child: None,
            args: options.extra.clone(),
            with_module: options.with_module,
            env,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        // A port taken between probing and binding makes the start fail: try a few.
        for _ in 0..5 {
            self.port = free_port();
            let mut cmd = server_command(self.port, &self.dir);
            if self.with_module {
                cmd.arg("--loadmodule").arg(module_path());
            }
            cmd.args(&self.args);
            cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary()));
            self.child = Some(child);
            if self.wait_ready(Duration::from_secs(20)) {
                return;
            }
            self.kill();
        }
        panic!("redis-server did not start; log:\n{}", self.log());
    }

    fn wait_ready(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            // Ready means: answering, and it is our process (another test's server may have
            // taken the port between probing and binding; then ours exits and we retry).
            // A connection can also be reset while the process starts: not ready yet.
            if let Ok(mut c) = Conn::connect(self.port)
                && c.try_cmd(&["PING"]).ok() == Some(Reply::Simple("PONG".into()))
                && let Ok(info) = c.try_cmd(&["INFO", "server"])
            {
                let pid = info
                    .text()
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:").map(|v| v.trim().to_string()));
                return pid == self.pid().map(|p| p.to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn conn(&self) -> Conn {
        Conn::connect(self.port).unwrap_or_else(|e| panic!("connect: {e}; log:\n{}", self.log()))
    }

    pub fn log(&self) -> String {
        read_log(&self.dir)
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// kill -9: no shutdown, no final fsync.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same directory (and a possibly new port), with or
    /// without the module.
    pub fn restart(&mut self, with_module: bool) {
        self.kill();
        self.with_module = with_module;
        self.launch();
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "---- redis-server log (port {}, last 60 lines) ----\n{}",
                self.port,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        self.terminate();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Server {
    /// SIGTERM and a bounded wait, then SIGKILL: a clean exit lets a server run under
    /// valgrind write its leak report.
    fn terminate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id()) {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A loopback port nobody is listening on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The key's full dump (type, value and encoding as RDB bytes), to prove a call changed
/// nothing. `None` for a missing key.
pub fn dump(c: &mut Conn, key: &[u8]) -> Option<Vec<u8>> {
    match c.cmd(&[b"DUMP".as_slice(), key]) {
        Reply::Bulk(b) => Some(b),
        Reply::Nil => None,
        other => panic!("DUMP: {other:?}"),
    }
}

/// HGETALL as sorted (field, value) pairs.
pub fn hgetall(c: &mut Conn, key: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let r = c.cmd(&[b"HGETALL".as_slice(), key]);
    let items = r.array();
    let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = items
        .chunks(2)
        .map(|p| match (&p[0], &p[1]) {
            (Reply::Bulk(f), Reply::Bulk(v)) => (f.clone(), v.clone()),
            other => panic!("HGETALL: {other:?}"),
        })
        .collect();
    pairs.sort();
    pairs
}

/// A hash field as text, or None.
pub fn hget(c: &mut Conn, key: &str, field: &str) -> Option<String> {
    match c.cmd(&["HGET", key, field]) {
        Reply::Bulk(b) => Some(String::from_utf8(b).unwrap()),
        Reply::Nil => None,
        other => panic!("HGET: {other:?}"),
    }
}

/// INFO field value.
pub fn info_field(c: &mut Conn, section: &str, field: &str) -> Option<String> {
    let text = c.cmd(&["INFO", section]).text();
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

// ---- Helpers for TB.MTAKE, TB.RESERVE, TB.PEEK and TB.REFUND (appended; the items above
// ---- are shared with other test files and stay as they are).

/// TB.MTAKE's reply, decoded: the aggregate four fields and one TB.TAKE-shaped entry per
/// key, in key order.
#[derive(Debug, Clone, PartialEq)]
pub struct MTake {
    pub allowed: bool,
    pub remaining: f64,
    pub retry_after: f64,
    pub reset_after: f64,
    pub keys: Vec<Take>,
}

impl MTake {
    pub fn from_reply(r: &Reply) -> MTake {
        let a = r.array();
        assert_eq!(a.len(), 5, "{r:?}");
        // The first four fields are TB.TAKE's reply.
        let total = Take::from_reply(&Reply::Array(a[..4].to_vec()));
        MTake {
            allowed: total.allowed,
            remaining: total.remaining,
            retry_after: total.retry_after,
            reset_after: total.reset_after,
            keys: a[4].array().iter().map(Take::from_reply).collect(),
        }
    }

    /// The aggregate fields only, as a `Take`.
    pub fn total(&self) -> Take {
        Take {
            allowed: self.allowed,
            remaining: self.remaining,
            retry_after: self.retry_after,
            reset_after: self.reset_after,
        }
    }
}

/// One key's part of a TB.MTAKE call: (key, capacity, rate, n).
pub type Bucket<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The argument list of `TB.MTAKE numkeys key.. (capacity rate n).. [now]`.
pub fn mtake_args(buckets: &[Bucket], now: Option<&str>) -> Vec<String> {
    let mut args = vec!["TB.MTAKE".to_string(), buckets.len().to_string()];
    args.extend(buckets.iter().map(|b| b.0.to_string()));
    for (_, capacity, rate, n) in buckets {
        args.extend([capacity.to_string(), rate.to_string(), n.to_string()]);
    }
    args.extend(now.map(str::to_string));
    args
}

impl Conn {
    /// TB.MTAKE with text arguments, decoded.
    pub fn mtake(&mut self, buckets: &[Bucket], now: Option<&str>) -> MTake {
        let r = self.cmd(&mtake_args(buckets, now));
        MTake::from_reply(&r)
    }

    /// TB.RESERVE with text arguments, decoded.
    pub fn reserve(
        &mut self,
        key: &str,
        capacity: &str,
        rate: &str,
        n: &str,
        max_wait: &str,
        now: Option<&str>,
    ) -> Take {
        self.decoded(vec!["TB.RESERVE", key, capacity, rate, n, max_wait], now)
    }

    /// TB.PEEK with text arguments, decoded.
    pub fn peek(&mut self, key: &str, capacity: &str, rate: &str, now: Option<&str>) -> Take {
        self.decoded(vec!["TB.PEEK", key, capacity, rate], now)
    }

    /// TB.REFUND with text arguments, decoded.
    pub fn refund(
        &mut self,
        key: &str,
        capacity: &str,
        rate: &str,
        n: &str,
        now: Option<&str>,
    ) -> Take {
        self.decoded(vec!["TB.REFUND", key, capacity, rate, n], now)
    }
}

/// Each key's DUMP and absolute expiry (PEXPIRETIME): equal before and after a call means
/// the call changed nothing there (a missing key stays missing).
pub fn fingerprint(c: &mut Conn, keys: &[&str]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|k| {
            let expire = c.cmd(&["PEXPIRETIME", k]).int();
            (dump(c, k.as_bytes()), expire)
        })
        .collect()
}

/// Sends `command` followed by each case's arguments: every call must get exactly the
/// case's error text and leave `keys` as they were (bytes and expiry, see `fingerprint`).
pub fn assert_errors_change_nothing(
    c: &mut Conn,
    command: &[&str],
    keys: &[&str],
    cases: &[(&[&str], &str)],
) {
    let before = fingerprint(c, keys);
    for (args, want) in cases {
        let mut full = command.to_vec();
        full.extend_from_slice(args);
        assert_eq!(c.cmd(&full), Reply::Error(want.to_string()), "{args:?}");
        assert_eq!(fingerprint(c, keys), before, "{args:?} changed something");
    }
}

/// Whether a transaction on another connection, watching `keys`, still runs after `args`
/// was sent (true: the call did not count as a modification of any watched key).
pub fn watch_survives<A: AsRef<[u8]>>(server: &Server, keys: &[&str], args: &[A]) -> bool {
    let mut watcher = server.conn();
    let mut c = server.conn();
    let mut watch = vec!["WATCH"];
    watch.extend_from_slice(keys);
    assert_eq!(watcher.cmd(&watch), Reply::Simple("OK".into()));
    assert_eq!(watcher.q("MULTI"), Reply::Simple("OK".into()));
    assert_eq!(watcher.q("PING"), Reply::Simple("QUEUED".into()));
    c.cmd(args);
    match watcher.q("EXEC") {
        Reply::Nil => false,
        Reply::Array(items) if items == vec![Reply::Simple("PONG".into())] => true,
        other => panic!("EXEC: {other:?}"),
    }
}

/// The keyspace notifications (`"<channel> <payload>"`) emitted while `f` runs on a second
/// connection of `server`, in order.
pub fn notifications_during(server: &Server, f: impl FnOnce(&mut Conn)) -> Vec<String> {
    const MARKER: &str = "__tb_test_notification_marker__";
    let mut c = server.conn();
    assert_eq!(
        c.q("CONFIG SET notify-keyspace-events KEA"),
        Reply::Simple("OK".into())
    );
    let mut sub = server.conn();
    sub.q("PSUBSCRIBE __key*@0__:*");
    f(&mut c);
    c.q(&format!("HSET {MARKER} f v"));
    let mut events = Vec::new();
    loop {
        let r = sub.read();
        let a = r.array();
        let channel = a[2].text();
        let payload = a[3].text();
        if payload == MARKER || channel.ends_with(&format!(":{MARKER}")) {
            break;
        }
        events.push(format!("{channel} {payload}"));
    }
    c.q(&format!("DEL {MARKER}"));
    events
}

/// Each of `outcomes` was seen at least `min` times (`seen`: how often each outcome of a
/// run of mixed traffic was seen).
pub fn assert_each_seen(seen: &BTreeMap<String, usize>, outcomes: &[&str], min: usize) {
    for outcome in outcomes {
        assert!(
            seen.get(*outcome).copied().unwrap_or(0) >= min,
            "too few {outcome}: {seen:?}"
        );
    }
}

/// `INFO tb` counters of one command (`take`, `mtake`, ...): calls, allowed, denied, errors.
pub fn tb_counters(c: &mut Conn, command: &str) -> [u64; 4] {
    ["calls", "allowed", "denied", "errors"].map(|what| {
        let field = format!("tb_{command}_{what}");
        info_field(c, "tb", &field)
            .unwrap_or_else(|| panic!("INFO tb has no {field}"))
            .parse()
            .unwrap()
    })
}

/// `COMMAND DOCS <name>` under RESP2, as (field, value) pairs of the one command.
pub fn command_docs(c: &mut Conn, name: &str) -> Vec<(String, Reply)> {
    let r = c.cmd(&["COMMAND", "DOCS", name]);
    let a = r.array();
    assert_eq!(a.len(), 2, "COMMAND DOCS {name}: {r:?}");
    assert_eq!(a[0].text(), name, "{r:?}");
    a[1].array()
        .chunks(2)
        .map(|p| (p[0].text(), p[1].clone()))
        .collect()
}

/// One field of a `command_docs` reply; panics when there is none.
pub fn doc_field(docs: &[(String, Reply)], name: &str) -> Reply {
    docs.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("no {name} in {docs:?}"))
}

/// `COMMAND DOCS <name>` has a non-empty summary, complexity and since, and its arguments
/// mention every one of `arguments`.
pub fn assert_documented(c: &mut Conn, name: &str, arguments: &[&str]) {
    let docs = command_docs(c, name);
    for field in ["summary", "complexity", "since"] {
        assert!(
            !doc_field(&docs, field).text().is_empty(),
            "{field}: {docs:?}"
        );
    }
    let args = doc_field(&docs, "arguments").flat();
    for arg in arguments {
        assert!(args.contains(arg), "{arg} missing from {args}");
    }
}

/// `COMMAND INFO <name>`: (arity, flags, the flattened key specs).
pub fn command_info(c: &mut Conn, name: &str) -> (i64, Vec<String>, String) {
    let r = c.cmd(&["COMMAND", "INFO", name]);
    let info = r.array()[0].array().to_vec();
    assert_eq!(info[0].text(), name, "{r:?}");
    let flags = info[2].array().iter().map(Reply::text).collect();
    (info[1].int(), flags, info[8].flat())
}

/// A master for replication checks: diskless sync without delay, and no periodic PING to
/// replicas (it would move the replication offset while a test watches it).
pub fn start_master() -> Server {
    Server::start_with(Options {
        with_module: true,
        extra: vec![
            "--repl-diskless-sync-delay".into(),
            "0".into(),
            "--repl-ping-replica-period".into(),
            "3600".into(),
        ],
    })
}

/// A replica of `master`, with or without the module, once its link is up.
pub fn start_replica(master: &Server, with_module: bool) -> Server {
    let replica = Server::start_with(Options {
        with_module,
        extra: vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port.to_string(),
        ],
    });
    let mut c = replica.conn();
    let start = Instant::now();
    while info_field(&mut c, "replication", "master_link_status").as_deref() != Some("up") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "replica never synced:\n{}",
            replica.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    replica
}

/// A server with the module and an AOF fsynced as `fsync` says ("always", "everysec").
pub fn start_aof_server(fsync: &str) -> Server {
    Server::start_with(Options {
        with_module: true,
        extra: vec![
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            fsync.into(),
        ],
    })
}

/// The master's replication offset: it moves exactly when something is replicated.
pub fn repl_offset(c: &mut Conn) -> i64 {
    info_field(c, "replication", "master_repl_offset")
        .unwrap()
        .parse()
        .unwrap()
}

/// Every key's hash (sorted field, value pairs) and absolute expiry (ms).
pub type Keyspace = BTreeMap<Vec<u8>, (Vec<(Vec<u8>, Vec<u8>)>, i64)>;

/// Every key (KEYS *) with `value` of it and its absolute expiry (ms).
fn every_key<V>(
    c: &mut Conn,
    value: impl Fn(&mut Conn, &[u8]) -> V,
) -> BTreeMap<Vec<u8>, (V, i64)> {
    let keys = c.q("KEYS *");
    let mut out = BTreeMap::new();
    for k in keys.array() {
        let Reply::Bulk(key) = k else { panic!("{k:?}") };
        let expire = c.cmd(&[b"PEXPIRETIME".as_slice(), key]).int();
        out.insert(key.clone(), (value(c, key), expire));
    }
    out
}

/// The whole keyspace, to compare a master with its replicas.
pub fn keyspace(c: &mut Conn) -> Keyspace {
    every_key(c, hgetall)
}

/// Every key's DUMP (type, value and encoding as RDB bytes) and absolute expiry (ms).
pub type Dumps = BTreeMap<Vec<u8>, (Option<Vec<u8>>, i64)>;

/// The whole keyspace as `Dumps`, to compare servers byte for byte.
pub fn dumps(c: &mut Conn) -> Dumps {
    every_key(c, dump)
}

/// The server's clock in ms.
pub fn server_ms(c: &mut Conn) -> i64 {
    let t = c.q("TIME");
    let a = t.array();
    a[0].text().parse::<i64>().unwrap() * 1000 + a[1].text().parse::<i64>().unwrap() / 1000
}

/// `dumps` without the keys that expire within 5 s of the server's clock, and those keys.
/// A key expiring between two snapshots would make them differ (an expired key is gone on
/// the master and hidden on replicas alike, but not at the same instant); a refund that
/// fills a bucket, for one, leaves it a TTL of about half a second. A key that expired
/// while this snapshot was read (listed by KEYS, then PEXPIRETIME -2) is left out too.
pub fn lasting(c: &mut Conn) -> (Dumps, BTreeSet<Vec<u8>>) {
    let all = dumps(c);
    let now = server_ms(c);
    let soon: BTreeSet<Vec<u8>> = all
        .iter()
        .filter(|(_, (_, expire))| *expire == -2 || (0..now + 5000).contains(expire))
        .map(|(k, _)| k.clone())
        .collect();
    (without(&all, &soon), soon)
}

/// Waits until every replica has caught up, then panics unless each holds the master's
/// bytes (DUMP and expiry) for every key of `c`'s server that does not expire within 5 s
/// (see `lasting`). Returns the keys compared and those left out.
pub fn assert_replicas_hold_the_masters_bytes(
    c: &mut Conn,
    replicas: &[(&Server, &str)],
) -> (Dumps, BTreeSet<Vec<u8>>) {
    let n = replicas.len().to_string();
    assert_eq!(
        c.cmd(&["WAIT", n.as_str(), "10000"]).int(),
        replicas.len() as i64
    );
    let (want, soon) = lasting(c);
    eprintln!(
        "compared {} keys ({} expiring within 5 s left out)",
        want.len(),
        soon.len()
    );
    for (replica, what) in replicas {
        let mut rc = replica.conn();
        let got = without(&dumps(&mut rc), &soon);
        assert_same_dumps(what, &mut rc, &got, c, &want);
    }
    (want, soon)
}

/// `all` without `keys`.
pub fn without(all: &Dumps, keys: &BTreeSet<Vec<u8>>) -> Dumps {
    all.iter()
        .filter(|(k, _)| !keys.contains(*k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Panics unless `got` (read on `got_conn`) equals `want` (read on `want_conn`), naming
/// `what` and showing the first differing key on both sides (a hash as its fields).
pub fn assert_same_dumps(
    what: &str,
    got_conn: &mut Conn,
    got: &Dumps,
    want_conn: &mut Conn,
    want: &Dumps,
) {
    if got == want {
        return;
    }
    let keys: BTreeSet<&Vec<u8>> = got.keys().chain(want.keys()).collect();
    let key = keys
        .into_iter()
        .find(|k| got.get(*k) != want.get(*k))
        .unwrap();
    let show = |c: &mut Conn, d: &Dumps| match d.get(key) {
        None => "missing".to_string(),
        Some((_, expire)) => {
            let t = c.cmd(&[b"TYPE".as_slice(), key]).text();
            let value = if t == "hash" {
                format!("{:?}", hgetall(c, key))
            } else {
                t
            };
            format!("{value}, expires at {expire} ms")
        }
    };
    panic!(
        "{what}: {} keys, {} wanted; first difference at {}: got {}, want {}",
        got.len(),
        want.len(),
        String::from_utf8_lossy(key),
        show(got_conn, got),
        show(want_conn, want)
    );
}

/// Waits until the one replica of `c`'s server has acknowledged every write, then asserts
/// that `replica` holds exactly the master's keyspace and met no command it does not know
/// (it may run without the module). Returns the master's keyspace.
pub fn assert_replica_matches(c: &mut Conn, replica: &Server) -> Keyspace {
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let want = keyspace(c);
    assert_eq!(keyspace(&mut replica.conn()), want);
    assert!(
        !replica.log().contains("unknown command"),
        "{}",
        replica.log()
    );
    want
}

/// The seed's Lua token bucket (HMGET tokens/last_refill_time, refill, HSET, EXPIRE), in
/// our own words: `EVAL LUA_SEED 1 key capacity rate n now`, reply
/// `{allowed, tostring(tokens)}`.
pub const LUA_SEED: &str = r#"
        local capacity = tonumber(ARGV[1])
        local rate = tonumber(ARGV[2])
        local requested = tonumber(ARGV[3])
        local now = tonumber(ARGV[4])
        local h = redis.call('HMGET', KEYS[1], 'tokens', 'last_refill_time')
        local tokens, last = tonumber(h[1]), tonumber(h[2])
        if not tokens then tokens = capacity; last = now
        else tokens = math.min(capacity, tokens + math.max(0, now - last) * rate) end
        if tokens >= requested then
            tokens = tokens - requested
            redis.call('HSET', KEYS[1], 'tokens', tokens, 'last_refill_time', now)
            redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 10)
            return {1, tostring(tokens)}
        end
        return {0, tostring(tokens)}
    "#;

/// The benchmark's Lua token bucket (bench/commands/token_bucket.lua), with TB.TAKE's
/// semantics and reply: `EVAL LUA_BENCH 1 key capacity rate n [now]`.
pub const LUA_BENCH: &str = include_str!("../../bench/commands/token_bucket.lua");

/// A cluster-enabled server with the module, and its cluster bus port. The bus port is
/// given explicitly: the default (port + 10000) overflows for ports above 55535, which
/// free loopback ports may be.
pub fn start_cluster_node() -> (Server, u16) {
    let bus = free_port();
    let server = Server::start_with(Options {
        with_module: true,
        extra: [
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus.to_string(),
            "--cluster-node-timeout",
            "2000",
            "--repl-diskless-sync-delay",
            "0",
        ]
        .map(String::from)
        .to_vec(),
    });
    (server, bus)
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `limit`.
pub fn wait_for(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Two cluster nodes met, `a` serving slots 0-8191 and `b` 8192-16383, once both see
/// `cluster_state:ok`.
pub fn start_two_node_cluster() -> (Server, Server) {
    let (a, _) = start_cluster_node();
    let (b, b_bus) = start_cluster_node();
    let mut ca = a.conn();
    let mut cb = b.conn();
    assert_eq!(
        ca.q("CLUSTER ADDSLOTSRANGE 0 8191"),
        Reply::Simple("OK".into())
    );
    assert_eq!(
        cb.q("CLUSTER ADDSLOTSRANGE 8192 16383"),
        Reply::Simple("OK".into())
    );
    let meet = format!("CLUSTER MEET 127.0.0.1 {} {b_bus}", b.port);
    assert_eq!(ca.q(&meet), Reply::Simple("OK".into()));
    for c in [&mut ca, &mut cb] {
        wait_for(Duration::from_secs(30), "cluster_state:ok", || {
            c.q("CLUSTER INFO").text().contains("cluster_state:ok")
        });
    }
    (a, b)
}

/// A fake replica on a raw socket: it sends SYNC, skips the RDB, and then reads the master's
/// replication stream command by command, exactly as replicas and the AOF receive it.
pub struct ReplStream {
    reader: BufReader<TcpStream>,
    _writer: TcpStream,
}

impl ReplStream {
    pub fn attach(server: &Server) -> ReplStream {
        let stream = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut writer = stream.try_clone().unwrap();
        writer.write_all(b"*1\r\n$4\r\nSYNC\r\n").unwrap();
        let mut reader = BufReader::new(stream);
        // Bare newlines are keepalives while the master produces the RDB.
        while reader.fill_buf().unwrap().first() == Some(&b'\n') {
            reader.consume(1);
        }
        let line = read_line(&mut reader).unwrap();
        let len: usize = line
            .strip_prefix('$')
            .and_then(|l| l.parse().ok())
            .unwrap_or_else(|| panic!("SYNC: unexpected {line:?}"));
        let mut rdb = vec![0; len];
        std::io::Read::read_exact(&mut reader, &mut rdb).unwrap();
        ReplStream {
            reader,
            _writer: writer,
        }
    }

    /// The next replicated command as text, its name upper-cased.
    pub fn next(&mut self) -> Vec<String> {
        match read_reply(&mut self.reader).unwrap() {
            Reply::Array(items) => {
                let mut args: Vec<String> = items.iter().map(Reply::text).collect();
                if let Some(name) = args.first_mut() {
                    *name = name.to_ascii_uppercase();
                }
                args
            }
            other => panic!("replication stream: {other:?}"),
        }
    }

    /// Every command replicated before `SET <marker> 1` (which the caller sends after the
    /// calls it wants to see), command names upper-cased, without the stream's own SELECT,
    /// PING and REPLCONF.
    pub fn until_marker(&mut self, marker: &str) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        loop {
            let cmd = self.next();
            if cmd == ["SET", marker, "1"] {
                return out;
            }
            // SELECT, the master's keepalive PING (Valkey 9 sends one as soon as a replica
            // attaches) and the REPLCONF GETACK a WAIT appends are the stream's own, not a
            // command's effects.
            if !matches!(
                cmd.first().map(String::as_str),
                Some("SELECT" | "PING" | "REPLCONF")
            ) {
                out.push(cmd);
            }
        }
    }
}

/// README.md and every docs/*.md, in a stable order: the files whose sessions and shell
/// blocks `doc_sessions.rs` and `doc_shell.rs` run.
pub fn doc_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}
