//! The in-flight limit (TB.ACQUIRE, TB.RELEASE, TB.RENEW, TB.PEEK key LEASES) against real
//! redis-server processes: grants up to the limit, refusals and their wait, the defined
//! answers for releasing twice / unknown / expired ids and renewing expired leases, the key
//! going away with its last lease, foreign keys refused unchanged, exact effects on the
//! replication stream, a promoted replica and an AOF restart keeping the leases, a killed
//! holder's slot coming back after its lease and not before, and many processes racing
//! on one key never exceeding the limit (measured by the holders themselves).

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    Conn, ReplStream, Reply, Server, WRONGTYPE, assert_documented, assert_errors_change_nothing,
    assert_replicas_hold_the_masters_bytes, command_info, dump, fingerprint, server_ms,
    start_aof_server, start_master, start_replica, tb_counters, wait_for, watch_survives,
};

const LIMIT_ERR: &str = "ERR limit must be a whole number >= 1 and <= 10000";
const MS_ERR: &str = "ERR lease_ms must be a whole number of milliseconds >= 1 and <= 31536000000";
const ID_ERR: &str = "ERR lease_id must be the 16 hex digits TB.ACQUIRE replied";
const TAKE_SYNTAX: &str = "ERR syntax: TB.ACQUIRE key limit lease_ms [TAKE numkeys key [key ...] capacity rate n [capacity rate n ...]] (no now: the server's clock)";
const TAKE_DUP: &str =
    "ERR tb.acquire got the same key more than once (the lease key and every bucket must differ)";
const NOT_LEASES: &str = "ERR key holds a sorted set that is not TB.ACQUIRE's leases (members lease:<16 hex digits>, scores whole ms)";

/// TB.ACQUIRE's reply, decoded.
#[derive(Debug, Clone, PartialEq)]
struct Acquired {
    granted: bool,
    in_flight: i64,
    id: Option<String>,
    ms: i64,
}

fn acquire(c: &mut Conn, key: &str, limit: &str, lease_ms: &str) -> Acquired {
    let r = c.cmd(&["TB.ACQUIRE", key, limit, lease_ms]);
    let a = r.array();
    assert_eq!(a.len(), 4, "{r:?}");
    let id = match &a[2] {
        Reply::Nil => None,
        other => Some(other.text()),
    };
    let granted = a[0].int() == 1;
    assert_eq!(granted, id.is_some(), "{r:?}");
    Acquired {
        granted,
        in_flight: a[1].int(),
        id,
        ms: a[3].int(),
    }
}

fn ints(r: &Reply) -> Vec<i64> {
    r.array().iter().map(Reply::int).collect()
}

fn release(c: &mut Conn, key: &str, id: &str) -> Vec<i64> {
    ints(&c.cmd(&["TB.RELEASE", key, id]))
}

fn renew(c: &mut Conn, key: &str, id: &str, lease_ms: &str) -> Vec<i64> {
    ints(&c.cmd(&["TB.RENEW", key, id, lease_ms]))
}

fn peek(c: &mut Conn, key: &str) -> Vec<i64> {
    ints(&c.cmd(&["TB.PEEK", key, "LEASES"]))
}

/// The key's members and scores.
/// The key's leases and their expiries, checking on the way that a key holding leases
/// starts with the module's marker (`redis-tb:leases`, score -1) and holds it once.
fn members(c: &mut Conn, key: &str) -> Vec<(String, i64)> {
    let all = all_members(c, key);
    if let Some(first) = all.first() {
        assert_eq!(first, &(MARKER.to_string(), -1), "{all:?}");
    }
    let leases: Vec<_> = all.into_iter().skip(1).collect();
    assert!(
        leases.iter().all(|(m, _)| m.starts_with("lease:")),
        "{leases:?}"
    );
    leases
}

/// Every member of the key and its score, the marker included.
fn all_members(c: &mut Conn, key: &str) -> Vec<(String, i64)> {
    let r = c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    r.array()
        .chunks(2)
        .map(|p| (p[0].text(), p[1].text().parse().unwrap()))
        .collect()
}

const MARKER: &str = "redis-tb:leases";

#[test]
fn acquire_grants_up_to_the_limit_then_refuses_with_the_wait_of_the_earliest_lease() {
    let s = Server::start();
    let mut c = s.conn();
    let t0 = server_ms(&mut c);
    let a = acquire(&mut c, "k", "2", "5000");
    assert!(a.granted && a.in_flight == 1, "{a:?}");
    assert!((5000..=5001).contains(&a.ms), "{a:?}");
    let id = a.id.unwrap();
    assert_eq!(id.len(), 16);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let b = acquire(&mut c, "k", "2", "9000");
    assert!(b.granted && b.in_flight == 2, "{b:?}");
    assert_ne!(b.id.as_deref(), Some(id.as_str()));
    let r = acquire(&mut c, "k", "2", "5000");
    assert_eq!((r.granted, r.in_flight, r.id.clone()), (false, 2, None));
    // The wait is until the first lease (5 s) expires, not the second.
    assert!((4000..=5001).contains(&r.ms), "{r:?}");
    // Stored: one member per lease, scored by its absolute expiry on the server's clock.
    let m = members(&mut c, "k");
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].0, format!("lease:{id}"));
    assert!(
        (t0 + 5000..=t0 + 5000 + 1000).contains(&m[0].1),
        "{m:?} {t0}"
    );
    // The key outlives its last lease.
    let expire = c.cmd(&["PEXPIRETIME", "k"]).int();
    assert!(expire >= m[1].1, "{expire} {m:?}");
    // A higher limit on the same key grants more; TB.PEEK counts them.
    assert!(acquire(&mut c, "k", "3", "5000").granted);
    let p = peek(&mut c, "k");
    assert_eq!(p[0], 3);
    assert!((1..=5001).contains(&p[1]), "{p:?}");
    assert_eq!(peek(&mut c, "missing"), vec![0, 0]);
}

#[test]
fn a_lowered_limit_refuses_until_enough_leases_have_ended() {
    let s = Server::start();
    let mut c = s.conn();
    for ms in ["1000", "3000", "6000"] {
        assert!(acquire(&mut c, "k", "3", ms).granted);
    }
    // Limit 2 with 3 held: a slot frees when two of them have ended (the 3 s one).
    let r = acquire(&mut c, "k", "2", "1000");
    assert!(!r.granted);
    assert!((2000..=3001).contains(&r.ms), "{r:?}");
}

#[test]
fn release_renew_and_their_defined_answers_for_ids_not_held() {
    let s = Server::start();
    let mut c = s.conn();
    let a = acquire(&mut c, "k", "2", "10000").id.unwrap();
    let b = acquire(&mut c, "k", "2", "10000").id.unwrap();
    // Renewing a live lease: [1, in_flight, ms left].
    let r = renew(&mut c, "k", &a, "20000");
    assert_eq!(&r[..2], &[1, 2]);
    assert!((20000..=20001).contains(&r[2]), "{r:?}");
    // Uppercase hex is the same id.
    assert_eq!(release(&mut c, "k", &a.to_uppercase()), vec![1, 1]);
    // Releasing twice, an unknown id, renewing a released one: 0, nothing changed.
    let before = fingerprint(&mut c, &["k"]);
    assert_eq!(release(&mut c, "k", &a), vec![0, 1]);
    assert_eq!(release(&mut c, "k", "0123456789abcdef"), vec![0, 1]);
    assert_eq!(renew(&mut c, "k", &a, "1000"), vec![0, 1, 0]);
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    assert!(watch_survives(&s, &["k"], &["TB.RELEASE", "k", a.as_str()]));
    // The last release removes the key.
    assert_eq!(release(&mut c, "k", &b), vec![1, 0]);
    assert_eq!(c.q("EXISTS k").int(), 0);
    assert_eq!(release(&mut c, "k", &b), vec![0, 0]);
    assert_eq!(c.q("EXISTS k").int(), 0);
}

#[test]
fn the_earliest_lease_and_a_later_one_are_released_and_renewed_alike() {
    // A release or renewal of the earliest live lease uses what the reclaiming pass read
    // (its member and expiry); any other goes through a lookup. Both must agree.
    let s = Server::start();
    let mut c = s.conn();
    let ids: Vec<String> = ["10000", "20000", "30000"]
        .iter()
        .map(|ms| acquire(&mut c, "k", "5", ms).id.unwrap())
        .collect();
    let names: Vec<String> = ids.iter().map(|id| format!("lease:{id}")).collect();
    let expiry = |c: &mut Conn, name: &str| {
        members(c, "k")
            .into_iter()
            .find(|(m, _)| m == name)
            .map(|(_, e)| e)
    };
    // The middle one (a lookup), then the earliest (read by the pass).
    assert_eq!(release(&mut c, "k", &ids[1]), vec![1, 2]);
    assert_eq!(expiry(&mut c, &names[1]), None);
    let latest = expiry(&mut c, &names[2]).unwrap();
    let r = renew(&mut c, "k", &ids[0], "40000");
    assert_eq!(&r[..2], &[1, 2], "{r:?}");
    let renewed = expiry(&mut c, &names[0]).unwrap();
    assert!(renewed > latest, "{renewed} > {latest}");
    // Now ids[2] is the earliest: renewed by the pass's read, then released.
    assert_eq!(renew(&mut c, "k", &ids[2], "50000")[0], 1);
    assert!(expiry(&mut c, &names[2]).unwrap() > renewed);
    assert_eq!(release(&mut c, "k", &ids[0]), vec![1, 1]);
    assert_eq!(release(&mut c, "k", &ids[0]), vec![0, 1]);
    assert_eq!(members(&mut c, "k").len(), 1);
    assert_eq!(release(&mut c, "k", &ids[2]), vec![1, 0]);
    assert_eq!(c.q("EXISTS k").int(), 0);
}

#[test]
fn an_expired_lease_is_reclaimed_and_cannot_be_renewed_or_released() {
    let s = Server::start();
    let mut c = s.conn();
    let short = acquire(&mut c, "k", "2", "100").id.unwrap();
    let long = acquire(&mut c, "k", "2", "60000").id.unwrap();
    assert!(!acquire(&mut c, "k", "2", "100").granted);
    std::thread::sleep(Duration::from_millis(150));
    // Expired: renewing it does not hand the slot back, and the call reclaims it.
    assert_eq!(renew(&mut c, "k", &short, "60000"), vec![0, 1, 0]);
    assert_eq!(members(&mut c, "k").len(), 1);
    assert_eq!(release(&mut c, "k", &short), vec![0, 1]);
    // The freed slot is there.
    assert!(acquire(&mut c, "k", "2", "100").granted);
    assert_eq!(release(&mut c, "k", &long), vec![1, 1]);
    // When every lease has expired, the key goes (by its TTL, no call needed).
    wait_for(Duration::from_secs(5), "the key to expire", || {
        c.q("EXISTS k").int() == 0
    });
}

#[test]
fn bad_arguments_and_foreign_keys_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let id = acquire(&mut c, "k", "5", "60000").id.unwrap();
    c.q("HSET user name x");
    c.q("TB.TAKE bucket 10 1 1");
    c.q("ZADD zs 1 a 2 b");
    c.q("TB.WINDOW log 10 60 1 LOG");
    c.q("SET str v");
    c.cmd(&["ZADD", "fake", "1.5", &format!("lease:{id}")]);
    let keys = [
        "k", "user", "bucket", "zs", "log", "str", "fake", "none", "b1",
    ];
    let arity = |name: &str| format!("ERR wrong number of arguments for '{name}' command");
    assert_errors_change_nothing(
        &mut c,
        &["TB.ACQUIRE"],
        &keys,
        &[
            (&["k", "0", "100"], LIMIT_ERR),
            (&["k", "10001", "100"], LIMIT_ERR),
            (&["k", "1.5", "100"], LIMIT_ERR),
            (&["k", "-1", "100"], LIMIT_ERR),
            (&["k", "x", "100"], LIMIT_ERR),
            (&["k", "1", "0"], MS_ERR),
            (&["k", "1", "1500.5"], MS_ERR),
            (&["k", "1", "1e-3"], MS_ERR),
            (&["k", "1", "31536000001"], MS_ERR),
            (&["k", "1"], &arity("tb.acquire")),
            (&["k", "1", "1", "1"], TAKE_SYNTAX),
            (&["k", "1", "1", "TAKE", "1", "b1", "10", "1"], TAKE_SYNTAX),
            (
                &[
                    "k",
                    "1",
                    "1",
                    "TAKE",
                    "1",
                    "b1",
                    "10",
                    "1",
                    "1",
                    "1764456268",
                ],
                TAKE_SYNTAX,
            ),
            (
                &["k", "1", "1", "TAKE", "0", "b1", "10", "1", "1"],
                "ERR numkeys must be a positive integer",
            ),
            (&["k", "1", "1", "TAKE", "1", "k", "10", "1", "1"], TAKE_DUP),
            (
                &[
                    "k", "1", "1", "TAKE", "2", "b1", "b1", "10", "1", "1", "10", "1", "1",
                ],
                TAKE_DUP,
            ),
            (
                &["k", "1", "1", "TAKE", "1", "str", "10", "1", "1"],
                WRONGTYPE,
            ),
            (
                &["k", "1", "1", "TAKE", "1", "log", "10", "1", "1"],
                WRONGTYPE,
            ),
            (
                &["k", "1", "1", "TAKE", "1", "b1", "0", "1", "1"],
                "ERR capacity must be > 0 and <= 9007199254740992",
            ),
            (&["user", "1", "100"], WRONGTYPE),
            (&["bucket", "1", "100"], WRONGTYPE),
            (&["str", "1", "100"], WRONGTYPE),
            (&["zs", "5", "100"], NOT_LEASES),
            (&["log", "5", "100"], NOT_LEASES),
            (&["fake", "5", "100"], NOT_LEASES),
        ],
    );
    assert_errors_change_nothing(
        &mut c,
        &["TB.RELEASE"],
        &keys,
        &[
            (&["k", "xyz"], ID_ERR),
            (&["k", "0123456789abcdeg"], ID_ERR),
            (&["k", ""], ID_ERR),
            (&["k"], &arity("tb.release")),
            (&["user", &id], WRONGTYPE),
            (&["zs", &id], NOT_LEASES),
            (&["fake", &id], NOT_LEASES),
        ],
    );
    assert_errors_change_nothing(
        &mut c,
        &["TB.RENEW"],
        &keys,
        &[
            (&["k", "xyz", "100"], ID_ERR),
            (&["k", &id, "0"], MS_ERR),
            (&["k", &id], &arity("tb.renew")),
            (&["log", &id, "100"], NOT_LEASES),
            (&["str", &id, "100"], WRONGTYPE),
            (
                &["user", &id, "100"],
                "ERR key holds a hash that is not a token bucket (it has neither 'tokens' nor 'last_refill_time'): left unchanged",
            ),
        ],
    );
    // A bucket's hash is TB.RENEW's too (its holds): this id is none of them, nothing changes.
    let before = fingerprint(&mut c, &keys);
    assert_eq!(renew(&mut c, "bucket", &id, "100"), vec![0, 0, 0]);
    assert_eq!(fingerprint(&mut c, &keys), before);
    assert_errors_change_nothing(
        &mut c,
        &["TB.PEEK"],
        &keys,
        &[
            (&["zs", "LEASES"], NOT_LEASES),
            (&["user", "LEASES"], WRONGTYPE),
        ],
    );
    // The bucket commands do not read a lease key as theirs.
    assert_errors_change_nothing(
        &mut c,
        &[],
        &keys,
        &[
            (&["TB.TAKE", "k", "10", "1", "1"], WRONGTYPE),
            (&["TB.PEEK", "k", "10", "1"], WRONGTYPE),
            (&["TB.WINDOW", "k", "10", "60", "1", "FIXED"], WRONGTYPE),
            (
                &["TB.WINDOW", "k", "10", "60", "1", "LOG"],
                "ERR key holds TB.ACQUIRE's leases, not a TB.WINDOW LOG window",
            ),
            (
                &["TB.WINDOW", "k", "10", "60", "0", "1764456268", "LOG"],
                "ERR key holds TB.ACQUIRE's leases, not a TB.WINDOW LOG window",
            ),
        ],
    );
    assert_eq!(members(&mut c, "k").len(), 1);
    // 25 cases, one of them wrong arity, which Redis refuses before the module runs.
    assert_eq!(tb_counters(&mut c, "acquire")[3], 24);
}

#[test]
fn info_counts_and_command_metadata() {
    let s = Server::start();
    let mut c = s.conn();
    let id = acquire(&mut c, "k", "1", "60000").id.unwrap();
    assert!(!acquire(&mut c, "k", "1", "60000").granted);
    c.q("TB.ACQUIRE k 0 1");
    assert_eq!(tb_counters(&mut c, "acquire"), [3, 1, 1, 1]);
    assert_eq!(release(&mut c, "k", &id), vec![1, 0]);
    assert_eq!(release(&mut c, "k", &id), vec![0, 0]);
    assert_eq!(tb_counters(&mut c, "release"), [2, 1, 1, 0]);
    assert_eq!(renew(&mut c, "k", &id, "5"), vec![0, 0, 0]);
    assert_eq!(tb_counters(&mut c, "renew"), [1, 0, 1, 0]);
    for (name, arity, args) in [
        (
            "tb.acquire",
            -4,
            &["key", "limit", "lease_ms", "TAKE", "numkeys"][..],
        ),
        ("tb.release", 3, &["key", "lease_id"]),
        ("tb.renew", 4, &["key", "lease_id", "lease_ms"]),
    ] {
        assert_documented(&mut c, name, args);
        let (got, flags, keys) = command_info(&mut c, name);
        assert_eq!(got, arity, "{name}");
        assert!(flags.contains(&"write".to_string()), "{name} {flags:?}");
        assert!(keys.contains("RW"), "{name} {keys}");
    }
    assert_eq!(
        c.q("COMMAND GETKEYS TB.ACQUIRE sem 3 100"),
        Reply::Array(vec![Reply::Bulk(b"sem".to_vec())])
    );
    assert_eq!(
        c.q("COMMAND GETKEYS TB.RENEW sem 0123456789abcdef 100"),
        Reply::Array(vec![Reply::Bulk(b"sem".to_vec())])
    );
    let (_, flags, _) = command_info(&mut c, "tb.peek");
    assert!(flags.contains(&"readonly".to_string()));
}

#[test]
fn effects_are_replicated_with_the_masters_ids_and_absolute_expiries() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    let mut stream = ReplStream::attach(&master);
    let a = acquire(&mut c, "k", "2", "100").id.unwrap();
    let b = acquire(&mut c, "k", "2", "60000").id.unwrap();
    assert!(!acquire(&mut c, "k", "2", "60000").granted); // refused: nothing replicated
    assert_eq!(release(&mut c, "k", "0123456789abcdef"), vec![0, 2]); // nothing
    std::thread::sleep(Duration::from_millis(150));
    let c2 = acquire(&mut c, "k", "2", "60000").id.unwrap(); // reclaims a
    assert_eq!(renew(&mut c, "k", &b, "70000")[0], 1);
    assert_eq!(release(&mut c, "k", &c2), vec![1, 1]);
    c.q("SET marker 1");
    let got = stream.until_marker("marker");
    let m = members(&mut c, "k");
    let score_b = m[0].1.to_string();
    let names: Vec<String> = got.iter().map(|cmd| cmd[0].clone()).collect();
    // Each call's effects: ZADD (+ PEXPIREAT), ..., the reclaim as ZREM by name.
    assert!(got.iter().all(|cmd| {
        matches!(
            cmd[0].as_str(),
            "MULTI" | "EXEC" | "ZADD" | "ZREM" | "PEXPIREAT"
        )
    }));
    assert!(
        got.contains(&vec!["ZREM".into(), "k".into(), format!("lease:{a}")]),
        "{got:?}"
    );
    assert!(
        got.contains(&vec![
            "ZADD".into(),
            "k".into(),
            "XX".into(),
            score_b,
            format!("lease:{b}")
        ]),
        "{got:?}"
    );
    assert!(
        got.contains(&vec!["ZREM".into(), "k".into(), format!("lease:{c2}")]),
        "{got:?}"
    );
    assert_eq!(names.iter().filter(|n| *n == "ZADD").count(), 4, "{got:?}");
    assert_replicas_hold_the_masters_bytes(&mut c, &[(&replica, "replica without the module")]);
}

#[test]
fn a_promoted_replica_keeps_the_leases_and_the_limit() {
    let master = start_master();
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    let a = acquire(&mut c, "k", "2", "60000").id.unwrap();
    let b = acquire(&mut c, "k", "2", "60000").id.unwrap();
    // What a failover can lose: writes the replica had not acknowledged. WAIT makes
    // these two acknowledged, so the promoted replica must hold both.
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = members(&mut c, "k");
    drop(master);
    let mut r = replica.conn();
    assert_eq!(r.q("REPLICAOF NO ONE"), Reply::Simple("OK".into()));
    assert_eq!(members(&mut r, "k"), before);
    assert!(!acquire(&mut r, "k", "2", "60000").granted);
    assert_eq!(peek(&mut r, "k")[0], 2);
    // The old ids still work on the new master; its new ids are its own.
    assert_eq!(release(&mut r, "k", &a), vec![1, 1]);
    let n = acquire(&mut r, "k", "2", "60000").id.unwrap();
    assert!(n != a && n != b);
    assert_eq!(renew(&mut r, "k", &b, "60000")[0], 1);
}

#[test]
fn an_unacknowledged_acquire_is_what_a_failover_can_lose() {
    // The bound: a grant the replica never received is lost (its holder's RELEASE then
    // answers 0 and its slot is free again on the new master), never one it did receive.
    let master = start_master();
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    let kept = acquire(&mut c, "k", "2", "60000").id.unwrap();
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    // Cut the link, then grant on the master only.
    let mut r = replica.conn();
    assert_eq!(r.q("REPLICAOF NO ONE"), Reply::Simple("OK".into()));
    let lost = acquire(&mut c, "k", "2", "60000").id.unwrap();
    assert_eq!(peek(&mut r, "k")[0], 1);
    assert_eq!(release(&mut r, "k", &lost), vec![0, 1]);
    assert_eq!(release(&mut r, "k", &kept), vec![1, 0]);
}

#[test]
fn aof_restart_after_kill_keeps_every_lease() {
    let mut server = start_aof_server("always");
    let mut c = server.conn();
    let a = acquire(&mut c, "k", "3", "60000").id.unwrap();
    let b = acquire(&mut c, "k", "3", "60000").id.unwrap();
    assert_eq!(release(&mut c, "k", &b), vec![1, 1]);
    let d = acquire(&mut c, "k", "3", "60000").id.unwrap();
    assert_eq!(renew(&mut c, "k", &d, "50000")[0], 1);
    let want = (
        members(&mut c, "k"),
        c.q("PEXPIRETIME k").int(),
        dump(&mut c, b"k"),
    );
    drop(c);
    server.restart(false);
    let mut c = server.conn();
    assert_eq!(
        (
            members(&mut c, "k"),
            c.q("PEXPIRETIME k").int(),
            dump(&mut c, b"k")
        ),
        want,
        "replayed without the module"
    );
    server.restart(true);
    let mut c = server.conn();
    assert_eq!(members(&mut c, "k"), want.0);
    assert_eq!(release(&mut c, "k", &a), vec![1, 1]);
    assert_eq!(release(&mut c, "k", &b), vec![0, 1]);
}

#[test]
fn a_killed_holders_slot_is_back_after_its_lease_and_not_before() {
    let s = Server::start();
    let mut c = s.conn();
    let lease_ms = 1500;
    // A separate process acquires the only slot and is killed without releasing.
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "redis-cli -p {} TB.ACQUIRE k 1 {lease_ms}; exec sleep 60",
            s.port
        ))
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh and redis-cli");
    let mut out = BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "1", "holder: {line}");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let expiry = members(&mut c, "k")[0].1;
    let granted_by = expiry - lease_ms; // the grant's ceil(ms): at or after the grant
    let start = Instant::now();
    let mut refusals = 0;
    loop {
        let before = server_ms(&mut c);
        let a = acquire(&mut c, "k", "1", "1000");
        let after = server_ms(&mut c);
        if a.granted {
            // Granted only once the lease had run its full length, and soon after.
            assert!(
                after >= granted_by + lease_ms,
                "granted at {after}, lease until {expiry}"
            );
            assert!(before <= expiry + 500, "granted late: {before} vs {expiry}");
            break;
        }
        // Refused: the call ran at or after `before`, so the lease had not ended then.
        assert!(
            before < expiry,
            "refused at {before}, the lease ended at {expiry}"
        );
        assert!(
            a.ms >= 1 && a.ms <= expiry - before,
            "{a:?} {before} {expiry}"
        );
        refusals += 1;
        assert!(start.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(refusals > 50, "{refusals}");
}

/// The holders of the race test: when `TB_LEASE_RACE_PORT` is set this runs as one of the
/// child processes (started by `many_processes_never_hold_more_than_the_limit`), else it
/// returns at once.
#[test]
fn lease_race_holder_process() {
    let Ok(port) = std::env::var("TB_LEASE_RACE_PORT") else {
        return;
    };
    let port: u16 = port.parse().unwrap();
    let secs: f64 = std::env::var("TB_LEASE_RACE_RUN").unwrap().parse().unwrap();
    let limit = std::env::var("TB_LEASE_RACE_LIMIT").unwrap();
    let mut c = Conn::connect(port).unwrap();
    let wall = || {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        t.as_micros()
    };
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut rng = std::process::id() as u64;
    // Printed at the end: the parent reads the children's pipes one after another, and a
    // holder blocked on a full pipe would hold its lease past its end.
    let mut intervals = Vec::new();
    while Instant::now() < end {
        let a = acquire(&mut c, "race", &limit, "10000");
        if !a.granted {
            std::thread::sleep(Duration::from_micros(200));
            continue;
        }
        // The interval the holder itself believes it holds the slot: after the grant
        // arrived, until before the release is sent.
        let from = wall();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(rng % 3000));
        let to = wall();
        intervals.push((from, to));
        assert_eq!(release(&mut c, "race", a.id.as_deref().unwrap())[0], 1);
    }
    let text: String = intervals
        .iter()
        .map(|(from, to)| format!("HELD {from} {to}\n"))
        .collect();
    print!("{text}");
}

#[test]
fn many_processes_never_hold_more_than_the_limit() {
    let secs: f64 = std::env::var("TB_LEASE_RACE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30.0);
    let limit = 3;
    let processes = 12;
    let s = Server::start();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "lease_race_holder_process", "--nocapture"])
                .env("TB_LEASE_RACE_PORT", s.port.to_string())
                .env("TB_LEASE_RACE_RUN", secs.to_string())
                .env("TB_LEASE_RACE_LIMIT", limit.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut events: Vec<(u128, i32)> = Vec::new();
    let mut held = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "holder failed");
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(rest) = line.strip_prefix("HELD ") {
                let (a, b) = rest.split_once(' ').unwrap();
                let (a, b): (u128, u128) = (a.parse().unwrap(), b.parse().unwrap());
                events.push((a, 1));
                events.push((b, -1));
                held += 1;
            }
        }
    }
    // Ends sort before starts at the same microsecond (touching is not overlapping).
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, d) in &events {
        now += d;
        most = most.max(now);
    }
    eprintln!("{held} holds by {processes} processes in {secs} s; at most {most} at once");
    assert!(held > processes, "too few holds: {held}");
    assert!(most <= limit, "{most} holders at once, limit {limit}");
    // The limit is actually reached (so the check above could fail).
    assert_eq!(most, limit);
    assert_eq!(peek(&mut s.conn(), "race"), vec![0, 0]);
}

#[test]
fn memory_per_lease_at_the_largest_limit() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..10_000 {
        assert!(acquire(&mut c, "k", "10000", "600000").granted);
    }
    assert!(!acquire(&mut c, "k", "10000", "600000").granted);
    let bytes = c.q("MEMORY USAGE k SAMPLES 0").int();
    let per = bytes as f64 / 10_000.0;
    eprintln!("MEMORY USAGE of 10000 leases: {bytes} bytes, {per:.1} per lease");
    assert!(per < 200.0, "{per} bytes per lease");
    // A call at the limit reclaims at most the limit and stays quick.
    let t = Instant::now();
    for _ in 0..100 {
        acquire(&mut c, "k", "10000", "600000");
    }
    assert!(t.elapsed() < Duration::from_secs(5));
}

/// TB.ACQUIRE ... TAKE's reply: the lease part and the buckets' (aggregate, per key).
fn acquire_take(c: &mut Conn, args: &[&str]) -> (Acquired, Vec<Reply>, Vec<Reply>) {
    let mut full = vec!["TB.ACQUIRE"];
    full.extend_from_slice(args);
    let r = c.cmd(&full);
    let a = r.array();
    assert_eq!(a.len(), 6, "{r:?}");
    let lease = Acquired {
        granted: a[0].int() == 1,
        in_flight: a[1].int(),
        id: match &a[2] {
            Reply::Nil => None,
            other => Some(other.text()),
        },
        ms: a[3].int(),
    };
    (lease, a[4].array().to_vec(), a[5].array().to_vec())
}

#[test]
fn acquire_with_take_charges_nothing_anywhere_unless_the_slot_and_every_bucket_pass() {
    let s = Server::start();
    let mut c = s.conn();
    let slow = "0.000000001";
    let take = |c: &mut Conn, limit: &str, n_b: &str| {
        acquire_take(
            c,
            &[
                "sem", limit, "60000", "TAKE", "2", "ba", "bb", "10", slow, "3", "5", slow, n_b,
            ],
        )
    };
    let tokens =
        |c: &mut Conn, k: &str| common::hget(c, k, "tokens").map(|t| t.parse::<f64>().unwrap());
    // Everything passes: a lease and both buckets charged.
    let (l, total, each) = take(&mut c, "1", "4");
    assert!(l.granted && l.in_flight == 1 && l.id.is_some(), "{l:?}");
    assert_eq!(total[0].int(), 1);
    assert_eq!(each.len(), 2);
    assert!((tokens(&mut c, "ba").unwrap() - 7.0).abs() < 1e-6);
    assert!((tokens(&mut c, "bb").unwrap() - 1.0).abs() < 1e-6);
    let before = fingerprint(&mut c, &["sem", "ba", "bb"]);
    // The slot is taken: nothing charged, though both buckets had enough.
    let (l, total, each) = take(&mut c, "1", "1");
    assert!(!l.granted && l.id.is_none() && l.ms > 0, "{l:?}");
    assert_eq!(total[0].int(), 1, "the buckets alone had enough");
    assert_eq!(each[0].array()[0].int(), 1);
    assert_eq!(fingerprint(&mut c, &["sem", "ba", "bb"]), before);
    // A slot is free but one bucket is short: no lease, nothing charged.
    let (l, total, each) = take(&mut c, "2", "4");
    assert!(!l.granted && l.in_flight == 1 && l.ms == 0, "{l:?}");
    assert_eq!(total[0].int(), 0);
    assert_eq!(each[1].array()[0].int(), 0);
    assert_eq!(fingerprint(&mut c, &["sem", "ba", "bb"]), before);
    // TB.MTAKE's syntax and replies are unchanged beside it.
    let m = c.cmd(&["TB.MTAKE", "2", "ba", "bb", "10", slow, "1", "5", slow, "1"]);
    assert_eq!(m.array().len(), 5);
    assert_eq!(
        c.q("COMMAND GETKEYS TB.ACQUIRE sem 1 100 TAKE 2 ba bb 10 1 1 5 1 1"),
        Reply::Array(vec![
            Reply::Bulk(b"sem".to_vec()),
            Reply::Bulk(b"ba".to_vec()),
            Reply::Bulk(b"bb".to_vec())
        ])
    );
}

#[test]
fn in_a_cluster_acquire_with_take_on_two_slots_gets_crossslot() {
    let (a, _b) = common::start_two_node_cluster();
    let mut c = a.conn();
    let r = c.q("TB.ACQUIRE {u1}sem 1 1000 TAKE 1 {u2}b 10 1 1");
    assert!(r.error().starts_with("CROSSSLOT"), "{r:?}");
    // Same hash tag: served (or redirected, when the slot is the other node's).
    let r = c.q("TB.ACQUIRE {u1}sem 1 1000 TAKE 1 {u1}b 10 1 1");
    match &r {
        Reply::Array(items) => assert_eq!(items.len(), 6),
        Reply::Error(e) => assert!(e.starts_with("MOVED"), "{r:?}"),
        other => panic!("{other:?}"),
    }
}

/// Issue 39 L6: a sorted set whose lowest member looks like a lease, but which also holds
/// `alice` and `bob`, was adopted (a lease added and a TTL set on the whole key). A set
/// the module did not make is never written: without the marker it is refused unless
/// every member is a lease, whatever its first member looks like.
#[test]
fn a_sorted_set_the_module_did_not_make_is_never_written_whatever_its_first_member() {
    let s = Server::start();
    let mut c = s.conn();
    let now = server_ms(&mut c);
    let live = (now + 600_000).to_string();
    let expired = (now - 1_000).to_string();
    // The attack's set: the lowest member a live-looking lease, then a leaderboard.
    let far = (now + 900_000).to_string();
    c.cmd(&[
        "ZADD",
        "mixed",
        &live,
        "lease:0000000000000001",
        &far,
        "alice",
        &far,
        "bob",
    ]);
    // The lowest an expired-looking lease (a call would reclaim it), then a user.
    c.cmd(&[
        "ZADD",
        "mixed2",
        &expired,
        "lease:0000000000000002",
        &far,
        "carol",
    ]);
    // The marker, but not first: someone else's member sorts before it.
    c.cmd(&[
        "ZADD",
        "forged",
        "-5",
        "zed",
        "-1",
        MARKER,
        &live,
        "lease:0000000000000003",
    ]);
    // The marker first, then a foreign member where a lease would be read.
    c.cmd(&["ZADD", "tampered", "-1", MARKER, "1", "dave"]);
    let keys = ["mixed", "mixed2", "forged", "tampered"];
    for key in keys {
        assert_errors_change_nothing(
            &mut c,
            &[],
            &[key],
            &[
                (&["TB.ACQUIRE", key, "5", "60000"], NOT_LEASES),
                (
                    &[
                        "TB.ACQUIRE",
                        key,
                        "5",
                        "60000",
                        "TAKE",
                        "1",
                        "b",
                        "10",
                        "1",
                        "1",
                    ],
                    NOT_LEASES,
                ),
                (&["TB.RELEASE", key, "0000000000000001"], NOT_LEASES),
                (&["TB.RELEASE", key, "0000000000000002"], NOT_LEASES),
                (&["TB.RENEW", key, "0000000000000001", "60000"], NOT_LEASES),
                (&["TB.PEEK", key, "LEASES"], NOT_LEASES),
            ],
        );
        assert_eq!(c.cmd(&["PTTL", key]).int(), -1, "{key}");
    }
    // Nothing the refused TAKE named was written either.
    assert_eq!(c.cmd(&["EXISTS", "b"]).int(), 0);
}

/// A key of leases written before the marker existed (every member a lease) is adopted:
/// read whole once, then marked by its next write, replicated with it; the marker goes
/// with the last lease, so the key does too.
#[test]
fn a_set_of_leases_from_before_the_marker_is_adopted_and_marked_by_its_next_write() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    let now = server_ms(&mut c);
    let live = (now + 600_000).to_string();
    let expired = (now - 1_000).to_string();
    c.cmd(&[
        "ZADD",
        "old",
        &live,
        "lease:00000000000000aa",
        &expired,
        "lease:00000000000000bb",
    ]);
    // Read-only, it is counted and not written.
    assert_eq!(peek(&mut c, "old")[0], 1);
    assert_eq!(all_members(&mut c, "old").len(), 2);
    let mut stream = ReplStream::attach(&master);
    let id = acquire(&mut c, "old", "5", "60000").id.unwrap();
    let m = members(&mut c, "old"); // asserts the marker is first
    assert_eq!(m.len(), 2, "{m:?}");
    assert_eq!(release(&mut c, "old", "00000000000000aa"), vec![1, 1]);
    assert_eq!(release(&mut c, "old", &id), vec![1, 0]);
    assert_eq!(
        c.cmd(&["EXISTS", "old"]).int(),
        0,
        "the marker goes with the last lease"
    );
    c.q("SET marker 1");
    let got = stream.until_marker("marker");
    assert!(
        got.iter().any(|cmd| cmd.len() == 6
            && cmd[0] == "ZADD"
            && cmd[2] == "-1"
            && cmd[3] == MARKER
            && cmd[5] == format!("lease:{id}")),
        "{got:?}"
    );
    assert!(
        got.contains(&vec![
            "ZREM".into(),
            "old".into(),
            format!("lease:{id}"),
            MARKER.into()
        ]),
        "{got:?}"
    );
    assert_replicas_hold_the_masters_bytes(&mut c, &[(&replica, "replica without the module")]);

    // A renewal marks an old key too (its own ZADD before the ZADD XX).
    c.cmd(&["ZADD", "old2", &live, "lease:00000000000000cc"]);
    assert_eq!(renew(&mut c, "old2", "00000000000000cc", "60000")[0], 1);
    assert_eq!(members(&mut c, "old2").len(), 1);
    // More members than a key can hold is not a set of ours.
    let mut args = vec!["ZADD".to_string(), "huge".into()];
    for i in 0..10_001u64 {
        args.push(live.clone());
        args.push(format!("lease:{i:016x}"));
    }
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    c.cmd(&refs);
    assert_eq!(
        c.cmd(&["TB.ACQUIRE", "huge", "5", "60000"]),
        Reply::Error(NOT_LEASES.into())
    );
}

/// Issue 39 L1: ids were SplitMix64 of one counter stepping by a constant, so from one's
/// own id an attacker computed every other (released a victim's lease, renewed one for a
/// year) and two ids told how many were granted between them. Today's ids come from a
/// keyed ChaCha20 stream: the inversion finds nothing.
#[test]
fn ids_predicted_from_ones_own_by_the_old_inversion_are_never_held() {
    const STEP: u64 = 0x9e37_79b9_7f4a_7c15;
    const STEP_INV: u64 = 0xf1de_83e1_9937_733d;
    fn unshift(z: u64, s: u32) -> u64 {
        let mut x = z;
        for _ in 0..(64 / s + 1) {
            x = z ^ (x >> s);
        }
        x
    }
    fn mix(mut z: u64) -> u64 {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unmix(z: u64) -> u64 {
        let mut x = unshift(z, 31);
        x = x.wrapping_mul(0x3196_42b2_d24d_8ec3);
        x = unshift(x, 27);
        x = x.wrapping_mul(0x96de_1b17_3f11_9089);
        unshift(x, 30)
    }
    let s = Server::start();
    let mut c = s.conn();
    // The attacker's lease, then 50 victims' leases on other keys and on this one.
    let mine = acquire(&mut c, "jobs:attacker", "100", "60000").id.unwrap();
    let mut victims = Vec::new();
    for i in 0..50 {
        let key = format!("jobs:victim{}", i % 5);
        victims.push((
            key.clone(),
            acquire(&mut c, &key, "100", "60000").id.unwrap(),
        ));
    }
    let hold = c.cmd(&["TB.HOLD", "llm:victim", "100000", "50", "4000", "60000"]);
    let hold_id = hold.array()[4].text();
    // The attack: step the counter behind my id forward and mix it again.
    let base = unmix(u64::from_str_radix(&mine, 16).unwrap());
    let mut predicted = std::collections::HashSet::new();
    for k in 1..=10_000u64 {
        predicted.insert(format!(
            "{:016x}",
            mix(base.wrapping_add(STEP.wrapping_mul(k)))
        ));
    }
    for (key, id) in &victims {
        assert!(!predicted.contains(id), "{key} {id} was predicted");
        // The releases the attacker would send: none frees a victim's slot.
    }
    assert!(!predicted.contains(&hold_id));
    for p in predicted.iter().take(200) {
        for i in 0..5 {
            assert_eq!(release(&mut c, &format!("jobs:victim{i}"), p)[0], 0);
        }
    }
    assert_eq!(peek(&mut c, "jobs:victim0")[0], 10);
    // Two consecutive grants tell nothing of the count between them: the old reading
    // (the counters' difference as a multiple of the step) gives no small count.
    let ids: Vec<u64> = victims
        .iter()
        .map(|(_, id)| u64::from_str_radix(id, 16).unwrap())
        .collect();
    for pair in ids.windows(2) {
        let k = unmix(pair[1])
            .wrapping_sub(unmix(pair[0]))
            .wrapping_mul(STEP_INV);
        assert!(k > 1_000_000, "{pair:x?}");
    }
    // Ids differ, and are unique per key.
    let mut all = ids.clone();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), ids.len());
}

/// Issue 39 L9: refused for want of a slot, TB.ACQUIRE ... TAKE's aggregate reported the
/// buckets as if charged (remaining 3 where they held 4) while its per-bucket arrays showed
/// them as they stood. Both now say the same: each bucket as it stands, and the aggregate
/// of those (the docs: whether the buckets alone had enough).
#[test]
fn a_slot_refusal_reports_the_aggregate_of_the_buckets_as_they_stand() {
    let s = Server::start();
    let mut c = s.conn();
    c.cmd(&["TB.TAKE", "{u}b1", "5", "0.000000001", "1"]); // holds 4
    c.cmd(&["TB.TAKE", "{u}b2", "5", "0.000000001", "2"]); // holds 3
    assert!(acquire(&mut c, "{u}jobs", "1", "60000").granted);
    let before = fingerprint(&mut c, &["{u}b1", "{u}b2", "{u}jobs"]);
    let r = c.cmd(&[
        "TB.ACQUIRE",
        "{u}jobs",
        "1",
        "60000",
        "TAKE",
        "2",
        "{u}b1",
        "{u}b2",
        "5",
        "0.000000001",
        "1",
        "5",
        "0.000000001",
        "1",
    ]);
    let a = r.array();
    assert_eq!(
        (a[0].int(), a[1].int(), &a[2]),
        (0, 1, &Reply::Nil),
        "{r:?}"
    );
    let total: Vec<f64> = a[4].array().iter().map(Reply::num).collect();
    let each: Vec<Vec<f64>> = a[5]
        .array()
        .iter()
        .map(|d| d.array().iter().map(Reply::num).collect())
        .collect();
    // As they stand: 4 and 3 (the per-bucket arrays) ...
    assert!((each[0][1] - 4.0).abs() < 1e-6, "{r:?}");
    assert!((each[1][1] - 3.0).abs() < 1e-6, "{r:?}");
    // ... and the aggregate is theirs: allowed alone, the smallest remaining, no wait, the
    // longest reset.
    assert_eq!(total[0], 1.0, "{r:?}");
    assert_eq!(total[1], each[1][1], "{r:?}");
    assert_eq!(total[2], 0.0, "{r:?}");
    assert_eq!(total[3], each[0][3].max(each[1][3]), "{r:?}");
    assert_eq!(fingerprint(&mut c, &["{u}b1", "{u}b2", "{u}jobs"]), before);
}

/// Issue 39 L8: one TB.ACQUIRE with 100,000 TAKE buckets held the server 1.3 s. TB.MTAKE
/// and TB.ACQUIRE ... TAKE take at most 64 buckets; more is an error naming the bound,
/// and nothing is written.
#[test]
fn one_call_takes_at_most_64_buckets() {
    let s = Server::start();
    let mut c = s.conn();
    for (n, ok) in [(64usize, true), (65, false), (100_000, false)] {
        let keys: Vec<String> = (0..n).map(|i| format!("{{t}}b{i}")).collect();
        let mut mtake = vec!["TB.MTAKE".to_string(), n.to_string()];
        mtake.extend(keys.iter().cloned());
        let mut acq = vec![
            "TB.ACQUIRE".to_string(),
            "{t}jobs".into(),
            "5".into(),
            "60000".into(),
            "TAKE".into(),
            n.to_string(),
        ];
        acq.extend(keys.iter().cloned());
        for _ in 0..n {
            for v in ["10", "1", "1"] {
                mtake.push(v.into());
                acq.push(v.into());
            }
        }
        for args in [&mtake, &acq] {
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let r = c.cmd(&refs);
            if ok {
                assert!(matches!(r, Reply::Array(_)), "{n}: {r:?}");
            } else {
                assert_eq!(
                    r,
                    Reply::Error(
                        "ERR numkeys must be at most 64 (the buckets one call may take)".into()
                    ),
                    "{n}"
                );
            }
        }
        if !ok {
            assert_eq!(c.cmd(&["EXISTS", "{t}b64"]).int(), 0);
        }
    }
}

/// Issue 39 "whole number": `1e3` and `1.0` are numbers of the documented grammar, and a
/// whole one is accepted wherever a whole number is asked for; `1.5` is not whole.
#[test]
fn whole_numbers_in_any_spelling_of_the_number_grammar() {
    let s = Server::start();
    let mut c = s.conn();
    let a = acquire(&mut c, "k", "2e0", "3e4");
    assert!(a.granted && (29_999..=30_001).contains(&a.ms), "{a:?}");
    let id = a.id.unwrap();
    assert_eq!(renew(&mut c, "k", &id, "60000.0")[0], 1);
    let r = c.cmd(&["TB.HOLD", "h", "10", "1", "1", "6e4"]);
    assert_eq!(r.array()[0].int(), 1);
    assert_eq!(
        c.cmd(&["TB.ACQUIRE", "k", "1.5", "1000"]),
        Reply::Error(LIMIT_ERR.into())
    );
    assert_eq!(
        c.cmd(&["TB.ACQUIRE", "k", "2", "1e-3"]),
        Reply::Error(MS_ERR.into())
    );
}
