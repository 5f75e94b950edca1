//! The tower layer's cost per request before and after a change, in one run: the app of
//! `serve/` (`GET /`, `hello`) built twice, against today's `clients/rust` and against
//! the client crate of an earlier revision, each variant served by a process of its own
//! on CPU 0, loaded in turn in rounds whose order rotates and reverses:
//!
//! - `none`, `ping`, `rawping`: no limiter and the two floors (one `PING` through the
//!   `redis` crate; one pre-encoded `PING` on a raw socket), built against today's crate;
//! - `one`, `three`: today's layer with one policy and with three (one TB.MTAKE);
//! - `one@base`, `three@base`: the same app and policies against the baseline's crate.
//!
//! The measure is each server process's CPU time per answered request (all its threads,
//! `/proc/<pid>/task/<tid>/schedstat`), as in the `overhead` binary; wall-clock req/s are
//! given too. Both builds use this workspace's `Cargo.lock` and release profile in scratch
//! crates under the temporary directory, so the client's code is the only difference.
//!
//! `OVERHEAD_BASELINE=88fc3cc cargo run --release -p redis-tb-bench-integrations --bin before_after`
//! Environment: `OVERHEAD_BASELINE` (a revision, required), `OVERHEAD_SECONDS` per phase
//! (2), `OVERHEAD_ROUNDS` (6), `OVERHEAD_CONNECTIONS` (16), `OVERHEAD_PIN=0` to not pin,
//! `BEFORE_AFTER_OUT` (default bench/results/integrations-rust-before-after.md), plus
//! `REDIS_SERVER` and `REDIS_TB_MODULE` as for the tests.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use redis_tb_bench_integrations::{
    Phase, Result, Runtimes, command_calls, env_or, load_average, load_measured, median_of,
    median_ratio, process_cpu_ns, round_order,
};

const AUTH: &[(&str, &str)] = &[("authorization", "Bearer alice-token")];
const TB_COMMANDS: [&str; 2] = ["tb.take", "tb.mtake"];

/// (variant name, which build, the app variant it serves).
const VARIANTS: [(&str, Build, &str); 7] = [
    ("none", Build::Now, "none"),
    ("ping", Build::Now, "ping"),
    ("rawping", Build::Now, "rawping"),
    ("one", Build::Now, "one"),
    ("three", Build::Now, "three"),
    ("one@base", Build::Base, "one"),
    ("three@base", Build::Base, "three"),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Build {
    Now,
    Base,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output()?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", out.status).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn git(args: &[&str]) -> Result<String> {
    run(Command::new("git").arg("-C").arg(root()).args(args))
}

/// The client crate's folder at `sha`: `clients/rust`, or `crates/redis-tb-client` before
/// the move.
fn client_dir_at(sha: &str) -> Result<&'static str> {
    for dir in ["clients/rust", "crates/redis-tb-client"] {
        if exists_at(sha, &format!("{dir}/Cargo.toml"))? {
            return Ok(dir);
        }
    }
    Err(format!("{sha} has neither clients/rust nor crates/redis-tb-client").into())
}

/// Whether `path` exists in revision `sha`.
fn exists_at(sha: &str, path: &str) -> Result<bool> {
    let found = Command::new("git")
        .arg("-C")
        .arg(root())
        .args(["cat-file", "-e", &format!("{sha}:{path}")])
        .stderr(Stdio::null())
        .status()?;
    Ok(found.success())
}

/// The workspace's `[profile.release]` section, verbatim.
fn release_profile() -> Result<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml"))?;
    let at = manifest
        .find("[profile.release]")
        .ok_or("Cargo.toml has no [profile.release]")?;
    let rest = &manifest[at..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 1);
    Ok(rest[..end].trim_end().to_owned())
}

/// A scratch crate `dir/<name>` holding `serve/` with its client dependency pointing at
/// `client`, this workspace's lockfile and release profile; built into `target`, returns
/// its binary.
fn build_serve(dir: &Path, name: &str, client: &Path, target: &Path) -> Result<PathBuf> {
    let serve = Path::new(env!("CARGO_MANIFEST_DIR")).join("serve");
    let krate = dir.join(name);
    std::fs::create_dir_all(krate.join("src"))?;
    for file in ["lib.rs", "main.rs"] {
        std::fs::copy(serve.join("src").join(file), krate.join("src").join(file))?;
    }
    let manifest = std::fs::read_to_string(serve.join("Cargo.toml"))?;
    let dep = manifest
        .lines()
        .find(|l| l.starts_with("redis-tb-client = "))
        .ok_or("serve/Cargo.toml has no redis-tb-client line")?;
    let client = client.to_str().ok_or("a scratch path that is not UTF-8")?;
    let manifest = manifest
        .replace(dep, &format!("redis-tb-client = {{ path = {client:?} }}"))
        .replace(
            "name = \"redis-tb-bench-serve\"",
            &format!("name = \"{name}\""),
        );
    let manifest = format!(
        "{manifest}\n[lib]\nname = \"redis_tb_bench_serve\"\n\n[workspace]\n\n{}\n",
        release_profile()?
    );
    std::fs::write(krate.join("Cargo.toml"), manifest)?;
    std::fs::copy(root().join("Cargo.lock"), krate.join("Cargo.lock"))?;
    eprintln!("building {name} against {client}");
    run(Command::new("cargo")
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(krate.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", target))?;
    Ok(target.join("release").join(name))
}

/// Both servers: (today's binary, the baseline's binary).
fn build_both(rev: &str, sha: &str) -> Result<(PathBuf, PathBuf)> {
    let short = sha.get(..12).unwrap_or(sha);
    let dir = std::env::temp_dir().join(format!("redis-tb-rust-baseline-{short}"));
    let base_src = dir.join("base-src");
    let client_dir = client_dir_at(sha)?;
    if !base_src.join(client_dir).join("Cargo.toml").exists() {
        std::fs::create_dir_all(&base_src)?;
        let tar = dir.join("base.tar");
        let mut archive = vec![
            "archive",
            "--format=tar",
            "-o",
            tar.to_str().ok_or("a scratch path that is not UTF-8")?,
            sha,
            client_dir,
        ];
        // the script library the crate's `lua/` links point at (include_str!), where the
        // revision has it
        if exists_at(sha, "clients/lua")? {
            archive.push("clients/lua");
        }
        git(&archive)?;
        run(Command::new("tar")
            .arg("-xf")
            .arg(&tar)
            .arg("-C")
            .arg(&base_src))?;
    }
    // Today's crate as it is in the working tree (what is being measured), copied so that
    // both builds are the same kind of scratch crate; `-L` copies the files its `lua/`
    // links point at (clients/lua), as `cargo package` stores them.
    let now_src = dir.join("now-src");
    let _ = std::fs::remove_dir_all(&now_src);
    std::fs::create_dir_all(&now_src)?;
    run(Command::new("cp")
        .arg("-rL")
        .arg(root().join("clients/rust"))
        .arg(now_src.join("rust")))?;
    let target = dir.join("target");
    let now = build_serve(&dir, "serve-now", &now_src.join("rust"), &target)?;
    let base = build_serve(&dir, "serve-base", &base_src.join(client_dir), &target)?;
    eprintln!("baseline {rev} = {sha} ({client_dir})");
    Ok((now, base))
}

/// A server process; killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `bin variant url` (it inherits this thread's CPU: 0 when pinned) and waits for
/// its `listening <addr>` line.
fn start(bin: &Path, variant: &str, url: &str) -> Result<Server> {
    let mut child = Command::new(bin)
        .args([variant, url])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out).read_line(&mut line)?;
    }
    let addr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok());
    match addr {
        Some(addr) => Ok(Server { child, addr }),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("{} {variant}: no listening line ({line:?})", bin.display()).into())
        }
    }
}

fn main() -> Result<()> {
    let rev = std::env::var("OVERHEAD_BASELINE")
        .map_err(|_| "OVERHEAD_BASELINE=<revision> names the baseline")?;
    let sha = git(&["rev-parse", "--verify", &format!("{rev}^{{commit}}")])?;
    let head = git(&["rev-parse", "--short=12", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--", "clients/rust"])?.is_empty();
    // Build before pinning: the builds would inherit CPU 0.
    let (now, base) = build_both(&rev, &sha)?;
    let rt = Runtimes::new("OVERHEAD_PIN")?;
    let head = if dirty {
        format!("{head} with uncommitted changes to clients/rust")
    } else {
        head
    };
    rt.loader
        .block_on(measure(&rt, &rev, &sha, &head, &now, &base))
}

async fn measure(
    rt: &Runtimes,
    rev: &str,
    sha: &str,
    head: &str,
    now: &Path,
    base: &Path,
) -> Result<()> {
    let secs: f64 = env_or("OVERHEAD_SECONDS", 2.0);
    let rounds: usize = env_or("OVERHEAD_ROUNDS", 6);
    let connections: usize = env_or("OVERHEAD_CONNECTIONS", 16);
    let out = std::env::var("BEFORE_AFTER_OUT").unwrap_or_else(|_| {
        format!(
            "{}/../../results/integrations-rust-before-after.md",
            env!("CARGO_MANIFEST_DIR")
        )
    });

    let load_before = load_average();
    let redis = rt.redis()?;
    let info = redis.command(&["INFO", "server"])?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    let url = redis.url();
    let mut servers = Vec::new();
    for (_, build, variant) in VARIANTS {
        let bin = if build == Build::Now { now } else { base };
        servers.push(start(bin, variant, &url)?);
    }
    let phase = |i: usize, secs: f64| {
        let (addr, pid) = servers
            .get(i)
            .map_or((SocketAddr::from(([127, 0, 0, 1], 0)), 0), |s| {
                (s.addr, s.child.id())
            });
        load_measured(
            addr,
            "/",
            AUTH,
            connections,
            secs,
            move || process_cpu_ns(pid),
            || 0,
        )
    };
    for i in 0..VARIANTS.len() {
        phase(i, 1.0).await?;
    }

    // rows[round][variant]; answers that made no TB call (a decision by the failure mode
    // would flatter the layer) per layer variant.
    let mut rows: Vec<Vec<Phase>> = Vec::new();
    let mut without_call = 0u64;
    for round in 0..rounds {
        let mut phases = vec![Phase::default(); VARIANTS.len()];
        for i in round_order(round, VARIANTS.len()) {
            let calls = command_calls(&redis, &TB_COMMANDS)?;
            let p = phase(i, secs).await?;
            let calls = command_calls(&redis, &TB_COMMANDS)?.saturating_sub(calls);
            if matches!(VARIANTS[i].2, "one" | "three") {
                without_call += (p.ok + p.limited + p.other).saturating_sub(calls);
            }
            phases[i] = p;
        }
        eprintln!(
            "round {}: {}",
            round + 1,
            VARIANTS
                .iter()
                .zip(&phases)
                .map(|((v, ..), p)| format!(
                    "{v} {:.0} req/s {:.1} cpu-us/req",
                    p.rps(),
                    p.cpu_us()
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
        rows.push(phases);
    }
    drop(servers);

    let idx = |name: &str| VARIANTS.iter().position(|v| v.0 == name).unwrap_or(0);
    let ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::capacity);
    let wall_ratio = |a: &str, b: &str| median_ratio(&rows, idx(a), idx(b), Phase::rps);
    let med_cpu = |a: &str| median_of(&rows, idx(a), Phase::cpu_us);
    let med_rps = |a: &str| median_of(&rows, idx(a), Phase::rps);
    let non_200: u64 = rows.iter().flatten().map(|p| p.other + p.limited).sum();
    let short = sha.get(..12).unwrap_or(sha);

    let mut md = String::new();
    md.push_str("# Rust integration before and after, in one run\n\n");
    md.push_str(&format!(
        "The app of `bench/integrations/rust/serve` (`GET /`, answering `hello`) built twice \
         in scratch crates with this workspace's `Cargo.lock` and release profile: against \
         today's `clients/rust` ({head}) and against the client crate of `{rev}` \
         ({short}). Each variant is a process of its own on CPU 0; the load generator and \
         redis-server share CPU 1. Written by `OVERHEAD_BASELINE={rev} cargo run --release \
         -p redis-tb-bench-integrations --bin before_after`.\n\n"
    ));
    md.push_str(
        "The primary measure is each server process's CPU time per answered request (all its \
         threads, user and kernel, `/proc/<pid>/task/<tid>/schedstat`); its inverse, \
         requests per CPU-second, is the throughput the app reaches with its core to \
         itself. Ratios are taken per round, then the median over rounds. The floors: one \
         `PING` per request through the `redis` crate (the client library the layer is \
         built on) and one pre-encoded `PING` on a raw socket (no client library).\n\n",
    );
    md.push_str("| comparison | median ratio of requests per CPU-second | median ratio of wall-clock req/s |\n|---|---:|---:|\n");
    for (a, b, label) in [
        ("one", "ping", "**one policy / one PING**, today"),
        ("one@base", "ping", "one policy / one PING, before"),
        ("one", "rawping", "**one policy / one raw PING**, today"),
        ("one@base", "rawping", "one policy / one raw PING, before"),
        ("three", "ping", "**three policies / one PING**, today"),
        ("three@base", "ping", "three policies / one PING, before"),
        (
            "three",
            "rawping",
            "**three policies / one raw PING**, today",
        ),
        (
            "three@base",
            "rawping",
            "three policies / one raw PING, before",
        ),
        ("one", "one@base", "**one policy, today / before**"),
        ("three", "three@base", "**three policies, today / before**"),
        ("ping", "rawping", "one PING / one raw PING"),
    ] {
        md.push_str(&format!(
            "| {label} | {:.3} | {:.3} |\n",
            ratio(a, b),
            wall_ratio(a, b)
        ));
    }
    md.push_str("\nMedian CPU µs per request (median wall-clock req/s): ");
    md.push_str(
        &VARIANTS
            .iter()
            .map(|(v, ..)| format!("{v} {:.1} ({:.0})", med_cpu(v), med_rps(v)))
            .collect::<Vec<_>>()
            .join(", "),
    );
    md.push_str(".\n\nPer round, CPU µs per request (wall-clock req/s):\n\n| round |");
    for (v, ..) in VARIANTS {
        md.push_str(&format!(" {v} |"));
    }
    md.push_str(" one today / before | three today / before |\n|---:|");
    md.push_str(&"---:|".repeat(VARIANTS.len() + 2));
    md.push('\n');
    for (round, phases) in rows.iter().enumerate() {
        md.push_str(&format!("| {} |", round + 1));
        for p in phases {
            md.push_str(&format!(" {:.1} ({:.0}) |", p.cpu_us(), p.rps()));
        }
        let r = |a: &str, b: &str| phases[idx(a)].capacity() / phases[idx(b)].capacity();
        md.push_str(&format!(
            " {:.3} | {:.3} |\n",
            r("one", "one@base"),
            r("three", "three@base")
        ));
    }
    let profile = if cfg!(debug_assertions) {
        "dev (unoptimized)"
    } else {
        "release"
    };
    md.push_str(&format!(
        "\nSetup: {connections} keep-alive HTTP/1.1 connections sending `GET /` with \
         `Authorization: Bearer alice-token` back to back, {secs} s per phase, {rounds} rounds \
         in an order that rotates and reverses from round to round, after a 1 s warm-up of \
         each variant. CPUs: {}; each server a single-threaded tokio runtime. redis-server \
         {version} (module loaded, persistence off) on loopback, RESP3 (the client's \
         default). Limits so high that every request is admitted (non-200 answers: \
         {non_200}; answers of a layer variant without a TB.TAKE or TB.MTAKE call: \
         {without_call}). Driver profile: {profile}. Load average (1, 5, 15 min) before \
         the run: {load_before}, after: {}.\n",
        if rt.pinned {
            "the servers on CPU 0, the load generator and redis-server on CPU 1 (`taskset`)"
        } else {
            "not pinned"
        },
        load_average(),
    ));
    if let Some(dir) = Path::new(&out).parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, &md)?;
    println!("{md}");
    eprintln!("wrote {out}");
    Ok(())
}
