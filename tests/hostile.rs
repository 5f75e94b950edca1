//! Keys and clocks the module must not trust: a key that is not limiter state (a user
//! record, a leaderboard, a hash holding two kinds of state) is refused by every command
//! and left byte for byte as it was, value and TTL; a client's `now` further ahead of the
//! server's clock than `max-clock-ahead-ms` is refused before anything is written, while
//! replicas and AOF replay, which only ever see effects, never refuse anything; numbers
//! are parsed with the grammar docs/commands.md states.
//!
//! The cases that apply to the script library (clients/lua) run against it too, on a server
//! without the module: each is a module with a `module` and a `scripts` test.

mod common;

use common::scripts::{Backend, Client, start_script_server};
use common::{
    NO_CLOCK_BOUND, Reply, Server, Take, dumps, fingerprint, hget, read_log, server_binary,
    server_command, start_replica,
};

/// Which backend a case runs against.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Module,
    Scripts,
}

/// A fresh server for `kind` (the scripts' has no module) and a client speaking the
/// module's commands to it.
fn start(kind: Kind) -> (Server, Client) {
    let (server, backend) = match kind {
        Kind::Module => (Server::start(), Backend::Module),
        Kind::Scripts => start_script_server(),
    };
    let conn = server.conn();
    (server, Client { conn, backend })
}

/// `case` as two tests, `case::module` and `case::scripts`.
macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        $(
            mod $case {
                #[test]
                fn module() {
                    super::$case(super::Kind::Module)
                }
                #[test]
                fn scripts() {
                    super::$case(super::Kind::Scripts)
                }
            }
        )*
    };
}

on_both_backends!(
    a_user_record_is_refused_by_every_command_and_left_byte_for_byte,
    a_leaderboard_is_refused_by_log_and_keeps_every_member,
    a_hash_holding_a_bucket_and_a_window_is_refused_by_every_command,
    a_bucket_or_window_with_fields_of_its_own_beside_it_keeps_working,
    a_now_an_hour_ahead_is_refused_by_every_command_and_writes_nothing,
    a_client_clock_ahead_pins_a_bucket_for_at_most_the_bound,
    a_now_in_the_past_is_accepted_and_never_rewinds_the_stored_time,
    numbers_follow_the_documented_grammar,
    a_sorted_set_the_module_did_not_make_is_never_written_by_a_lease_command,
    a_hash_that_is_not_a_bucket_or_has_corrupt_holds_is_never_written_by_a_hold_command,
    holds_of_no_cost_cannot_fill_a_table_and_a_full_table_is_a_refusal,
    ids_are_read_as_the_module_reads_them,
);

const NOT_BUCKET: &str = "ERR key holds a hash that is not a token bucket (it has neither 'tokens' nor 'last_refill_time'): left unchanged";
const NOT_WINDOW: &str = "ERR key holds a hash that is not a TB.WINDOW window (it has none of 'start', 'count', 'counts', 'previous'): left unchanged";
const NOT_LOG: &str = "ERR key holds a sorted set that is not a TB.WINDOW LOG (a member is not '<score>-<n>'): left unchanged";
const MIXED: &str =
    "ERR key holds both a token bucket's and a TB.WINDOW window's fields: left unchanged";
const AHEAD: &str = "ERR now is further ahead of the server clock than max-clock-ahead-ms allows (now must be seconds since the Unix epoch)";
const NOW_RANGE: &str = "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800";

/// An app server's `time.time()` in the past (2025-11-29): always within the bound.
const T0: &str = "1764456268.123456";

/// The server's clock in seconds, as a client would send it.
fn server_now(c: &mut common::Conn) -> f64 {
    let t = c.q("TIME");
    let a = t.array();
    a[0].text().parse::<f64>().unwrap() + a[1].text().parse::<f64>().unwrap() / 1e6
}

/// Every command, on `key`, as a client would send it (TB.MTAKE with a fresh key first,
/// which must not be created either); the scripts have no TB.THROTTLE.
fn every_command(key: &str, kind: Kind) -> Vec<Vec<String>> {
    let lines = [
        format!("TB.TAKE {key} 10 1 1"),
        format!("TB.TAKE {key} 10 1 1 {T0}"),
        format!("TB.MTAKE 2 fresh {key} 10 1 1 10 1 1"),
        format!("TB.MTAKE 2 {key} fresh 10 1 1 10 1 1 {T0}"),
        format!("TB.RESERVE {key} 10 1 1 5"),
        format!("TB.PEEK {key} 10 1"),
        format!("TB.REFUND {key} 10 1 1"),
        format!("TB.THROTTLE {key} 9 1 1"),
        format!("TB.WINDOW {key} 100 60 1 FIXED"),
        format!("TB.WINDOW {key} 100 60 1"),
        format!("TB.WINDOW {key} 100 60 1 {T0} SLIDING"),
        format!("TB.WINDOW {key} 100 60 1 LOG"),
        format!("TB.WINDOW {key} 100 60 1 {T0} LOG"),
    ];
    lines
        .iter()
        .filter(|l| kind == Kind::Module || !l.starts_with("TB.THROTTLE"))
        .map(|l| l.split(' ').map(String::from).collect())
        .collect()
}

/// Runs every command on `key` and checks each reply with `want` (the command's words),
/// and that neither `key` nor `fresh` changed in any way.
fn assert_refused_and_unchanged(
    c: &mut Client,
    key: &str,
    want: impl Fn(&[String]) -> Option<&'static str>,
) {
    let before = fingerprint(c, &[key, "fresh"]);
    let pttl = c.cmd(&["PTTL", key]).int();
    assert!(before[0].0.is_some(), "{key} must exist");
    let kind = if c.backend == Backend::Module {
        Kind::Module
    } else {
        Kind::Scripts
    };
    for cmd in every_command(key, kind) {
        let r = c.cmd(&cmd);
        match want(&cmd) {
            Some(text) => assert_eq!(r, Reply::Error(text.into()), "{cmd:?}"),
            None => assert!(!matches!(r, Reply::Error(_)), "{cmd:?}: {r:?}"),
        }
        assert_eq!(
            fingerprint(c, &[key, "fresh"]),
            before,
            "{cmd:?} changed a key"
        );
    }
    // The TTL (if any) did not even get refreshed.
    let after = c.cmd(&["PTTL", key]).int();
    assert!(after <= pttl, "{pttl} -> {after}");
}

fn a_user_record_is_refused_by_every_command_and_left_byte_for_byte(kind: Kind) {
    let (_s, mut c) = start(kind);
    // The case: `HSET user:2 name bob`, then a key prefix mistake.
    c.q("HSET user:2 name bob email bob@example.com");
    c.q("PEXPIRE user:2 86400000");
    assert_refused_and_unchanged(&mut c, "user:2", |cmd| {
        Some(match (cmd[0].as_str(), cmd.last().map(String::as_str)) {
            ("TB.WINDOW", Some("LOG")) => {
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            ("TB.WINDOW", _) => NOT_WINDOW,
            _ => NOT_BUCKET,
        })
    });
    // And without a TTL: none is added.
    c.q("HSET user:3 name carol");
    assert_refused_and_unchanged(&mut c, "user:3", |cmd| {
        Some(match (cmd[0].as_str(), cmd.last().map(String::as_str)) {
            ("TB.WINDOW", Some("LOG")) => {
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            }
            ("TB.WINDOW", _) => NOT_WINDOW,
            _ => NOT_BUCKET,
        })
    });
    assert_eq!(c.q("PTTL user:3").int(), -1);
    assert_eq!(hget(&mut c, "user:3", "name").as_deref(), Some("carol"));
}

fn a_leaderboard_is_refused_by_log_and_keeps_every_member(kind: Kind) {
    let (_s, mut c) = start(kind);
    // Points as scores: all "long ago" on LOG's clock, so the call would remove them all.
    c.q("ZADD leaderboard 1500 alice 1200 bob 900 carol");
    c.q("PEXPIRE leaderboard 86400000");
    // Times as scores (a log of logins by user name): in the window, no member removed,
    // so the call reads none on its way; the oldest is checked all the same.
    let now = server_now(&mut c);
    let micros = format!("{}", (now * 1e6) as u64);
    c.cmd(&["ZADD", "logins", &micros, "alice"]);
    // The notes' script's log: bare times as members.
    c.cmd(&["ZADD", "script", &micros, &micros]);
    // A LOG of ours with one foreign member added at the newest end.
    c.q("TB.WINDOW mixedlog 100 60 1 LOG");
    c.cmd(&[
        "ZADD",
        "mixedlog",
        &format!("{}", (now * 1e6) as u64 + 5_000_000),
        "zed",
    ]);
    for key in ["leaderboard", "logins", "script"] {
        assert_refused_and_unchanged(&mut c, key, |cmd| {
            Some(match (cmd[0].as_str(), cmd.last().map(String::as_str)) {
                ("TB.WINDOW", Some("LOG")) => NOT_LOG,
                _ => "WRONGTYPE Operation against a key holding the wrong kind of value",
            })
        });
    }
    assert_eq!(c.q("ZCARD leaderboard").int(), 3);
    // Our own log with a stranger's member: the newest is read, and refused.
    let before = fingerprint(&mut c, &["mixedlog"]);
    let r = c.q("TB.WINDOW mixedlog 100 60 1 LOG");
    assert_eq!(r, Reply::Error(NOT_LOG.into()));
    assert_eq!(fingerprint(&mut c, &["mixedlog"]), before);
    // A real log keeps working.
    for _ in 0..3 {
        assert!(Take::from_reply(&c.q("TB.WINDOW real 100 60 1 LOG")).allowed);
    }
    assert_eq!(c.q("ZCARD real").int(), 3);
}

fn a_hash_holding_a_bucket_and_a_window_is_refused_by_every_command(kind: Kind) {
    let (_s, mut c) = start(kind);
    let cases = [
        "HSET both tokens 5 last_refill_time 1764456268 start 1764456240 count 1",
        "HSET both tokens 5 last_refill_time 1764456268 start 1764456240 counts 1~0",
        "HSET both tokens 5 start 1764456240",
        "HSET both last_refill_time 1764456268 previous 3 owner alice",
    ];
    for line in cases {
        c.q("DEL both");
        let args: Vec<String> = line.split(' ').map(|a| a.replace('~', " ")).collect();
        c.cmd(&args);
        c.q("PEXPIRE both 600000");
        assert_refused_and_unchanged(&mut c, "both", |cmd| {
            Some(match (cmd[0].as_str(), cmd.last().map(String::as_str)) {
                ("TB.WINDOW", Some("LOG")) => {
                    "WRONGTYPE Operation against a key holding the wrong kind of value"
                }
                _ => MIXED,
            })
        });
    }
}

fn a_bucket_or_window_with_fields_of_its_own_beside_it_keeps_working(kind: Kind) {
    let (_s, mut c) = start(kind);
    c.take("b", "10", "1", "1", Some(T0));
    c.q("HSET b owner alice");
    assert!(c.take("b", "10", "1", "1", Some(T0)).allowed);
    assert_eq!(hget(&mut c, "b", "tokens").as_deref(), Some("8"));
    assert_eq!(hget(&mut c, "b", "owner").as_deref(), Some("alice"));
}

// ---------------------------------------------------------------------------------------
// The client's clock

/// Every command that takes a `now`, on fresh keys, at `now` (slow buckets: their TTLs
/// outlast a test).
fn with_now(now: &str) -> Vec<Vec<String>> {
    [
        format!("TB.TAKE k1 10 0.01 1 {now}"),
        format!("TB.MTAKE 2 k2a k2b 10 0.01 1 10 0.01 1 {now}"),
        format!("TB.RESERVE k3 10 0.01 1 5 {now}"),
        format!("TB.PEEK k4 10 0.01 {now}"),
        format!("TB.REFUND k5 10 0.01 1 {now}"),
        format!("TB.WINDOW k6 10 60 1 {now} FIXED"),
        format!("TB.WINDOW k7 10 60 1 {now}"),
        format!("TB.WINDOW k8 10 60 1 {now} LOG"),
    ]
    .iter()
    .map(|l| l.split(' ').map(String::from).collect())
    .collect()
}

const KEYS: [&str; 9] = ["k1", "k2a", "k2b", "k3", "k4", "k5", "k6", "k7", "k8"];

fn a_now_an_hour_ahead_is_refused_by_every_command_and_writes_nothing(kind: Kind) {
    let (_s, mut c) = start(kind);
    let now = server_now(&mut c);
    // The case, and the wrong units: ms and µs given as seconds (those are past
    // the year 10000, and refused as such).
    for (ahead, want) in [
        (format!("{}", now + 3600.0), AHEAD),
        (format!("{}", now + 11.0), AHEAD),
        (format!("{}", (now * 1e3) as u64), NOW_RANGE),
        (format!("{}", (now * 1e6) as u64), NOW_RANGE),
        // Deciseconds: before the year 10000, far ahead: the bound catches it.
        (format!("{}", (now * 10.0) as u64), AHEAD),
    ] {
        for cmd in with_now(&ahead) {
            assert_eq!(c.cmd(&cmd), Reply::Error(want.into()), "{cmd:?}");
        }
        assert_eq!(c.q("DBSIZE").int(), 0, "{ahead}");
    }
    // A bucket already there stays as it was.
    c.take("k1", "10", "10", "5", None);
    let before = fingerprint(&mut c, &KEYS);
    for cmd in with_now(&format!("{}", now + 3600.0)) {
        assert_eq!(c.cmd(&cmd), Reply::Error(AHEAD.into()), "{cmd:?}");
    }
    assert_eq!(fingerprint(&mut c, &KEYS), before);
    // Within the default 10 s: accepted.
    let now = server_now(&mut c);
    for cmd in with_now(&format!("{}", now + 8.0)) {
        let r = c.cmd(&cmd);
        assert!(!matches!(r, Reply::Error(_)), "{cmd:?}: {r:?}");
    }
}

fn a_client_clock_ahead_pins_a_bucket_for_at_most_the_bound(kind: Kind) {
    let (_s, mut c) = start(kind);
    let now = server_now(&mut c);
    // Refused at an hour ahead: the server-clock callers keep their bucket.
    let r = c.cmd(&[
        "TB.TAKE",
        "k",
        "10",
        "10",
        "10",
        &format!("{}", now + 3600.0),
    ]);
    assert_eq!(r, Reply::Error(AHEAD.into()));
    assert!(c.take("k", "10", "10", "1", None).allowed);
    // 9 s ahead (accepted) and spending the bucket: a server-clock caller waits the 9 s
    // and the refill of one token, not an hour.
    c.q("DEL k");
    let t = c.take("k", "10", "10", "10", Some(&format!("{}", now + 9.0)));
    assert!(t.allowed);
    let t = c.take("k", "10", "10", "1", None);
    assert!(!t.allowed);
    assert!(t.retry_after > 8.0 && t.retry_after <= 9.2, "{t:?}");
    let stored: f64 = hget(&mut c, "k", "last_refill_time")
        .unwrap()
        .parse()
        .unwrap();
    assert!(stored <= server_now(&mut c) + 10.0, "{stored}");
}

fn a_now_in_the_past_is_accepted_and_never_rewinds_the_stored_time(kind: Kind) {
    let (_s, mut c) = start(kind);
    let now = server_now(&mut c);
    let t = c.take("k", "10", "1", "10", Some(&format!("{now}")));
    assert!(t.allowed);
    let stored = hget(&mut c, "k", "last_refill_time");
    // An hour and a day behind: no refill, the stored time stays, the wait is measured
    // from the stored time.
    for behind in [3600.0, 86_400.0] {
        let t = c.take("k", "10", "1", "1", Some(&format!("{}", now - behind)));
        assert!(!t.allowed, "{t:?}");
        assert!(t.retry_after >= behind + 0.99, "{t:?}");
        assert_eq!(hget(&mut c, "k", "last_refill_time"), stored);
    }
    // `0`, the epoch, is a valid time too.
    assert!(!c.take("k", "10", "1", "1", Some("0")).allowed);
    assert_eq!(hget(&mut c, "k", "last_refill_time"), stored);
}

#[test]
fn max_clock_ahead_ms_sets_the_bound_at_load() {
    let s = Server::start_with_load_args(&["max-clock-ahead-ms", "1000"], &[]);
    let mut c = s.conn();
    let now = server_now(&mut c);
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{}", now + 5.0)]);
    assert_eq!(r, Reply::Error(AHEAD.into()));
    assert_eq!(c.q("EXISTS k").int(), 0);
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{}", now + 0.5)]);
    assert!(Take::from_reply(&r).allowed, "{r:?}");
    // 0: not a microsecond ahead (the server clock moves on between the calls).
    let s = Server::start_with_load_args(&["CL.THROTTLE", "MAX-CLOCK-AHEAD-MS", "0"], &[]);
    let mut c = s.conn();
    let now = server_now(&mut c);
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{}", now + 1.0)]);
    assert_eq!(r, Reply::Error(AHEAD.into()));
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{now}")]);
    assert!(Take::from_reply(&r).allowed, "{r:?}");
    assert!(matches!(c.q("CL.THROTTLE t 1 1 1"), Reply::Array(_)));
    // The largest value lets every accepted `now` through.
    let s = Server::start_unbounded();
    let r = s.conn().q("TB.TAKE k 10 1 1 253402300799.5");
    assert!(Take::from_reply(&r).allowed, "{r:?}");
}

#[test]
fn a_bad_max_clock_ahead_ms_fails_the_load_with_a_clear_log_line() {
    for (args, says) in [
        (
            &["max-clock-ahead-ms", "ten"][..],
            "tb: max-clock-ahead-ms needs a whole number of milliseconds from 0 to 253402300800000 (got 'ten'); not loading",
        ),
        (&["max-clock-ahead-ms", "-5"], "(got '-5')"),
        (
            &["max-clock-ahead-ms", "253402300800001"],
            "(got '253402300800001')",
        ),
        (&["max-clock-ahead-ms"], "(got nothing)"),
        (
            &["max-clock-ahead", "5"],
            "tb: unknown load argument 'max-clock-ahead'",
        ),
    ] {
        let dir = std::env::temp_dir().join(format!(
            "redis-tb-hostile-{}-{}",
            std::process::id(),
            args.join("_")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = server_command(common::free_port(), &dir);
        cmd.arg("--loadmodule")
            .arg(common::module_path())
            .args(args);
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", server_binary()));
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if start.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let log = read_log(&dir);
        assert!(
            status.is_some_and(|s| !s.success()),
            "{args:?} kept running:\n{log}"
        );
        assert!(log.contains(says), "{args:?}:\n{log}");
    }
}

#[test]
fn replicas_and_aof_replay_take_the_effects_of_a_time_ahead_without_refusing() {
    // The master accepts any time; its replica and the AOF replay run the default bound.
    let master = Server::start_with_load_args(
        &NO_CLOCK_BOUND,
        &[
            "--repl-diskless-sync-delay",
            "0",
            "--repl-ping-replica-period",
            "3600",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ],
    );
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    let ahead = format!("{}", server_now(&mut c) + 1800.0);
    for cmd in with_now(&ahead) {
        let r = c.cmd(&cmd);
        assert!(!matches!(r, Reply::Error(_)), "{cmd:?}: {r:?}");
    }
    assert_eq!(
        hget(&mut c, "k1", "last_refill_time").as_deref(),
        Some(ahead.as_str())
    );
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let want = dumps(&mut c);
    assert!(want.len() >= 7, "{want:?}");
    assert_eq!(dumps(&mut replica.conn()), want);
    // The AOF, replayed by a server whose module has the default bound (the master
    // stopped first: one AOF, one writer).
    let ks = dumps(&mut c);
    drop(c);
    let mut master = master;
    master.kill();
    let mut aof = Server::start_with(common::Options {
        with_module: true,
        extra: vec![
            "--appendonly".into(),
            "yes".into(),
            "--dir".into(),
            master.dir.display().to_string(),
        ],
    });
    assert_eq!(dumps(&mut aof.conn()), ks);
    assert!(aof.alive());
}

// ---------------------------------------------------------------------------------------
// Numbers

fn numbers_follow_the_documented_grammar(kind: Kind) {
    let (_s, mut c) = start(kind);
    const CAPACITY: &str = "ERR capacity is not a valid number";
    const N: &str = "ERR n is not a valid number";
    const NOW: &str = "ERR now is not a valid number";
    for (args, want) in [
        (["+5", "1", "1", T0], CAPACITY),
        ([".5", "1", "1", T0], CAPACITY),
        (["5.", "1", "1", T0], CAPACITY),
        (["-.5", "1", "1", T0], CAPACITY),
        (["10", "1", "+1", T0], N),
        (["10", "1", ".5", T0], N),
        (["10", "1", "1", "+1764456268"], NOW),
        (["10", "1", "1", "1764456268."], NOW),
        (["10", "1", "1", ".1764456268e10"], NOW),
    ] {
        let mut cmd = vec!["TB.TAKE", "k"];
        cmd.extend(args);
        assert_eq!(c.cmd(&cmd), Reply::Error(want.into()), "{args:?}");
    }
    assert_eq!(c.q("EXISTS k").int(), 0);
    // Accepted: digits, a fraction with digits on both sides, an exponent with a sign.
    for (args, remaining) in [
        (["10", "1", "0.5", T0], 9.5),
        (["10", "1", "5e-1", T0], 9.0),
        (["1e1", "1", "1E+0", T0], 8.0),
        (["10", "1", "-0", T0], 8.0),
        (["010", "1.0", "1", T0], 7.0),
    ] {
        let mut cmd = vec!["TB.TAKE", "k"];
        cmd.extend(args);
        let t = Take::from_reply(&c.cmd(&cmd));
        assert_eq!(t.remaining, remaining, "{args:?}");
    }
    if kind == Kind::Module {
        assert_eq!(
            c.q("TB.THROTTLE t +5 1 1"),
            Reply::Error("ERR max_burst is not a valid number".into())
        );
    }
}

// ---------------------------------------------------------------------------------------
// The script library alone

/// The scripts' clock bound is one constant in tb.lua (the module's load argument has no
/// place in a script): edited, it is the bound.
#[test]
fn the_scripts_clock_bound_is_the_constant_in_the_library() {
    let from = "local MAX_AHEAD_MS = 10000";
    assert_eq!(common::scripts::LIBRARY.matches(from).count(), 1);
    let source = common::scripts::LIBRARY.replace(from, "local MAX_AHEAD_MS = 1000");
    let (s, backend) = common::scripts::start_script_server_with(&source, &[]);
    let mut c = Client {
        conn: s.conn(),
        backend,
    };
    let now = server_now(&mut c);
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{}", now + 5.0)]);
    assert_eq!(r, Reply::Error(AHEAD.into()));
    assert_eq!(c.q("EXISTS k").int(), 0);
    let r = c.cmd(&["TB.TAKE", "k", "10", "1", "1", &format!("{}", now + 0.5)]);
    assert!(Take::from_reply(&r).allowed, "{r:?}");
}

/// Random calls to the script, well formed or not (any command word, any number of keys,
/// arguments of any bytes), on a server that also has the module: a foreign key is never
/// changed, and every key the scripts leave is state the module reads without an error.
#[test]
fn no_input_the_scripts_accept_corrupts_a_key_or_adopts_a_foreign_one() {
    let s = Server::start();
    let mut c = s.conn();
    let sha = common::scripts::load_script(&mut c, common::scripts::LIBRARY);
    let now = server_now(&mut c);
    let micros = format!("{}", (now * 1e6) as u64);
    for line in [
        "HSET user name bob email bob@example.com",
        "ZADD board 1500 alice 1200 bob",
        "SET text hello",
        "HSET mixed tokens 5 last_refill_time 1764456268 start 1764456240 count 1",
        "HSET badtok tokens abc last_refill_time 1764456268",
        "HSET half tokens 5",
        "HSET badcounts start 1764456240 counts x",
        "RPUSH list a b",
    ] {
        c.q(line);
    }
    c.cmd(&["ZADD", "logins", &micros, "alice"]);
    c.cmd(&["ZADD", "leases", &micros, "lease:0123456789abcdef"]);
    c.q("PEXPIRE user 86400000");
    let foreign = [
        "user",
        "board",
        "text",
        "mixed",
        "badtok",
        "half",
        "badcounts",
        "list",
        "logins",
        "leases",
    ];
    let own = ["b", "w", "v", "l", "fresh"];
    c.cmd(&["ZADD", "legacy", "1e15", "lease:00000000000000a1"]);
    let before = fingerprint(&mut c, &foreign);
    let mut rng = common::Rng(0xf00d_cafe);
    let words = [
        "TAKE", "MTAKE", "RESERVE", "PEEK", "REFUND", "WINDOW", "take", "window", "NOPE", "",
        "ACQUIRE", "RELEASE", "RENEW", "HOLD", "SETTLE", "acquire", "hold",
    ];
    let pieces: Vec<Vec<u8>> = [
        "1",
        "10",
        "0.5",
        "0",
        "-0",
        "2",
        "100",
        "1e-9",
        "1e308",
        "4.9e-324",
        "9007199254740992",
        "9007199254740993",
        "-1",
        "+1",
        ".5",
        "nan",
        "inf",
        "0x10",
        " 1",
        "FIXED",
        "SLIDING",
        "LOG",
        "log",
        "LEASES",
        "HOLDS",
        "1e400",
        "253402300800",
        "ID",
        "NOW",
        "TAKE",
        "0123456789abcdef",
        "0123456789ABCDEF",
        "60000",
        "5e-324",
    ]
    .iter()
    .map(|p| p.as_bytes().to_vec())
    .chain([
        vec![0xff, 0xfe, 0],
        vec![b'9'; 200],
        format!("{now}").into_bytes(),
        format!("{}", now - 5.0).into_bytes(),
        format!("{}", now + 5.0).into_bytes(),
        format!("{}", now + 3600.0).into_bytes(),
    ])
    .collect();
    let mut accepted = std::collections::BTreeMap::<&str, u32>::new();
    let valid = ["1", "2", "10", "0.5", "3", "1.6666666666666667", "0", "100"];
    let now_text = format!("{now}");
    for i in 0..5_000 {
        let mut cmd: Vec<Vec<u8>> = vec![b"EVALSHA".to_vec(), sha.clone().into_bytes()];
        let mut formed = None;
        let key = |rng: &mut common::Rng| {
            if rng.below(4) == 0 {
                foreign[rng.below(foreign.len() as u64) as usize]
            } else {
                own[rng.below(own.len() as u64) as usize]
            }
        };
        if rng.below(2) == 0 {
            // A well-formed call (its numbers from a pool of valid ones), one argument
            // replaced now and then.
            let pick = |rng: &mut common::Rng| valid[rng.below(valid.len() as u64) as usize];
            let (word, keys, count) = match rng.below(11) {
                0 => ("TAKE", 1, 3),
                1 => ("MTAKE", 2, 6),
                2 => ("RESERVE", 1, 4),
                3 => ("PEEK", 1, 2),
                4 => ("REFUND", 1, 3),
                5 => ("ACQUIRE", 1, 2),
                6 => ("HOLD", 1, 4),
                7 => ("SETTLE", 1, 4),
                8 => ("RELEASE", 1, 1),
                9 => ("RENEW", 1, 2),
                _ => ("WINDOW", 1, 3),
            };
            formed = Some(word);
            cmd.push(keys.to_string().into_bytes());
            for _ in 0..keys {
                cmd.push(key(&mut rng).as_bytes().to_vec());
            }
            cmd.push(word.as_bytes().to_vec());
            for _ in 0..count {
                cmd.push(pick(&mut rng).as_bytes().to_vec());
            }
            if matches!(word, "RELEASE" | "RENEW" | "SETTLE") {
                // An id where the command takes one (a granted one when there is one).
                let at = cmd.len() - count + if word == "SETTLE" { 2 } else { 0 };
                let held = c.cmd(&["ZRANGE", "l", "-1", "-1"]);
                let last = match &held {
                    Reply::Array(items) => items.first().cloned(),
                    _ => None,
                };
                cmd[at] = match last {
                    Some(Reply::Bulk(m)) if m.starts_with(b"lease:") => m[6..].to_vec(),
                    _ => b"0123456789abcdef".to_vec(),
                };
            }
            if matches!(word, "ACQUIRE" | "HOLD") {
                cmd.extend([b"ID".to_vec(), common::scripts::random_id().into_bytes()]);
            } else if !matches!(word, "RELEASE" | "RENEW" | "SETTLE") {
                cmd.push(now_text.clone().into_bytes());
            }
            if word == "WINDOW" {
                let mode = ["FIXED", "SLIDING", "LOG"][rng.below(3) as usize];
                cmd.push(mode.as_bytes().to_vec());
            }
            if rng.below(3) == 0 {
                let at = 4 + rng.below((cmd.len() - 4) as u64) as usize;
                cmd[at] = pieces[rng.below(pieces.len() as u64) as usize].clone();
            }
        } else {
            let numkeys = rng.below(4) as usize;
            cmd.push(numkeys.to_string().into_bytes());
            for _ in 0..numkeys {
                cmd.push(key(&mut rng).as_bytes().to_vec());
            }
            cmd.push(
                words[rng.below(words.len() as u64) as usize]
                    .as_bytes()
                    .to_vec(),
            );
            for _ in 0..rng.below(9) {
                cmd.push(pieces[rng.below(pieces.len() as u64) as usize].clone());
            }
        }
        let r = c.cmd(&cmd);
        if !matches!(r, Reply::Error(_)) {
            *accepted.entry(formed.unwrap_or("(random)")).or_default() += 1;
        }
        assert_eq!(fingerprint(&mut c, &foreign), before, "call {i}: {cmd:?}");
        for key in own {
            let kind = c.cmd(&["TYPE", key]).text();
            let fields = if kind == "hash" {
                common::hgetall(&mut c, key.as_bytes())
            } else {
                Vec::new()
            };
            let has = |f: &str| fields.iter().any(|(k, _)| k == f.as_bytes());
            let check = match kind.as_str() {
                "none" => continue,
                "hash" if has("holds") => format!("TB.PEEK {key} HOLDS"),
                "hash" if has("tokens") => format!("TB.PEEK {key} 10 1"),
                "hash" if has("counts") => format!("TB.WINDOW {key} 10 1 0 SLIDING"),
                "hash" => format!("TB.WINDOW {key} 10 1 0 FIXED"),
                "zset" if c.cmd(&["ZSCORE", key, "redis-tb:leases"]) != Reply::Nil => {
                    format!("TB.PEEK {key} LEASES")
                }
                "zset" => format!("TB.WINDOW {key} 10 1 0 LOG"),
                other => panic!("call {i}: {key} is a {other}: {cmd:?}"),
            };
            let r = c.q(&check);
            assert!(
                !matches!(r, Reply::Error(_)),
                "call {i}: {cmd:?} left {key} unreadable: {r:?} ({fields:?})"
            );
        }
    }
    // The run reaches past argument parsing: over 14 runs on Redis 7.0, 8.0 and Valkey 8.1,
    // 460 to 560 calls were accepted, every command among them (TB.WINDOW the fewest, 2 to
    // 11: its keys are shared with the other kinds on purpose). The ids and the server's
    // clock differ per run, so the bound leaves room; it was "more than 500", which flaked.
    let total: u32 = accepted.values().sum();
    assert!(total > 300, "only {total} calls accepted: {accepted:?}");
}

// ---------------------------------------------------------------------------------------
// Leases and holds (issue 39's rows, and issue 42's scripts)

const NOT_LEASES: &str = "ERR key holds a sorted set that is not TB.ACQUIRE's leases (members lease:<16 hex digits>, scores whole ms)";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const CORRUPT_HOLDS: &str = "ERR bucket state is corrupt: field 'holds' is not a list of holds";

/// Every lease and hold command on `key` (TB.ACQUIRE ... TAKE with the key as its lease key
/// and as a bucket).
fn lease_commands(key: &str) -> Vec<(&'static str, Vec<String>)> {
    let id = "0123456789abcdef";
    [
        ("lease", format!("TB.ACQUIRE {key} 5 1000")),
        (
            "lease",
            format!("TB.ACQUIRE {key} 5 1000 TAKE 1 fresh 10 1 1"),
        ),
        (
            "bucket",
            format!("TB.ACQUIRE fresh 5 1000 TAKE 1 {key} 10 1 1"),
        ),
        ("lease", format!("TB.RELEASE {key} {id}")),
        ("either", format!("TB.RENEW {key} {id} 1000")),
        ("lease", format!("TB.PEEK {key} LEASES")),
        ("bucket", format!("TB.HOLD {key} 10 1 1 1000")),
        ("bucket", format!("TB.SETTLE {key} 10 1 {id} 1")),
        ("bucket", format!("TB.SETTLE {key} 10 1 {id} 1 5")),
        ("bucket", format!("TB.PEEK {key} HOLDS")),
    ]
    .into_iter()
    .map(|(what, l)| (what, l.split(' ').map(String::from).collect()))
    .collect()
}

/// Issue 39 L6: a sorted set without the marker is written only if every member is a lease;
/// a user's set (a leaderboard, one whose lowest member looks like a lease, a lease with a
/// score no expiry has, a marker at the wrong score) is refused by every lease command and
/// left byte for byte, TTL included; hold commands answer WRONGTYPE.
fn a_sorted_set_the_module_did_not_make_is_never_written_by_a_lease_command(kind: Kind) {
    let (_s, mut c) = start(kind);
    let far = (server_now(&mut c.conn) as u64 + 86_400) * 1000;
    let far = far.to_string();
    let sets: [(&str, Vec<(&str, &str)>); 5] = [
        ("board", vec![("1500", "alice"), ("1200", "bob")]),
        (
            "lookalike",
            vec![(&far, "lease:00000000000000b1"), ("1e15", "alice")],
        ),
        (
            "halfms",
            vec![("1764456268123.5", "lease:00000000000000b2")],
        ),
        ("future", vec![("1e300", "lease:00000000000000b3")]),
        (
            "badmarker",
            vec![("-2", "redis-tb:leases"), (&far, "lease:00000000000000b4")],
        ),
    ];
    for (key, members) in &sets {
        for (score, member) in members {
            c.cmd(&["ZADD", key, score, member]);
        }
        c.cmd(&["PEXPIRE", key, "86400000"]);
    }
    for (key, _) in &sets {
        let before = fingerprint(&mut c.conn, &[key, "fresh"]);
        for (what, cmd) in lease_commands(key) {
            let r = c.cmd(&cmd);
            let want = if what == "bucket" {
                WRONGTYPE
            } else {
                NOT_LEASES
            };
            assert_eq!(r, Reply::Error(want.into()), "{key}: {cmd:?}");
            assert_eq!(fingerprint(&mut c.conn, &[key, "fresh"]), before, "{cmd:?}");
        }
    }
}

/// A user's record is not a bucket for TB.HOLD, TB.SETTLE, TB.PEEK key HOLDS or TB.RENEW of
/// a hold, and a bucket whose `holds` is not a list of holds is refused, not rewritten.
fn a_hash_that_is_not_a_bucket_or_has_corrupt_holds_is_never_written_by_a_hold_command(kind: Kind) {
    let (_s, mut c) = start(kind);
    c.q("HSET user name bob email bob@example.com");
    c.q("PEXPIRE user 86400000");
    for (key, value) in [
        ("h1", "zz"),
        ("h2", "0123456789abcdef:1"),
        ("h3", "0123456789abcdef:0:5"),
        ("h4", "0123456789abcdef:1:-5"),
        ("h5", "0123456789abcdef:nan:5"),
        ("h6", "123:1:5"),
        ("h7", "0123456789abcdef:1:99999999999999999999999"),
    ] {
        c.cmd(&[
            "HSET",
            key,
            "tokens",
            "5",
            "last_refill_time",
            T0,
            "holds",
            value,
        ]);
    }
    let cases: Vec<(&str, &str)> = vec![("user", NOT_BUCKET)]
        .into_iter()
        .chain(["h1", "h2", "h3", "h4", "h5", "h6", "h7"].map(|k| (k, CORRUPT_HOLDS)))
        .collect();
    for (key, want) in cases {
        let before = fingerprint(&mut c.conn, &[key, "fresh"]);
        for (what, cmd) in lease_commands(key) {
            if what == "lease" {
                continue;
            }
            // TB.ACQUIRE ... TAKE reads a bucket's fields, not its holds.
            let want = if cmd[0] == "TB.ACQUIRE" && want == CORRUPT_HOLDS {
                continue;
            } else {
                want
            };
            assert_eq!(c.cmd(&cmd), Reply::Error(want.into()), "{key}: {cmd:?}");
            assert_eq!(fingerprint(&mut c.conn, &[key, "fresh"]), before, "{cmd:?}");
        }
    }
}

/// Issue 39 L7: a hold charges at least capacity/100, so 100 holds of 5e-324 spend the
/// whole bucket; a full table refuses the next hold with the wait for a place, charging
/// nothing, as a reply (never an error a client could take for Redis down).
fn holds_of_no_cost_cannot_fill_a_table_and_a_full_table_is_a_refusal(kind: Kind) {
    let (_s, mut c) = start(kind);
    for i in 0..100 {
        let r = c.q("TB.HOLD tiny 10 0.001 5e-324 60000");
        assert_eq!(r.array()[0], Reply::Int(1), "hold {i}: {r:?}");
    }
    let r = c.q("TB.HOLD tiny 10 0.001 5e-324 60000");
    assert_eq!(r.array()[0], Reply::Int(0), "{r:?}");
    assert_eq!(r.array()[4], Reply::Nil);
    // A bucket that refills faster than holds take (a million a second): a full table is
    // a refusal whose wait is the place's.
    for _ in 0..100 {
        c.q("TB.HOLD big 100 1e6 1 60000");
    }
    let before = fingerprint(&mut c.conn, &["big"]);
    let r = c.q("TB.HOLD big 100 1e6 1 60000");
    assert_eq!(r.array()[0], Reply::Int(0), "{r:?}");
    let wait: f64 = r.array()[2].text().parse().unwrap();
    assert!((59.0..=60.001).contains(&wait), "{r:?}");
    assert_eq!(fingerprint(&mut c.conn, &["big"]), before);
    let r = c.q("TB.PEEK big HOLDS");
    assert_eq!(r.array()[0], Reply::Int(100));
}

/// Ids are 16 hex digits in either case (sent back as replied or in capitals); anything else
/// is the error naming the id, and a wrong id changes nothing.
fn ids_are_read_as_the_module_reads_them(kind: Kind) {
    let (_s, mut c) = start(kind);
    let r = c.q("TB.ACQUIRE k 2 60000");
    let id = r.array()[2].text();
    for bad in [
        "xyz",
        "0123456789abcde",
        "0123456789abcdef0",
        "0123456789abcdeg",
        "+123456789abcdef",
    ] {
        assert_eq!(
            c.cmd(&["TB.RELEASE", "k", bad]),
            Reply::Error("ERR lease_id must be the 16 hex digits TB.ACQUIRE replied".into())
        );
        assert_eq!(
            c.cmd(&["TB.SETTLE", "b", "10", "1", bad, "1"]),
            Reply::Error("ERR hold_id must be the 16 hex digits TB.HOLD replied".into())
        );
    }
    let before = fingerprint(&mut c.conn, &["k"]);
    assert_eq!(
        c.q("TB.RELEASE k 0000000000000000").array()[0],
        Reply::Int(0)
    );
    assert_eq!(fingerprint(&mut c.conn, &["k"]), before);
    let upper = id.to_uppercase();
    assert_eq!(
        c.cmd(&["TB.RENEW", "k", &upper, "1000"]).array()[0],
        Reply::Int(1)
    );
    assert_eq!(
        c.cmd(&["TB.RELEASE", "k", &upper]).array()[0],
        Reply::Int(1)
    );
}

/// The scripts' own rules for the id a grant gets (README.md): the client's, 16 hex digits,
/// not already held on the key; without it, malformed or taken, the call is refused before
/// anything is written. And `NOW` never moves a lease where TIME works.
#[test]
fn the_scripts_take_the_clients_id_and_never_its_clock_where_time_works() {
    let (s, backend) = start_script_server();
    let sha = match &backend {
        Backend::Eval(sha) => sha.clone(),
        _ => unreachable!(),
    };
    let mut c = s.conn();
    let eval = |c: &mut common::Conn, keys: &[&str], args: &[&str]| {
        let mut cmd = vec!["EVALSHA".to_string(), sha.clone(), keys.len().to_string()];
        cmd.extend(keys.iter().chain(args).map(|s| s.to_string()));
        c.cmd(&cmd)
    };
    const ID: &str = "ERR the scripts take ID <16 hex digits from the client's CSPRNG> after TB.ACQUIRE's and TB.HOLD's arguments";
    const TAKEN: &str = "ERR ID is already held on this key: send a fresh random one";
    for args in [
        vec!["ACQUIRE", "5", "1000"],
        vec!["ACQUIRE", "5", "1000", "ID", "xyz"],
        vec!["ACQUIRE", "5", "1000", "ID", "0123456789abcdeg"],
    ] {
        assert_eq!(
            eval(&mut c, &["k"], &args),
            Reply::Error(ID.into()),
            "{args:?}"
        );
    }
    assert_eq!(
        eval(&mut c, &["h"], &["HOLD", "10", "1", "1", "1000"]),
        Reply::Error(ID.into())
    );
    assert_eq!(c.q("DBSIZE").int(), 0);
    let r = eval(
        &mut c,
        &["k"],
        &["ACQUIRE", "5", "60000", "ID", "0123456789ABCDEF"],
    );
    assert_eq!(r.array()[2].text(), "0123456789abcdef");
    let before = fingerprint(&mut c, &["k", "b"]);
    for args in [
        vec!["ACQUIRE", "5", "1000", "ID", "0123456789abcdef"],
        vec![
            "ACQUIRE",
            "5",
            "1000",
            "TAKE",
            "10",
            "1",
            "1",
            "ID",
            "0123456789abcdef",
        ],
    ] {
        let keys: &[&str] = if args.len() > 5 { &["k", "b"] } else { &["k"] };
        assert_eq!(
            eval(&mut c, keys, &args),
            Reply::Error(TAKEN.into()),
            "{args:?}"
        );
    }
    assert_eq!(
        fingerprint(&mut c, &["k", "b"]),
        before,
        "a taken id wrote something"
    );
    let r = eval(
        &mut c,
        &["h"],
        &["HOLD", "10", "1", "1", "60000", "ID", "00000000000000aa"],
    );
    assert_eq!(r.array()[4].text(), "00000000000000aa");
    let before = fingerprint(&mut c, &["h"]);
    let r = eval(
        &mut c,
        &["h"],
        &["HOLD", "10", "1", "1", "60000", "ID", "00000000000000AA"],
    );
    assert_eq!(r, Reply::Error(TAKEN.into()));
    assert_eq!(fingerprint(&mut c, &["h"]), before);
    // A NOW an hour ahead is not read where TIME works: the lease lasts its lease_ms.
    let ahead = format!("{}", server_now(&mut c) + 3600.0);
    let r = eval(
        &mut c,
        &["k"],
        &[
            "ACQUIRE",
            "5",
            "1000",
            "ID",
            "00000000000000bb",
            "NOW",
            &ahead,
        ],
    );
    assert!(matches!(r.array()[3], Reply::Int(1000 | 1001)), "{r:?}");
    let r = eval(
        &mut c,
        &["k"],
        &["RENEW", "00000000000000bb", "1000", "NOW", &ahead],
    );
    assert!(matches!(r.array()[2], Reply::Int(1000 | 1001)), "{r:?}");
}
