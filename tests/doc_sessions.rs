//! The redis-cli sessions of README.md and docs/*.md, run against a real server the way
//! `make run` starts it (the module loaded with the CL.THROTTLE alias), so they stay true.
//!
//! A session is a fenced block with `127.0.0.1:<port>> COMMAND` prompt lines, each followed
//! by the reply as redis-cli prints it. Every command of a file runs in order on one fresh
//! server, and its reply, printed as redis-cli would, must equal the block's lines. A
//! command on the server clock (its last argument is not a Unix time) cannot repeat the
//! doc's exact numbers: there a quoted number matches within 0.1 (or 1%), and a number
//! from 1e9 up (a reading of the clock itself) matches any such number; integers likewise
//! (TB.ACQUIRE's waits in ms). A quoted 16-hex-digit id the server makes (lease and hold
//! ids) matches any such id, and the doc's id in a later command is replaced by the one the
//! server gave. A block that
//! cannot run is marked on the line before it with `<!-- doc-session: skip (reason) -->`.

mod common;

use common::{Options, Reply, Server, doc_files, module_path};

const SKIP: &str = "<!-- doc-session: skip";

struct Step {
    line: usize,
    command: Vec<String>,
    expected: Vec<String>,
}

/// The prompt's command, if the line is a redis-cli prompt (`127.0.0.1:6379> ...`).
fn prompt(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("127.0.0.1:")?;
    let (port, command) = rest.split_once("> ")?;
    port.bytes().all(|b| b.is_ascii_digit()).then_some(command)
}

/// Splits a command line as redis-cli does for plain, 'single' and "double" quoted words.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut quote, mut any) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, any) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if any {
                    out.push(std::mem::take(&mut word));
                }
                any = false;
            }
            (_, c) => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// The sessions of one file, in order (skipped blocks left out).
fn sessions(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let (mut inside, mut skip, mut previous) = (false, false, "");
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            if !inside {
                skip = previous.trim_start().starts_with(SKIP);
            }
            inside = !inside;
            previous = line;
            continue;
        }
        previous = line;
        if !inside || skip {
            continue;
        }
        if let Some(command) = prompt(line) {
            steps.push(Step {
                line: i + 1,
                command: words(command),
                expected: Vec::new(),
            });
        } else if let Some(step) = steps.last_mut().filter(|s| s.line + s.expected.len() == i) {
            step.expected.push(line.trim_end().to_string());
        }
    }
    steps
}

/// A reply as redis-cli prints it (RESP2).
fn print(r: &Reply) -> Vec<String> {
    match r {
        Reply::Int(n) => vec![format!("(integer) {n}")],
        Reply::Bulk(b) => vec![format!("\"{}\"", String::from_utf8_lossy(b))],
        Reply::Simple(s) => vec![s.clone()],
        Reply::Error(e) => vec![format!("(error) {e}")],
        Reply::Nil => vec!["(nil)".into()],
        Reply::Array(items) if items.is_empty() => vec!["(empty array)".into()],
        Reply::Array(items) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let head = format!("{}) ", i + 1);
                for (j, line) in print(item).into_iter().enumerate() {
                    let pad = if j == 0 {
                        head.clone()
                    } else {
                        " ".repeat(head.len())
                    };
                    out.push(format!("{pad}{line}"));
                }
            }
            out
        }
        other => vec![format!("{other:?}")],
    }
}

/// The quoted number at the end of a printed line, with what comes before it.
fn quoted_number(line: &str) -> Option<(&str, f64)> {
    let body = line.strip_suffix('"')?;
    let start = body.rfind('"')?;
    Some((&body[..start], body[start + 1..].parse().ok()?))
}

/// `(integer) N` as its prefix and N.
fn integer(line: &str) -> Option<(&str, f64)> {
    let at = line.rfind("(integer) ")? + "(integer) ".len();
    Some((&line[..at], line[at..].parse().ok()?))
}

/// A quoted server-made id (TB.ACQUIRE's lease ids, TB.HOLD's hold ids: 16 lowercase hex
/// digits), as its prefix and the id.
fn quoted_id(line: &str) -> Option<(&str, &str)> {
    let body = line.strip_suffix('"')?;
    let start = body.rfind('"')?;
    let id = &body[start + 1..];
    (id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then(|| (&body[..start], id))
}

fn line_matches(got: &str, want: &str, server_clock: bool) -> bool {
    if got == want {
        return true;
    }
    if let (Some((g_head, _)), Some((w_head, _))) = (quoted_id(got), quoted_id(want)) {
        return g_head == w_head;
    }
    let (Some((g_head, g)), Some((w_head, w))) = (
        quoted_number(got).or_else(|| integer(got)),
        quoted_number(want).or_else(|| integer(want)),
    ) else {
        return false;
    };
    if !server_clock || g_head != w_head {
        return false;
    }
    if w >= 1e9 {
        return g >= 1e9;
    }
    (g - w).abs() <= 0.1_f64.max(w.abs() * 0.01)
}

#[test]
fn the_redis_cli_sessions_of_the_readme_and_docs_answer_as_shown() {
    let mut ran = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let steps = sessions(&text);
        if steps.is_empty() {
            continue;
        }
        // As `make run` loads it (redis.conf.example): with the CL.THROTTLE alias.
        let s = Server::start_with(Options {
            with_module: false,
            extra: vec![
                "--loadmodule".into(),
                module_path().display().to_string(),
                "CL.THROTTLE".into(),
            ],
        });
        let mut c = s.conn();
        // The ids the server made, by the id the doc shows in their place.
        let mut ids: Vec<(String, String)> = Vec::new();
        for step in &steps {
            let command: Vec<String> = step
                .command
                .iter()
                .map(|w| {
                    ids.iter()
                        .find(|(doc, _)| doc == w)
                        .map_or_else(|| w.clone(), |(_, got)| got.clone())
                })
                .collect();
            let reply = c.cmd(&command);
            let got = print(&reply);
            let server_clock = !step
                .command
                .last()
                .and_then(|a| a.parse::<f64>().ok())
                .is_some_and(|t| t >= 1e9);
            let same = got.len() == step.expected.len()
                && got
                    .iter()
                    .zip(&step.expected)
                    .all(|(g, w)| line_matches(g, w, server_clock));
            assert!(
                same,
                "{}:{}: {}\nthe doc shows:\n{}\nthe server answered:\n{}",
                file.display(),
                step.line,
                step.command.join(" "),
                step.expected.join("\n"),
                got.join("\n")
            );
            for (g, w) in got.iter().zip(&step.expected) {
                if let (Some((_, g)), Some((_, w))) = (quoted_id(g), quoted_id(w)) {
                    ids.push((w.to_string(), g.to_string()));
                }
            }
            ran += 1;
        }
    }
    assert!(ran >= 20, "only {ran} session commands found");
}

#[test]
fn a_wrong_reply_in_a_session_is_caught() {
    let doc = "```\n127.0.0.1:6379> TB.TAKE k 10 1 1 1764456268.5\n1) (integer) 1\n2) \"9\"\n```\n";
    let steps = sessions(doc);
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].expected.len(), 2);
    // A client-clock call's numbers must be exact; a server-clock one's within tolerance.
    assert!(!line_matches("2) \"9.05\"", "2) \"9\"", false));
    assert!(line_matches("2) \"9.05\"", "2) \"9\"", true));
    assert!(!line_matches("2) \"8\"", "2) \"9\"", true));
    assert!(!line_matches("1) (integer) 0", "1) (integer) 1", true));
    let skipped = format!("{SKIP} (needs a cluster) -->\n{doc}");
    assert!(sessions(&skipped).is_empty());
    assert_eq!(words("GET 'a b' \"c\" d"), ["GET", "a b", "c", "d"]);
}
