//! TB.THROTTLE, the CL.THROTTLE drop-in (and its opt-in `CL.THROTTLE` alias), checked
//! against a real redis-server with the module loaded.
//!
//! TB.THROTTLE runs on the server's clock. The sequences below use slow rates (1 per 60 s,
//! 2 per second) so that the refill between two calls a few milliseconds apart changes no
//! reply: `remaining` is floored and waits are rounded up to whole seconds, so a refill of
//! a few thousandths of a token leaves every integer where the arithmetic puts it.

mod common;

use std::time::{Duration, Instant};

use common::{
    CORRUPT_TIME, CORRUPT_TOKENS, Conn, Options, Reply, Server, WRONGTYPE, dump, fingerprint,
    free_port, hget, hgetall, info_field, module_path, read_log, repl_offset, server_binary,
    server_command, start_replica, tb_counters, wait_for,
};

/// The five-integer reply `[limited, limit, remaining, retry_after, reset_after]`.
fn ints(v: [i64; 5]) -> Reply {
    Reply::Array(v.iter().map(|&i| Reply::Int(i)).collect())
}

/// The reply's five integers (panics on any other shape).
fn five(r: &Reply) -> [i64; 5] {
    let a = r.array();
    assert_eq!(a.len(), 5, "{r:?}");
    [a[0].int(), a[1].int(), a[2].int(), a[3].int(), a[4].int()]
}

/// `got` is `want`, except that its positive times (retry_after, reset_after: seconds,
/// rounded up) may be up to the whole seconds of `elapsed` less, for a bucket that has
/// been refilling for at most `elapsed` since the expected reply was worked out. Any
/// other reply (an error) must be exactly `want`.
fn assert_refilling(got: &Reply, want: &Reply, elapsed: Duration, line: &str) {
    let (Reply::Array(_), Reply::Array(_)) = (got, want) else {
        assert_eq!(got, want, "{line}");
        return;
    };
    let (g, w) = (five(got), five(want));
    let slack = elapsed.as_secs() as i64;
    assert_eq!(g[..3], w[..3], "{line}: {got:?}");
    for i in 3..5 {
        if w[i] > 0 {
            assert!(
                (w[i] - slack..=w[i]).contains(&g[i]),
                "{line}: field {i} is {}, want {} (at most {slack} s less)",
                g[i],
                w[i]
            );
        } else {
            assert_eq!(g[i], w[i], "{line}: {got:?}");
        }
    }
}

fn err(text: &str) -> Reply {
    Reply::Error(text.to_string())
}

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// The rate `count / period` as the shortest text that reads back as the same double, as
/// TB.TAKE and TB.PEEK take it.
fn rate_text(count: f64, period: f64) -> String {
    format!("{}", count / period)
}

/// A server with the module loaded with `args` after its path (`--loadmodule path ARG`):
/// the harness's own `--loadmodule` has no arguments, so it is left off.
fn server_with_load_args(args: &[&str], extra: &[&str]) -> Server {
    let mut all = vec![
        "--loadmodule".to_string(),
        module_path().display().to_string(),
    ];
    all.extend(args.iter().map(|a| a.to_string()));
    all.extend(extra.iter().map(|a| a.to_string()));
    Server::start_with(Options {
        with_module: false,
        extra: all,
    })
}

/// A server that also serves `CL.THROTTLE` (`loadmodule libredis_tb.so CL.THROTTLE`).
fn alias_server() -> Server {
    server_with_load_args(&["CL.THROTTLE"], &[])
}

/// `COMMAND <sub> <name>`'s reply with every occurrence of the name itself blanked, so the
/// entries of a command and of its alias can be compared.
fn command_reply_without_name(c: &mut Conn, sub: &str, name: &str) -> Reply {
    fn blank(r: &Reply, name: &str) -> Reply {
        match r {
            Reply::Bulk(b) if b.eq_ignore_ascii_case(name.as_bytes()) => Reply::Bulk(b"*".to_vec()),
            Reply::Simple(s) if s.eq_ignore_ascii_case(name) => Reply::Simple("*".into()),
            Reply::Array(items) => Reply::Array(items.iter().map(|i| blank(i, name)).collect()),
            other => other.clone(),
        }
    }
    blank(&c.cmd(&["COMMAND", sub, name]), name)
}

// ---- The reply's shape ----

#[test]
fn reply_is_five_integers_with_limit_max_burst_plus_one_under_resp2() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 4, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 3, -1, 120]));
    // max_burst 0 is a bucket of one.
    assert_eq!(c.q("TB.THROTTLE one 0 1 60"), ints([0, 1, 0, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE one 0 1 60"), ints([1, 1, 0, 60, 60]));
    assert_eq!(
        c.q("TB.THROTTLE big 999999 1 1"),
        ints([0, 1_000_000, 999_999, -1, 1])
    );
}

#[test]
fn reply_is_five_integers_under_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(matches!(c.q("HELLO 3"), Reply::Array(_)));
    // RESP3 integers (`:`), not doubles or bulk strings.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 4, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 4"), ints([0, 5, 0, -1, 300]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([1, 5, 0, 60, 300]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 6"), ints([1, 5, 0, -1, 300]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 0, -1, 300]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 -5"), ints([0, 5, 5, -1, 0]));
    assert_eq!(
        c.q("TB.THROTTLE k 4 1 60 x"),
        err("ERR quantity is not a valid number")
    );
}

#[test]
fn sub_second_retry_after_rounds_up_to_one_second() {
    let s = Server::start();
    let mut c = s.conn();
    // A bucket of 1 refilling 2 per second: full again 0.5 s after a take.
    assert_eq!(c.q("TB.THROTTLE half 0 1 0.5"), ints([0, 1, 0, -1, 1]));
    // Refused: the token is back in under 0.5 s, which reads 1 (never 0: a caller that
    // waits 0 s and retries at once would be refused again).
    assert_eq!(c.q("TB.THROTTLE half 0 1 0.5"), ints([1, 1, 0, 1, 1]));
    // 100 per second: the wait is about 10 ms and still reads 1 (the two calls are
    // pipelined, so they run microseconds apart).
    c.send(&["TB.THROTTLE", "fast", "0", "100", "1"]);
    c.send(&["TB.THROTTLE", "fast", "0", "100", "1"]);
    assert_eq!(c.read(), ints([0, 1, 0, -1, 1]));
    assert_eq!(c.read(), ints([1, 1, 0, 1, 1]));
}

/// README: "Where a wait is a whole number of seconds both answer the same" (as
/// redis-cell). One per 49 s is full again 49 s after a take; redis-cell answers 49. The
/// float rate 1/49 does not invert exactly (49 x (1/49) < 1), and the wait, rounded up to
/// whole microseconds (and nudged up for float time) before being rounded up to whole
/// seconds, must not become 50.
#[test]
fn whole_second_reset_after_is_not_overstated_when_the_rate_is_an_inexact_reciprocal() {
    let s = Server::start();
    let mut c = s.conn();
    let mut wrong = Vec::new();
    for (i, (count, period, full_in)) in [
        ("1", "49", 49),
        ("1", "98", 98),
        ("1", "103", 103),
        ("3", "147", 49),
        ("1", "60", 60),
        ("1", "3600", 3600),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("k{i}");
        let r = c.cmd(&["TB.THROTTLE", &key, "0", count, period]);
        if r != ints([0, 1, 0, -1, full_in]) {
            wrong.push(format!(
                "TB.THROTTLE {key} 0 {count} {period}: got {:?}, want {:?}",
                five(&r),
                [0, 1, 0, -1, full_in]
            ));
        }
    }
    // One per 1e9 s (the smallest rate): whether the nudge is needed depends on the bits
    // of the server's clock, so try twenty times.
    for i in 0..20 {
        let key = format!("slow{i}");
        let r = c.cmd(&["TB.THROTTLE", &key, "0", "1", "1e9"]);
        if r != ints([0, 1, 0, -1, 1_000_000_000]) {
            wrong.push(format!(
                "TB.THROTTLE {key} 0 1 1e9: got {:?}, want {:?}",
                five(&r),
                [0, 1, 0, -1, 1_000_000_000]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn remaining_is_floored_and_reset_after_rounded_up() {
    let s = Server::start();
    let mut c = s.conn();
    // Half a token taken: 4.5 left (reads 4), full in 30 s.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0.5"), ints([0, 5, 4, -1, 30]));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("4.5"));
    // One more: 3.5 and a little refill (reads 3), full in just under 90 s (reads 90).
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 1"), ints([0, 5, 3, -1, 90]));
    // A refused call reports the floored remaining too.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 4"), ints([1, 5, 3, 30, 90]));
}

// ---- CL.THROTTLE's sequence on the server clock ----

#[test]
fn cl_throttle_sequence_on_the_server_clock_answers_as_redis_cell() {
    let s = Server::start();
    let mut c = s.conn();
    // max_burst 4, 1 per 60 s: a bucket of 5 refilling one token a minute.
    // More than the limit can never pass; on a missing key nothing is created.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 6"), ints([1, 5, 5, -1, 0]));
    assert_eq!(c.q("EXISTS k"), Reply::Int(0));
    // A burst of five, each one minute further from full.
    for (i, want) in [
        [0, 5, 4, -1, 60],
        [0, 5, 3, -1, 120],
        [0, 5, 2, -1, 180],
        [0, 5, 1, -1, 240],
        [0, 5, 0, -1, 300],
    ]
    .into_iter()
    .enumerate()
    {
        assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints(want), "call {i}");
    }
    // Then refused: the next token is a minute away, the bucket full in five.
    let before = fingerprint(&mut c, &["k"]);
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([1, 5, 0, 60, 300]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 3"), ints([1, 5, 0, 180, 300]));
    // Above the limit: never, so retry_after is -1.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 6"), ints([1, 5, 0, -1, 300]));
    // Quantity 0 reports and writes nothing.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 0, -1, 300]));
    assert_eq!(
        fingerprint(&mut c, &["k"]),
        before,
        "refused calls and quantity 0 changed the bucket"
    );
    // A negative quantity gives tokens back...
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 -2"), ints([0, 5, 2, -1, 180]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 1, -1, 240]));
    // ...never above the limit.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 -100"), ints([0, 5, 5, -1, 0]));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("5"));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 5, -1, 0]));
    // And the bucket serves a full burst again.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 5"), ints([0, 5, 0, -1, 300]));
}

#[test]
fn quantity_zero_writes_nothing_and_never_creates_the_key() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(c.q("TB.THROTTLE missing 4 1 60 0"), ints([0, 5, 5, -1, 0]));
    assert_eq!(c.q("EXISTS missing"), Reply::Int(0));
    // A refund to a missing (so full) bucket adds nothing and creates nothing either.
    assert_eq!(c.q("TB.THROTTLE missing 4 1 60 -1"), ints([0, 5, 5, -1, 0]));
    assert_eq!(c.q("EXISTS missing"), Reply::Int(0));
    // On an existing bucket the DUMP (type, fields, encoding) and the expiry stay the same.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 2"), ints([0, 5, 3, -1, 120]));
    let before = fingerprint(&mut c, &["k"]);
    let raw = dump(&mut c, b"k");
    for _ in 0..3 {
        assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 3, -1, 120]));
    }
    assert_eq!(dump(&mut c, b"k"), raw);
    assert_eq!(fingerprint(&mut c, &["k"]), before);
}

// ---- Fractional rates and more than 1000 per second ----

#[test]
fn fractional_period_is_honoured() {
    let s = Server::start();
    let mut c = s.conn();
    // max_burst 9, 1 per 0.5 s: a bucket of 10 refilling 2 per second.
    for i in 0..10i64 {
        let want = [0, 10, 9 - i, -1, (i + 2) / 2];
        assert_eq!(c.q("TB.THROTTLE k 9 1 0.5"), ints(want), "call {i}");
    }
    // Empty: the next token in under 0.5 s (reads 1), full in just under 5 s.
    assert_eq!(c.q("TB.THROTTLE k 9 1 0.5"), ints([1, 10, 0, 1, 5]));
    // 0.6 s later 1.2 tokens are back: admitted.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(c.q("TB.THROTTLE k 9 1 0.5"), ints([0, 10, 0, -1, 5]));
    // The stored bucket is a bucket of 10 refilling at 2 per second.
    let last = hget(&mut c, "k", "last_refill_time").unwrap();
    let tokens = hget(&mut c, "k", "tokens").unwrap();
    let peek = c.cmd(&["TB.PEEK", "k", "10", "2", &last]);
    assert_eq!(peek.array()[1].text(), tokens, "{peek:?}");
    let t: f64 = tokens.parse().unwrap();
    assert!(
        (peek.array()[3].num() - (10.0 - t) / 2.0).abs() < 1e-4,
        "{peek:?}"
    );
}

#[test]
fn fractional_count_per_period_is_honoured() {
    let s = Server::start();
    let mut c = s.conn();
    // 1.5 per 3 s = 0.5 per second, a bucket of 1: full 2 s after a take.
    assert_eq!(c.q("TB.THROTTLE k 0 1.5 3"), ints([0, 1, 0, -1, 2]));
    assert_eq!(c.q("TB.THROTTLE k 0 1.5 3"), ints([1, 1, 0, 2, 2]));
    // 0.5 per 0.25 s = 2 per second with fractional count and period.
    assert_eq!(c.q("TB.THROTTLE h 3 0.5 0.25 2"), ints([0, 4, 2, -1, 1]));
    assert_eq!(c.q("TB.THROTTLE h 3 0.5 0.25 3"), ints([1, 4, 2, 1, 1]));
    // Below one per second and fractional: 0.25 per 10 s = one token in 40 s.
    assert_eq!(c.q("TB.THROTTLE slow 1 0.25 10"), ints([0, 2, 1, -1, 40]));
    assert_eq!(c.q("TB.THROTTLE slow 1 0.25 10 2"), ints([1, 2, 1, 40, 40]));
}

#[test]
fn more_than_a_thousand_per_second_admits_a_full_burst_then_refills_within_milliseconds() {
    let s = Server::start();
    let mut c = s.conn();
    // `TB.THROTTLE k 99 2500 1`: a bucket of 100 refilling 2.5 tokens per ms (redis-cell
    // refuses or misbehaves above 1000 per second). One transaction, so the burst runs in
    // well under a millisecond: 100 admitted, then a call for the whole limit refused.
    assert_eq!(c.q("MULTI"), ok());
    for _ in 0..100 {
        assert_eq!(
            c.q("TB.THROTTLE k 99 2500 1"),
            Reply::Simple("QUEUED".into())
        );
    }
    assert_eq!(
        c.q("TB.THROTTLE k 99 2500 1 100"),
        Reply::Simple("QUEUED".into())
    );
    let replies = c.q("EXEC");
    let replies = replies.array();
    assert_eq!(replies.len(), 101);
    assert_eq!(replies[0], ints([0, 100, 99, -1, 1]));
    for (i, r) in replies[..100].iter().enumerate() {
        let [limited, limit, remaining, retry_after, reset_after] = five(r);
        // The refill during the transaction may add a token or so, never take one away.
        let floor = 99 - i as i64;
        assert!(
            (floor..=99).contains(&remaining),
            "call {i}: {r:?} (remaining at least {floor})"
        );
        assert_eq!(
            [limited, limit, retry_after, reset_after],
            [0, 100, -1, 1],
            "call {i}: {r:?}"
        );
    }
    let [limited, limit, remaining, retry_after, reset_after] = five(&replies[100]);
    assert_eq!(
        [limited, limit, retry_after, reset_after],
        [1, 100, 1, 1],
        "{:?}",
        replies[100]
    );
    assert!(remaining < 100, "{:?}", replies[100]);
    // A few ms later 10 tokens are back (2.5 per ms), and 40 ms fill the bucket.
    std::thread::sleep(Duration::from_millis(5));
    let r = c.q("TB.THROTTLE k 99 2500 1 10");
    let [limited, limit, _, retry_after, reset_after] = five(&r);
    assert_eq!(
        [limited, limit, retry_after, reset_after],
        [0, 100, -1, 1],
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(c.q("TB.THROTTLE k 99 2500 1 0"), ints([0, 100, 100, -1, 0]));
    assert_eq!(c.q("TB.THROTTLE k 99 2500 1 100"), ints([0, 100, 0, -1, 1]));
}

// ---- The CL.THROTTLE alias ----

#[test]
fn alias_cl_throttle_shares_state_and_counters_when_loaded_with_the_argument() {
    let s = alias_server();
    let mut c = s.conn();
    assert_eq!(c.q("CL.THROTTLE k 4 1 60"), ints([0, 5, 4, -1, 60]));
    // The same bucket under both names, and under any case of the name.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 3, -1, 120]));
    assert_eq!(c.q("cl.throttle k 4 1 60"), ints([0, 5, 2, -1, 180]));
    assert_eq!(c.q("CL.THROTTLE k 4 1 60 3"), ints([1, 5, 2, 60, 180]));
    assert_eq!(c.q("CL.THROTTLE k 4 1 60 0"), ints([0, 5, 2, -1, 180]));
    assert_eq!(
        c.q("CL.THROTTLE k 4 x 60"),
        err("ERR count_per_period is not a valid number")
    );
    assert_eq!(
        hget(&mut c, "k", "tokens").map(|t| t.starts_with('2')),
        Some(true)
    );
    // One set of counters for both names: calls, allowed, denied, errors.
    assert_eq!(tb_counters(&mut c, "throttle"), [6, 4, 1, 1]);
    let info = c.q("INFO tb").text();
    assert!(
        !info.to_ascii_lowercase().contains("cl_throttle")
            && !info.to_ascii_lowercase().contains("cl.throttle"),
        "{info}"
    );
    assert_eq!(tb_counters(&mut c, "take"), [0, 0, 0, 0]);
}

#[test]
fn alias_load_argument_is_case_insensitive() {
    let s = server_with_load_args(&["cl.throttle"], &[]);
    let mut c = s.conn();
    assert_eq!(c.q("CL.THROTTLE k 0 1 60"), ints([0, 1, 0, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE k 0 1 60"), ints([1, 1, 0, 60, 60]));
}

#[test]
fn without_the_load_argument_cl_throttle_is_an_unknown_command() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        c.q("CL.THROTTLE k 4 1 60"),
        err("ERR unknown command 'CL.THROTTLE', with args beginning with: 'k' '4' '1' '60' ")
    );
    assert_eq!(
        c.q("COMMAND INFO cl.throttle"),
        Reply::Array(vec![Reply::Nil])
    );
    assert_eq!(c.q("EXISTS k"), Reply::Int(0));
    // TB.THROTTLE itself is there.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 4, -1, 60]));
    assert_eq!(tb_counters(&mut c, "throttle"), [1, 1, 0, 0]);
}

#[test]
fn unknown_load_argument_fails_the_load_and_logs_it() {
    let dir = std::env::temp_dir().join(format!(
        "redis-tb-test-throttle-bogus-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = server_command(free_port(), &dir)
        .arg("--loadmodule")
        .arg(module_path())
        .arg("BOGUS")
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", server_binary()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "redis-server kept running with an unknown load argument; log:\n{}",
                read_log(&dir)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let log = read_log(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success(), "exit status {status:?}; log:\n{log}");
    assert!(
        log.contains("tb: unknown load argument 'BOGUS'"),
        "the log does not name the argument:\n{log}"
    );
    assert!(
        log.contains("initialization failed") || log.contains("Can't load module"),
        "the log does not say the load failed:\n{log}"
    );
}

#[test]
fn alias_has_the_same_command_info_and_docs_as_tb_throttle() {
    let s = alias_server();
    let mut c = s.conn();
    let r = c.q("COMMAND INFO cl.throttle");
    let info = r.array()[0].array();
    assert_eq!(info[0].text(), "cl.throttle", "{r:?}");
    assert_eq!(info[1], Reply::Int(-5), "{r:?}");
    let flags: Vec<String> = info[2].array().iter().map(Reply::text).collect();
    for flag in ["write", "denyoom", "fast"] {
        assert!(flags.iter().any(|f| f == flag), "{flag} missing: {r:?}");
    }
    assert_eq!(
        info[3..6].to_vec(),
        vec![Reply::Int(1), Reply::Int(1), Reply::Int(1)],
        "{r:?}"
    );
    // Key specs: one key at position 1, RW access update.
    let specs = info[8].flat();
    assert_eq!(
        specs,
        "[[flags [RW access update] begin_search [type index spec [index 1]] find_keys [type range spec [lastkey 0 keystep 1 limit 0]]]]",
        "{r:?}"
    );
    assert_eq!(
        c.q("COMMAND GETKEYS CL.THROTTLE user123 15 30 60 1"),
        Reply::Array(vec![Reply::Bulk(b"user123".to_vec())])
    );
    // Everything but the name is TB.THROTTLE's.
    assert_eq!(
        command_reply_without_name(&mut c, "INFO", "cl.throttle"),
        command_reply_without_name(&mut c, "INFO", "tb.throttle")
    );
    let docs = c.q("COMMAND DOCS cl.throttle");
    // Redis 8 and Valkey add `display_text <name>` to each argument; 7.0 does not.
    let flat = without_display_text(&docs.flat());
    assert!(flat.starts_with("[cl.throttle [summary redis-cell's CL.THROTTLE on a token bucket: [limited, limit, remaining, retry_after, reset_after] as integers"), "{flat}");
    assert!(
        flat.contains("arguments [[name key type key key_spec_index 0] [name max_burst type integer] [name count_per_period type double] [name period type double] [name quantity type double flags [optional]]]"),
        "{flat}"
    );
    assert_eq!(
        command_reply_without_name(&mut c, "DOCS", "cl.throttle"),
        command_reply_without_name(&mut c, "DOCS", "tb.throttle")
    );
}

/// A flattened COMMAND DOCS reply without the `display_text <word>` pairs newer servers add.
fn without_display_text(flat: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut words = flat.split(' ');
    while let Some(w) = words.next() {
        if w == "display_text" {
            // The skipped word may close lists: keep its brackets.
            let closing: String = words
                .next()
                .unwrap_or("")
                .chars()
                .filter(|&c| c == ']')
                .collect();
            if let Some(last) = out.last_mut() {
                last.push_str(&closing);
            }
        } else {
            out.push(w.to_string());
        }
    }
    out.join(" ")
}

#[test]
fn wrong_arity_names_the_command_as_called() {
    let s = alias_server();
    let mut c = s.conn();
    let cl = "ERR wrong number of arguments for 'cl.throttle' command";
    let tb = "ERR wrong number of arguments for 'tb.throttle' command";
    // Too few: refused by Redis from the declared arity; too many: by the module, which
    // names the command the same way.
    for (line, want) in [
        ("CL.THROTTLE k 4 1", cl),
        ("CL.THROTTLE k", cl),
        ("CL.THROTTLE", cl),
        ("CL.THROTTLE k 4 1 60 1 1", cl),
        ("cl.throttle k 4 1 60 1 1", cl),
        ("Cl.Throttle k 4 1 60 1 1 1", cl),
        ("TB.THROTTLE k 4 1", tb),
        ("TB.THROTTLE k 4 1 60 1 1", tb),
        ("tb.throttle k 4 1 60 1 1", tb),
    ] {
        assert_eq!(c.q(line), err(want), "{line}");
    }
    assert_eq!(c.q("EXISTS k"), Reply::Int(0));
}

// ---- Errors ----

#[test]
fn every_argument_error_has_its_text_and_changes_nothing() {
    let s = alias_server();
    let mut c = s.conn();
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 2"), ints([0, 5, 3, -1, 120]));
    let before = fingerprint(&mut c, &["k", "missing"]);
    let burst_nan = "ERR max_burst is not a valid number";
    let burst_range = "ERR max_burst must be a whole number >= 0 and < 9007199254740992";
    let count_nan = "ERR count_per_period is not a valid number";
    let count_range = "ERR count_per_period must be > 0";
    let period_nan = "ERR period is not a valid number";
    let period_range = "ERR period must be > 0 seconds";
    let rate_range =
        "ERR count_per_period / period must be >= 1e-9 and <= 9007199254740992 per second";
    let q_nan = "ERR quantity is not a valid number";
    let q_range = "ERR quantity must be >= -9007199254740992 and <= 9007199254740992";
    let cases: &[(&[&str], &str)] = &[
        (&["x", "1", "60"], burst_nan),
        (&["", "1", "60"], burst_nan),
        (&[" 4", "1", "60"], burst_nan),
        (&["0x10", "1", "60"], burst_nan),
        (&["inf", "1", "60"], burst_nan),
        (&["nan", "1", "60"], burst_nan),
        (&["-1", "1", "60"], burst_range),
        (&["1.5", "1", "60"], burst_range),
        (&["9007199254740992", "1", "60"], burst_range),
        (&["1e300", "1", "60"], burst_range),
        (&["4", "x", "60"], count_nan),
        (&["4", "1 ", "60"], count_nan),
        (&["4", "0", "60"], count_range),
        (&["4", "-1", "60"], count_range),
        (&["4", "-0", "60"], count_range),
        (&["4", "1", "x"], period_nan),
        (&["4", "1", "inf"], period_nan),
        (&["4", "1", "0"], period_range),
        (&["4", "1", "-60"], period_range),
        (&["4", "1", "2e9"], rate_range),
        (&["4", "1e-10", "1"], rate_range),
        (&["4", "1e300", "1"], rate_range),
        (&["4", "9007199254740994", "1"], rate_range),
        (&["4", "1", "60", "x"], q_nan),
        (&["4", "1", "60", ""], q_nan),
        (&["4", "1", "60", "nan"], q_nan),
        (&["4", "1", "60", "-inf"], q_nan),
        (&["4", "1", "60", "9007199254740994"], q_range),
        (&["4", "1", "60", "-9007199254740994"], q_range),
        (&["4", "1", "60", "1e300"], q_range),
        // Arguments are checked in order: the first bad one is named.
        (&["x", "y", "z", "w"], burst_nan),
        (&["4", "0", "x", "w"], count_range),
        (&["4", "1", "0", "w"], period_range),
    ];
    let mut errors = 0;
    for name in ["TB.THROTTLE", "CL.THROTTLE"] {
        for key in ["k", "missing"] {
            for (args, want) in cases {
                let mut line = vec![name, key];
                line.extend_from_slice(args);
                assert_eq!(c.cmd(&line), err(want), "{line:?}");
                errors += 1;
            }
        }
    }
    assert_eq!(fingerprint(&mut c, &["k", "missing"]), before);
    assert_eq!(tb_counters(&mut c, "throttle"), [errors + 1, 1, 0, errors]);
    // Valid edges: the largest max_burst and the smallest and largest rates.
    assert_eq!(
        c.q("TB.THROTTLE e1 9007199254740991 1 1"),
        ints([0, 9007199254740992, 9007199254740991, -1, 1])
    );
    // (Its reset_after, 1e9 s, is checked in
    // `whole_second_reset_after_is_not_overstated_when_the_rate_is_an_inexact_reciprocal`.)
    let r = c.q("TB.THROTTLE e2 0 1 1e9");
    assert_eq!(five(&r)[..4], [0, 1, 0, -1], "{r:?}");
    assert!(five(&r)[4] >= 1_000_000_000, "{r:?}");
    assert_eq!(
        c.q("TB.THROTTLE e3 0 9007199254740992 1"),
        ints([0, 1, 0, -1, 1])
    );
    assert_eq!(
        c.q("TB.THROTTLE e4 0 1 60 -9007199254740992"),
        ints([0, 1, 1, -1, 0])
    );
    assert_eq!(c.q("EXISTS e4"), Reply::Int(0));
}

#[test]
fn corrupt_state_is_an_error_and_the_server_stays_up() {
    let s = alias_server();
    let mut c = s.conn();
    let cases = [
        (
            "c1",
            "HSET c1 tokens abc last_refill_time 1764456268",
            CORRUPT_TOKENS,
        ),
        ("c2", "HSET c2 tokens 3", CORRUPT_TIME),
        ("c3", "HSET c3 last_refill_time 1764456268", CORRUPT_TOKENS),
        ("c4", "HSET c4 tokens 3 last_refill_time abc", CORRUPT_TIME),
        (
            "c5",
            "HSET c5 tokens inf last_refill_time 1764456268",
            CORRUPT_TOKENS,
        ),
        (
            "c6",
            "HSET c6 tokens 3 last_refill_time 1764456268123",
            CORRUPT_TIME,
        ),
    ];
    for (key, setup, want) in cases {
        assert!(matches!(c.q(setup), Reply::Int(_)), "{setup}");
        let before = fingerprint(&mut c, &[key]);
        for quantity in ["1", "0", "-1", "100"] {
            for name in ["TB.THROTTLE", "CL.THROTTLE"] {
                let line = [name, key, "4", "1", "60", quantity];
                assert_eq!(c.cmd(&line), err(want), "{line:?}");
            }
        }
        assert_eq!(fingerprint(&mut c, &[key]), before, "{key}");
        assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
    }
    // The server is up and other keys are served.
    assert_eq!(c.q("TB.THROTTLE ok 4 1 60"), ints([0, 5, 4, -1, 60]));
    assert_eq!(tb_counters(&mut c, "throttle"), [49, 1, 0, 48]);
}

#[test]
fn redis_cell_string_key_gets_wrongtype_and_stays_as_it_is() {
    let s = alias_server();
    let mut c = s.conn();
    // redis-cell keeps its GCRA time (nanoseconds) in a string.
    assert_eq!(c.q("SET user123 1764456268123456789"), ok());
    assert_eq!(c.q("PEXPIRE user123 60000"), Reply::Int(1));
    assert_eq!(c.q("RPUSH list a"), Reply::Int(1));
    let before = fingerprint(&mut c, &["user123", "list"]);
    for line in [
        "CL.THROTTLE user123 15 30 60",
        "CL.THROTTLE user123 15 30 60 0",
        "TB.THROTTLE user123 15 30 60 -1",
        "TB.THROTTLE list 15 30 60 1",
    ] {
        assert_eq!(c.q(line), err(WRONGTYPE), "{line}");
    }
    assert_eq!(fingerprint(&mut c, &["user123", "list"]), before);
    assert_eq!(
        c.q("GET user123"),
        Reply::Bulk(b"1764456268123456789".to_vec())
    );
}

// ---- Shared state with TB.TAKE / TB.PEEK ----

#[test]
fn throttle_state_is_read_by_tb_peek_and_tb_take_as_capacity_burst_plus_one() {
    let s = Server::start();
    let mut c = s.conn();
    let rate = rate_text(1.0, 60.0);
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 4, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60"), ints([0, 5, 3, -1, 120]));
    // TB.PEEK at the stored time sees exactly the stored tokens in a bucket of 5 at 1/60.
    let tokens = hget(&mut c, "k", "tokens").unwrap();
    let last = hget(&mut c, "k", "last_refill_time").unwrap();
    let t: f64 = tokens.parse().unwrap();
    assert!((3.0..3.1).contains(&t), "{tokens}");
    let peek = c.cmd(&["TB.PEEK", "k", "5", &rate, &last]);
    let p = peek.array();
    assert_eq!(p[0], Reply::Int(1), "{peek:?}");
    assert_eq!(p[1].text(), tokens, "{peek:?}");
    assert_eq!(p[2].text(), "0", "{peek:?}");
    assert!((p[3].num() - (5.0 - t) * 60.0).abs() < 1e-4, "{peek:?}");
    assert_eq!(c.q("EXISTS nothing"), Reply::Int(0));
    // TB.TAKE on the server clock takes from the same bucket...
    let take = c.take("k", "5", &rate, "2", None);
    assert!(take.allowed, "{take:?}");
    assert!((1.0..1.1).contains(&take.remaining), "{take:?}");
    // ...which TB.THROTTLE then reports.
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 1, -1, 240]));
    // A take too large for what is left is refused by both, with the same wait.
    let take = c.take("k", "5", &rate, "2", None);
    assert!(!take.allowed, "{take:?}");
    assert!((59.0..60.0).contains(&take.retry_after), "{take:?}");
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 2"), ints([1, 5, 1, 60, 240]));
}

#[test]
fn tb_take_state_is_read_by_tb_throttle() {
    let s = Server::start();
    let mut c = s.conn();
    let rate = rate_text(1.0, 60.0);
    let take = c.take("k", "5", &rate, "3", None);
    assert!(take.allowed && take.remaining == 2.0, "{take:?}");
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 0"), ints([0, 5, 2, -1, 180]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 3"), ints([1, 5, 2, 60, 180]));
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 2"), ints([0, 5, 0, -1, 300]));
    // A bucket TB.TAKE wrote with a client's `now` (plain decimal seconds) reads the same.
    let now = format!(
        "{:.6}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    );
    let take = c.take("n", "5", &rate, "4", Some(&now));
    assert!(take.allowed && take.remaining == 1.0, "{take:?}");
    assert_eq!(c.q("TB.THROTTLE n 4 1 60 0"), ints([0, 5, 1, -1, 240]));
    // And TB.REFUND gives back to it.
    let refund = c.cmd(&["TB.REFUND", "n", "5", &rate, "2"]);
    assert_eq!(refund.array()[0], Reply::Int(1), "{refund:?}");
    assert_eq!(c.q("TB.THROTTLE n 4 1 60 0"), ints([0, 5, 3, -1, 120]));
}

// ---- Replication ----

/// A master serving both names, with diskless sync at once and no periodic PING to
/// replicas (it would move the replication offset while a test watches it).
fn master() -> Server {
    server_with_load_args(
        &["CL.THROTTLE"],
        &[
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "3600",
        ],
    )
}

#[test]
fn replica_without_the_module_holds_the_masters_exact_buckets() {
    let master = master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    let calls = [
        ("TB.THROTTLE a 4 1 60", [0, 5, 4, -1, 60]),
        ("CL.THROTTLE a 4 1 60", [0, 5, 3, -1, 120]),
        ("TB.THROTTLE a 4 1 60 2", [0, 5, 1, -1, 240]),
        ("CL.THROTTLE a 4 1 60 2", [1, 5, 1, 60, 240]),
        ("TB.THROTTLE a 4 1 60 0", [0, 5, 1, -1, 240]),
        ("CL.THROTTLE a 4 1 60 -1", [0, 5, 2, -1, 180]),
        ("TB.THROTTLE b 9 1 0.5 3", [0, 10, 7, -1, 2]),
        ("TB.THROTTLE b 9 1 0.5 0.5", [0, 10, 6, -1, 2]),
        ("CL.THROTTLE c 0 1.5 3", [0, 1, 0, -1, 2]),
        ("CL.THROTTLE c 0 1.5 3", [1, 1, 0, 2, 2]),
        ("TB.THROTTLE e 4 1 60 -3", [0, 5, 5, -1, 0]),
        ("TB.THROTTLE f 4 1 60 6", [1, 5, 5, -1, 0]),
        ("TB.THROTTLE g 4 1 60 5", [0, 5, 0, -1, 300]),
        ("CL.THROTTLE g 4 1 60 -2", [0, 5, 2, -1, 180]),
    ];
    for (line, want) in calls {
        assert_eq!(c.q(line), ints(want), "{line}");
    }
    assert_eq!(c.q("WAIT 1 10000"), Reply::Int(1));
    let mut r = replica.conn();
    let mut keys: Vec<String> = c.q("KEYS *").array().iter().map(Reply::text).collect();
    keys.sort();
    assert_eq!(keys, ["a", "b", "c", "g"], "e, f: nothing written");
    let mut replica_keys: Vec<String> = r.q("KEYS *").array().iter().map(Reply::text).collect();
    replica_keys.sort();
    assert_eq!(replica_keys, keys);
    for key in &keys {
        assert_eq!(
            hgetall(&mut r, key.as_bytes()),
            hgetall(&mut c, key.as_bytes()),
            "{key}"
        );
        assert_eq!(
            dump(&mut r, key.as_bytes()),
            dump(&mut c, key.as_bytes()),
            "{key}"
        );
        let expire = c.cmd(&["PEXPIRETIME", key]).int();
        assert!(expire > 0, "{key} has no TTL");
        assert_eq!(r.cmd(&["PEXPIRETIME", key]).int(), expire, "{key}");
    }
    // The replica, which lacks the module, never received a command it does not know.
    let log = replica.log();
    assert!(
        !log.contains("unknown command") && !log.contains("CRITICAL"),
        "{log}"
    );
}

#[test]
fn quantity_zero_refused_and_failed_calls_replicate_nothing() {
    let master = master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    // `k` refills from here on: the times below may be a second or more less on a busy
    // machine (the replica's sync and WAIT come between).
    let drained = Instant::now();
    assert_eq!(c.q("TB.THROTTLE k 4 1 60 5"), ints([0, 5, 0, -1, 300]));
    assert_eq!(c.q("TB.THROTTLE full 4 1 60 1"), ints([0, 5, 4, -1, 60]));
    assert_eq!(c.q("TB.THROTTLE full 4 1 60 -1"), ints([0, 5, 5, -1, 0]));
    // A full bucket gets a short TTL (a missing key is a full bucket): keep it, so that
    // no expiry moves the offset while the test watches it.
    assert_eq!(c.q("PERSIST full"), Reply::Int(1));
    assert_eq!(c.q("HSET bad tokens abc last_refill_time 1"), Reply::Int(2));
    assert_eq!(c.q("WAIT 1 10000"), Reply::Int(1));
    let offset = repl_offset(&mut c);
    for (line, want) in [
        ("TB.THROTTLE k 4 1 60 0", ints([0, 5, 0, -1, 300])),
        ("CL.THROTTLE k 4 1 60 0", ints([0, 5, 0, -1, 300])),
        ("TB.THROTTLE k 4 1 60", ints([1, 5, 0, 60, 300])),
        ("CL.THROTTLE k 4 1 60 3", ints([1, 5, 0, 180, 300])),
        ("TB.THROTTLE k 4 1 60 6", ints([1, 5, 0, -1, 300])),
        ("TB.THROTTLE missing 4 1 60 0", ints([0, 5, 5, -1, 0])),
        ("TB.THROTTLE missing 4 1 60 6", ints([1, 5, 5, -1, 0])),
        ("TB.THROTTLE missing 4 1 60 -1", ints([0, 5, 5, -1, 0])),
        // A refund to a bucket already full adds nothing.
        ("TB.THROTTLE full 4 1 60 -1", ints([0, 5, 5, -1, 0])),
        ("TB.THROTTLE full 4 1 60 0", ints([0, 5, 5, -1, 0])),
        (
            "TB.THROTTLE k 4 x 60",
            err("ERR count_per_period is not a valid number"),
        ),
        ("TB.THROTTLE bad 4 1 60", err(CORRUPT_TOKENS)),
    ] {
        let got = c.q(line);
        assert_refilling(&got, &want, drained.elapsed(), line);
        assert_eq!(repl_offset(&mut c), offset, "{line} replicated something");
    }
    // An allowed call does replicate, and the replica catches up to the same offset.
    let got = c.q("TB.THROTTLE k 4 1 60 -1");
    assert_refilling(
        &got,
        &ints([0, 5, 1, -1, 240]),
        drained.elapsed(),
        "refund 1",
    );
    let moved = repl_offset(&mut c);
    assert!(moved > offset, "an allowed call replicated nothing");
    assert_eq!(c.q("WAIT 1 10000"), Reply::Int(1));
    // WAIT itself appends a REPLCONF GETACK to the stream: compare with the offset after it.
    let master_offset = repl_offset(&mut c);
    assert!(master_offset >= moved);
    let mut r = replica.conn();
    wait_for(Duration::from_secs(10), "the replica's offset", || {
        info_field(&mut r, "replication", "master_repl_offset").as_deref()
            == Some(master_offset.to_string().as_str())
    });
    assert_eq!(dump(&mut r, b"k"), dump(&mut c, b"k"));
    assert_eq!(r.q("EXISTS missing"), Reply::Int(0));
}

// ---- Expiry ----

#[test]
fn ttl_is_set_and_covers_the_time_until_full() {
    let s = Server::start();
    let mut c = s.conn();
    // (call, seconds until full): the TTL is at least that, and at most about 25% + 1 s
    // more (README).
    for (line, want, full_in) in [
        ("TB.THROTTLE a 4 1 60", [0, 5, 4, -1, 60], 60.0),
        ("TB.THROTTLE b 4 1 60 5", [0, 5, 0, -1, 300], 300.0),
        ("TB.THROTTLE c 0 1 0.5", [0, 1, 0, -1, 1], 0.5),
        ("TB.THROTTLE d 9 1.5 3 7", [0, 10, 3, -1, 14], 14.0),
    ] {
        let key = line.split_whitespace().nth(1).unwrap();
        let sent = Instant::now();
        assert_eq!(c.q(line), ints(want), "{line}");
        let pttl = c.cmd(&["PTTL", key]).int();
        let elapsed_ms = sent.elapsed().as_millis() as i64;
        let full_ms = (full_in * 1000.0) as i64;
        assert!(pttl > 0, "{line}: PTTL {pttl}");
        assert!(
            pttl + elapsed_ms >= full_ms,
            "{line}: PTTL {pttl} ms does not cover the {full_ms} ms until full"
        );
        assert!(
            pttl <= full_ms + full_ms / 4 + 1000 + 5,
            "{line}: PTTL {pttl} ms is far longer than the {full_ms} ms until full"
        );
    }
    // A deeper take moves the expiry out to the new time until full.
    assert_eq!(c.q("TB.THROTTLE a 4 1 60 3"), ints([0, 5, 1, -1, 240]));
    let pttl = c.q("PTTL a").int();
    assert!((239_000..=301_000 + 1000).contains(&pttl), "PTTL {pttl}");
    // The key expires once full: a 0.5 s bucket is gone within about 1.6 s.
    wait_for(Duration::from_secs(5), "c to expire", || {
        c.q("EXISTS c") == Reply::Int(0)
    });
    assert_eq!(c.q("TB.THROTTLE c 0 1 0.5 0"), ints([0, 1, 1, -1, 0]));
}
