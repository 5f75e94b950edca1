//! Test and benchmark support (not part of the example's lesson): a real `redis-server` with
//! the module on a free loopback port (killed on drop), the app served on a loopback port,
//! and a minimal HTTP/1.1 client (keep-alive, Content-Length or chunked bodies).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinHandle;

/// The module: `REDIS_TB_MODULE`, else `<repo>/target/release/libredis_tb.so`.
pub fn module_path() -> PathBuf {
    match std::env::var_os("REDIS_TB_MODULE") {
        Some(p) => PathBuf::from(p),
        None => {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/libredis_tb.so")
        }
    }
}

/// A redis-server child process on 127.0.0.1, persistence off.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    module: bool,
    cpu: Option<usize>,
    args: Vec<String>,
}

impl RedisServer {
    /// Starts `REDIS_SERVER` (default `redis-server`) with the module loaded.
    pub fn start() -> io::Result<RedisServer> {
        RedisServer::start_with(true, None)
    }

    /// Starts it with the module, pinned to one CPU with `taskset -c <cpu>` (benchmarks).
    pub fn start_pinned(cpu: usize) -> io::Result<RedisServer> {
        RedisServer::start_with(true, Some(cpu))
    }

    /// Starts a server without the module (to test the startup check).
    pub fn start_without_module() -> io::Result<RedisServer> {
        RedisServer::start_with(false, None)
    }

    /// Starts a server without the module, with extra configuration (SPEC E: `["--rename-
    /// command", "TIME", ""]` refuses TIME in scripts, `"FUNCTION"` leaves only EVALSHA).
    pub fn start_without_module_with_args(args: &[&str]) -> io::Result<RedisServer> {
        RedisServer::start_full(false, None, args)
    }

    /// Starts it with the module and extra configuration (`["--rename-command", "HELLO",
    /// ""]` makes it answer like a server from before RESP3).
    pub fn start_with_args(args: &[&str]) -> io::Result<RedisServer> {
        RedisServer::start_full(true, None, args)
    }

    fn start_with(module: bool, cpu: Option<usize>) -> io::Result<RedisServer> {
        RedisServer::start_full(module, cpu, &[])
    }

    fn start_full(module: bool, cpu: Option<usize>, args: &[&str]) -> io::Result<RedisServer> {
        if module && !module_path().exists() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} not found: build the module first (cargo build --release at the repo root) or set REDIS_TB_MODULE",
                    module_path().display()
                ),
            ));
        }
        let mut last_err = None;
        // A free port can be taken between probing and binding; try a few.
        for _ in 0..5 {
            let port = free_port()?;
            let mut server = RedisServer {
                child: None,
                port,
                module,
                cpu,
                args: args.iter().map(|a| (*a).to_owned()).collect(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| io::Error::other("redis-server did not start")))
    }

    fn spawn(&mut self) -> io::Result<()> {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let mut cmd = match self.cpu {
            Some(cpu) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpu.to_string(), &bin]);
                c
            }
            None => Command::new(&bin),
        };
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &std::env::temp_dir().display().to_string()]);
        if self.module {
            cmd.arg("--loadmodule").arg(module_path());
        }
        cmd.args(&self.args);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {bin}: {e}")))?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!("{bin} exited at start: {status}")));
            }
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::other(format!(
                    "{bin} did not answer PING within 20 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The loopback port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (SIGKILL: Redis disappears mid-run).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Runs one command (text arguments) and returns the raw RESP2 reply text.
    pub fn command(&self, args: &[&str]) -> io::Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = format!("*{}\r\n", args.len());
        for a in args {
            buf.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(buf.as_bytes())?;
        s.write_all(b"*1\r\n$4\r\nQUIT\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        // Drop QUIT's "+OK\r\n" from the end.
        Ok(out.strip_suffix("+OK\r\n").unwrap_or(&out).to_owned())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// An app served on 127.0.0.1:<free port> with `ConnectInfo<SocketAddr>`; aborted on drop.
pub struct Served {
    /// Where it listens.
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `app` on a loopback port.
pub async fn serve(app: Router) -> io::Result<Served> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    Ok(Served { addr, task })
}

/// A response: status, headers (lower-case names, in order), body.
#[derive(Clone, Debug)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// Body as text.
    pub body: String,
}

impl HttpResponse {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One keep-alive HTTP/1.1 connection.
pub struct HttpConn {
    stream: BufReader<tokio::net::TcpStream>,
}

impl HttpConn {
    /// Connects to `addr`.
    pub async fn connect(addr: SocketAddr) -> io::Result<HttpConn> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(HttpConn {
            stream: BufReader::new(stream),
        })
    }

    /// Sends one request with `headers` and an empty body, reads the response.
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
    ) -> io::Result<HttpResponse> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: 0\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.stream.get_mut().write_all(req.as_bytes()).await?;
        self.read_response().await
    }

    /// Sends one request with a body the way some clients do: the head in one write, then
    /// `gap`, then the body in another write (two TCP segments); reads the response.
    pub async fn request_split(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        gap: Duration,
    ) -> io::Result<HttpResponse> {
        self.send_head(method, path, headers, body.len()).await?;
        tokio::time::sleep(gap).await;
        self.stream.get_mut().write_all(body).await?;
        self.read_response().await
    }

    /// Sends a request head announcing `content_length` body bytes, and no body.
    pub async fn send_head(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        content_length: usize,
    ) -> io::Result<()> {
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nhost: test\r\ncontent-length: {content_length}\r\n"
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        self.stream.get_mut().write_all(head.as_bytes()).await?;
        self.stream.get_mut().flush().await
    }

    /// Sends raw bytes (a request head without its body, say).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.get_mut().write_all(bytes).await
    }

    /// Reads one response.
    pub async fn response(&mut self) -> io::Result<HttpResponse> {
        self.read_response().await
    }

    /// Whether the server closed the connection: reads until EOF (or a reset), `false` if
    /// more data arrives first.
    pub async fn closed_by_server(&mut self) -> io::Result<bool> {
        let mut buf = [0u8; 1];
        match self.stream.read(&mut buf).await {
            Ok(0) => Ok(true),
            Ok(_) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn read_line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.stream.read_line(&mut line).await? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_owned())
    }

    async fn read_response(&mut self) -> io::Result<HttpResponse> {
        let status_line = self.read_line().await?;
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bad status line {status_line:?}")))?;
        let mut headers = Vec::new();
        loop {
            let line = self.read_line().await?;
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
            }
        }
        let find = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let body = if let Some(len) = find("content-length") {
            let len: usize = len
                .parse()
                .map_err(|_| io::Error::other("bad content-length"))?;
            let mut body = vec![0; len];
            self.stream.read_exact(&mut body).await?;
            body
        } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            loop {
                let size = self.read_line().await?;
                let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                    .map_err(|_| io::Error::other("bad chunk size"))?;
                if size == 0 {
                    // Trailers end with an empty line.
                    while !self.read_line().await?.is_empty() {}
                    break;
                }
                let mut chunk = vec![0; size + 2];
                self.stream.read_exact(&mut chunk).await?;
                chunk.truncate(size);
                body.extend_from_slice(&chunk);
            }
            body
        } else {
            Vec::new()
        };
        Ok(HttpResponse {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
}

/// One request on a fresh connection.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<HttpResponse> {
    HttpConn::connect(addr)
        .await?
        .request(method, path, headers)
        .await
}
