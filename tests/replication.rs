//! Replicas and AOF end with exactly the master's buckets: TB.TAKE replicates its effects
//! (HSET + PEXPIREAT), never itself, so nothing is recomputed with another clock and a
//! server without the module can replay it.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Conn, Options, Reply, Rng, Server, hgetall, info_field};

type Snapshot = BTreeMap<Vec<u8>, (Vec<(Vec<u8>, Vec<u8>)>, i64)>;

/// Every key's hash and absolute expiry (ms).
fn snapshot(c: &mut Conn) -> Snapshot {
    let keys = c.q("KEYS *");
    let mut out = BTreeMap::new();
    for k in keys.array() {
        let Reply::Bulk(key) = k else { panic!("{k:?}") };
        let expire = c.cmd(&[b"PEXPIRETIME".as_slice(), key]).int();
        out.insert(key.clone(), (hgetall(c, key), expire));
    }
    out
}

fn replica_of(master: &Server, with_module: bool) -> Server {
    let replica = Server::start_with(Options {
        with_module,
        extra: vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            master.port.to_string(),
        ],
    });
    let mut c = replica.conn();
    let start = Instant::now();
    while info_field(&mut c, "replication", "master_link_status").as_deref() != Some("up") {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "replica never synced:\n{}",
            replica.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    replica
}

fn master() -> Server {
    Server::start_with(Options {
        with_module: true,
        extra: vec!["--repl-diskless-sync-delay".into(), "0".into()],
    })
}

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
    let master = master();
    let with_module = replica_of(&master, true);
    let without_module = replica_of(&master, false);
    let mut c = master.conn();
    let (allowed, denied) = mixed_traffic(&mut c, 5000, 7);
    assert!(
        allowed > 1000 && denied > 1000,
        "allowed {allowed} denied {denied}"
    );
    assert_eq!(c.q("WAIT 2 10000").int(), 2);
    let want = snapshot(&mut c);
    assert!(want.len() >= 50, "{}", want.len());
    assert!(
        want.values().all(|(_, expire)| *expire > 0),
        "every bucket has a TTL"
    );
    for replica in [&with_module, &without_module] {
        let got = snapshot(&mut replica.conn());
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
    let master = master();
    let _replica = replica_of(&master, true);
    let mut c = master.conn();
    let offset = |c: &mut Conn| -> i64 {
        info_field(c, "replication", "master_repl_offset")
            .unwrap()
            .parse()
            .unwrap()
    };
    c.q("TB.TAKE k 2 1 2 1764456268");
    let before = offset(&mut c);
    c.q("TB.TAKE k 2 1 1 1764456268.5"); // denied: half a token
    c.q("TB.TAKE k 2 1 0 1764456268.5"); // query
    c.q("TB.TAKE k 2 1 3 1764456268.5"); // never
    c.q("TB.TAKE k x 1 1"); // error
    assert_eq!(offset(&mut c), before);
    // The same check does move when something is written.
    c.q("TB.TAKE k 2 1 1 1764456270");
    assert!(offset(&mut c) > before);
}

#[test]
fn only_changed_fields_are_rewritten_on_the_master_and_its_replicas() {
    let master = master();
    let replica = replica_of(&master, false);
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
    assert_eq!(snapshot(&mut replica.conn()), snapshot(&mut c));
}

#[test]
fn server_clock_calls_replicate_the_masters_time_not_the_replicas() {
    let master = master();
    let replica = replica_of(&master, true);
    let mut c = master.conn();
    for i in 0..200 {
        c.q(&format!("TB.TAKE srv:{} 10 0.5 1", i % 7));
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
    }
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    assert_eq!(snapshot(&mut replica.conn()), snapshot(&mut c));
}

#[test]
fn aof_replay_after_kill_restores_every_bucket_exactly() {
    let mut server = Server::start_with(Options {
        with_module: true,
        extra: vec![
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "always".into(),
        ],
    });
    let mut c = server.conn();
    mixed_traffic(&mut c, 4000, 11);
    for i in 0..100 {
        c.q(&format!("TB.TAKE srv:{i} 1000 1 3"));
    }
    let want = snapshot(&mut c);
    assert!(want.len() >= 150);
    drop(c);
    // kill -9: no shutdown, no rewrite; only what appendfsync always wrote survives.
    server.restart(true);
    assert_eq!(
        snapshot(&mut server.conn()),
        want,
        "after restart with the module"
    );
    server.restart(false);
    assert_eq!(
        snapshot(&mut server.conn()),
        want,
        "after restart without the module"
    );
}
