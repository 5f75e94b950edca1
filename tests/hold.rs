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

/// Issue 39 L7: a full table of 100 holds was an error every client read as "Redis down"
/// (and streamed without a hold); it is a refusal with the wait until a place frees.
#[test]
fn a_full_hold_table_is_a_refusal_with_the_wait_for_a_place() {
    let s = Server::start();
    let mut c = s.conn();
    // A bucket that refills at once: only the table can refuse.
    let h = |c: &mut Conn, ttl: &str| c.cmd(&["TB.HOLD", "b", "100000", "1e9", "1000", ttl]);
    for i in 0..100 {
        // The earliest hold ends in about 5 s, the others later.
        let r = h(&mut c, &(5_000 + 1_000 * i).to_string());
        assert_eq!(r.array()[0].int(), 1, "{r:?}");
    }
    let before = common::fingerprint(&mut c, &["b"]);
    let r = h(&mut c, "60000");
    let a = r.array();
    assert_eq!((a[0].int(), &a[4]), (0, &Reply::Nil), "{r:?}");
    // Nothing charged or written; the wait is until the earliest hold's place frees.
    assert_eq!(common::fingerprint(&mut c, &["b"]), before);
    assert!((4.5..=5.001).contains(&a[2].num()), "{r:?}");
    assert_eq!(peek_holds(&mut c, "b").0, 100);
    assert_eq!(tb_counters(&mut c, "hold")[3], 0, "no error counted");
    let bytes = c.q("MEMORY USAGE b").int();
    eprintln!("a bucket with 100 holds: {bytes} bytes");
}

/// Issue 39 L7: 100 holds of estimate 5e-324 with a 365-day ttl cost nothing and then
/// refused every TB.HOLD on the key for a year. A hold now charges at least one place's
/// share, capacity / 100: a table full of holds has spent the whole bucket.
#[test]
fn a_hold_of_no_real_cost_charges_one_place_of_the_bucket() {
    let s = Server::start();
    let mut c = s.conn();
    let (r, id) = hold(&mut c, "b", "1000", "5e-324", "31536000000");
    assert!(id.is_some());
    assert!(close(r[1].num(), 990.0), "{r:?}");
    assert!(close(peek_holds(&mut c, "b").1, 10.0));
    // Settled at 0, the surplus comes back whole.
    let (settled, remaining, charged) = settle(&mut c, "b", "1000", &id.unwrap(), "0", &[]);
    assert!(settled && close(remaining, 1000.0) && close(charged, -10.0));
    // The attack: a hundred of them spend the bucket; the tokens, not a cheap table, stop
    // the next hold, and a plain TB.TAKE sees an empty bucket as well.
    for _ in 0..100 {
        assert!(
            hold(&mut c, "b2", "1000", "5e-324", "31536000000")
                .1
                .is_some()
        );
    }
    assert!(close(tokens(&mut c, "b2"), 0.0));
    let (r, id) = hold(&mut c, "b2", "1000", "5e-324", "31536000000");
    assert!(id.is_none() && r[2].num() > 0.0, "{r:?}");
}

/// Issue 39 L2: a request that outlives its hold's ttl still settles its actual cost: the
/// hold is renewed with TB.RENEW on the bucket, as a lease is.
#[test]
fn tb_renew_on_a_bucket_renews_a_hold_so_a_long_request_still_settles() {
    let s = Server::start();
    let mut c = s.conn();
    let (_, id) = hold(&mut c, "b", "100", "10", "300");
    let id = id.unwrap();
    let r = c.cmd(&["TB.RENEW", "b", &id, "1000"]);
    let a: Vec<i64> = r.array().iter().map(Reply::int).collect();
    assert_eq!(a[..2], [1, 1], "{r:?}");
    assert!((999..=1001).contains(&a[2]), "{r:?}");
    std::thread::sleep(Duration::from_millis(500));
    // Past its first ttl of 300 ms, still live: the settle charges the actual cost.
    let (settled, remaining, charged) = settle(&mut c, "b", "100", &id, "25", &[]);
    assert!(settled && close(charged, 15.0) && close(remaining, 75.0));
    // Not live (settled): not renewed, nothing written.
    let before = common::fingerprint(&mut c, &["b"]);
    let r = c.cmd(&["TB.RENEW", "b", &id, "1000"]);
    assert_eq!(
        r,
        Reply::Array(vec![Reply::Int(0), Reply::Int(0), Reply::Int(0)])
    );
    assert_eq!(common::fingerprint(&mut c, &["b"]), before);
    // An unrenewed hold expires at its ttl and its settle answers 0.
    let (_, late) = hold(&mut c, "b", "100", "10", "200");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!settle(&mut c, "b", "100", &late.unwrap(), "25", &[]).0);
    // The key outlives a renewed hold.
    let (_, long) = hold(&mut c, "b3", "100", "1", "1000");
    c.cmd(&["TB.RENEW", "b3", &long.unwrap(), "600000"]);
    assert!(c.cmd(&["PTTL", "b3"]).int() > 590_000);
    // Missing key: nothing held. A user's hash: refused, unchanged.
    assert_eq!(
        c.cmd(&["TB.RENEW", "missing", &id, "1000"]),
        Reply::Array(vec![Reply::Int(0), Reply::Int(0), Reply::Int(0)])
    );
    c.cmd(&["HSET", "user", "name", "alice"]);
    assert_errors_change_nothing(
        &mut c,
        &["TB.RENEW"],
        &["user"],
        &[(
            &["user", &id, "1000"],
            "ERR key holds a hash that is not a token bucket (it has neither 'tokens' nor 'last_refill_time'): left unchanged",
        )],
    );
}

/// What TB.PEEK key HOLDS answers where there is no bucket: a missing key holds nothing; a
/// user's hash is refused as every bucket command refuses it.
#[test]
fn peek_holds_on_a_missing_key_and_on_a_users_hash() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(peek_holds(&mut c, "missing"), (0, 0.0, 0));
    c.cmd(&["HSET", "user", "name", "alice"]);
    let r = c.cmd(&["TB.PEEK", "user", "HOLDS"]);
    assert_eq!(r, c.cmd(&["TB.TAKE", "user", "10", "1", "1"]));
    assert!(matches!(r, Reply::Error(_)), "{r:?}");
    // Anything after HOLDS / LEASES names that form, not a bucket's capacity.
    assert_eq!(
        c.cmd(&["TB.PEEK", "k", "HOLDS", "x"]),
        Reply::Error("ERR syntax: TB.PEEK key HOLDS takes nothing after HOLDS".into())
    );
    assert_eq!(
        c.cmd(&["TB.PEEK", "k", "leases", "x"]),
        Reply::Error("ERR syntax: TB.PEEK key LEASES takes nothing after LEASES".into())
    );
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
