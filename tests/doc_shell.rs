//! The shell blocks and redis.conf lines of README.md and docs/*.md, run as printed, so
//! they stay true (the redis-cli sessions are `doc_sessions.rs`'s).
//!
//! Every fenced block of those files is one of:
//! - a redis-cli session (prompt lines `127.0.0.1:<port>> ...`): `doc_sessions.rs`;
//! - `sh` (or `bash`, `shell`): a shell block, run with `bash -euo pipefail` in an empty
//!   temporary directory, which must exit 0 within two minutes. The line before it may
//!   say how instead, in an HTML comment:
//!   - `<!-- doc-shell: server -->`: the block runs a server in the foreground on `$PORT`
//!     (`make run`); it is started with `PORT` set to a free port (and the repository as its
//!     directory), must answer PING with the module loaded (`COMMAND INFO tb.take`), and
//!     is stopped;
//!   - `<!-- doc-shell: cleanup <commands> -->`: run, then `<commands>` (also when it
//!     failed), for blocks that start daemons;
//!   - `<!-- doc-shell: skip (<reason>) -->`: not run, for the reason given (the test
//!     suite itself; a root install covered by `make test-dist`; commands of the reader's);
//! - `conf`: redis.conf lines: written to a config file with `port <free>`, a server
//!   started on it must answer PING with the module loaded;
//! - any other language (`text`, `python`, `rust`, `ts`, `http`, ...): not run here.
//!
//! A block without a language that is not a session fails the test: say what it is. The
//! docs' placeholders for the module's path (`/path/to/libredis_tb.so`, the installed
//! `/usr/local/lib/redis/modules/redis-tb-<version>.so`) are replaced by the module this
//! test run built; nothing else is changed.

mod common;

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, Reply, doc_files, free_port, module_path, server_binary};

const MARK: &str = "<!-- doc-shell:";

#[derive(Debug)]
struct Block {
    file: PathBuf,
    line: usize,
    lang: String,
    body: String,
    mark: Option<String>,
}

fn is_session_line(line: &str) -> bool {
    line.strip_prefix("127.0.0.1:")
        .and_then(|r| r.split_once("> "))
        .is_some_and(|(port, _)| port.bytes().all(|b| b.is_ascii_digit()))
}

/// The fenced blocks of a markdown text (top-level fences of three backticks).
fn blocks(file: &Path, text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(lang) = lines[i].strip_prefix("```") else {
            i += 1;
            continue;
        };
        let start = i;
        let mut j = i + 1;
        while j < lines.len() && !lines[j].starts_with("```") {
            j += 1;
        }
        let body: Vec<&str> = lines[start + 1..j.min(lines.len())].to_vec();
        let mark = start
            .checked_sub(1)
            .map(|p| lines[p].trim())
            .and_then(|l| l.strip_prefix(MARK))
            .and_then(|l| l.strip_suffix("-->"))
            .map(|l| l.trim().to_string());
        if !body.iter().any(|l| is_session_line(l)) {
            out.push(Block {
                file: file.to_path_buf(),
                line: start + 1,
                lang: lang.trim().to_string(),
                body: body.join("\n") + "\n",
                mark,
            });
        }
        i = j + 1;
    }
    out
}

/// The docs' module-path placeholders, replaced by the module this run built.
fn substitute(body: &str) -> String {
    let module = module_path().display().to_string();
    let mut out = body.replace("/path/to/libredis_tb.so", &module);
    while let Some(at) = out.find("/usr/local/lib/redis/modules/redis-tb-") {
        let end = out[at..].find(".so").map_or(out.len(), |e| at + e + 3);
        out.replace_range(at..end, &module);
    }
    out
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redis-tb-doc-shell-{tag}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn where_(b: &Block) -> String {
    format!("{}:{}", b.file.display(), b.line)
}

/// Runs `script` with bash in `dir`; (exit ok, output).
fn bash(script: &str, dir: &Path, env: &[(&str, String)], limit: Duration) -> (bool, String) {
    let mut cmd = Command::new("bash");
    cmd.args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("bash");
    let started = Instant::now();
    loop {
        match child.try_wait().unwrap() {
            Some(status) => {
                let mut out = String::new();
                child.stdout.take().map(|mut s| s.read_to_string(&mut out));
                child.stderr.take().map(|mut s| s.read_to_string(&mut out));
                return (status.success(), out);
            }
            None if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                return (false, format!("timed out after {limit:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn answers_with_module(port: u16, within: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Ok(mut c) = Conn::connect(port)
            && let Ok(Reply::Simple(pong)) = c.try_cmd(&["PING"])
            && pong == "PONG"
        {
            return match c.try_cmd(&["COMMAND", "INFO", "tb.take"]) {
                Ok(Reply::Array(items)) if items.first().is_some_and(|i| *i != Reply::Nil) => {
                    Ok(())
                }
                other => Err(format!(
                    "the module is not loaded: COMMAND INFO tb.take answered {other:?}"
                )),
            };
        }
        if started.elapsed() > within {
            return Err(format!("nothing answered PING on {port} within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_server_block(b: &Block) -> Result<(), String> {
    let port = free_port();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &substitute(&b.body)])
        .current_dir(repo)
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| e.to_string())?;
    let result = answers_with_module(port, Duration::from_secs(300));
    // The whole group: make, and the server it started.
    let pid = i32::try_from(child.id()).unwrap_or(0);
    if pid > 0 {
        // SAFETY: kill(2) on the process group this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    let _ = child.wait();
    result
}

fn run_conf_block(b: &Block) -> Result<(), String> {
    let port = free_port();
    let dir = tempdir("conf");
    let conf = dir.join("redis.conf");
    let text = format!(
        "{}\nport {port}\nbind 127.0.0.1\nsave \"\"\ndir {}\nlogfile {}\n",
        substitute(&b.body),
        dir.display(),
        dir.join("redis.log").display()
    );
    std::fs::write(&conf, text).map_err(|e| e.to_string())?;
    let mut child = Command::new(server_binary())
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let result = answers_with_module(port, Duration::from_secs(30));
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    result.map_err(|e| format!("{e}\nredis.log:\n{log}"))
}

fn run_block(b: &Block) -> Result<(), String> {
    let dir = tempdir("sh");
    let cleanup = b
        .mark
        .as_deref()
        .and_then(|m| m.strip_prefix("cleanup "))
        .map(str::to_string);
    let (ok, out) = bash(&substitute(&b.body), &dir, &[], Duration::from_secs(120));
    if let Some(c) = cleanup {
        let _ = bash(&c, &dir, &[], Duration::from_secs(60));
    }
    let _ = std::fs::remove_dir_all(&dir);
    if ok { Ok(()) } else { Err(out) }
}

#[test]
fn the_shell_blocks_and_config_lines_of_the_readme_and_docs_run_as_printed() {
    let mut failures = Vec::new();
    let (mut ran, mut skipped) = (0, 0);
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for b in blocks(&file, &text) {
            let mark = b.mark.as_deref().unwrap_or("");
            let result = match (b.lang.as_str(), mark) {
                ("", _) => Err("a block with no language that is not a redis-cli session: \
                                label it (sh, conf, text, ...)"
                    .to_string()),
                ("sh" | "bash" | "shell", m) if m.starts_with("skip") => {
                    if !(m.contains('(') && m.ends_with(')')) {
                        Err(
                            "a skipped block must say why: <!-- doc-shell: skip (reason) -->"
                                .into(),
                        )
                    } else {
                        skipped += 1;
                        continue;
                    }
                }
                ("sh" | "bash" | "shell", "server") => run_server_block(&b),
                ("sh" | "bash" | "shell", m) if m.is_empty() || m.starts_with("cleanup ") => {
                    run_block(&b)
                }
                ("sh" | "bash" | "shell", m) => Err(format!("unknown doc-shell mark {m:?}")),
                ("conf", _) => run_conf_block(&b),
                _ => continue,
            };
            ran += 1;
            if let Err(e) = result {
                failures.push(format!("{}:\n{}\n-> {e}", where_(&b), b.body));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} blocks failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran >= 5, "only {ran} blocks ran ({skipped} skipped)");
}

#[test]
fn a_failing_block_and_an_unlabelled_block_are_caught() {
    let doc = "```sh\nfalse\n```\n\n```\nnot a session\n```\n\n<!-- doc-shell: skip (ours) -->\n```sh\nfalse\n```\n";
    let bs = blocks(Path::new("x.md"), doc);
    assert_eq!(bs.len(), 3);
    assert!(run_block(&bs[0]).is_err());
    assert_eq!(bs[1].lang, "");
    assert_eq!(bs[2].mark.as_deref(), Some("skip (ours)"));
    let conf = Block {
        file: "x.md".into(),
        line: 1,
        lang: "conf".into(),
        body: "loadmodule /path/to/nothing.so\n".into(),
        mark: None,
    };
    assert!(run_conf_block(&conf).is_err());
    let ok = Block {
        body: "loadmodule /path/to/libredis_tb.so CL.THROTTLE\n".into(),
        ..conf
    };
    assert_eq!(run_conf_block(&ok), Ok(()));
}
