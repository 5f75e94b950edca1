//! Test harness: a real redis-server with the module loaded on a free loopback port, and a
//! small RESP2/RESP3 client that keeps replies exactly as sent (error texts included).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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
        let mut args = vec!["TB.TAKE", key, capacity, rate, n];
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

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A redis-server process, killed (and its directory removed) on drop. On a failing test
/// its log is printed, so a crash inside the module is visible in the test output.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    with_module: bool,
}

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

    pub fn start_with(options: Options) -> Server {
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
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        // A port taken between probing and binding makes the start fail: try a few.
        for _ in 0..5 {
            self.port = free_port();
            let mut cmd = Command::new(server_binary());
            cmd.arg("--port")
                .arg(self.port.to_string())
                .arg("--bind")
                .arg("127.0.0.1")
                .arg("--dir")
                .arg(&self.dir)
                .arg("--logfile")
                .arg("redis.log")
                .arg("--save")
                .arg("")
                .arg("--appendonly")
                .arg("no")
                .arg("--daemonize")
                .arg("no");
            if self.with_module {
                cmd.arg("--loadmodule").arg(module_path());
            }
            cmd.args(&self.args);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
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
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
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
