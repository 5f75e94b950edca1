//! TB.TAKE's contract, checked against a real redis-server with the module loaded.

mod common;

use common::{Conn, LUA_SEED, Reply, Server, T0, T0F, Take, at, bulk_reply, dump, hget, hgetall};

#[test]
fn missing_key_is_a_full_bucket_and_a_take_deducts() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.take("rl:a", "10", "2", "1", Some(T0));
    assert_eq!(
        t,
        Take {
            allowed: true,
            remaining: 9.0,
            retry_after: 0.0,
            reset_after: 0.5
        }
    );
    assert_eq!(hget(&mut c, "rl:a", "tokens").as_deref(), Some("9"));
    assert_eq!(
        hget(&mut c, "rl:a", "last_refill_time").as_deref(),
        Some(T0)
    );
}

#[test]
fn refill_follows_the_formula_and_is_capped() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..10 {
        assert!(c.take("k", "10", "2", "1", Some(T0)).allowed);
    }
    let t = c.take("k", "10", "2", "1", Some(T0));
    assert!(!t.allowed);
    assert_eq!(t.remaining, 0.0);
    // 1.25 s later: 2.5 tokens; take 1 leaves 1.5.
    let t = c.take("k", "10", "2", "1", Some(&at(1.25)));
    assert!(t.allowed);
    assert!((t.remaining - 1.5).abs() < 1e-6, "{t:?}");
    // An hour later the bucket is full, not 7201 tokens.
    let t = c.take("k", "10", "2", "0", Some(&at(3600.0)));
    assert_eq!(t.remaining, 10.0);
}

#[test]
fn fractional_rate_and_remaining_keep_full_precision() {
    let s = Server::start();
    let mut c = s.conn();
    let rate = format!("{}", 100.0f64 / 60.0);
    for _ in 0..100 {
        c.take("k", "100", &rate, "1", Some(T0));
    }
    let t = c.take("k", "100", &rate, "1", Some(&at(0.9)));
    // 0.9 s x 1.666.. = 1.5 tokens; remaining 0.5 is not truncated to an integer.
    assert!(t.allowed);
    assert!((t.remaining - 0.5).abs() < 1e-6, "{t:?}");
    let stored: f64 = hget(&mut c, "k", "tokens").unwrap().parse().unwrap();
    assert_eq!(stored, t.remaining);
}

#[test]
fn denied_take_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "3", "1", "3", Some(T0));
    let before = dump(&mut c, b"k");
    let ttl_before = c.q("PEXPIRETIME k").int();
    let t = c.take("k", "3", "1", "2", Some(&at(0.5)));
    assert!(!t.allowed);
    assert!((t.retry_after - 1.5).abs() < 1e-6, "{t:?}");
    assert_eq!(dump(&mut c, b"k"), before);
    assert_eq!(c.q("PEXPIRETIME k").int(), ttl_before);
}

#[test]
fn watch_sees_only_takes_that_write() {
    let s = Server::start();
    let mut watcher = s.conn();
    let mut c = s.conn();
    c.take("k", "2", "1", "2", Some(T0)); // now empty
    let exec_after = |watcher: &mut Conn, c: &mut Conn, line: &str| {
        watcher.q("WATCH k");
        watcher.q("MULTI");
        watcher.q("PING");
        c.q(line);
        watcher.q("EXEC")
    };
    // A denied take, a query, a take that can never succeed, an error: nothing written,
    // so a transaction watching the bucket still runs.
    for line in [
        format!("TB.TAKE k 2 1 1 {T0}"),
        format!("TB.TAKE k 2 1 0 {T0}"),
        format!("TB.TAKE k 2 1 3 {T0}"),
        "TB.TAKE k 2 x 1".to_string(),
    ] {
        let r = exec_after(&mut watcher, &mut c, &line);
        assert_eq!(
            r,
            Reply::Array(vec![Reply::Simple("PONG".into())]),
            "{line}"
        );
    }
    // An allowed take is a write: the transaction is aborted.
    let r = exec_after(
        &mut watcher,
        &mut c,
        &format!("TB.TAKE k 2 1 1 {}", at(1.0)),
    );
    assert_eq!(r, Reply::Nil);
}

#[test]
fn client_side_caching_is_invalidated_only_by_takes_that_write() {
    let s = Server::start();
    let mut cache = s.conn();
    let mut c = s.conn();
    c.take("k", "2", "1", "2", Some(T0)); // now empty
    cache.q("HELLO 3");
    assert_eq!(cache.q("CLIENT TRACKING ON"), Reply::Simple("OK".into()));
    cache.q("HGETALL k"); // the client now caches k
    c.q(&format!("TB.TAKE k 2 1 1 {T0}")); // denied
    c.q(&format!("TB.TAKE k 2 1 0 {T0}")); // query
    // No invalidation push arrived before the reply to PING.
    assert_eq!(cache.q("PING"), Reply::Simple("PONG".into()));
    c.q(&format!("TB.TAKE k 2 1 1 {}", at(1.0))); // allowed: a write
    let invalidate = Reply::Array(vec![
        Reply::Bulk(b"invalidate".to_vec()),
        Reply::Array(vec![Reply::Bulk(b"k".to_vec())]),
    ]);
    assert_eq!(cache.q("PING"), invalidate);
    assert_eq!(cache.read(), Reply::Simple("PONG".into()));
}

#[test]
fn n_zero_reports_the_state_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.take("new", "5", "1", "0", Some(T0));
    assert_eq!(
        t,
        Take {
            allowed: true,
            remaining: 5.0,
            retry_after: 0.0,
            reset_after: 0.0
        }
    );
    assert_eq!(
        c.q("EXISTS new").int(),
        0,
        "a query must not create the bucket"
    );
    c.take("k", "5", "1", "4", Some(T0));
    let before = dump(&mut c, b"k");
    let t = c.take("k", "5", "1", "0", Some(&at(2.0)));
    assert_eq!(t.remaining, 3.0);
    assert_eq!(t.reset_after, 2.0);
    assert_eq!(dump(&mut c, b"k"), before);
}

#[test]
fn n_above_capacity_is_never_allowed() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.take("k", "5", "1", "6", Some(T0));
    assert_eq!(
        t,
        Take {
            allowed: false,
            remaining: 5.0,
            retry_after: -1.0,
            reset_after: 0.0
        }
    );
    assert_eq!(c.q("EXISTS k").int(), 0);
    let t = c.take("k", "5", "1", "5.000001", Some(&at(1e6)));
    assert_eq!(t.retry_after, -1.0);
}

#[test]
fn an_earlier_now_never_moves_the_stored_time_backwards() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "10", Some(T0));
    // A server whose clock is 5 s behind gets no refill, and does not rewind the bucket.
    let t = c.take("k", "10", "1", "1", Some(&at(-5.0)));
    assert!(!t.allowed);
    assert!((t.retry_after - 6.0).abs() < 1e-6, "{t:?}");
    assert_eq!(hget(&mut c, "k", "last_refill_time").as_deref(), Some(T0));
    // The seed script's bug: with the time rewound, this call would see 5 s of refill.
    let t = c.take("k", "10", "1", "1", Some(T0));
    assert!(!t.allowed, "{t:?}");
    // A later call that is allowed while another clock is behind keeps the later time.
    c.take("k", "10", "1", "1", Some(&at(3.0)));
    c.take("k", "10", "1", "1", Some(&at(1.0)));
    assert_eq!(hget(&mut c, "k", "last_refill_time").unwrap(), at(3.0));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("1"));
}

#[test]
fn stored_tokens_above_a_lowered_capacity_are_clamped() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "100", "1", "1", Some(T0));
    let t = c.take("k", "10", "1", "1", Some(T0));
    assert!(t.allowed);
    assert_eq!(t.remaining, 9.0);
}

#[test]
fn other_fields_in_the_hash_are_left_alone() {
    let s = Server::start();
    let mut c = s.conn();
    // Fields added to a bucket after it was created stay as they are.
    c.take("k", "10", "1", "1", Some(T0));
    c.q("HSET k owner alice plan gold");
    c.take("k", "10", "1", "1", Some(T0));
    let all = hgetall(&mut c, b"k");
    let text: Vec<(String, String)> = all
        .into_iter()
        .map(|(f, v)| (String::from_utf8(f).unwrap(), String::from_utf8(v).unwrap()))
        .collect();
    assert_eq!(
        text,
        vec![
            ("last_refill_time".into(), T0.into()),
            ("owner".into(), "alice".into()),
            ("plan".into(), "gold".into()),
            ("tokens".into(), "8".into()),
        ]
    );
}

#[test]
fn a_client_that_waits_retry_after_is_allowed() {
    let s = Server::start();
    let mut c = s.conn();
    let rates = ["1.6666666666666667", "0.3", "7", "1000", "0.001"];
    for (i, rate) in rates.iter().enumerate() {
        let key = format!("k{i}");
        let mut now = T0F;
        let mut waits = 0;
        for _ in 0..300 {
            let t = c.take(&key, "3", rate, "1", Some(&format!("{now}")));
            if !t.allowed {
                assert!(t.retry_after > 0.0);
                now += t.retry_after;
                let retry = c.take(&key, "3", rate, "1", Some(&format!("{now}")));
                assert!(
                    retry.allowed,
                    "rate {rate}: waited {} and was denied: {retry:?}",
                    t.retry_after
                );
                waits += 1;
            }
        }
        assert!(waits > 100, "rate {rate}: only {waits} waits");
    }
}

#[test]
fn server_clock_retry_after_is_honoured() {
    let s = Server::start();
    let mut c = s.conn();
    // 20 tokens/s: empty the bucket, then wait what we are told, on the server's clock.
    for _ in 0..3 {
        c.take("k", "2", "20", "1", None);
    }
    for _ in 0..5 {
        let t = c.take("k", "2", "20", "1", None);
        if t.allowed {
            continue;
        }
        assert!(t.retry_after > 0.0 && t.retry_after <= 0.05, "{t:?}");
        std::thread::sleep(std::time::Duration::from_secs_f64(t.retry_after));
        assert!(c.take("k", "2", "20", "1", None).allowed);
    }
    // The server clock is written fixed-width with microseconds.
    let last = hget(&mut c, "k", "last_refill_time").unwrap();
    let (secs, micros) = last.split_once('.').unwrap();
    assert_eq!(micros.len(), 6, "{last}");
    let secs: u64 = secs.parse().unwrap();
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.abs_diff(wall) <= 2, "{last} vs {wall}");
}

#[test]
fn ttl_covers_time_to_full_on_the_server_clock_and_not_much_more() {
    let s = Server::start_unbounded();
    let mut c = s.conn();
    // Client times far in the past and future: the TTL is a duration on the server clock.
    for (key, now) in [
        ("past", "1000"),
        ("present", T0),
        ("future", "200000000000"),
    ] {
        let t = c.take(key, "100", "10", "30", Some(now));
        assert_eq!(t.reset_after, 3.0);
        let pttl = c.cmd(&["PTTL", key]).int();
        assert!(
            (2900..=3000 + 1000 + 750 + 100).contains(&pttl),
            "{key}: pttl {pttl}"
        );
    }
    // Without now, too.
    c.take("srv", "100", "10", "30", None);
    let pttl = c.q("PTTL srv").int();
    assert!((2900..=4900).contains(&pttl), "{pttl}");
    // A bucket whose time-to-full grows gets its TTL extended.
    for _ in 0..6 {
        c.take("srv", "100", "10", "10", None);
    }
    let pttl = c.q("PTTL srv").int();
    assert!((8800..=12_000).contains(&pttl), "{pttl}");
}

#[test]
fn an_expired_bucket_comes_back_full() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.take("k", "2", "10", "2", None);
    assert!(t.allowed && t.remaining == 0.0);
    assert!(!c.take("k", "2", "10", "1", None).allowed);
    // Full again after 0.2 s; the key is gone within the TTL's slack (1 s + 25%).
    let start = std::time::Instant::now();
    while c.q("EXISTS k").int() == 1 {
        assert!(start.elapsed().as_secs_f64() < 3.0, "key never expired");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let t = c.take("k", "2", "10", "2", None);
    assert!(t.allowed);
}

#[test]
fn reply_is_bulk_text_under_resp2_and_doubles_under_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    // Shortest round-trip text: 1/3 reads as 0.3333333333333333, not %.17g noise.
    let r = c.q("TB.TAKE k 10 3 1 1000");
    assert_eq!(r, bulk_reply(1, ["9", "0", "0.3333333333333333"]));
    c.q("DEL k");
    let r = c.q(&format!("TB.TAKE k 10 3 1 {T0}"));
    let reset = r.array()[3].num();
    assert!((1.0 / 3.0..1.0 / 3.0 + 1e-6).contains(&reset), "{r:?}");
    let r = c.q("HELLO 3");
    assert!(matches!(r, Reply::Array(_)), "{r:?}");
    let r = c.q(&format!("TB.TAKE k 10 3 1 {T0}"));
    let a = r.array();
    assert_eq!(
        a[..3],
        [Reply::Int(1), Reply::Double(8.0), Reply::Double(0.0)]
    );
    match a[3] {
        Reply::Double(d) => assert!((2.0 / 3.0..2.0 / 3.0 + 1e-6).contains(&d), "{d}"),
        ref other => panic!("{other:?}"),
    }
    let r = c.q(&format!("TB.TAKE k 10 3 11 {T0}"));
    assert_eq!(r.array()[2], Reply::Double(-1.0));
}

#[test]
fn a_lua_seed_style_caller_keeps_working() {
    // The seed script reads `{allowed, tokens}` from the first two elements.
    let s = Server::start();
    let mut c = s.conn();
    let r = c.q(&format!("TB.TAKE rate_limit:ip:1.2.3.4 10 2 1 {T0}"));
    let a = r.array();
    assert_eq!(a[0], Reply::Int(1));
    assert_eq!(a[1].num(), 9.0);
}

#[test]
fn buckets_are_shared_with_the_lua_script_both_ways() {
    // The seed's Lua token bucket (common::LUA_SEED), run on buckets the module wrote and
    // the other way round.
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "2", "4", Some(T0));
    let r = c.cmd(&["EVAL", LUA_SEED, "1", "k", "10", "2", "1", &at(1.0)]);
    assert_eq!(r.array()[1].text(), "7");
    let t = c.take("k", "10", "2", "1", Some(&at(1.5)));
    assert_eq!(t.remaining, 7.0);
    let r = c.cmd(&["EVAL", LUA_SEED, "1", "k", "10", "2", "7", &at(1.5)]);
    assert_eq!(r.array()[0], Reply::Int(1));
    let t = c.take("k", "10", "2", "1", Some(&at(1.6)));
    assert!(!t.allowed);
    assert!((t.remaining - 0.2).abs() < 1e-6, "{t:?}");
}

#[test]
fn integral_values_are_stored_as_integers() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "100", "1", "1", Some("1764456268"));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("99"));
    assert_eq!(
        hget(&mut c, "k", "last_refill_time").as_deref(),
        Some("1764456268")
    );
    assert_eq!(c.q("OBJECT ENCODING k").text(), "listpack");
}

#[test]
fn binary_keys_are_safe() {
    let s = Server::start();
    let mut c = s.conn();
    let key: &[u8] = b"rl:\x00\xff\r\n key";
    let r = c.cmd(&[b"TB.TAKE".as_slice(), key, b"5", b"1", b"2", T0.as_bytes()]);
    assert_eq!(Take::from_reply(&r).remaining, 3.0);
    let r = c.cmd(&[b"HGET".as_slice(), key, b"tokens"]);
    assert_eq!(r, Reply::Bulk(b"3".to_vec()));
    assert_eq!(c.q("DBSIZE").int(), 1);
}

#[test]
fn works_inside_multi_and_from_lua() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("MULTI");
    c.q(&format!("TB.TAKE k 2 1 1 {T0}"));
    c.q(&format!("TB.TAKE k 2 1 1 {T0}"));
    c.q(&format!("TB.TAKE k 2 1 1 {T0}"));
    let r = c.q("EXEC");
    let allowed: Vec<bool> = r
        .array()
        .iter()
        .map(|t| Take::from_reply(t).allowed)
        .collect();
    assert_eq!(allowed, vec![true, true, false]);
    let r = c.cmd(&[
        "EVAL",
        "return redis.call('TB.TAKE', KEYS[1], 5, 1, 1)",
        "1",
        "lua",
    ]);
    assert_eq!(r.array()[0], Reply::Int(1));
}

#[test]
fn command_metadata_declares_the_key_and_flags() {
    let s = Server::start();
    let mut c = s.conn();
    let r = c.q("COMMAND INFO tb.take");
    let info = r.array()[0].array().to_vec();
    assert_eq!(info[0].text(), "tb.take");
    assert_eq!(info[1], Reply::Int(-5));
    let flags: Vec<String> = info[2].array().iter().map(Reply::text).collect();
    for f in ["write", "denyoom", "fast"] {
        assert!(flags.contains(&f.to_string()), "{flags:?}");
    }
    assert_eq!((info[3].int(), info[4].int(), info[5].int()), (1, 1, 1));
    let specs = info[8].flat();
    assert!(specs.contains("RW") && specs.contains("index"), "{specs}");
    let keys = c.q("COMMAND GETKEYS tb.take user:42 10 1 1");
    assert_eq!(keys, Reply::Array(vec![Reply::Bulk(b"user:42".to_vec())]));
    let docs = c.q("COMMAND DOCS tb.take").flat();
    assert!(
        docs.contains("token bucket") && docs.contains("capacity") && docs.contains("optional"),
        "{docs}"
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "10", "1", "3", Some(T0));
    let before = dump(&mut c, b"k");
    let pexpire = c.q("PEXPIRETIME k").int();
    let cases: &[(&[&str], &str)] = &[
        (
            &["k", "10", "1"],
            "ERR wrong number of arguments for 'tb.take' command",
        ),
        (
            &["k", "10", "1", "1", T0, "extra"],
            "ERR wrong number of arguments for 'tb.take' command",
        ),
        (
            &["k"],
            "ERR wrong number of arguments for 'tb.take' command",
        ),
        (
            &["k", "abc", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (&["k", "", "1", "1"], "ERR capacity is not a valid number"),
        (
            &["k", " 10", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "10 ", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "0x10", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "nan", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "inf", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "1e999", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "0", "1", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["k", "-10", "1", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["k", "1e300", "1", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "0", "1"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (
            &["k", "10", "-1", "1"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (
            &["k", "10", "1e-300", "1"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (&["k", "10", "-inf", "1"], "ERR rate is not a valid number"),
        (&["k", "10", "NaN", "1"], "ERR rate is not a valid number"),
        (
            &["k", "10", "1", "-1"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "1e20"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (&["k", "10", "1", "one"], "ERR n is not a valid number"),
        (
            &["k", "10", "1", "1", "-5"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (
            &["k", "10", "1", "1", "1764456268123"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (
            &["k", "10", "1", "1", "now"],
            "ERR now is not a valid number",
        ),
        (&["k", "10", "1", "1", ""], "ERR now is not a valid number"),
        (
            &["k", "10", "1", "1", "+inf"],
            "ERR now is not a valid number",
        ),
    ];
    for (args, want) in cases {
        let mut full = vec!["TB.TAKE"];
        full.extend_from_slice(args);
        let r = c.cmd(&full);
        assert_eq!(r, Reply::Error(want.to_string()), "{args:?}");
        assert_eq!(dump(&mut c, b"k"), before, "{args:?} changed the bucket");
    }
    assert_eq!(c.q("PEXPIRETIME k").int(), pexpire);
    assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn other_types_get_wrongtype_and_are_untouched() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("SET str v");
    c.q("RPUSH list a");
    c.q("SADD set a");
    c.q("ZADD zset 1 a");
    c.q("XADD stream * f v");
    for key in ["str", "list", "set", "zset", "stream"] {
        let before = dump(&mut c, key.as_bytes());
        let r = c.cmd(&["TB.TAKE", key, "10", "1", "1"]);
        assert_eq!(
            r,
            Reply::Error(
                "WRONGTYPE Operation against a key holding the wrong kind of value".into()
            ),
            "{key}"
        );
        assert_eq!(dump(&mut c, key.as_bytes()), before);
    }
}

#[test]
fn a_corrupt_bucket_is_reported_not_reset() {
    let s = Server::start();
    let mut c = s.conn();
    let tokens_err = "ERR bucket state is corrupt: field 'tokens' is not a valid token count";
    let time_err =
        "ERR bucket state is corrupt: field 'last_refill_time' is not a valid time in seconds";
    let cases: &[(&[&str], &str)] = &[
        (&["tokens", "nan", "last_refill_time", "1"], tokens_err),
        (&["tokens", "inf", "last_refill_time", "1"], tokens_err),
        (&["tokens", "-inf", "last_refill_time", "1"], tokens_err),
        (&["tokens", "abc", "last_refill_time", "1"], tokens_err),
        (&["tokens", "", "last_refill_time", "1"], tokens_err),
        (&["tokens", "1e400", "last_refill_time", "1"], tokens_err),
        (&["tokens", "5", "last_refill_time", "nan"], time_err),
        (&["tokens", "5", "last_refill_time", "soon"], time_err),
        (&["tokens", "5", "last_refill_time", "-1"], time_err),
        (&["tokens", "5"], time_err),
        (&["last_refill_time", "5"], tokens_err),
    ];
    for (i, (fields, want)) in cases.iter().enumerate() {
        let key = format!("bad{i}");
        let mut hset = vec!["HSET", key.as_str()];
        hset.extend_from_slice(fields);
        c.cmd(&hset);
        let before = dump(&mut c, key.as_bytes());
        let r = c.cmd(&["TB.TAKE", &key, "10", "1", "1", T0]);
        assert_eq!(r, Reply::Error(want.to_string()), "{fields:?}");
        assert_eq!(dump(&mut c, key.as_bytes()), before);
    }
}

#[test]
fn the_server_survives_arbitrary_argument_bytes() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = common::Rng(0x9E37_79B9_7F4A_7C15);
    let mut next = || rng.next();
    let pieces: &[&[u8]] = &[
        b"1",
        b"0",
        b"-0",
        b"1e308",
        b"1e-308",
        b"4.9e-324",
        b"9007199254740993",
        b"nan",
        b"",
        b" ",
        b"\x00",
        b"\xff\xfe",
        b"1764456268.5",
        b"-1",
        b"1.",
        b".1",
        b"e",
        b"+",
    ];
    for _ in 0..3000 {
        let argc = (next() % 7) as usize;
        let mut args: Vec<Vec<u8>> = vec![b"TB.TAKE".to_vec(), b"fuzz".to_vec()];
        for _ in 0..argc {
            let arg = if next() % 3 == 0 {
                (0..next() % 12).map(|_| next() as u8).collect()
            } else {
                pieces[(next() % pieces.len() as u64) as usize].to_vec()
            };
            args.push(arg);
        }
        match c.cmd(&args) {
            Reply::Error(e) => assert!(e.starts_with("ERR ") || e.starts_with("WRONGTYPE "), "{e}"),
            r => {
                let t = Take::from_reply(&r);
                assert!(
                    t.remaining.is_finite()
                        && t.retry_after.is_finite()
                        && t.reset_after.is_finite()
                );
            }
        }
    }
    assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn info_reports_calls_allowed_denied_and_errors() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("k", "1", "1", "1", Some(T0));
    c.take("k", "1", "1", "1", Some(T0));
    c.q("TB.TAKE k x 1 1");
    let field = |c: &mut Conn, f: &str| common::info_field(c, "tb", f).unwrap();
    assert_eq!(field(&mut c, "tb_take_calls"), "3");
    assert_eq!(field(&mut c, "tb_take_allowed"), "1");
    assert_eq!(field(&mut c, "tb_take_denied"), "1");
    assert_eq!(field(&mut c, "tb_take_errors"), "1");
    assert_eq!(field(&mut c, "tb_version"), env!("CARGO_PKG_VERSION"));
}
