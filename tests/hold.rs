//! Holds settled later (TB.HOLD, TB.SETTLE, TB.PEEK key HOLDS) against a real redis-server:
//! a settled hold changes the bucket by exactly actual minus estimate, settling twice is a
//! no-op that says so, an unsettled hold keeps its estimate charged when it expires and its
//! record goes, an excess goes into bounded debt, TB.TAKE keeps working on a bucket with
//! holds, errors change nothing, and replicas and an AOF restart keep the holds.

mod common;

use std::time::Duration;

use common::{
    Conn, Reply, Server, WRONGTYPE, assert_documented, assert_errors_change_nothing,
    assert_replica_matches, command_info, hget, hgetall, start_aof_server, start_master,
    start_replica, tb_counters,
};

/// A rate so slow that the refill during a test (well under a minute) is below 1e-7.
const SLOW: &str = "0.000000001";

fn hold(
    c: &mut Conn,
    key: &str,
    capacity: &str,
    estimate: &str,
    ttl: &str,
) -> (Vec<Reply>, Option<String>) {
    let r = c.cmd(&["TB.HOLD", key, capacity, SLOW, estimate, ttl]);
    let a = r.array().to_vec();
    assert_eq!(a.len(), 5, "{r:?}");
    let id = match &a[4] {
        Reply::Nil => None,
        other => Some(other.text()),
    };
    assert_eq!(a[0].int() == 1, id.is_some(), "{r:?}");
    (a, id)
}

/// TB.SETTLE's [settled, remaining, charged, reset_after] as (settled, remaining, charged).
fn settle(
    c: &mut Conn,
    key: &str,
    capacity: &str,
    id: &str,
    actual: &str,
    extra: &[&str],
) -> (bool, f64, f64) {
    let mut args = vec!["TB.SETTLE", key, capacity, SLOW, id, actual];
    args.extend_from_slice(extra);
    let r = c.cmd(&args);
    let a = r.array();
    assert_eq!(a.len(), 4, "{r:?}");
    (a[0].int() == 1, a[1].num(), a[2].num())
}

fn tokens(c: &mut Conn, key: &str) -> f64 {
    hget(c, key, "tokens").unwrap().parse().unwrap()
}

fn peek_holds(c: &mut Conn, key: &str) -> (i64, f64, i64) {
    let r = c.cmd(&["TB.PEEK", key, "HOLDS"]);
    let a = r.array();
    (a[0].int(), a[1].num(), a[2].int())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_settled_hold_changes_the_bucket_by_exactly_actual_minus_estimate() {
    let s = Server::start();
    let mut c = s.conn();
    for (estimate, actual) in [("30", "12.5"), ("10", "25"), ("7", "7"), ("5", "0")] {
        let key = format!("b:{estimate}:{actual}");
        assert!(c.cmd(&["TB.TAKE", &key, "100", SLOW, "20"]).array()[0].int() == 1);
        let before = tokens(&mut c, &key);
        let (r, id) = hold(&mut c, &key, "100", estimate, "60000");
        let id = id.unwrap();
        let e: f64 = estimate.parse().unwrap();
        let a: f64 = actual.parse().unwrap();
        assert!(close(r[1].num(), before - e), "{r:?}");
        let (settled, remaining, charged) = settle(&mut c, &key, "100", &id, actual, &[]);
        assert!(settled);
        assert!(close(charged, a - e), "{charged}");
        assert!(close(remaining, before - a), "{remaining}");
        assert!(close(tokens(&mut c, &key), before - a));
        assert_eq!(hget(&mut c, &key, "holds"), None);
        // Settling twice: a no-op that says so.
        let dump = hgetall(&mut c, key.as_bytes());
        let (settled, remaining, charged) = settle(&mut c, &key, "100", &id, "99", &[]);
        assert!(!settled);
        assert_eq!(charged, 0.0);
        assert!(close(remaining, before - a));
        assert_eq!(hgetall(&mut c, key.as_bytes()), dump);
    }
    assert_eq!(tb_counters(&mut c, "settle"), [8, 4, 4, 0]);
    assert_eq!(tb_counters(&mut c, "hold"), [4, 4, 0, 0]);
}

#[test]
fn an_unsettled_hold_keeps_its_estimate_when_it_expires_and_its_record_goes() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, id) = hold(&mut c, "b", "100", "40", "100");
    let id = id.unwrap();
    let (_, other) = hold(&mut c, "b", "100", "2", "60000");
    assert_eq!(peek_holds(&mut c, "b").0, 2);
    assert!(close(peek_holds(&mut c, "b").1, 42.0));
    std::thread::sleep(Duration::from_millis(150));
    // Expired: not counted, and settling it is refused with nothing given back.
    assert_eq!(peek_holds(&mut c, "b").0, 1);
    let (settled, remaining, _) = settle(&mut c, "b", "100", &id, "0", &[]);
    assert!(!settled);
    assert!(close(remaining, 58.0), "{remaining}");
    // The settle dropped the expired record; the live one is still there.
    let holds = hget(&mut c, "b", "holds").unwrap();
    assert!(
        !holds.contains(&id) && holds.contains(other.as_deref().unwrap()),
        "{holds}"
    );
    assert!(close(tokens(&mut c, "b"), 58.0));
}

#[test]
fn an_excess_goes_into_debt_bounded_by_max_wait_times_rate() {
    let s = Server::start();
    let mut c = s.conn();
    let r = c.cmd(&["TB.HOLD", "b", "10", "1", "4", "60000"]);
    let id = r.array()[4].text();
    // Actual 100: 6 left, the excess 96 would leave -90; max_wait 5 s at 1/s bounds it at -5.
    let r = c.cmd(&["TB.SETTLE", "b", "10", "1", &id, "100", "5"]);
    let a = r.array();
    assert_eq!(a[0].int(), 1);
    let remaining = a[1].num();
    assert!((-5.0..-4.9).contains(&remaining), "{r:?}");
    // Without max_wait, the whole excess is charged.
    let r = c.cmd(&["TB.HOLD", "d", "10", "1", "4", "60000"]);
    let id = r.array()[4].text();
    let r = c.cmd(&["TB.SETTLE", "d", "10", "1", &id, "100"]);
    assert!((-90.0..-89.9).contains(&r.array()[1].num()), "{r:?}");
    // TB.TAKE sees the debt.
    assert_eq!(c.q("TB.TAKE d 10 1 1").array()[0].int(), 0);
}

#[test]
fn take_and_peek_keep_working_on_a_bucket_with_holds() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, id) = hold(&mut c, "b", "10", "4", "60000");
    let holds = hget(&mut c, "b", "holds").unwrap();
    assert!(c.cmd(&["TB.TAKE", "b", "10", SLOW, "5"]).array()[0].int() == 1);
    assert!(close(tokens(&mut c, "b"), 1.0));
    assert_eq!(hget(&mut c, "b", "holds"), Some(holds));
    assert!(close(
        c.cmd(&["TB.PEEK", "b", "10", SLOW]).array()[1].num(),
        1.0
    ));
    // The key lives as long as the hold.
    assert!(c.q("PTTL b").int() >= 59_000);
    let (settled, remaining, _) = settle(&mut c, "b", "10", &id.unwrap(), "1", &[]);
    assert!(settled && close(remaining, 4.0));
    assert_eq!(
        c.q("TB.WINDOW b 10 60 1 FIXED").error(),
        "ERR key holds a token bucket, not a TB.WINDOW window"
    );
}

#[test]
fn bad_arguments_and_foreign_keys_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, id) = hold(&mut c, "b", "10", "4", "60000");
    let id = id.unwrap();
    c.q("TB.WINDOW w 10 60 1 FIXED");
    c.q("SET str v");
    c.q("HSET corrupt tokens 5 last_refill_time 1764456268 holds garbage");
    c.q("TB.ACQUIRE sem 1 60000");
    let keys = ["b", "w", "str", "corrupt", "sem"];
    let corrupt = "ERR bucket state is corrupt: field 'holds' is not a list of holds";
    assert_errors_change_nothing(
        &mut c,
        &["TB.HOLD"],
        &keys,
        &[
            (
                &["b", "10", "1", "0", "100"],
                "ERR estimate must be > 0 and <= 9007199254740992",
            ),
            (
                &["b", "10", "1", "-2", "100"],
                "ERR estimate must be > 0 and <= 9007199254740992",
            ),
            (
                &["b", "10", "1", "x", "100"],
                "ERR estimate must be > 0 and <= 9007199254740992",
            ),
            (
                &["b", "10", "1", "1", "0"],
                "ERR ttl_ms must be a whole number of milliseconds >= 1 and <= 31536000000",
            ),
            (
                &["b", "0", "1", "1", "10"],
                "ERR capacity must be > 0 and <= 9007199254740992",
            ),
            (
                &["w", "10", "1", "1", "10"],
                "ERR key holds a TB.WINDOW window, not a token bucket",
            ),
            (&["str", "10", "1", "1", "10"], WRONGTYPE),
            (&["sem", "10", "1", "1", "10"], WRONGTYPE),
            (&["corrupt", "10", "1", "1", "10"], corrupt),
        ],
    );
    assert_errors_change_nothing(
        &mut c,
        &["TB.SETTLE"],
        &keys,
        &[
            (
                &["b", "10", "1", "xyz", "1"],
                "ERR hold_id must be the 16 hex digits TB.HOLD replied",
            ),
            (
                &["b", "10", "1", &id, "-1"],
                "ERR actual must be >= 0 and <= 9007199254740992",
            ),
            (
                &["b", "10", "1", &id, "1", "-1"],
                "ERR max_wait must be >= 0 seconds",
            ),
            (
                &["b", "10", "1", &id],
                "ERR wrong number of arguments for 'tb.settle' command",
            ),
            (&["corrupt", "10", "1", &id, "1"], corrupt),
            (
                &["w", "10", "1", &id, "1"],
                "ERR key holds a TB.WINDOW window, not a token bucket",
            ),
        ],
    );
    assert_errors_change_nothing(
        &mut c,
        &["TB.PEEK"],
        &keys,
        &[
            (&["corrupt", "HOLDS"], corrupt),
            (&["str", "HOLDS"], WRONGTYPE),
        ],
    );
}

#[test]
fn a_bucket_keeps_at_most_a_hundred_holds() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..100 {
        assert!(hold(&mut c, "b", "1000", "1", "60000").1.is_some());
    }
    assert_eq!(
        c.cmd(&["TB.HOLD", "b", "1000", SLOW, "1", "60000"]),
        Reply::Error("ERR the bucket has 100 outstanding holds: settle some first".into())
    );
    assert_eq!(peek_holds(&mut c, "b").0, 100);
    let bytes = c.q("MEMORY USAGE b").int();
    eprintln!("a bucket with 100 holds: {bytes} bytes");
}

#[test]
fn metadata_replication_and_aof_keep_the_holds() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    let (_, a) = hold(&mut c, "b", "10", "4", "60000");
    let (_, b) = hold(&mut c, "b", "10", "3", "60000");
    settle(&mut c, "b", "10", &a.unwrap(), "1", &[]);
    // Fields and expiry, not DUMP bytes: two holds make `holds` longer than
    // hash-max-listpack-value (64), so the hash is a hashtable, whose DUMP order follows
    // each server's random hash seed.
    let want = assert_replica_matches(&mut c, &replica);
    assert!(want[&b"b".to_vec()].0.iter().any(|(f, _)| f == b"holds"));
    for (name, args) in [
        ("tb.hold", &["capacity", "estimate", "ttl_ms"][..]),
        ("tb.settle", &["hold_id", "actual", "max_wait"]),
    ] {
        assert_documented(&mut c, name, args);
        assert!(command_info(&mut c, name).1.contains(&"write".to_string()));
    }
    drop((c, replica, master));

    let mut server = start_aof_server("always");
    let mut c = server.conn();
    let (_, a) = hold(&mut c, "b", "10", "4", "60000");
    hold(&mut c, "b", "10", "3", "60000");
    let want = hgetall(&mut c, b"b");
    drop(c);
    server.restart(true);
    let mut c = server.conn();
    assert_eq!(hgetall(&mut c, b"b"), want);
    assert_eq!(peek_holds(&mut c, "b").0, 2);
    let (settled, remaining, _) = settle(&mut c, "b", "10", &a.unwrap(), "0", &[]);
    assert!(settled && close(remaining, 7.0));
    let _ = b;
}
