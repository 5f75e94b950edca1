//! TB.REFUND's contract (give tokens back after the refill, never above capacity; a
//! refund that changes nothing writes nothing), checked against a real redis-server with
//! the module loaded.

mod common;

use common::{
    CORRUPT_TIME, CORRUPT_TOKENS, Reply, Rng, Server, T0, T0F, WRONGTYPE, assert_documented,
    assert_errors_change_nothing, assert_replica_matches, at, command_info, fingerprint, hget,
    notifications_during, repl_offset, start_master, start_replica, take, tb_counters,
    watch_survives,
};

const ARITY: &str = "ERR wrong number of arguments for 'tb.refund' command";

/// Asserts that `f` changes nothing observable on `keys`: bytes, expiry, keyspace events,
/// transactions watching them.
fn assert_writes_nothing(s: &Server, keys: &[&str], args: &[&str]) {
    let mut c = s.conn();
    let before = fingerprint(&mut c, keys);
    let events = notifications_during(s, |c| {
        let r = c.cmd(args);
        assert!(matches!(r, Reply::Array(_)), "{args:?}: {r:?}");
    });
    assert_eq!(events, Vec::<String>::new(), "{args:?}");
    assert_eq!(fingerprint(&mut c, keys), before, "{args:?}");
    assert!(
        watch_survives(s, keys, args),
        "{args:?} signalled a watcher"
    );
    assert_eq!(fingerprint(&mut c, keys), before, "{args:?}");
}

#[test]
fn refund_on_a_missing_key_is_already_full_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        c.refund("k", "10", "2", "3", Some(T0)),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(
        c.refund("k", "2.5", "2", "0", None),
        take(true, 2.5, 0.0, 0.0)
    );
    assert_eq!(c.q("EXISTS k").int(), 0);
    assert_writes_nothing(&s, &["k"], &["TB.REFUND", "k", "10", "2", "3", T0]);
    assert_writes_nothing(&s, &["k"], &["TB.REFUND", "k", "10", "2", "3"]);
    assert_eq!(c.q("DBSIZE").int(), 0);
}

#[test]
fn refund_after_a_take_gives_the_tokens_back_exactly() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(c.take("k", "10", "1", "3", Some(T0)).remaining, 7.0);
    assert_eq!(
        c.refund("k", "10", "1", "3", Some(T0)),
        take(true, 10.0, 0.0, 0.0)
    );
    assert!(c.take("k", "10", "1", "10", Some(T0)).allowed, "full again");
    // Over many states: take n then refund n at the same instant is back where it was.
    let mut rng = Rng(0x0002_EF0D);
    let mut now = T0F;
    for step in 0..400 {
        let key = format!("r{}", rng.below(3));
        let capacity = rng.pick(&["4", "10", "2.5"]);
        let rate = rng.pick(&["0.5", "1", "2", "0.25"]);
        let n = rng.pick(&["1", "2", "0.5", "3"]);
        now += rng.below(8) as f64 * 0.125;
        let now_text = format!("{now}");
        let before = c.take(&key, capacity, rate, "0", Some(&now_text));
        let t = c.take(&key, capacity, rate, n, Some(&now_text));
        if !t.allowed {
            continue;
        }
        let r = c.refund(&key, capacity, rate, n, Some(&now_text));
        let ctx = format!("step {step}: {key} {capacity} {rate} {n} at {now_text}");
        assert_eq!(
            r,
            take(true, before.remaining, 0.0, before.reset_after),
            "{ctx}"
        );
        assert_eq!(
            c.take(&key, capacity, rate, "0", Some(&now_text)),
            before,
            "{ctx}"
        );
    }
}

#[test]
fn refund_adds_after_the_refill_and_never_above_capacity() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "5", Some(T0));
    // One second later: 5 + 1 refilled + 2 given back.
    assert_eq!(
        c.refund("k", "10", "1", "2", Some(&at(1.0))),
        take(true, 8.0, 0.0, 2.0)
    );
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("8"));
    assert_eq!(hget(&mut c, "k", "last_refill_time").unwrap(), at(1.0));
    assert_eq!(
        c.refund("k", "10", "1", "0.5", Some(&at(1.0))),
        take(true, 8.5, 0.0, 1.5)
    );
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("8.5"));
    assert_eq!(
        c.refund("k", "10", "1", "100", Some(&at(1.0))),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(
        c.take("k", "10", "1", "0", Some(&at(1.0))),
        take(true, 10.0, 0.0, 0.0)
    );
    // A lowered capacity caps the refund too.
    c.take("low", "10", "1", "2", Some(T0));
    assert_eq!(
        c.refund("low", "5", "1", "1", Some(T0)),
        take(true, 5.0, 0.0, 0.0)
    );
    assert_eq!(
        c.refund("big", "9007199254740992", "1", "9007199254740992", Some(T0)),
        take(true, 9007199254740992.0, 0.0, 0.0)
    );
}

#[test]
fn refund_of_a_full_bucket_or_of_zero_tokens_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    // Full as stored.
    c.q(&format!("HSET full tokens 10 last_refill_time {T0}"));
    c.q("PEXPIRE full 100000");
    // Full by refill since it was stored.
    c.take("refilled", "10", "1", "4", Some(T0));
    // Half empty, and in debt, for n = 0.
    c.take("half", "10", "1", "5", Some(T0));
    for _ in 0..4 {
        c.reserve("debt", "2", "1", "1", "100", Some(T0));
    }
    // Each first: the very first refund must already write nothing.
    let ten = at(10.0);
    let one = at(1.0);
    for args in [
        ["TB.REFUND", "full", "10", "1", "3", T0],
        ["TB.REFUND", "full", "10", "1", "3", ten.as_str()],
        ["TB.REFUND", "refilled", "10", "1", "1", ten.as_str()],
        ["TB.REFUND", "half", "10", "1", "0", one.as_str()],
        ["TB.REFUND", "debt", "2", "1", "0", T0],
    ] {
        assert_writes_nothing(&s, &[args[1]], &args);
    }
    assert_eq!(
        c.refund("full", "10", "1", "3", Some(T0)),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(
        c.refund("refilled", "10", "1", "1", Some(&at(10.0))),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(
        c.refund("half", "10", "1", "0", Some(&at(1.0))),
        take(true, 6.0, 0.0, 4.0)
    );
    assert_eq!(
        c.refund("debt", "2", "1", "0", Some(T0)),
        take(true, -2.0, 0.0, 4.0)
    );
}

#[test]
fn refund_of_a_bucket_above_a_lowered_capacity_is_full_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.q(&format!("HSET above tokens 100 last_refill_time {T0}"));
    for n in ["1", "0"] {
        assert_writes_nothing(&s, &["above"], &["TB.REFUND", "above", "10", "1", n, T0]);
    }
    assert_eq!(
        c.refund("above", "10", "1", "1", Some(T0)),
        take(true, 10.0, 0.0, 0.0)
    );
    assert_eq!(hget(&mut c, "above", "tokens").as_deref(), Some("100"));
}

#[test]
fn refund_after_a_reservation_reduces_the_debt() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..5 {
        assert!(c.reserve("k", "2", "1", "1", "100", Some(T0)).allowed);
    }
    assert_eq!(c.peek("k", "2", "1", Some(T0)).remaining, -3.0);
    assert_eq!(
        c.refund("k", "2", "1", "1", Some(T0)),
        take(true, -2.0, 0.0, 4.0)
    );
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("-2"));
    // The next reserver now waits one second less.
    assert_eq!(
        c.reserve("k", "2", "1", "1", "100", Some(T0)),
        take(true, -3.0, 3.0, 5.0)
    );
    assert_eq!(
        c.refund("k", "2", "1", "10", Some(&at(0.5))),
        take(true, 2.0, 0.0, 0.0)
    );
    assert!(c.take("k", "2", "1", "2", Some(&at(0.5))).allowed);
}

#[test]
fn an_earlier_now_never_moves_the_stored_time_backwards() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "2", Some(&at(5.0)));
    // A caller 5 s behind: no refill, and the bucket's time stays where it was.
    let r = c.refund("k", "10", "1", "1", Some(T0));
    assert_eq!(r, take(true, 9.0, 0.0, 6.0));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("9"));
    assert_eq!(hget(&mut c, "k", "last_refill_time").unwrap(), at(5.0));
}

#[test]
fn refund_on_the_server_clock_gives_back_after_the_refill() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "0.001", "5", None);
    let r = c.refund("k", "10", "0.001", "2", None);
    assert!(r.allowed && r.retry_after == 0.0, "{r:?}");
    assert!(r.remaining >= 7.0 && r.remaining < 7.01, "{r:?}");
    assert!(
        r.reset_after > 2990.0 && r.reset_after <= 3000.0 + 1e-5,
        "{r:?}"
    );
    let last = hget(&mut c, "k", "last_refill_time").unwrap();
    let (_, micros) = last.split_once('.').unwrap();
    assert_eq!(micros.len(), 6, "{last}");
}

#[test]
fn a_refund_that_writes_keeps_a_ttl_covering_the_time_to_full() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "0.01", "9", Some(T0));
    let before = c.q("PTTL k").int();
    assert!(before >= 899_000, "{before}");
    let r = c.refund("k", "10", "0.01", "4", Some(T0));
    assert_eq!(r, take(true, 5.0, 0.0, 500.0));
    let pttl = c.q("PTTL k").int();
    assert!(pttl >= 499_000, "{pttl}");
    // A bucket written by someone else without a TTL keeps none or gets one long enough.
    c.q(&format!("HSET plain tokens 0 last_refill_time {T0}"));
    let r = c.refund("plain", "10", "1", "1", Some(T0));
    assert_eq!(r, take(true, 1.0, 0.0, 9.0));
    let pttl = c.q("PTTL plain").int();
    assert!(pttl == -1 || pttl >= 8_900, "{pttl}");
}

#[test]
fn a_refund_that_writes_signals_watchers_and_emits_hset() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "5", Some(T0));
    assert!(!watch_survives(
        &s,
        &["k"],
        &["TB.REFUND", "k", "10", "1", "1", T0]
    ));
    let events = notifications_during(&s, |c| {
        assert_eq!(c.refund("k", "10", "1", "1", Some(T0)).remaining, 7.0);
    });
    assert_eq!(
        events[..2],
        ["__keyspace@0__:k hset", "__keyevent@0__:hset k"]
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "3", Some(T0));
    c.q("SET str v");
    c.q("HSET bad tokens 1e999 last_refill_time 1");
    c.q("HSET deep tokens -1e16 last_refill_time 1");
    c.q("HSET notime tokens 1");
    let keys = ["k", "str", "bad", "deep", "notime", "new"];
    let cases: &[(&[&str], &str)] = &[
        (&["k", "10", "1"], ARITY),
        (&["k"], ARITY),
        (&["k", "10", "1", "1", T0, "extra"], ARITY),
        (
            &["k", "ten", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "-1", "1", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (&["k", "10", "+inf", "1"], "ERR rate is not a valid number"),
        (
            &["k", "10", "1e20", "1"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (&["k", "10", "1", "0x1"], "ERR n is not a valid number"),
        (
            &["k", "10", "1", "-1"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "1e300"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "1", "1 "],
            "ERR now is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "1e12"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (&["str", "10", "1", "1"], WRONGTYPE),
        (&["str", "10", "1", "0", T0], WRONGTYPE),
        (&["bad", "10", "1", "1", T0], CORRUPT_TOKENS),
        (&["bad", "10", "1", "0", T0], CORRUPT_TOKENS),
        (&["deep", "10", "1", "1", T0], CORRUPT_TOKENS),
        (&["notime", "10", "1", "1", T0], CORRUPT_TIME),
    ];
    assert_errors_change_nothing(&mut c, &["TB.REFUND"], &keys, cases);
}

#[test]
fn refund_replicates_its_effects_and_nothing_when_nothing_changes() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    c.take("k", "10", "1", "5", Some(T0));
    c.q(&format!("HSET full tokens 10 last_refill_time {T0}"));
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = repl_offset(&mut c);
    for line in [
        format!("TB.REFUND missing 10 1 3 {T0}"),
        "TB.REFUND missing 10 1 3".to_string(),
        format!("TB.REFUND full 10 1 3 {T0}"),
        format!("TB.REFUND k 10 1 0 {T0}"),
        format!("TB.REFUND k 10 x 1 {T0}"),
        format!("TB.REFUND k 10 1 1 {T0} extra"),
    ] {
        c.q(&line);
        assert_eq!(repl_offset(&mut c), before, "{line}");
    }
    assert_eq!(c.refund("k", "10", "1", "2", Some(T0)).remaining, 7.0);
    assert!(repl_offset(&mut c) > before);
    c.take("srv", "10", "0.01", "5", None);
    c.refund("srv", "10", "0.01", "2", None);
    let want = assert_replica_matches(&mut c, &replica);
    assert_eq!(want.len(), 3);
}

#[test]
fn at_the_memory_limit_refund_gets_the_standard_oom_error() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "5", Some(T0));
    let before = fingerprint(&mut c, &["k"]);
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    let r = c.q(&format!("TB.REFUND k 10 1 1 {T0}"));
    assert_eq!(
        r,
        Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into())
    );
    c.q("CONFIG SET maxmemory 0");
    assert_eq!(fingerprint(&mut c, &["k"]), before);
}

#[test]
fn info_counts_refunds_as_allowed_and_errors() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(tb_counters(&mut c, "refund"), [0, 0, 0, 0]);
    c.take("k", "10", "1", "5", Some(T0));
    c.refund("k", "10", "1", "1", Some(T0)); // gives back
    c.refund("k", "10", "1", "0", Some(T0)); // changes nothing
    c.refund("missing", "10", "1", "1", Some(T0)); // already full
    c.q("TB.REFUND k 10 1 x"); // error
    c.q("SET str v");
    c.q("TB.REFUND str 10 1 1"); // error
    assert_eq!(tb_counters(&mut c, "refund"), [5, 3, 0, 2]);
    assert_eq!(tb_counters(&mut c, "take"), [1, 1, 0, 0]);
}

#[test]
fn command_metadata_declares_the_key_flags_and_docs() {
    let s = Server::start();
    let mut c = s.conn();
    let (arity, flags, specs) = command_info(&mut c, "tb.refund");
    assert_eq!(arity, -5);
    for f in ["write", "denyoom", "fast"] {
        assert!(flags.contains(&f.to_string()), "{flags:?}");
    }
    assert!(specs.contains("RW"), "{specs}");
    assert_eq!(
        c.q("COMMAND GETKEYS tb.refund user:42 10 1 1"),
        Reply::Array(vec![Reply::Bulk(b"user:42".to_vec())])
    );
    assert_documented(
        &mut c,
        "tb.refund",
        &["key", "capacity", "rate", "n", "now", "optional"],
    );
}
