//! Benchmark support shared by the `overhead` and `flood` binaries (not part of the
//! example's lesson): the two tokio runtimes (the apps on CPU 0, the load generator on
//! CPU 1 with redis-server), the apps' thread CPU time and redis-server's, and a
//! closed-loop load of keep-alive HTTP/1.1 connections that counts answers by status.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use redis_tb_axum_example::support::{HttpConn, RedisServer};

/// A benchmark's error type.
pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The apps run on their own tokio runtime, whose one worker thread has this name; the
/// load generator runs on another runtime, so that only the apps' CPU time is measured.
pub const APP_THREAD: &str = "app-worker";
/// The load generator's worker thread.
pub const LOAD_THREAD: &str = "load-worker";

/// `name` from the environment, parsed, else `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Counts of one phase of load.
#[derive(Clone, Copy, Debug, Default)]
pub struct Phase {
    /// 200 answers.
    pub ok: u64,
    /// 429 answers.
    pub limited: u64,
    /// Any other status.
    pub other: u64,
    /// Wall-clock length of the phase.
    pub seconds: f64,
    /// CPU time the apps' thread spent during the phase, in seconds.
    pub cpu: f64,
    /// CPU time (user + system) redis-server spent during the phase, in seconds (0 when
    /// not measured: [`load_measured`]'s `server` reads it).
    pub server_cpu: f64,
}

impl Phase {
    /// 200 answers per second.
    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.seconds
    }

    /// All answers per second.
    pub fn answers_per_second(&self) -> f64 {
        (self.ok + self.limited + self.other) as f64 / self.seconds
    }

    /// CPU microseconds the apps' thread spent per 200 answer.
    pub fn cpu_us(&self) -> f64 {
        self.cpu * 1e6 / self.ok.max(1) as f64
    }

    /// CPU microseconds redis-server spent per 200 answer (0 when not measured).
    pub fn server_cpu_us(&self) -> f64 {
        self.server_cpu * 1e6 / self.ok.max(1) as f64
    }

    /// 200 answers per CPU-second of the apps' thread: the throughput it would reach with
    /// its core to itself (what other processes on a shared machine take does not count).
    pub fn capacity(&self) -> f64 {
        self.ok as f64 / self.cpu.max(1e-9)
    }
}

/// Thread directories (`/proc/self/task/<tid>`) of this process's threads named `name`.
fn threads(name: &str) -> Vec<std::path::PathBuf> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| t.ok())
        .map(|t| t.path())
        .filter(|p| std::fs::read_to_string(p.join("comm")).is_ok_and(|c| c.trim_end() == name))
        .collect()
}

/// Nanoseconds the apps' thread has run on a CPU (`/proc/self/task/<tid>/schedstat`).
pub fn cpu_ns() -> u64 {
    threads(APP_THREAD)
        .iter()
        .filter_map(|t| std::fs::read_to_string(t.join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// Nanoseconds all threads of process `pid` have run on a CPU
/// (`/proc/<pid>/task/<tid>/schedstat`); 0 when it is gone.
pub fn process_cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(|t| t.ok())
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| {
            s.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// Clock ticks a second of `/proc/<pid>/stat`'s times (`getconf CLK_TCK`, else 100).
fn clock_ticks() -> u64 {
    static TICKS: OnceLock<u64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .unwrap_or(100)
    })
}

/// Nanoseconds of CPU time (user + system, all threads) process `pid` has used: `utime`
/// and `stime` of `/proc/<pid>/stat`, in clock ticks (10 ms at 100 a second); 0 when it is
/// gone.
pub fn process_stat_cpu_ns(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    // Field 2, the command, is in parentheses and may hold spaces: count from the last
    // `)`, after which field 3 (`state`) comes first, so utime (14) and stime (15) are the
    // 12th and 13th.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    ticks.saturating_mul(1_000_000_000) / clock_ticks()
}

/// The process id of `redis` (`process_id` of `INFO server`).
pub fn server_pid(redis: &RedisServer) -> Result<u32> {
    let info = redis.command(&["INFO", "server"])?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| "INFO server gave no process_id".into())
}

fn taskset(args: &[&str]) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("taskset {args:?} failed: {status}").into())
    }
}

/// Moves the threads named `name` to `cpu`.
fn pin_threads(name: &str, cpu: usize) -> Result<()> {
    for t in threads(name) {
        let tid = t
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        taskset(&["-p", "-c", &cpu.to_string(), &tid])?;
    }
    Ok(())
}

/// The two runtimes of a benchmark.
pub struct Runtimes {
    /// Serves the apps (one worker thread, [`APP_THREAD`]; CPU 0 when pinned).
    pub apps: tokio::runtime::Runtime,
    /// Runs the load generator (one worker thread, [`LOAD_THREAD`]; CPU 1 when pinned).
    pub loader: tokio::runtime::Runtime,
    /// Whether the threads are pinned (2+ cores and `<prefix>_PIN` not `0`).
    pub pinned: bool,
    /// Cores on the machine.
    pub cores: usize,
}

impl Runtimes {
    /// Builds them; pins unless `pin_var` (`OVERHEAD_PIN`, say) is `0` or there is one core.
    /// Call before any other thread exists: the runtimes' threads inherit CPU 0.
    pub fn new(pin_var: &str) -> Result<Runtimes> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let pinned = std::env::var(pin_var).map_or(true, |v| v != "0") && cores >= 2;
        if pinned {
            taskset(&["-a", "-p", "-c", "0", &std::process::id().to_string()])?;
        }
        let apps = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(APP_THREAD)
            .enable_all()
            .build()?;
        let loader = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(LOAD_THREAD)
            .enable_all()
            .build()?;
        if pinned {
            // The apps keep CPU 0 to themselves; the load generator shares CPU 1 with
            // Redis. Spawning a task makes sure the worker thread exists before it moves.
            loader.block_on(async { tokio::spawn(async {}).await })?;
            pin_threads(LOAD_THREAD, 1)?;
        }
        Ok(Runtimes {
            apps,
            loader,
            pinned,
            cores,
        })
    }

    /// redis-server with the module, on CPU 1 when pinned.
    pub fn redis(&self) -> Result<RedisServer> {
        Ok(if self.pinned {
            RedisServer::start_pinned(1)?
        } else {
            RedisServer::start()?
        })
    }

    /// What the pinning was, for a report.
    pub fn describe(&self) -> String {
        let cpus = if self.pinned {
            "the apps' runtime (one worker thread) on CPU 0; the load generator's runtime \
             (one worker thread) and redis-server on CPU 1 (`taskset`)"
        } else {
            "not pinned"
        };
        format!("{cpus}; {} cores on the machine", self.cores)
    }
}

/// `connections` keep-alive connections each sending `GET path` with `headers` back to
/// back for `secs`; answers counted by status, CPU time that of the apps' thread.
pub async fn load(
    addr: SocketAddr,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    connections: usize,
    secs: f64,
) -> Result<Phase> {
    load_measured(addr, path, headers, connections, secs, cpu_ns, || 0).await
}

/// [`load`] with the app's CPU time read by `cpu` ([`process_cpu_ns`] of an app served by
/// another process) and redis-server's by `server` ([`process_stat_cpu_ns`] of its pid,
/// [`Phase::server_cpu`]; `|| 0` where it is not measured): nanoseconds, each read at the
/// start and the end of the phase.
pub async fn load_measured(
    addr: SocketAddr,
    path: &'static str,
    headers: &'static [(&'static str, &'static str)],
    connections: usize,
    secs: f64,
    cpu: impl Fn() -> u64,
    server: impl Fn() -> u64,
) -> Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new([AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)]);
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (stop, counts) = (stop.clone(), counts.clone());
        let mut conn = HttpConn::connect(addr).await?;
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let slot = match conn.request("GET", path, headers).await {
                    Ok(r) if r.status == 200 => 0,
                    Ok(r) if r.status == 429 => 1,
                    Ok(_) => 2,
                    Err(_) => break,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let start = Instant::now();
    let cpu_start = cpu();
    let server_start = server();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let at_stop = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    let cpu = cpu().saturating_sub(cpu_start) as f64 / 1e9;
    let server_cpu = server().saturating_sub(server_start) as f64 / 1e9;
    let seconds = start.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    Ok(Phase {
        ok: at_stop[0],
        limited: at_stop[1],
        other: at_stop[2],
        seconds,
        cpu,
        server_cpu,
    })
}

/// The 1, 5 and 15 minute load averages (`/proc/loadavg`).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The order in which round `round` loads `n` variants: rotated by the round and reversed
/// every other round, so that no variant always follows the same one.
pub fn round_order(round: usize, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    if n > 0 {
        order.rotate_left(round % n);
    }
    if round % 2 == 1 {
        order.reverse();
    }
    order
}

/// The median over rounds (`rows[round][variant]`) of variant `a`'s `measure` over `b`'s.
pub fn median_ratio(rows: &[Vec<Phase>], a: usize, b: usize, measure: fn(&Phase) -> f64) -> f64 {
    median(
        rows.iter()
            .map(|r| measure(&r[a]) / measure(&r[b]))
            .collect(),
    )
}

/// [`median_ratio`] with the range over rounds: (median, lowest, highest).
pub fn ratio_range(
    rows: &[Vec<Phase>],
    a: usize,
    b: usize,
    measure: fn(&Phase) -> f64,
) -> (f64, f64, f64) {
    let ratios: Vec<f64> = rows
        .iter()
        .map(|r| measure(&r[a]) / measure(&r[b]))
        .collect();
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(ratios), low, high)
}

/// The median over rounds of variant `a`'s `measure`.
pub fn median_of(rows: &[Vec<Phase>], a: usize, measure: fn(&Phase) -> f64) -> f64 {
    median(rows.iter().map(|r| measure(&r[a])).collect())
}

/// The median (NaN of nothing).
pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

/// `calls=` of `cmdstat_<command>` in `INFO commandstats` (0 when never called).
pub fn command_calls(redis: &RedisServer, commands: &[&str]) -> Result<u64> {
    let info = redis.command(&["INFO", "commandstats"])?;
    Ok(commands
        .iter()
        .map(|name| {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|rest| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum())
}

/// The report file both binaries write: `bench/results/integrations-rust.md`, or
/// `OVERHEAD_OUT`.
pub fn report_path() -> String {
    std::env::var("OVERHEAD_OUT").unwrap_or_else(|_| {
        format!(
            "{}/../../results/integrations-rust.md",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}
