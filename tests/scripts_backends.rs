//! The script library (clients/lua) where users run it, against the module: keys continued
//! by either backend both ways, the number texts and grammar against the module's own
//! functions, the server's clock, a server that refuses TIME in scripts, effects on the
//! replication stream, a replica and an AOF restart without the module, the Functions
//! build on a replica, and LOG calls that add and remove 10,000 entries.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::clock::SharedClock;
use common::differential::{Differential, Side};
use common::scripts::{
    Backend, LIBRARY, load_functions, load_script, start_script_server, start_script_server_env,
};
use common::{
    Conn, Options, ReplStream, Reply, Server, Take, assert_same_dumps, dumps, hgetall,
    start_replica,
};

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

/// A module server with the library loaded beside it: each call may go either way.
fn both_backends() -> (Server, Backend) {
    both_backends_env(Vec::new())
}

fn both_backends_env(env: Vec<(String, String)>) -> (Server, Backend) {
    let s = Server::start_with_env(Options::default(), env);
    let sha = load_script(&mut s.conn(), LIBRARY);
    (s, Backend::Eval(sha))
}

/// A shared test clock in a directory of its own (removed with the guard).
struct Clock {
    clock: Option<SharedClock>,
    dir: std::path::PathBuf,
}

impl Clock {
    /// None where the server's wall clock does not follow the shared one (Valkey 9.1:
    /// common::clock::server_follows_shared_clock says why).
    fn new(name: &str) -> Option<Clock> {
        if !common::clock::server_follows_shared_clock() {
            return None;
        }
        let dir =
            std::env::temp_dir().join(format!("redis-tb-clock-{}-{name}", std::process::id()));
        Some(Clock {
            clock: Some(SharedClock::new(&dir)),
            dir,
        })
    }
    fn env(&self) -> Vec<(String, String)> {
        self.clock.as_ref().unwrap().env()
    }
    fn take(&mut self) -> SharedClock {
        self.clock.take().unwrap()
    }
}

impl Drop for Clock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------------------
// One key, two backends

#[test]
fn a_key_written_by_either_backend_is_continued_by_the_other() {
    // One server with both (B) against one with the module only (A): every step's reply
    // and key must be the same, whichever backend wrote the key before.
    let (b, script) = both_backends();
    let a = Server::start();
    let mut ca = a.conn();
    let mut cb = b.conn();
    let t = wall();
    let at = |dt: f64| format!("{}", t + dt);
    let steps: Vec<(Backend, String)> = vec![
        (Backend::Module, format!("TB.TAKE k 10 2 3 {}", at(0.0))),
        (script.clone(), format!("TB.TAKE k 10 2 4 {}", at(0.25))),
        (
            Backend::Module,
            format!("TB.RESERVE k 10 2 6 5 {}", at(0.5)),
        ),
        (script.clone(), format!("TB.REFUND k 10 2 1 {}", at(0.75))),
        (Backend::Module, format!("TB.PEEK k 10 2 {}", at(1.0))),
        (
            script.clone(),
            format!("TB.MTAKE 2 k k2 10 2 1 5 1 1 {}", at(1.5)),
        ),
        (
            Backend::Module,
            format!("TB.MTAKE 2 k2 k 5 1 2 10 2 1 {}", at(2.0)),
        ),
        (
            script.clone(),
            format!("TB.WINDOW f 3 10 2 {} FIXED", at(0.0)),
        ),
        (
            Backend::Module,
            format!("TB.WINDOW f 3 10 1 {} FIXED", at(1.0)),
        ),
        (
            script.clone(),
            format!("TB.WINDOW f 3 10 1 {} FIXED", at(2.0)),
        ),
        (Backend::Module, format!("TB.WINDOW s 4 2 3 {}", at(0.0))),
        (script.clone(), format!("TB.WINDOW s 4 2 2 {}", at(2.5))),
        (
            Backend::Module,
            format!("TB.WINDOW s 4 2 1 {} SLIDING", at(3.0)),
        ),
        (script.clone(), format!("TB.WINDOW l 3 5 2 {} LOG", at(0.0))),
        (
            Backend::Module,
            format!("TB.WINDOW l 3 5 1 {} LOG", at(0.5)),
        ),
        (script.clone(), format!("TB.WINDOW l 3 5 1 {} LOG", at(1.0))),
        (
            Backend::Module,
            format!("TB.WINDOW l 3 5 2 {} LOG", at(5.2)),
        ),
        (script.clone(), format!("TB.WINDOW l 3 5 1 {} LOG", at(5.6))),
    ];
    for (backend, line) in steps {
        let cmd = words(&line);
        let want = ca.cmd(&cmd);
        let got = backend.call(&mut cb, &cmd);
        assert_eq!(got, want, "{line} via {backend:?}");
        assert!(!matches!(got, Reply::Error(_)), "{line}: {got:?}");
        for key in ["k", "k2", "f", "s", "l"] {
            let (da, db) = (
                common::dump(&mut ca, key.as_bytes()),
                common::dump(&mut cb, key.as_bytes()),
            );
            assert_eq!(db, da, "{key} after {line}");
        }
    }
    // The server clock too: a key the module wrote on it, continued by the scripts on it.
    let module_first = Take::from_reply(&cb.q("TB.TAKE c 10 1 4"));
    let script_next = Take::from_reply(&script.q(&mut cb, "TB.TAKE c 10 1 4"));
    assert!(module_first.allowed && script_next.allowed);
    assert!(
        (script_next.remaining - 2.0).abs() < 0.01,
        "{script_next:?}"
    );
    let script_then = Take::from_reply(&script.q(&mut cb, "TB.TAKE c 10 1 4"));
    assert!(
        !script_then.allowed && script_then.retry_after > 1.9,
        "{script_then:?}"
    );
    let module_then = Take::from_reply(&cb.q("TB.PEEK c 10 1"));
    assert!((module_then.remaining - script_then.remaining).abs() < 0.01);
}

#[test]
fn module_and_scripts_taking_turns_on_the_same_keys_match_the_module_alone() {
    // The differential run with every call on B sent to the module or the scripts at
    // random: a deployment switched between backends mid-traffic, call by call. Leases
    // and holds included (one clock for both servers): a grant on B goes through the scripts
    // with A's id, and the releases, renewals, settlements and peeks of those leases and
    // holds through either.
    let Some(mut clock) = Clock::new("turns") else {
        return;
    };
    let (b, script) = both_backends_env(clock.env());
    let a = Server::start_with_env(Options::default(), clock.env());
    let mut side_b = Side::new(b.conn(), Backend::Module);
    side_b.alternate = Some(script);
    let mut d = Differential::new(0x0bac_4e0d, Side::new(a.conn(), Backend::Module), side_b);
    d.clock = Some(clock.take());
    d.run(20_000).unwrap_or_else(|e| panic!("{e}"));
    for command in ["TB.RELEASE", "TB.RENEW", "TB.SETTLE"] {
        assert!(d.stats.outcome(command, "allowed") > 20, "{:?}", d.stats);
    }
    assert!(
        d.stats.outcome("TB.WINDOW", "allowed") > 100,
        "{:?}",
        d.stats
    );
}

// ---------------------------------------------------------------------------------------
// Numbers

/// xorshift64*, for values.
struct Values(u64);

impl Values {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A double in (0, 2^53] (the capacities TB.PEEK accepts): of any magnitude (uniform
    /// bits), a token count as the refill leaves it (stored + elapsed x rate at epoch
    /// times), a wait, or a whole number of microseconds.
    fn value(&mut self, kind: u64) -> f64 {
        match kind {
            0 => loop {
                let v = f64::from_bits(self.next() >> 1);
                if v > 0.0 && v <= 9_007_199_254_740_992.0 {
                    return v;
                }
            },
            1 => {
                let now = 1.796e9 + self.unit() * 1e6;
                let last = now - self.unit() * 10.0;
                let rate = [100.0 / 60.0, 2.0, 0.1, 7.3][(self.next() % 4) as usize];
                (self.unit() * 50.0 + (now - last) * rate).min(1e3) + 0.5
            }
            2 => (self.unit() * 100.0) / [1.6666666666666667, 3.0, 7.0][(self.next() % 3) as usize],
            _ => (1 + self.next() % 4_000_000_000_000) as f64 / 1e6,
        }
    }
}

/// The significant digits of a `{:e}` text, without trailing zeros.
fn digits_of(text: &str) -> String {
    let mantissa = text.split('e').next().unwrap();
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() {
        "0".into()
    } else {
        digits.into()
    }
}

/// Each of `commands` on the module server and the script server, pipelined; every pair of
/// replies must be equal.
fn same_replies(a: &mut Conn, b: &mut Conn, script: &Backend, commands: &[Vec<String>]) {
    for chunk in commands.chunks(2_000) {
        let for_b: Vec<Vec<String>> = chunk.iter().map(|c| script.argv(c)).collect();
        a.send_all(chunk);
        b.send_all(&for_b);
        for cmd in chunk {
            let (ra, rb) = (a.read(), b.read());
            assert_eq!(rb, ra, "{cmd:?}");
        }
    }
}

#[test]
fn number_texts_are_the_modules_shortest_round_trip_texts() {
    // TB.PEEK on a missing key replies its capacity as `remaining`: the number as the
    // module formats it against the script's text for it. Stored debts give negative
    // texts, and a slow refill of a large capacity waits of any size.
    let module = Server::start();
    let (s, script) = start_script_server();
    let (mut a, mut b) = (module.conn(), s.conn());
    let now = format!("{}", wall());
    let mut values = Values(0x1234_5678_9abc_def1);
    // How the shortest text relates to printf's (README.md): the digits the shortest needs
    // (15 or fewer, 16, 17), and how often %.17g is not the shortest text.
    let per_kind = 50_000;
    let mut report = Vec::new();
    for (kind, name) in [
        "uniform bits",
        "refilled token counts",
        "waits",
        "whole microseconds",
    ]
    .iter()
    .enumerate()
    {
        let batch: Vec<f64> = (0..per_kind).map(|_| values.value(kind as u64)).collect();
        let commands: Vec<Vec<String>> = batch
            .iter()
            .map(|v| words(&format!("TB.PEEK missing {v:e} 1 {now}")))
            .collect();
        same_replies(&mut a, &mut b, &script, &commands);
        let mut by_digits = [0u64; 3];
        let (mut g17, mut g15_or_17) = (0, 0);
        for v in &batch {
            let shortest = digits_of(&format!("{v:e}"));
            by_digits[shortest.len().clamp(15, 17) - 15] += 1;
            if digits_of(&format!("{v:.16e}")) != shortest {
                g17 += 1;
                // %.15g when it reads back (bench/token_bucket.lua's way), else %.17g.
                if shortest.len() > 15 {
                    g15_or_17 += 1;
                }
            }
        }
        let pct = |n: u64| 100.0 * n as f64 / per_kind as f64;
        report.push(format!(
            "{name}: shortest has <=15 digits {:.1}%, 16 {:.1}%, 17 {:.1}%; not the shortest: %.17g {:.1}%, %.15g-else-%.17g {:.1}%",
            pct(by_digits[0]),
            pct(by_digits[1]),
            pct(by_digits[2]),
            pct(g17),
            pct(g15_or_17)
        ));
    }
    eprintln!("{}", report.join("\n"));
    // The edges where the layout changes, negative values, and values above 2^53.
    let edges = [
        1e16,
        9999999999999998.0,
        1.5e15,
        1e-5,
        1.5e-5,
        0.0001,
        0.00012345,
        1e-7,
        5e-324,
        2.2250738585072014e-308,
        4294967296.0,
        4294967295.999999,
        4294967296.000001,
        0.000001,
        0.0000005,
        123456.5,
        2.5e-6,
        1764456268.123456,
        0.1 + 0.2,
        1.0 / 3.0,
        9007199254740992.0,
        9007199254740991.5,
    ];
    let mut commands: Vec<Vec<String>> = edges
        .iter()
        .map(|v| words(&format!("TB.PEEK missing {v:e} 1 {now}")))
        .collect();
    for (i, v) in [
        0.5,
        3e-6,
        1e-7,
        123.456,
        9e15,
        9007199254740992.0,
        1.0 / 3.0,
    ]
    .iter()
    .enumerate()
    {
        let key = format!("debt{i}");
        let stored = vec![
            "HSET".into(),
            key.clone(),
            "tokens".into(),
            format!("-{v:e}"),
            "last_refill_time".into(),
            now.clone(),
        ];
        commands.push(stored);
        commands.push(words(&format!("TB.PEEK {key} 9007199254740992 1e-9 {now}")));
        commands.push(words(&format!("TB.PEEK {key} 2 3e-9 {now}")));
    }
    same_replies(&mut a, &mut b, &script, &commands);
}

#[test]
fn numbers_are_read_by_the_modules_grammar() {
    // A text as TB.PEEK's capacity: refused as not a number, out of range, or replied back
    // as the number read; the module and the scripts alike.
    let module = Server::start();
    let (s, script) = start_script_server();
    let (mut a, mut b) = (module.conn(), s.conn());
    let now = format!("{}", wall());
    let mut texts: Vec<String> = [
        "0",
        "-0",
        "05",
        "1e3",
        "5e-05",
        "1.5E+20",
        "+5",
        ".5",
        "5.",
        "-.5",
        "0x10",
        "inf",
        "-inf",
        "nan",
        "1_000",
        " 1",
        "1 ",
        "",
        "1e400",
        "1e-400",
        "-1e400",
        "1e",
        "1e+",
        "--1",
        "1..2",
        "1.2.3",
        "2.5e2",
        "1764456268.123456",
        "9007199254740993",
        "0.1000000000000000055511151231257827",
        "1\u{0}",
        "\u{0}",
        "1e-320",
        "4.9e-324",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    texts.push("1".repeat(128));
    texts.push(format!("0.{}", "1".repeat(127)));
    texts.push("1".repeat(129));
    let mut v = Values(42);
    let alphabet = b"0123456789.-+eE x";
    for _ in 0..30_000 {
        let len = 1 + (v.next() % 12) as usize;
        let t: String = (0..len)
            .map(|_| alphabet[(v.next() % alphabet.len() as u64) as usize] as char)
            .collect();
        texts.push(t);
    }
    let mut commands = Vec::new();
    for t in &texts {
        let peek = |cap: &str, rate: &str, now: &str| {
            vec![
                "TB.PEEK".to_string(),
                "missing".to_string(),
                cap.to_string(),
                rate.to_string(),
                now.to_string(),
            ]
        };
        commands.push(peek(t, "1", &now));
        commands.push(peek("10", t, &now));
        commands.push(peek("10", "1", t));
    }
    same_replies(&mut a, &mut b, &script, &commands);
    // The accepted ones were accepted at all.
    let accepted = texts.iter().filter(|t| t.parse::<f64>().is_ok()).count();
    assert!(accepted > 1_000, "{accepted}");
}

// ---------------------------------------------------------------------------------------
// Clocks

#[test]
fn on_the_server_clock_the_scripts_store_and_answer_as_the_module_does() {
    let (s, script) = both_backends();
    let mut c = s.conn();
    // Same calls, one after the other on one server: the second backend is a few
    // microseconds later, so the numbers agree within the refill of that time.
    for (line, key) in [
        ("TB.TAKE {} 10 1 3", "t"),
        ("TB.RESERVE {} 5 2 6 10", "r"),
        ("TB.WINDOW {} 10 60 3 FIXED", "f"),
        ("TB.WINDOW {} 10 1 3", "s"),
        ("TB.WINDOW {} 10 60 3 LOG", "l"),
    ] {
        let m = Take::from_reply(&c.q(&line.replace("{}", &format!("{key}m"))));
        let l = Take::from_reply(&script.q(&mut c, &line.replace("{}", &format!("{key}s"))));
        assert_eq!(m.allowed, l.allowed, "{line}");
        assert!(
            (m.remaining - l.remaining).abs() < 0.01,
            "{line}: {m:?} {l:?}"
        );
        assert!(
            (m.reset_after - l.reset_after).abs() < 0.01,
            "{line}: {m:?} {l:?}"
        );
        // Waits in whole microseconds (rounded up), as the module reports them.
        let reply = script.q(&mut c, &line.replace("{}", &format!("{key}s")));
        for field in &reply.array()[2..] {
            let text = field.text();
            let decimals = text.split('.').nth(1).map_or(0, str::len);
            assert!(decimals <= 6 && !text.contains('e'), "{line}: {text}");
        }
    }
    // The stored time: the server's microseconds, fixed width, as the module stores it.
    for key in ["tm", "ts"] {
        let fields = hgetall(&mut c, key.as_bytes());
        let time = String::from_utf8(fields[0].1.clone()).unwrap();
        assert_eq!(fields[0].0, b"last_refill_time");
        assert_eq!(time.split('.').nth(1).map(str::len), Some(6), "{time}");
    }
}

const AHEAD: &str = "ERR now is further ahead of the server clock than max-clock-ahead-ms allows (now must be seconds since the Unix epoch)";
const NO_TIME: &str =
    "ERR this server refuses TIME in scripts: send now (seconds since the Unix epoch)";

/// Checks the script on a server whose scripts may not call TIME: `now` is required, the
/// bound holds once a key has an expiry to read the server's clock from, and the
/// differential run (times within the bound) finds nothing.
fn refuses_time(
    s: &Server,
    script: &Backend,
    clock: SharedClock,
    clock_env: Vec<(String, String)>,
) {
    let mut c = s.conn();
    let err = c.cmd(&["EVAL", "return redis.call('TIME')", "0"]);
    assert!(
        matches!(err, Reply::Error(_)),
        "TIME is not refused: {err:?}"
    );
    for line in [
        "TB.TAKE k 10 1 1",
        "TB.PEEK k 10 1",
        "TB.WINDOW w 10 60 1 LOG",
        "TB.MTAKE 2 a b 1 1 1 1 1 1",
    ] {
        assert_eq!(
            script.q(&mut c, line),
            Reply::Error(NO_TIME.into()),
            "{line}"
        );
    }
    assert_eq!(c.q("DBSIZE").int(), 0);
    let now = wall();
    // A key's first call has no clock to be bounded by (README.md): an hour ahead passes.
    let r = script.q(&mut c, &format!("TB.TAKE k 10 1 1 {}", now + 3600.0));
    assert!(Take::from_reply(&r).allowed, "{r:?}");
    // From then on the key's expiry tells the server's clock: the bound applies.
    let r = script.q(&mut c, &format!("TB.TAKE k 10 1 1 {}", now + 3600.0));
    assert_eq!(r, Reply::Error(AHEAD.into()));
    let r = script.q(&mut c, &format!("TB.TAKE k2 10 1 1 {}", now));
    assert!(Take::from_reply(&r).allowed);
    let r = script.q(&mut c, &format!("TB.TAKE k2 10 1 1 {}", now + 11.0));
    assert_eq!(r, Reply::Error(AHEAD.into()));
    let r = script.q(&mut c, &format!("TB.TAKE k2 10 1 1 {}", now + 8.0));
    assert!(Take::from_reply(&r).allowed, "{r:?}");
    // MTAKE reads the clock from any of its keys.
    let r = script.q(
        &mut c,
        &format!("TB.MTAKE 2 new k2 1 1 1 10 1 1 {}", now + 60.0),
    );
    assert_eq!(r, Reply::Error(AHEAD.into()));
    let r = script.q(&mut c, &format!("TB.WINDOW wl 10 60 1 {now} LOG"));
    assert!(Take::from_reply(&r).allowed);
    let r = script.q(&mut c, &format!("TB.WINDOW wl 10 60 1 {} LOG", now + 30.0));
    assert_eq!(r, Reply::Error(AHEAD.into()));
    refuses_time_leases(&mut c, script, &clock);
    c.q("FLUSHALL");
    // Everything else as the module, at times within the bound, leases and holds with
    // `NOW` (the shared clock: what the module reads).
    let a = Server::start_with_env(Options::default(), clock_env);
    let mut d = Differential::new(
        0x0071_3e00,
        Side::new(a.conn(), Backend::Module),
        Side::new(c, script.clone()),
    );
    d.far_ahead = false;
    d.clock = Some(clock);
    d.no_time = true;
    d.run(10_000).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        d.stats.outcome("TB.ACQUIRE", "allowed") > 100,
        "{:?}",
        d.stats
    );
}

const NO_TIME_LEASE: &str = "ERR this server refuses TIME in scripts and no key tells its clock: send NOW <seconds since the Unix epoch> after the arguments";

/// Leases and holds where TIME is refused: the server's millisecond from the key's TTL once
/// it has one (a client's NOW only inside it), the client's NOW for a key's first grant.
fn refuses_time_leases(c: &mut Conn, script: &Backend, clock: &SharedClock) {
    let us = clock.sync();
    let secs = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    let ms = us / 1000;
    let acquire = |c: &mut Conn, key: &str, tail: &[&str]| {
        let mut argv = script.argv(&words(&format!("TB.ACQUIRE {key} 5 1000")));
        argv.extend(tail.iter().map(|s| s.to_string()));
        c.cmd(&argv)
    };
    assert_eq!(acquire(c, "nl", &[]), Reply::Error(NO_TIME_LEASE.into()));
    let mut hold = script.argv(&words("TB.HOLD nh 10 1 1 1000"));
    assert_eq!(c.cmd(&hold), Reply::Error(NO_TIME_LEASE.into()));
    // Nothing to read or write on a missing key: no clock needed.
    assert_eq!(
        script.q(c, "TB.RELEASE nl 0123456789abcdef"),
        Reply::Array(vec![Reply::Int(0), Reply::Int(0)])
    );
    assert_eq!(
        script.q(c, "TB.PEEK nl LEASES"),
        Reply::Array(vec![Reply::Int(0), Reply::Int(0)])
    );
    // A first grant takes the client's NOW (nothing on the server tells the time).
    let r = acquire(c, "nl", &["NOW", &secs(us)]);
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    let score = |c: &mut Conn, key: &str| -> Vec<u64> {
        let r = c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
        r.array()
            .chunks(2)
            .filter(|p| p[0].text() != "redis-tb:leases")
            .map(|p| p[1].text().parse().unwrap())
            .collect()
    };
    assert_eq!(score(c, "nl"), vec![ms + 1 + 1000]);
    // From then on the key's TTL tells the server's millisecond: a NOW an hour ahead (or
    // behind) stays inside it, and no NOW at all is needed.
    let r = acquire(c, "nl", &["NOW", &secs(us + 3_600_000_000)]);
    assert!(matches!(r.array()[3], Reply::Int(1000 | 1001)), "{r:?}");
    let r = acquire(c, "nl", &["NOW", &secs(us - 3_600_000_000)]);
    assert!(matches!(r.array()[3], Reply::Int(1000 | 1001)), "{r:?}");
    let r = acquire(c, "nl", &[]);
    assert!(matches!(r.array()[3], Reply::Int(1000 | 1001)), "{r:?}");
    let scores = score(c, "nl");
    assert_eq!(scores.len(), 4);
    for s in scores {
        assert!((ms + 1000..=ms + 1001).contains(&s), "{s} against {ms}");
    }
    assert_eq!(script.q(c, "TB.PEEK nl LEASES").array()[0], Reply::Int(4));
    // Holds alike: the bucket's stored time is the server's, whatever NOW says.
    hold.extend(["NOW".to_string(), secs(us)]);
    assert_eq!(c.cmd(&hold).array()[0], Reply::Int(1));
    let mut hold = script.argv(&words("TB.HOLD nh 10 1 1 1000"));
    hold.extend(["NOW".to_string(), secs(us + 3_600_000_000)]);
    assert_eq!(c.cmd(&hold).array()[0], Reply::Int(1));
    let time = c.cmd(&["HGET", "nh", "last_refill_time"]).text();
    let stored: f64 = time.parse().unwrap();
    assert!(
        (stored - us as f64 / 1e6).abs() < 0.002,
        "{time} against {us}"
    );
}

#[test]
fn a_server_that_renames_time_away_is_served_with_the_clients_now() {
    let Some(mut clock) = Clock::new("rename") else {
        return;
    };
    let (s, script) =
        start_script_server_env(LIBRARY, &["--rename-command", "TIME", ""], clock.env());
    let env = clock.env();
    refuses_time(&s, &script, clock.take(), env);
}

#[test]
fn a_user_whose_acl_refuses_time_is_served_with_the_clients_now() {
    // Scripts run their commands with the caller's ACL: a user without TIME has scripts
    // without it.
    let Some(mut clock) = Clock::new("acl") else {
        return;
    };
    let (s, script) = start_script_server_env(LIBRARY, &[], clock.env());
    assert_eq!(
        s.conn().q("ACL SETUSER default -time"),
        Reply::Simple("OK".into())
    );
    let env = clock.env();
    refuses_time(&s, &script, clock.take(), env);
}

// ---------------------------------------------------------------------------------------
// Replication and persistence

#[test]
fn the_scripts_replicate_the_modules_effects() {
    // The same calls on a module master and a script master: the same commands reach the
    // replication stream (HSET of the changed fields, PEXPIREAT, ZREM, ZADD, HDEL), in
    // MULTI/EXEC; only the absolute expiries differ by the clocks' microseconds.
    let module = Server::start();
    let (script_server, script) = start_script_server();
    let mut streams = [
        ReplStream::attach(&module),
        ReplStream::attach(&script_server),
    ];
    let mut conns = [module.conn(), script_server.conn()];
    let backends = [Backend::Module, script];
    let t = wall();
    let lines = [
        format!("TB.TAKE k 10 1 3 {t}"),
        format!("TB.TAKE k 10 1 1 {t}"),
        format!("TB.TAKE k 10 1 20 {t}"),
        format!("TB.MTAKE 2 a b 5 1 1 5 1 2 {}", t + 0.5),
        format!("TB.WINDOW w 3 1 2 {t} LOG"),
        format!("TB.WINDOW w 3 1 1 {} LOG", t + 1.5),
        format!("TB.WINDOW s 3 10 1 {t} SLIDING"),
        format!("TB.WINDOW f 3 10 1 {t} FIXED"),
    ];
    let mut seen: Vec<Vec<Vec<String>>> = Vec::new();
    for i in 0..2 {
        // An earlier build's SLIDING key, rewritten as `counts` (HSET then HDEL).
        conns[i].cmd(&[
            "HSET",
            "s",
            "start",
            &format!("{}", t.floor()),
            "count",
            "1",
            "previous",
            "0",
        ]);
        for line in &lines {
            let r = backends[i].call(&mut conns[i], &words(line));
            assert!(!matches!(r, Reply::Error(_)), "{line}: {r:?}");
        }
        conns[i].q("SET marker 1");
        seen.push(
            streams[i]
                .until_marker("marker")
                .into_iter()
                .map(|cmd| {
                    // Absolute expiries: the clocks' difference, not the backends'.
                    if cmd[0] == "PEXPIREAT" {
                        vec![cmd[0].clone(), cmd[1].clone()]
                    } else {
                        cmd
                    }
                })
                .collect(),
        );
    }
    assert_eq!(seen[1], seen[0]);
    assert!(seen[0].iter().any(|c| c[0] == "HDEL"), "{:?}", seen[0]);
    assert!(seen[0].iter().any(|c| c[0] == "ZREM"), "{:?}", seen[0]);
}

#[test]
fn a_replica_and_an_aof_restart_without_the_module_hold_what_the_scripts_wrote() {
    let master = Server::start_with(Options {
        with_module: false,
        extra: [
            "--repl-diskless-sync-delay",
            "0",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ]
        .map(String::from)
        .to_vec(),
    });
    let script = Backend::Eval(load_script(&mut master.conn(), LIBRARY));
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    // A minute of state for every kind: nothing expires while it is compared.
    let now = wall();
    for i in 0..200 {
        let t = format!("{}", now + i as f64 * 0.01);
        for line in [
            format!("TB.TAKE b{} 100 0.5 1 {t}", i % 7),
            format!("TB.MTAKE 2 m{} n{} 100 1 1 50 0.5 2 {t}", i % 5, i % 3),
            format!("TB.RESERVE r 10 0.2 1 1000 {t}"),
            format!("TB.WINDOW f{} 100 120 1 {t} FIXED", i % 4),
            format!("TB.WINDOW s{} 100 120 1 {t}", i % 4),
            format!("TB.WINDOW l{} 100 120 1 {t} LOG", i % 4),
        ] {
            let r = script.q(&mut c, &line);
            assert!(!matches!(r, Reply::Error(_)), "{line}: {r:?}");
        }
    }
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let want = dumps(&mut c);
    assert!(want.len() > 20, "{}", want.len());
    let mut rc = replica.conn();
    let got = dumps(&mut rc);
    assert_same_dumps("replica", &mut rc, &got, &mut c, &want);
    // kill -9 and a restart from the AOF, still without the module.
    drop(c);
    let mut master = master;
    master.restart(false);
    let mut c = master.conn();
    assert_eq!(dumps(&mut c), want, "after the AOF restart");
    // The scripts continue the keys after the restart (SCRIPT LOAD again: the script
    // cache is not persisted).
    let script = Backend::Eval(load_script(&mut c, LIBRARY));
    let t = format!("{}", now + 3.0);
    let r = Take::from_reply(&script.q(&mut c, &format!("TB.TAKE b0 100 0.5 1 {t}")));
    assert!(r.allowed && r.remaining < 72.0, "{r:?}");
}

// ---------------------------------------------------------------------------------------
// The Functions build

#[test]
fn the_functions_build_serves_peek_on_a_replica_and_matches_eval() {
    let master = Server::start_with(Options {
        with_module: false,
        extra: ["--repl-diskless-sync-delay", "0"]
            .map(String::from)
            .to_vec(),
    });
    let mut c = master.conn();
    load_functions(&mut c, LIBRARY);
    let sha = load_script(&mut c, LIBRARY);
    let replica = start_replica(&master, false);
    let now = wall();
    let f = Backend::Function;
    let e = Backend::Eval(sha);
    let r = f.q(&mut c, &format!("TB.TAKE k 10 1 4 {now}"));
    assert_eq!(r, common::bulk_reply(1, ["6", "0", "4"]));
    assert_eq!(
        e.q(&mut c, &format!("TB.TAKE k 10 1 4 {now}")),
        common::bulk_reply(1, ["2", "0", "8"])
    );
    assert_eq!(c.q("WAIT 1 5000").int(), 1);
    // FUNCTION LOAD is replicated: the replica has the library, and FCALL_RO runs there.
    let mut rc = replica.conn();
    let r = f.q(&mut rc, &format!("TB.PEEK k 10 1 {now}"));
    assert_eq!(r, common::bulk_reply(1, ["2", "0", "8"]));
    let r = rc.cmd(&f.argv(&words(&format!("TB.TAKE k 10 1 1 {now}"))));
    assert!(r.error().starts_with("READONLY"), "{r:?}");
    // An unknown word, and errors as the module words them.
    let Backend::Eval(sha) = &e else {
        unreachable!()
    };
    assert_eq!(
        c.cmd(&["EVALSHA", sha, "1", "k", "NOPE"]).error(),
        "ERR unknown command word \"NOPE\": the first argument is TAKE, MTAKE, RESERVE, PEEK, REFUND, WINDOW, ACQUIRE, RELEASE, RENEW, HOLD or SETTLE"
    );
    assert_eq!(
        f.q(&mut c, "TB.TAKE k 10 1"),
        Reply::Error("ERR wrong number of arguments for 'tb.take' command".into())
    );
}

// ---------------------------------------------------------------------------------------
// LOG at its largest

#[test]
fn log_calls_that_add_and_remove_ten_thousand_entries_match_the_module() {
    let module = Server::start();
    let (s, script) = start_script_server();
    let mut ca = module.conn();
    let mut cb = s.conn();
    let t = wall() - 100.0;
    for (i, line) in [
        format!("TB.WINDOW big 10000 2 10000 {t} LOG"),
        format!("TB.WINDOW big 10000 2 1 {} LOG", t + 1.0),
        format!("TB.WINDOW big 10000 2 10000 {} LOG", t + 2.5),
        format!("TB.WINDOW big 10000 2 3 {} LOG", t + 2.6),
        format!("TB.WINDOW big 10000 2 0 {} LOG", t + 3.0),
    ]
    .iter()
    .enumerate()
    {
        let cmd = words(line);
        let want = ca.cmd(&cmd);
        let got = script.call(&mut cb, &cmd);
        assert_eq!(got, want, "{i}: {line}");
        let a = ca.cmd(&["ZRANGE", "big", "0", "-1", "WITHSCORES"]);
        let b = cb.cmd(&["ZRANGE", "big", "0", "-1", "WITHSCORES"]);
        assert_eq!(a, b, "{i}: {line}");
        // The script sets its TTL relative to when its PEXPIRE runs, after its ZREM and
        // ZADD (README.md): later than the module's, by up to the call's duration.
        let (pa, pb) = (ca.q("PTTL big").int(), cb.q("PTTL big").int());
        assert!(pb >= pa - 20 && pb <= pa + 500, "module {pa}, script {pb}");
    }
    assert_eq!(cb.q("ZCARD big").int(), 10_000);
}

// ---------------------------------------------------------------------------------------
// What clients see beside the reply

#[test]
fn under_resp3_the_scripts_reply_bulk_strings_where_the_module_replies_doubles() {
    // The one reply difference (README.md): same values, another RESP3 type.
    let (s, script) = both_backends();
    let mut c = s.conn();
    assert!(matches!(c.q("HELLO 3"), Reply::Array(_)));
    let now = wall();
    let module = c.cmd(&words(&format!("TB.TAKE m 10 3 1 {now}")));
    let scripted = script.call(&mut c, &words(&format!("TB.TAKE s 10 3 1 {now}")));
    assert_eq!(module.array()[0], Reply::Int(1));
    assert_eq!(scripted.array()[0], Reply::Int(1));
    for (m, l) in module.array()[1..].iter().zip(&scripted.array()[1..]) {
        assert!(matches!(m, Reply::Double(_)), "{m:?}");
        assert!(matches!(l, Reply::Bulk(_)), "{l:?}");
        assert_eq!(m.num(), l.num());
    }
}

#[test]
fn watch_is_aborted_by_a_script_call_that_writes_and_by_no_other() {
    let (s, script) = start_script_server();
    let now = wall();
    let argv = |line: String| script.argv(&words(&line));
    // A write aborts a transaction watching the key, as the module's does.
    assert!(!common::watch_survives(
        &s,
        &["k"],
        &argv(format!("TB.TAKE k 10 1 5 {now}"))
    ));
    // Refusals, reports and errors write nothing: the transaction goes through.
    for line in [
        format!("TB.TAKE k 10 1 20 {now}"),
        format!("TB.TAKE k 10 1 0 {now}"),
        format!("TB.PEEK k 10 1 {now}"),
        format!("TB.REFUND k 10 1 0 {now}"),
        format!("TB.TAKE k 10 1 1 {}", now + 3600.0),
        "TB.TAKE k 10 1 +1".to_string(),
        format!("TB.WINDOW k 10 1 1 {now} LOG"),
    ] {
        assert!(
            common::watch_survives(&s, &["k"], &argv(line.clone())),
            "{line}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// A deployment switched between backends

#[test]
fn a_deployment_switched_from_scripts_to_the_module_and_back_keeps_every_key() {
    // One server with both backends and a clock the test moves: traffic through the
    // scripts, then through the module, then the scripts again. Every lease, hold, bucket
    // and window made by one backend is held, renewed, released, settled and continued by
    // the other, with the counts and tokens the calls imply.
    let Some(mut guard) = Clock::new("switch") else {
        return;
    };
    let (s, script) = both_backends_env(guard.env());
    let clock = guard.take();
    let mut c = s.conn();
    // Half a millisecond in: every expiry rounds up to the next whole millisecond.
    let t0 = clock.sync() / 1000 * 1000 + 500;
    clock.set(t0);
    let ints = |r: &Reply| -> Vec<i64> { r.array().iter().map(Reply::int).collect() };
    let id_of = |r: &Reply, at: usize| r.array()[at].text();
    let now = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
    let module = Backend::Module;

    // Scripts: three leases of three, a hold, a bucket, the three windows.
    let mut leases = Vec::new();
    for _ in 0..3 {
        let r = script.q(&mut c, "TB.ACQUIRE lk 3 60000");
        assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
        leases.push(id_of(&r, 2));
    }
    assert_eq!(
        script.q(&mut c, "TB.ACQUIRE lk 3 60000").array()[0],
        Reply::Int(0)
    );
    let r = script.q(&mut c, "TB.HOLD hb 100 0.001 10 60000");
    let script_hold = id_of(&r, 4);
    assert_eq!(r.array()[1].text(), "90");
    let r = script.q(&mut c, "TB.ACQUIRE tl 2 60000 TAKE 1 tb 10 0.001 4");
    assert_eq!(r.array()[0], Reply::Int(1));
    let taken = id_of(&r, 2);
    for (mode, key) in [("FIXED", "wf"), ("SLIDING", "ws"), ("LOG", "wl")] {
        let r = script.q(
            &mut c,
            &format!("TB.WINDOW {key} 5 60 2 {} {mode}", now(t0)),
        );
        assert_eq!(r.array()[0], Reply::Int(1));
    }

    // Switched to the module a second later: everything is there.
    let t1 = t0 + 1_000_000;
    clock.set(t1);
    let r = module.q(&mut c, "TB.PEEK lk LEASES");
    assert_eq!(ints(&r), vec![3, 59_001], "{r:?}");
    assert_eq!(
        module.q(&mut c, "TB.ACQUIRE lk 3 60000").array()[0],
        Reply::Int(0)
    );
    assert_eq!(
        ints(&module.q(&mut c, &format!("TB.RENEW lk {} 120000", leases[0]))),
        vec![1, 3, 120_001]
    );
    assert_eq!(
        ints(&module.q(&mut c, &format!("TB.RELEASE lk {}", leases[1]))),
        vec![1, 2]
    );
    let r = module.q(&mut c, "TB.ACQUIRE lk 3 60000");
    assert_eq!(r.array()[0], Reply::Int(1));
    let module_lease = id_of(&r, 2);
    let r = module.q(&mut c, "TB.PEEK hb HOLDS");
    assert_eq!(r.array()[0], Reply::Int(1));
    // The scripts' hold of 10 settled at 4: 6 back (and a second's refill of 0.001).
    let r = module.q(&mut c, &format!("TB.SETTLE hb 100 0.001 {script_hold} 4"));
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    assert_eq!(r.array()[2].text(), "-6");
    let r = module.q(&mut c, "TB.HOLD hb 100 0.001 20 60000");
    let module_hold = id_of(&r, 4);
    let r = module.q(&mut c, "TB.TAKE tb 10 0.001 6");
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    assert_eq!(
        ints(&module.q(&mut c, &format!("TB.RELEASE tl {taken}"))),
        vec![1, 0]
    );
    for (mode, key) in [("FIXED", "wf"), ("SLIDING", "ws"), ("LOG", "wl")] {
        let r = module.q(
            &mut c,
            &format!("TB.WINDOW {key} 5 60 3 {} {mode}", now(t1)),
        );
        assert_eq!(r.array()[0], Reply::Int(1), "{mode}");
        assert_eq!(r.array()[1].text(), "0", "{mode}");
    }

    // Back to the scripts: the module's lease and hold are theirs to end.
    let t2 = t1 + 1_000_000;
    clock.set(t2);
    assert_eq!(
        ints(&script.q(&mut c, "TB.PEEK lk LEASES")),
        vec![3, 58_001]
    );
    assert_eq!(
        ints(&script.q(&mut c, &format!("TB.RENEW lk {module_lease} 1000"))),
        vec![1, 3, 1001]
    );
    assert_eq!(
        ints(&script.q(&mut c, &format!("TB.RELEASE lk {module_lease}"))),
        vec![1, 2]
    );
    let r = script.q(&mut c, &format!("TB.SETTLE hb 100 0.001 {module_hold} 30"));
    assert_eq!(r.array()[2].text(), "10", "{r:?}");
    let r = script.q(&mut c, "TB.PEEK hb HOLDS");
    assert_eq!((r.array()[0].int(), r.array()[2].int()), (0, 0), "{r:?}");
    let r = script.q(&mut c, "TB.TAKE tb 10 0.001 1");
    assert_eq!(r.array()[0], Reply::Int(0), "{r:?}");
    for (mode, key) in [("FIXED", "wf"), ("SLIDING", "ws"), ("LOG", "wl")] {
        let r = script.q(
            &mut c,
            &format!("TB.WINDOW {key} 5 60 1 {} {mode}", now(t2)),
        );
        assert_eq!(r.array()[0], Reply::Int(0), "{mode}: {r:?}");
    }
    for id in [&leases[0], &leases[2]] {
        assert_eq!(
            script.q(&mut c, &format!("TB.RELEASE lk {id}")).array()[0],
            Reply::Int(1)
        );
    }
    // The last lease gone, the marker stays and the key lives out its TTL, as the module's
    // does (store_lease.rs LeaseKey::remove).
    assert_eq!(c.q("ZCARD lk").int(), 1);
    assert_eq!(c.q("ZSCORE lk redis-tb:leases").text(), "-1");
    assert!(c.q("PTTL lk").int() > 0);
    clock.set(0);
}
