//! `TbClient`'s in-flight and hold commands against a real redis-server with the module
//! (issue 40: each language's client covers the same commands): `acquire` with and
//! without TAKE up to its limit, `release` (an unknown id answers 0), `renew`,
//! `peek_leases`, and `hold` / `peek_holds` / `settle`. The server is `REDIS_SERVER`
//! (default `redis-server`) with `REDIS_TB_MODULE` (default the repo's release build).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_tb_client::{Charge, ClientConfig, TbClient};

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A redis-server child on a free loopback port, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Result<Server, Box<dyn std::error::Error>> {
        let module = std::env::var_os("REDIS_TB_MODULE").map_or_else(
            || {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../target/release/libredis_tb.so")
            },
            PathBuf::from,
        );
        if !module.exists() {
            return Err(format!(
                "{} not found: cargo build --release at the repo root, or set REDIS_TB_MODULE",
                module.display()
            )
            .into());
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let mut child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--loadmodule")
            .arg(&module)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = child.try_wait()? {
                return Err(format!("{bin} exited at start: {status}").into());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!("{bin} did not listen within 20 s").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Server { child, port })
    }

    async fn client(&self) -> Result<TbClient, redis_tb_client::Error> {
        let config = ClientConfig {
            call_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            startup_timeout: Duration::from_secs(10),
            ..ClientConfig::default()
        };
        TbClient::connect_with(&format!("redis://127.0.0.1:{}", self.port), config).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn acquire_up_to_the_limit_then_release_renew_and_peek_leases() -> TestResult {
    let server = Server::start()?;
    let tb = server.client().await?;
    assert_eq!(tb.peek_leases("jobs").await?, (0.0, 0.0));
    let first = tb.acquire("jobs", 2, 30_000, &[]).await?;
    assert!(first.granted && first.in_flight == 1.0 && first.buckets.is_empty());
    assert!((30_000.0..=30_001.0).contains(&first.ms), "{first:?}");
    let id = first.id.clone().ok_or("a granted lease has an id")?;
    assert_eq!(id.len(), 16);
    let second = tb.acquire("jobs", 2, 30_000, &[]).await?;
    assert!(second.granted && second.in_flight == 2.0 && second.id != first.id);
    let refused = tb.acquire("jobs", 2, 30_000, &[]).await?;
    assert!(!refused.granted && refused.id.is_none() && refused.in_flight == 2.0);
    assert!(refused.ms > 0.0 && refused.ms <= 30_001.0, "{refused:?}");
    let (in_flight, ms) = tb.peek_leases("jobs").await?;
    assert!(
        in_flight == 2.0 && ms > 29_000.0 && ms <= 30_001.0,
        "{in_flight} {ms}"
    );
    let (renewed, count, ms) = tb.renew("jobs", &id, 60_000).await?;
    assert!(renewed && count == 2.0 && (60_000.0..=60_001.0).contains(&ms));
    assert_eq!(tb.release("jobs", "0123456789abcdef").await?, (false, 2.0));
    assert_eq!(tb.release("jobs", &id).await?, (true, 1.0));
    assert_eq!(tb.release("jobs", &id).await?, (false, 1.0));
    assert_eq!(tb.renew("jobs", &id, 60_000).await?, (false, 1.0, 0.0));
    // the module's refusal of a limit out of range comes back as an error, not a reply
    assert!(tb.acquire("jobs", 0, 30_000, &[]).await.is_err());
    Ok(())
}

#[tokio::test]
async fn acquire_with_take_is_all_or_nothing() -> TestResult {
    let server = Server::start()?;
    let tb = server.client().await?;
    let charge = |key: &str, capacity: f64, rate: f64| Charge {
        key: key.to_owned(),
        capacity,
        rate,
        n: 1.0,
    };
    let buckets = [
        charge("rl:{u7}:s", 10.0, 1.0),
        charge("rl:{u7}:m", 1.0, 0.1),
    ];
    let first = tb.acquire("jobs:{u7}", 4, 30_000, &buckets).await?;
    assert!(first.granted && first.id.is_some(), "{first:?}");
    let remaining: Vec<f64> = first.buckets.iter().map(|b| b.remaining).collect();
    assert_eq!(remaining, [9.0, 0.0]);
    let refused = tb.acquire("jobs:{u7}", 4, 30_000, &buckets).await?;
    assert!(
        !refused.granted && refused.id.is_none() && refused.ms == 0.0,
        "{refused:?}"
    );
    assert_eq!(refused.in_flight, 1.0); // the slot was free: a bucket refused
    assert!(refused.buckets[0].allowed && !refused.buckets[1].allowed);
    assert!(tb.peek("rl:{u7}:s", 10.0, 1.0).await?.remaining < 9.5); // charged once
    Ok(())
}

#[tokio::test]
async fn hold_peek_holds_renew_and_settle() -> TestResult {
    let server = Server::start()?;
    let tb = server.client().await?;
    assert_eq!(tb.peek_holds("llm").await?, (0.0, 0.0, 0.0));
    let held = tb.hold("llm", 100_000.0, 50.0, 4000.0, 60_000).await?;
    assert!(
        held.reply.allowed && held.reply.remaining == 96_000.0,
        "{held:?}"
    );
    let id = held.id.ok_or("a hold taken has an id")?;
    let (holds, amount, ms) = tb.peek_holds("llm").await?;
    assert!(holds == 1.0 && amount == 4000.0 && ms > 59_000.0 && ms <= 60_001.0);
    let (renewed, count, ms) = tb.renew("llm", &id, 120_000).await?;
    assert!(renewed && count == 1.0 && ms > 119_000.0, "{ms}");
    let settled = tb
        .settle("llm", 100_000.0, 50.0, &id, 2500.0, 2000.0)
        .await?;
    assert!(settled.settled && settled.charged == -1500.0, "{settled:?}");
    let again = tb
        .settle("llm", 100_000.0, 50.0, &id, 2500.0, 2000.0)
        .await?;
    assert!(!again.settled && again.charged == 0.0);
    assert_eq!(tb.peek_holds("llm").await?, (0.0, 0.0, 0.0));
    Ok(())
}
