//! TB.PEEK's contract (what a take of one token would answer, without taking it; never a
//! write), checked against a real redis-server with the module loaded.

mod common;

use std::time::Duration;

use common::{
    CORRUPT_TIME, CORRUPT_TOKENS, Conn, Reply, Rng, Server, T0, T0F, Take, WRONGTYPE,
    assert_documented, assert_errors_change_nothing, at, bulk_reply, command_info, double_reply,
    fingerprint, hget, notifications_during, repl_offset, start_cluster_node, start_master,
    start_replica, take, tb_counters, wait_for, watch_survives,
};

const ARITY: &str = "ERR wrong number of arguments for 'tb.peek' command";

/// What TB.PEEK must answer, from TB.TAKE on a copy: allowed and retry_after of taking one
/// token, remaining and reset_after as the bucket stands (a take of 0).
fn peek_via_take(c: &mut Conn, key: &str, capacity: &str, rate: &str, now: &str) -> Take {
    c.cmd(&["DEL", "probe"]);
    if c.cmd(&["EXISTS", key]).int() == 1 {
        assert_eq!(c.cmd(&["COPY", key, "probe"]), Reply::Int(1));
    }
    let zero = c.take("probe", capacity, rate, "0", Some(now));
    let one = c.take("probe", capacity, rate, "1", Some(now));
    c.cmd(&["DEL", "probe"]);
    take(
        one.allowed,
        zero.remaining,
        one.retry_after,
        zero.reset_after,
    )
}

#[test]
fn peek_on_a_missing_key_reports_a_full_bucket_and_creates_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(c.peek("k", "10", "2", Some(T0)), take(true, 10.0, 0.0, 0.0));
    assert_eq!(c.peek("k", "10", "2", None), take(true, 10.0, 0.0, 0.0));
    assert_eq!(
        c.peek("k", "9007199254740992", "1e-9", Some(T0)),
        take(true, 9007199254740992.0, 0.0, 0.0)
    );
    assert_eq!(c.q("EXISTS k").int(), 0);
    assert_eq!(c.q("DBSIZE").int(), 0);
}

#[test]
fn peek_reports_one_token_allowed_or_its_wait_and_the_current_count() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "2", "10", Some(T0));
    assert_eq!(c.peek("k", "10", "2", Some(T0)), take(false, 0.0, 0.5, 5.0));
    assert_eq!(
        c.peek("k", "10", "2", Some(&at(0.25))),
        take(false, 0.5, 0.25, 4.75)
    );
    assert_eq!(
        c.peek("k", "10", "2", Some(&at(0.5))),
        take(true, 1.0, 0.0, 4.5)
    );
    assert_eq!(
        c.peek("k", "10", "2", Some(&at(3.0))),
        take(true, 6.0, 0.0, 2.0)
    );
    assert_eq!(
        c.peek("k", "10", "2", Some(&at(3600.0))),
        take(true, 10.0, 0.0, 0.0)
    );
    // The peeks took nothing: a take of all ten is allowed exactly when full.
    assert!(!c.take("k", "10", "2", "10", Some(&at(4.5))).allowed);
    assert!(c.take("k", "10", "2", "10", Some(&at(5.0))).allowed);
}

#[test]
fn peek_answers_what_a_take_of_one_token_would_without_taking_it() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0x09EE_C0DE);
    let mut now = T0F;
    for step in 0..500 {
        let key = format!("k{}", rng.below(3));
        let capacity = rng.pick(&["5", "10", "2.5", "1", "0.5", "1.5"]);
        let rate = rng.pick(&["0.5", "1", "1.6666666666666667", "3", "0.1"]);
        // Mostly forward, sometimes a client clock that is behind.
        now += rng.below(700) as f64 / 1000.0 - 0.1;
        let now_text = format!("{now}");
        let want = peek_via_take(&mut c, &key, capacity, rate, &now_text);
        let before = fingerprint(&mut c, &[&key]);
        let got = c.peek(&key, capacity, rate, Some(&now_text));
        assert_eq!(
            got, want,
            "step {step}: {key} {capacity} {rate} at {now_text}"
        );
        assert_eq!(fingerprint(&mut c, &[&key]), before, "step {step}");
        // Move the bucket: takes, reservations into debt, refunds.
        let n = rng.pick(&["1", "2", "0.5", "4"]);
        match rng.below(4) {
            0 | 1 => {
                c.take(&key, capacity, rate, n, Some(&now_text));
            }
            2 => {
                c.reserve(&key, capacity, rate, n, "3", Some(&now_text));
            }
            _ => {
                c.refund(&key, capacity, rate, n, Some(&now_text));
            }
        }
    }
}

#[test]
fn peek_with_capacity_below_one_never_allows() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "0.5", "1", "0.25", Some(T0));
    let before = fingerprint(&mut c, &["k"]);
    assert_eq!(
        c.peek("k", "0.5", "1", Some(T0)),
        take(false, 0.25, -1.0, 0.25)
    );
    assert_eq!(
        c.peek("k", "0.5", "1", Some(&at(10.0))),
        take(false, 0.5, -1.0, 0.0)
    );
    assert_eq!(fingerprint(&mut c, &["k"]), before);
}

#[test]
fn peek_with_capacity_below_one_on_a_missing_key_never_allows() {
    // "what TB.TAKE key capacity rate 1 would answer; -1 when capacity < 1".
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        c.peek("k", "0.5", "1", Some(T0)),
        c.take("k", "0.5", "1", "1", Some(T0))
    );
    assert_eq!(
        c.peek("k", "0.5", "1", Some(T0)),
        take(false, 0.5, -1.0, 0.0)
    );
    assert_eq!(c.q("EXISTS k").int(), 0);
}

#[test]
fn peek_shows_a_negative_remaining_while_reservations_are_outstanding() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..5 {
        assert!(c.reserve("k", "2", "1", "1", "100", Some(T0)).allowed);
    }
    assert_eq!(c.peek("k", "2", "1", Some(T0)), take(false, -3.0, 4.0, 5.0));
    assert_eq!(
        c.peek("k", "2", "1", Some(&at(2.5))),
        take(false, -0.5, 1.5, 2.5)
    );
    assert_eq!(
        c.peek("k", "2", "1", Some(&at(4.0))),
        take(true, 1.0, 0.0, 1.0)
    );
    let r = c.q("HELLO 3");
    assert!(matches!(r, Reply::Array(_)), "{r:?}");
    assert_eq!(
        c.q(&format!("TB.PEEK k 2 1 {T0}")),
        double_reply(0, [-3.0, 4.0, 5.0])
    );
}

#[test]
fn reply_is_bulk_text_under_resp2_and_doubles_under_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("TB.TAKE k 10 3 1 1000");
    let r = c.q("TB.PEEK k 10 3 1000");
    assert_eq!(r, bulk_reply(1, ["9", "0", "0.3333333333333333"]));
    let r = c.q("TB.PEEK missing 10 3");
    assert_eq!(r, bulk_reply(1, ["10", "0", "0"]));
    c.q("HELLO 3");
    let r = c.q("TB.PEEK k 10 3 1000");
    assert_eq!(r, double_reply(1, [9.0, 0.0, 1.0 / 3.0]));
    c.q("TB.TAKE k 10 3 9 1000");
    let r = c.q("TB.PEEK k 10 3 1000");
    assert_eq!(r, double_reply(0, [0.0, 1.0 / 3.0, 10.0 / 3.0]));
    let r = c.q("TB.PEEK k 0.5 3 1000");
    assert_eq!(r.array()[2], Reply::Double(-1.0));
    let r = c.q("TB.PEEK k 0.5 3");
    assert_eq!(r.array()[2], Reply::Double(-1.0));
}

#[test]
fn peek_never_writes_nor_touches_the_ttl() {
    let s = Server::start_unbounded();
    let mut c = s.conn();
    c.take("k", "10", "2", "6", Some(T0));
    c.q("HSET big tokens 100 last_refill_time 1764456268");
    c.q("PEXPIRE big 500000");
    let keys = ["k", "big", "missing"];
    let before = fingerprint(&mut c, &keys);
    let calls: Vec<Vec<String>> = vec![
        vec!["k", "10", "2", T0],
        vec!["k", "10", "2"],
        vec!["k", "10", "2", "1000"],
        vec!["k", "10", "2", "200000000000"],
        // A rate so slow that a take would have to extend the TTL: a peek must not.
        vec!["k", "10", "1e-9", T0],
        vec!["k", "1000", "0.001", T0],
        // Stored tokens above a lowered capacity: clamped in the reply, not in the hash.
        vec!["big", "10", "1", T0],
        vec!["missing", "10", "1", T0],
        vec!["missing", "10", "1"],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    let events = notifications_during(&s, |c| {
        for args in &calls {
            let mut full = vec!["TB.PEEK".to_string()];
            full.extend(args.iter().cloned());
            let r = c.cmd(&full);
            assert!(matches!(r, Reply::Array(_)), "{args:?}: {r:?}");
        }
    });
    assert_eq!(events, Vec::<String>::new());
    assert_eq!(fingerprint(&mut c, &keys), before);
    assert_eq!(
        c.peek("big", "10", "1", Some(T0)),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(hget(&mut c, "big", "tokens").as_deref(), Some("100"));
    for args in &calls {
        let mut full = vec!["TB.PEEK".to_string()];
        full.extend(args.iter().cloned());
        assert!(
            watch_survives(&s, &["k", "big", "missing"], &full),
            "{args:?}"
        );
    }
    assert_eq!(fingerprint(&mut c, &keys), before);
}

#[test]
fn client_side_caching_is_not_invalidated_by_a_peek() {
    let s = Server::start();
    let mut cache = s.conn();
    let mut c = s.conn();
    c.take("k", "2", "1", "2", Some(T0));
    cache.q("HELLO 3");
    assert_eq!(cache.q("CLIENT TRACKING ON"), Reply::Simple("OK".into()));
    cache.q("HGETALL k");
    c.peek("k", "2", "1", Some(T0));
    c.peek("k", "2", "1", None);
    assert_eq!(cache.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "3", Some(T0));
    c.q("SET str v");
    c.q("HSET bad tokens x last_refill_time 1");
    c.q("HSET deep tokens -9007199254740994 last_refill_time 1");
    c.q("HSET late tokens 1 last_refill_time 253402300800");
    let keys = ["k", "str", "bad", "deep", "late", "new"];
    let cases: &[(&[&str], &str)] = &[
        (&["k", "10"], ARITY),
        (&["k"], ARITY),
        (&["k", "10", "1", T0, "extra"], ARITY),
        (&["k", "x", "1"], "ERR capacity is not a valid number"),
        (&["k", "", "1"], "ERR capacity is not a valid number"),
        (
            &["k", "0", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["k", "9007199254740994", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (&["k", "10", "nan"], "ERR rate is not a valid number"),
        (
            &["k", "10", "1e-10"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (&["k", "10", "1", "soon"], "ERR now is not a valid number"),
        (&["k", "10", "1", " 1"], "ERR now is not a valid number"),
        (
            &["k", "10", "1", "-0.5"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (
            &["k", "10", "1", "253402300800"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (&["str", "10", "1"], WRONGTYPE),
        (&["str", "10", "1", T0], WRONGTYPE),
        (&["bad", "10", "1", T0], CORRUPT_TOKENS),
        (&["deep", "10", "1", T0], CORRUPT_TOKENS),
        (&["late", "10", "1", T0], CORRUPT_TIME),
    ];
    assert_errors_change_nothing(&mut c, &["TB.PEEK"], &keys, cases);
}

#[test]
fn peek_replicates_nothing_and_a_replica_with_the_module_serves_it() {
    let master = start_master();
    let replica = start_replica(&master, true);
    let mut c = master.conn();
    c.take("k", "10", "2", "7", Some(T0));
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = repl_offset(&mut c);
    for line in [
        format!("TB.PEEK k 10 2 {T0}"),
        format!("TB.PEEK k 10 1e-9 {T0}"),
        "TB.PEEK k 10 2".to_string(),
        "TB.PEEK missing 10 2".to_string(),
        "TB.PEEK k x 2".to_string(),
    ] {
        c.q(&line);
        assert_eq!(repl_offset(&mut c), before, "{line}");
    }
    let mut r = replica.conn();
    let want = take(true, 3.0, 0.0, 3.5);
    assert_eq!(c.peek("k", "10", "2", Some(T0)), want);
    assert_eq!(r.peek("k", "10", "2", Some(T0)), want);
    assert_eq!(
        r.q(&format!("TB.TAKE k 10 2 1 {T0}")),
        Reply::Error("READONLY You can't write against a read only replica.".into())
    );
}

#[test]
fn a_cluster_replica_serves_peek_after_readonly() {
    let (master, master_bus) = start_cluster_node();
    let (replica, _) = start_cluster_node();
    let mut m = master.conn();
    let mut r = replica.conn();
    assert_eq!(
        m.q("CLUSTER ADDSLOTSRANGE 0 16383"),
        Reply::Simple("OK".into())
    );
    let master_id = m.q("CLUSTER MYID").text();
    let meet = format!("CLUSTER MEET 127.0.0.1 {} {master_bus}", master.port);
    assert_eq!(r.q(&meet), Reply::Simple("OK".into()));
    let replicate = format!("CLUSTER REPLICATE {master_id}");
    wait_for(Duration::from_secs(20), "CLUSTER REPLICATE", || {
        r.q(&replicate) == Reply::Simple("OK".into())
    });
    wait_for(Duration::from_secs(30), "the replica to sync", || {
        let link = common::info_field(&mut r, "replication", "master_link_status");
        link.as_deref() == Some("up") && r.q("CLUSTER INFO").text().contains("cluster_state:ok")
    });
    wait_for(
        Duration::from_secs(30),
        "the master's cluster_state:ok",
        || m.q("CLUSTER INFO").text().contains("cluster_state:ok"),
    );
    m.take("{u}k", "10", "2", "7", Some(T0));
    assert_eq!(m.q("WAIT 1 10000").int(), 1);
    let peek = format!("TB.PEEK {{u}}k 10 2 {T0}");
    let r1 = r.q(&peek);
    assert!(r1.error().starts_with("MOVED "), "{r1:?}");
    assert_eq!(r.q("READONLY"), Reply::Simple("OK".into()));
    assert_eq!(Take::from_reply(&r.q(&peek)), take(true, 3.0, 0.0, 3.5));
    // A write is still sent to the master.
    let w = r.q(&format!("TB.TAKE {{u}}k 10 2 1 {T0}"));
    assert!(w.error().starts_with("MOVED "), "{w:?}");
}

#[test]
fn peek_works_at_the_memory_limit() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "4", Some(T0));
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    assert_eq!(c.peek("k", "10", "1", Some(T0)), take(true, 6.0, 0.0, 4.0));
    let r = c.q(&format!("TB.TAKE k 10 1 1 {T0}"));
    assert!(r.error().starts_with("OOM "), "{r:?}");
    c.q("CONFIG SET maxmemory 0");
}

#[test]
fn info_counts_peeks_as_their_replies_say() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(tb_counters(&mut c, "peek"), [0, 0, 0, 0]);
    c.take("k", "1", "1", "1", Some(T0));
    c.peek("k", "1", "1", Some(T0)); // denied
    c.peek("k", "1", "1", Some(&at(1.0))); // allowed
    c.peek("missing", "1", "1", Some(T0)); // allowed
    c.peek("missing", "0.5", "1", Some(T0)); // never: denied
    c.q("TB.PEEK k x 1"); // error
    c.q("SET str v");
    c.q("TB.PEEK str 1 1"); // error
    assert_eq!(tb_counters(&mut c, "peek"), [6, 2, 2, 2]);
    assert_eq!(tb_counters(&mut c, "take"), [1, 1, 0, 0]);
}

#[test]
fn command_metadata_declares_a_readonly_fast_command() {
    let s = Server::start();
    let mut c = s.conn();
    let (arity, flags, specs) = command_info(&mut c, "tb.peek");
    // -3: TB.PEEK key LEASES / key HOLDS; the bucket form's wrong arity is the module's.
    assert_eq!(arity, -3);
    assert_eq!(
        c.q("TB.PEEK k 10").error(),
        "ERR wrong number of arguments for 'tb.peek' command"
    );
    for f in ["readonly", "fast"] {
        assert!(flags.contains(&f.to_string()), "{flags:?}");
    }
    for f in ["write", "denyoom"] {
        assert!(!flags.contains(&f.to_string()), "{flags:?}");
    }
    assert!(specs.contains("RO") && !specs.contains("RW"), "{specs}");
    assert_eq!(
        c.q("COMMAND GETKEYS tb.peek user:42 10 1"),
        Reply::Array(vec![Reply::Bulk(b"user:42".to_vec())])
    );
    assert_documented(
        &mut c,
        "tb.peek",
        &["key", "capacity", "rate", "now", "optional"],
    );
}

#[test]
fn a_user_with_read_only_key_access_may_peek_but_not_take() {
    let s = Server::start();
    let mut admin = s.conn();
    admin.take("rl:a", "10", "1", "4", Some(T0));
    let r = admin.q("ACL SETUSER reader on >pw %R~rl:* resetchannels -@all +tb.peek +tb.take");
    assert_eq!(r, Reply::Simple("OK".into()));
    let mut c = s.conn();
    assert_eq!(c.q("AUTH reader pw"), Reply::Simple("OK".into()));
    assert_eq!(
        c.peek("rl:a", "10", "1", Some(T0)),
        take(true, 6.0, 0.0, 4.0)
    );
    let r = c.q(&format!("TB.TAKE rl:a 10 1 1 {T0}"));
    assert!(r.error().starts_with("NOPERM"), "{r:?}");
    let r = c.q(&format!("TB.PEEK other 10 1 {T0}"));
    assert!(r.error().starts_with("NOPERM"), "{r:?}");
}
