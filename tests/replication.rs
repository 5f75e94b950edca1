//! Replicas and AOF end with exactly the master's buckets: every command (TB.TAKE,
//! TB.MTAKE, TB.RESERVE, TB.REFUND) replicates its effects (HSET + PEXPIREAT, a TB.MTAKE's
//! inside MULTI/EXEC), never itself, so nothing is recomputed with another clock and a
//! server without the module can replay it. A call that writes nothing (a denied take, a
//! TB.PEEK, a no-op refund) replicates nothing, and TB.PEEK is served by replicas.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{
    Conn, ReplStream, Reply, Rng, Take, assert_each_seen, assert_replicas_hold_the_masters_bytes,
    assert_same_dumps, dumps, keyspace, lasting, repl_offset, start_aof_server, start_master,
    start_replica, without,
};

/// Thousands of mixed calls: with and without `now`, allowed and denied, n = 0, n above
/// capacity, fractional rates, and client clocks that go backwards.
fn mixed_traffic(c: &mut Conn, calls: usize, seed: u64) -> (usize, usize) {
    let mut rng = Rng(seed);
    let (mut allowed, mut denied) = (0, 0);
    let mut now = 1_764_456_268.123456f64;
    for _ in 0..calls {
        let key = format!("rl:{}", rng.below(60));
        // Slow enough refills that no bucket expires while the test compares servers
        // (an expiring key would race between the snapshots).
        let capacity = ["5", "10", "100", "2.5"][rng.below(4) as usize];
        let rate = ["0.1", "0.05", "0.16666666666666666", "0.25"][rng.below(4) as usize];
        let n = ["0", "1", "1", "2", "0.5", "200"][rng.below(6) as usize];
        now += (rng.below(100) as f64) / 1000.0 - 0.02;
        let now_text = format!("{now}");
        let mut args = vec!["TB.TAKE", key.as_str(), capacity, rate, n];
        if rng.below(2) == 0 {
            args.push(now_text.as_str());
        }
        let r = c.cmd(&args);
        match r.array()[0] {
            Reply::Int(1) => allowed += 1,
            Reply::Int(0) => denied += 1,
            ref other => panic!("{other:?}"),
        }
    }
    (allowed, denied)
}

#[test]
fn replicas_with_and_without_the_module_end_with_identical_buckets() {
    let master = start_master();
    let with_module = start_replica(&master, true);
    let without_module = start_replica(&master, false);
    let mut c = master.conn();
    let (allowed, denied) = mixed_traffic(&mut c, 5000, 7);
    assert!(
        allowed > 1000 && denied > 1000,
        "allowed {allowed} denied {denied}"
    );
    assert_eq!(c.q("WAIT 2 10000").int(), 2);
    let want = keyspace(&mut c);
    assert!(want.len() >= 50, "{}", want.len());
    assert!(
        want.values().all(|(_, expire)| *expire > 0),
        "every bucket has a TTL"
    );
    for replica in [&with_module, &without_module] {
        let got = keyspace(&mut replica.conn());
        assert_eq!(got, want, "replica on port {} differs", replica.port);
    }
    // The replica without the module saw no command it does not know.
    assert!(
        !without_module.log().contains("unknown command"),
        "{}",
        without_module.log()
    );
}

#[test]
fn denied_calls_and_queries_replicate_nothing() {
    let master = start_master();
    let _replica = start_replica(&master, true);
    let mut c = master.conn();
    c.q("TB.TAKE k 2 1 2 1764456268");
    let before = repl_offset(&mut c);
    c.q("TB.TAKE k 2 1 1 1764456268.5"); // denied: half a token
    c.q("TB.TAKE k 2 1 0 1764456268.5"); // query
    c.q("TB.TAKE k 2 1 3 1764456268.5"); // never
    c.q("TB.TAKE k x 1 1"); // error
    assert_eq!(repl_offset(&mut c), before);
    // The same check does move when something is written.
    c.q("TB.TAKE k 2 1 1 1764456270");
    assert!(repl_offset(&mut c) > before);
}

#[test]
fn only_changed_fields_are_rewritten_on_the_master_and_its_replicas() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    // Numbers spelled the way another writer (the Lua script, HINCRBYFLOAT) may leave
    // them: a value the module did not change must keep its text, here and on replicas.
    c.q("HSET a tokens 5.0 last_refill_time 1764456268.50");
    let allowed = |c: &mut Conn, line: &str| c.q(line).array()[0] == Reply::Int(1);
    // Same time: only tokens changes.
    assert!(allowed(&mut c, "TB.TAKE a 10 1 1 1764456268.5"));
    let field = |c: &mut Conn, f: &str| c.cmd(&["HGET", "a", f]).text();
    assert_eq!(field(&mut c, "tokens"), "4");
    assert_eq!(field(&mut c, "last_refill_time"), "1764456268.50");
    // One second later, one token refilled and one taken: only the time changes.
    c.q("HSET a tokens 4.0");
    assert!(allowed(&mut c, "TB.TAKE a 10 1 1 1764456269.5"));
    assert_eq!(field(&mut c, "tokens"), "4.0");
    assert_eq!(field(&mut c, "last_refill_time"), "1764456269.5");
    // Both change.
    assert!(allowed(&mut c, "TB.TAKE a 10 1 2 1764456270.5"));
    assert_eq!(field(&mut c, "tokens"), "3");
    assert_eq!(field(&mut c, "last_refill_time"), "1764456270.5");
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    assert_eq!(keyspace(&mut replica.conn()), keyspace(&mut c));
}

#[test]
fn server_clock_calls_replicate_the_masters_time_not_the_replicas() {
    let master = start_master();
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    for i in 0..200 {
        c.q(&format!("TB.TAKE srv:{} 10 0.5 1", i % 7));
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    assert_eq!(keyspace(&mut replica.conn()), keyspace(&mut c));
}

#[test]
fn aof_replay_after_kill_restores_every_bucket_exactly() {
    let mut server = start_aof_server("always");
    let mut c = server.conn();
    mixed_traffic(&mut c, 4000, 11);
    for i in 0..100 {
        c.q(&format!("TB.TAKE srv:{i} 1000 1 3"));
    }
    let want = keyspace(&mut c);
    assert!(want.len() >= 150);
    drop(c);
    // kill -9: no shutdown, no rewrite; only what appendfsync always wrote survives.
    server.restart(true);
    assert_eq!(
        keyspace(&mut server.conn()),
        want,
        "after restart with the module"
    );
    server.restart(false);
    assert_eq!(
        keyspace(&mut server.conn()),
        want,
        "after restart without the module"
    );
}

// ---------------------------------------------------------------------------------------
// Every command: TB.MTAKE, TB.RESERVE, TB.REFUND and TB.PEEK next to TB.TAKE

/// An app server's `time.time()` for the calls below that pass `now`.
const T0: f64 = 1_764_456_268.123456;

/// A bucket of user `group`: the parts of one user share a hash tag, as TB.MTAKE needs on
/// a cluster (`rl:{u7}:ip`, `rl:{u7}:user`, `rl:{u7}:orders`).
fn bucket_key(group: u64, part: u64) -> String {
    format!(
        "rl:{{u{group}}}:{}",
        ["ip", "user", "orders"][part as usize]
    )
}

/// Thousands of calls of every command on shared buckets: with and without `now` (a client
/// clock that also goes backwards), allowed and denied, n = 0 and n above capacity,
/// reservations into debt, refunds, reads, and bad input (a duplicate or WRONGTYPE key in a
/// TB.MTAKE, out-of-range numbers) that must change nothing. Returns how often each
/// outcome was seen ("mtake allowed", "reserve debt", "error", ...).
fn mixed_traffic_of_every_command(
    c: &mut Conn,
    calls: usize,
    seed: u64,
) -> BTreeMap<String, usize> {
    const GROUPS: u64 = 20;
    let mut rng = Rng(seed);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    // A string next to each user's buckets: a TB.MTAKE naming it is refused whole.
    for g in 0..GROUPS {
        c.q(&format!("SET rl:{{u{g}}}:note text"));
    }
    let mut now = T0;
    for _ in 0..calls {
        // Slow refills (at least 8 s to refill the smallest take), so no bucket expires
        // while the test compares servers.
        let limit = |rng: &mut Rng| -> [String; 3] {
            [
                rng.pick(&["5", "10", "100", "2.5"]).to_string(),
                rng.pick(&["0.01", "0.02", "0.016666666666666666", "0.0625"])
                    .to_string(),
                rng.pick(&["0", "1", "1", "2", "0.5", "200"]).to_string(),
            ]
        };
        now += (rng.below(100) as f64) / 1000.0 - 0.02;
        let group = rng.below(GROUPS);
        let key = bucket_key(group, rng.below(3));
        let [capacity, rate, n] = limit(&mut rng);
        let bad = rng.below(40) == 0;
        let (name, mut args): (&str, Vec<String>) = match rng.below(10) {
            0..=2 => ("take", vec!["TB.TAKE".into(), key, capacity, rate, n]),
            3..=4 => {
                let numkeys = 1 + rng.below(3);
                let mut parts: Vec<u64> = vec![0, 1, 2];
                // A few shuffles: keys in any order.
                for i in (1..3).rev() {
                    parts.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let mut keys: Vec<String> = parts[..numkeys as usize]
                    .iter()
                    .map(|&p| bucket_key(group, p))
                    .collect();
                if bad {
                    // The same key twice, or a string among the buckets.
                    keys.push(if rng.below(2) == 0 {
                        keys[0].clone()
                    } else {
                        format!("rl:{{u{group}}}:note")
                    });
                }
                let mut args = vec!["TB.MTAKE".to_string(), keys.len().to_string()];
                args.extend(keys.iter().cloned());
                for _ in &keys {
                    args.extend(limit(&mut rng));
                }
                ("mtake", args)
            }
            5..=6 => {
                let max_wait = rng.pick(&["0", "0.5", "5", "30", "1e308"]).to_string();
                (
                    "reserve",
                    vec!["TB.RESERVE".into(), key, capacity, rate, n, max_wait],
                )
            }
            7 => ("refund", vec!["TB.REFUND".into(), key, capacity, rate, n]),
            _ => ("peek", vec!["TB.PEEK".into(), key, capacity, rate]),
        };
        if bad && name != "mtake" {
            args[2] = "0".into(); // capacity out of range
        }
        if rng.below(2) == 0 {
            args.push(format!("{now}"));
        }
        let r = c.cmd(&args);
        let outcome = match &r {
            Reply::Error(e) => {
                assert!(bad, "{args:?}: {e}");
                "error".to_string()
            }
            Reply::Array(a) => {
                assert!(!bad, "{args:?} was accepted: {r:?}");
                assert_eq!(a.len(), if name == "mtake" { 5 } else { 4 }, "{r:?}");
                match (&a[0], name) {
                    (Reply::Int(1), "reserve") if a[1].num() < 0.0 => "reserve debt".into(),
                    (Reply::Int(1), _) => format!("{name} allowed"),
                    (Reply::Int(0), _) => format!("{name} denied"),
                    other => panic!("{args:?}: {other:?}"),
                }
            }
            other => panic!("{args:?}: {other:?}"),
        };
        *seen.entry(outcome).or_default() += 1;
    }
    seen
}

#[test]
fn every_command_leaves_byte_identical_buckets_on_replicas_with_and_without_the_module() {
    let master = start_master();
    let with_module = start_replica(&master, true);
    let without_module = start_replica(&master, false);
    let mut c = master.conn();
    let seen = mixed_traffic_of_every_command(&mut c, 6000, 23);
    eprintln!("outcomes on the master: {seen:?}");
    assert_each_seen(
        &seen,
        &[
            "take allowed",
            "take denied",
            "mtake allowed",
            "mtake denied",
            "reserve allowed",
            "reserve debt",
            "reserve denied",
            "refund allowed",
            "peek allowed",
            "peek denied",
            "error",
        ],
        10,
    );
    let (want, soon) = assert_replicas_hold_the_masters_bytes(
        &mut c,
        &[
            (&with_module, "replica with the module"),
            (&without_module, "replica without the module"),
        ],
    );
    assert!(
        want.len() >= 60,
        "{} lasting, {} expiring soon",
        want.len(),
        soon.len()
    );
    // The replica without the module saw no command it does not know.
    assert!(
        !without_module.log().contains("unknown command"),
        "{}",
        without_module.log()
    );
}

#[test]
fn aof_replay_after_kill_restores_every_commands_buckets_byte_for_byte() {
    let mut server = start_aof_server("always");
    let mut c = server.conn();
    let seen = mixed_traffic_of_every_command(&mut c, 4000, 29);
    assert_each_seen(&seen, &["mtake allowed", "reserve debt"], 10);
    let (want, soon) = lasting(&mut c);
    assert!(
        want.len() >= 60,
        "{} lasting, {} expiring soon",
        want.len(),
        soon.len()
    );
    drop(c);
    // kill -9: no shutdown, no rewrite; only what appendfsync always wrote survives.
    for with_module in [true, false] {
        server.restart(with_module);
        let mut rc = server.conn();
        let got = without(&dumps(&mut rc), &soon);
        // (The wanted side of a failure message is read on the restarted server too: the
        // original process is gone.)
        let mut again = server.conn();
        let what = format!("after restart with module {with_module}");
        assert_same_dumps(&what, &mut rc, &got, &mut again, &want);
    }
}

#[test]
fn a_denied_mtake_a_peek_and_a_no_op_refund_replicate_nothing() {
    let master = start_master();
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    let allowed = |c: &mut Conn, line: &str| -> bool {
        match c.q(line) {
            Reply::Array(a) => a[0] == Reply::Int(1),
            other => panic!("{line}: {other:?}"),
        }
    };
    // Refills of 1 token per 100 s, so nothing expires during the test. a: 1 token of 2
    // left; b: empty; c: 4 of 5; full: a full bucket (written as another writer would,
    // without a TTL).
    assert!(allowed(&mut c, "TB.TAKE {u}:a 2 0.01 1 1764456268"));
    assert!(allowed(
        &mut c,
        "TB.MTAKE 2 {u}:b {u}:c 5 0.01 5 5 0.01 1 1764456268"
    ));
    c.q("HSET {u}:full tokens 3 last_refill_time 1764456268");
    c.q("SET {u}:str text");
    c.q("SET marker:setup 1");
    let setup = stream.until_marker("marker:setup");
    assert!(!setup.is_empty());
    let before = repl_offset(&mut c);
    let keys_before = dumps(&mut c);

    let denied = [
        "TB.MTAKE 2 {u}:a {u}:b 2 0.01 1 5 0.01 1 1764456268", // b is empty
        "TB.MTAKE 2 {u}:c {u}:a 5 0.01 1 2 0.01 2 1764456268", // a has 1 of 2
        "TB.MTAKE 2 {u}:c {u}:a 5 0.01 1 2 0.01 3",            // server clock, never
        "TB.MTAKE 1 {u}:a 2 0.01 3 1764456268",                // never: 3 > capacity
        "TB.MTAKE 2 {u}:missing {u}:b 9 0.01 1 5 0.01 1 1764456268", // the missing one is full
        "TB.PEEK {u}:b 5 0.01 1764456268",
        "TB.RESERVE {u}:b 5 0.01 1 0 1764456268", // max_wait 0: not now
        "TB.RESERVE {u}:b 5 0.01 1 50 1764456268", // one token is 100 s away
        "TB.RESERVE {u}:a 2 0.01 3 1e308 1764456268", // never
    ];
    for line in denied {
        assert!(!allowed(&mut c, line), "{line}");
    }
    let reads = [
        "TB.MTAKE 2 {u}:a {u}:c 2 0.01 0 5 0.01 0 1764456268", // n = 0 everywhere
        "TB.PEEK {u}:a 2 0.01 1764456268",
        "TB.PEEK {u}:a 2 0.01",
        "TB.PEEK {u}:missing 2 0.01 1764456268",
        "TB.PEEK {u}:missing 2 0.01",
        "TB.RESERVE {u}:a 2 0.01 0 10 1764456268",
        "TB.REFUND {u}:full 3 0.01 1 1764456268", // already full
        "TB.REFUND {u}:a 2 0.01 0 1764456268",    // n = 0
        "TB.REFUND {u}:missing 3 0.01 1 1764456268", // a missing key is full
        "TB.REFUND {u}:missing 3 0.01 2",
    ];
    for line in reads {
        assert!(allowed(&mut c, line), "{line}");
    }
    let errors = [
        "TB.MTAKE 2 {u}:c {u}:c 5 1 1 5 1 1 1764456268",
        "TB.MTAKE 2 {u}:c {u}:str 5 1 1 5 1 1 1764456268",
        "TB.MTAKE 2 {u}:c {u}:a 5 1 1 2 x 1 1764456268",
        "TB.RESERVE {u}:c 5 1 1 -1 1764456268",
        "TB.REFUND {u}:c 5 1 -1 1764456268",
        "TB.PEEK {u}:c 0 1 1764456268",
    ];
    for line in errors {
        let r = c.q(line);
        assert!(matches!(r, Reply::Error(_)), "{line}: {r:?}");
    }
    assert_eq!(repl_offset(&mut c), before, "something was replicated");
    assert_eq!(dumps(&mut c), keys_before, "something was written");
    c.q("SET marker:reads 1");
    assert_eq!(
        stream.until_marker("marker:reads"),
        Vec::<Vec<String>>::new()
    );

    // The same checks do move when something is written: a refund of a token to b.
    assert!(allowed(&mut c, "TB.REFUND {u}:b 5 0.01 1 1764456268"));
    assert!(repl_offset(&mut c) > before);
    c.q("SET marker:refund 1");
    let effects = stream.until_marker("marker:refund");
    assert!(
        effects.iter().any(|cmd| cmd[0] == "HSET")
            && effects.iter().all(|cmd| matches!(
                cmd[0].as_str(),
                "HSET" | "PEXPIREAT" | "MULTI" | "EXEC"
            ) && (cmd.len() == 1 || cmd[1] == "{u}:b")),
        "{effects:?}"
    );
}

#[test]
fn an_allowed_mtake_replicates_each_keys_effects_inside_one_multi_exec() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    let keys = ["rl:{u42}:ip", "rl:{u42}:user", "rl:{u42}:orders"];
    let r = c.q(&format!(
        "TB.MTAKE 3 {} {} {} 10 0.01 1 20 0.02 2 5 0.005 1 1764456268",
        keys[0], keys[1], keys[2]
    ));
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    c.q("SET marker:1 1");
    let effects = stream.until_marker("marker:1");
    assert_eq!(
        effects.first().map(|c| c[0].as_str()),
        Some("MULTI"),
        "{effects:?}"
    );
    assert_eq!(
        effects.last().map(|c| c[0].as_str()),
        Some("EXEC"),
        "{effects:?}"
    );
    let inner = &effects[1..effects.len() - 1];
    for key in keys {
        // New buckets: each gets its fields and an expiry.
        for command in ["HSET", "PEXPIREAT"] {
            assert_eq!(
                inner
                    .iter()
                    .filter(|c| c[0] == command && c[1] == key)
                    .count(),
                1,
                "{command} {key}: {effects:?}"
            );
        }
    }
    assert_eq!(inner.len(), 6, "{effects:?}");

    // A key asked for n = 0 is only reported: only the other key is written.
    let r = c.q(&format!(
        "TB.MTAKE 3 {} {} {} 10 0.01 1 20 0.02 0 5 0.005 0 1764456268",
        keys[0], keys[1], keys[2]
    ));
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    c.q("SET marker:2 1");
    let effects = stream.until_marker("marker:2");
    assert!(
        effects.iter().any(|c| c[0] == "HSET" && c[1] == keys[0])
            && effects.iter().all(|c| c.len() == 1 || c[1] == keys[0]),
        "{effects:?}"
    );
    assert!(
        effects.iter().all(|c| !c[0].starts_with("TB.")),
        "{effects:?}"
    );
    // And what the stream carries is the master's state on a replica without the module.
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let want = dumps(&mut c);
    let mut rc = replica.conn();
    let got = dumps(&mut rc);
    assert_same_dumps("replica", &mut rc, &got, &mut c, &want);
}

#[test]
fn reserve_and_refund_replicate_the_new_balance_never_the_command() {
    let master = start_master();
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    // A bucket of 2, reserved twice at one instant: the second leaves a debt of 2, to be
    // waited for (2 s at 1 token/s).
    let t = Take::from_reply(&c.q("TB.RESERVE {u}:r 2 1 2 10 1764456268"));
    assert!(t.allowed && t.remaining == 0.0, "{t:?}");
    let t = Take::from_reply(&c.q("TB.RESERVE {u}:r 2 1 2 10 1764456268"));
    assert!(t.allowed && t.remaining == -2.0, "{t:?}");
    c.q("SET marker:1 1");
    let effects = stream.until_marker("marker:1");
    let hset = effects
        .iter()
        .rfind(|c| c[0] == "HSET")
        .unwrap_or_else(|| panic!("{effects:?}"));
    assert_eq!(hset[1], "{u}:r", "{effects:?}");
    let tokens = hset.iter().position(|a| a == "tokens").unwrap();
    assert_eq!(hset[tokens + 1], "-2", "{effects:?}");
    assert!(
        effects
            .iter()
            .any(|c| c[0] == "PEXPIREAT" && c[1] == "{u}:r"),
        "{effects:?}"
    );
    // A refund pays one token of the debt back.
    let t = Take::from_reply(&c.q("TB.REFUND {u}:r 1 1 1 1764456268"));
    assert!(t.allowed && t.remaining == -1.0, "{t:?}");
    c.q("SET marker:2 1");
    let effects = stream.until_marker("marker:2");
    let hset = effects
        .iter()
        .find(|c| c[0] == "HSET")
        .unwrap_or_else(|| panic!("{effects:?}"));
    let tokens = hset.iter().position(|a| a == "tokens").unwrap();
    assert_eq!(hset[tokens + 1], "-1", "{effects:?}");
    // On the server clock, the master's time is what travels.
    let t = Take::from_reply(&c.q("TB.RESERVE {u}:s 2 0.001 2 5000"));
    assert!(t.allowed, "{t:?}");
    let stored = common::hget(&mut c, "{u}:s", "last_refill_time").unwrap();
    c.q("SET marker:3 1");
    let effects = stream.until_marker("marker:3");
    assert!(
        effects.iter().any(|c| c[0] == "HSET"
            && c[1] == "{u}:s"
            && c.windows(2)
                .any(|w| w[0] == "last_refill_time" && w[1] == stored)),
        "{stored}: {effects:?}"
    );
    assert!(
        effects.iter().all(|c| !c[0].starts_with("TB.")),
        "{effects:?}"
    );
}

#[test]
fn peek_on_a_replica_answers_with_the_masters_state_and_creates_nothing() {
    let master = start_master();
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    // a: 6 of 10; b: a debt of 3 on a bucket of 2; c, d: 0 and 4 of 5 (slow refills:
    // nothing expires during the test).
    c.q("TB.TAKE a 10 0.1 4 1764456268");
    for n in [2, 2, 1] {
        let t = Take::from_reply(&c.q(&format!("TB.RESERVE b 2 0.5 {n} 100 1764456268")));
        assert!(t.allowed, "{t:?}");
    }
    c.q("TB.MTAKE 2 c d 5 0.1 5 5 0.1 1 1764456268");
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let mut rc = replica.conn();
    let replica_before = dumps(&mut rc);
    let offset_before = repl_offset(&mut c);

    for (key, capacity, rate) in [
        ("a", "10", "0.1"),
        ("b", "2", "0.5"),
        ("c", "5", "0.1"),
        ("d", "5", "0.1"),
    ] {
        for now in ["1764456268", "1764456269.5", "1764456368"] {
            let line = format!("TB.PEEK {key} {capacity} {rate} {now}");
            let want = c.q(&line);
            assert_eq!(rc.q(&line), want, "{line}");
        }
    }
    let peek = |c: &mut Conn, line: &str| Take::from_reply(&c.q(line));
    let t = peek(&mut rc, "TB.PEEK a 10 0.1 1764456268");
    assert_eq!(
        (t.allowed, t.remaining, t.retry_after),
        (true, 6.0, 0.0),
        "{t:?}"
    );
    assert!(
        t.reset_after >= 40.0 && t.reset_after < 40.0 + 1e-5,
        "{t:?}"
    );
    // One token is 8 s away (from -3 to 1 at 0.5/s), full after 10 s.
    let t = peek(&mut rc, "TB.PEEK b 2 0.5 1764456268");
    assert!(!t.allowed && t.remaining == -3.0, "{t:?}");
    assert!(t.retry_after >= 8.0 && t.retry_after < 8.0 + 1e-5, "{t:?}");
    assert!(
        t.reset_after >= 10.0 && t.reset_after < 10.0 + 1e-5,
        "{t:?}"
    );
    // On the server clock (later than the stored time): the replica reads as the master.
    let on_master = peek(&mut c, "TB.PEEK d 5 0.1");
    let on_replica = peek(&mut rc, "TB.PEEK d 5 0.1");
    assert_eq!(on_replica.allowed, on_master.allowed);
    assert_eq!((on_replica.remaining, on_master.remaining), (5.0, 5.0));
    // A missing key is a full bucket, and stays missing.
    let t = peek(&mut rc, "TB.PEEK nothing 7 1 1764456268");
    assert_eq!(
        (t.allowed, t.remaining, t.retry_after, t.reset_after),
        (true, 7.0, 0.0, 0.0)
    );
    peek(&mut rc, "TB.PEEK nothing 7 1");
    assert_eq!(rc.q("EXISTS nothing").int(), 0);
    assert_eq!(c.q("EXISTS nothing").int(), 0);
    // A write is refused on the read-only replica; the reads wrote nothing anywhere.
    let r = rc.q("TB.TAKE a 10 0.1 1 1764456268");
    assert!(r.error().starts_with("READONLY"), "{r:?}");
    let r = rc.q("TB.MTAKE 1 a 10 0.1 1 1764456268");
    assert!(r.error().starts_with("READONLY"), "{r:?}");
    assert_eq!(dumps(&mut rc), replica_before);
    assert_eq!(repl_offset(&mut c), offset_before);
}

#[test]
fn a_key_whose_time_to_full_outgrows_any_ttl_loses_it_on_the_master_its_replicas_and_the_aof() {
    let mut master = start_aof_server("always");
    let with = start_replica(&master, true);
    let without_module = start_replica(&master, false);
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    let expire_of = |c: &mut Conn, key: &str| c.cmd(&["PEXPIRETIME", key]).int();
    // Two buckets with an ordinary TTL (time to full 1 s).
    for key in ["forever", "back"] {
        assert!(Take::from_reply(&c.q(&format!("TB.TAKE {key} 10 1 1"))).allowed);
        assert!(expire_of(&mut c, key) > 0, "{key} has no TTL");
    }
    c.q("SET marker:1 1");
    stream.until_marker("marker:1");
    // The same keys as buckets of 1e15 at 0.001/s: full again in about 1e18 s, far beyond
    // the largest TTL kept (1e15 ms, about 31,700 years). The TTL must go: an expiry
    // would hand out a full bucket long before it is full.
    for key in ["forever", "back"] {
        let t = Take::from_reply(&c.q(&format!("TB.TAKE {key} 1e15 0.001 1")));
        assert!(t.allowed && t.reset_after > 1e17, "{t:?}");
        assert_eq!(expire_of(&mut c, key), -1, "{key} kept its TTL");
    }
    c.q("SET marker:2 1");
    let effects = stream.until_marker("marker:2");
    for key in ["forever", "back"] {
        assert!(
            effects.iter().any(|e| e[0] == "PERSIST" && e[1] == key),
            "no PERSIST {key}: {effects:?}"
        );
        assert!(
            !effects.iter().any(|e| e[0] == "PEXPIREAT" && e[1] == key),
            "{effects:?}"
        );
    }
    // A key without a TTL whose time to full is still beyond it: nothing about the expiry
    // is replicated again.
    assert!(Take::from_reply(&c.q("TB.TAKE forever 1e15 0.001 1")).allowed);
    c.q("SET marker:3 1");
    let effects = stream.until_marker("marker:3");
    assert!(
        effects
            .iter()
            .all(|e| e[0] != "PERSIST" && e[0] != "PEXPIREAT"),
        "{effects:?}"
    );
    // Back to a small bucket: the TTL returns.
    assert!(Take::from_reply(&c.q("TB.TAKE back 10 1 1")).allowed);
    assert!(expire_of(&mut c, "back") > 0);
    c.q("SET marker:4 1");
    let effects = stream.until_marker("marker:4");
    assert!(
        effects
            .iter()
            .any(|e| e[0] == "PEXPIREAT" && e[1] == "back"),
        "{effects:?}"
    );
    // Replicas, with and without the module, hold the same bytes and the same (absent) TTL.
    let (compared, _) = assert_replicas_hold_the_masters_bytes(
        &mut c,
        &[
            (&with, "replica with the module"),
            (&without_module, "replica without it"),
        ],
    );
    assert!(compared.contains_key(b"forever".as_slice()));
    for replica in [&with, &without_module] {
        assert_eq!(expire_of(&mut replica.conn(), "forever"), -1);
    }
    // kill -9, then the AOF replayed: the TTL stays gone, with and without the module.
    let want = dumps(&mut c);
    drop(c);
    drop(stream);
    master.restart(true);
    let mut c = master.conn();
    assert_eq!(dumps(&mut c), want, "after restart with the module");
    assert_eq!(expire_of(&mut c, "forever"), -1);
    drop(c);
    master.restart(false);
    let mut c = master.conn();
    assert_eq!(dumps(&mut c), want, "after restart without the module");
    assert_eq!(expire_of(&mut c, "forever"), -1);
}
