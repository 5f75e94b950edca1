//! TB.MTAKE's contract (several buckets, all or nothing), checked against a real
//! redis-server with the module loaded.

mod common;

use std::time::Duration;

use common::{
    Bucket, CORRUPT_TIME, CORRUPT_TOKENS, Conn, LUA_SEED, MTake, ReplStream, Reply, Rng, Server,
    T0, T0F, Take, WRONGTYPE, assert_documented, assert_errors_change_nothing,
    assert_replica_matches, at, bulk_reply, command_info, double_reply, fingerprint, hget, hgetall,
    mtake_args, notifications_during, repl_offset, start_cluster_node, start_master, start_replica,
    start_two_node_cluster, take, tb_counters, wait_for, watch_survives,
};

const ARITY: &str = "ERR wrong number of arguments for 'tb.mtake' command";
const NUMKEYS: &str = "ERR numkeys must be a positive integer";
const TOO_MANY: &str = "ERR numkeys must be at most 64 (the buckets one call may take)";
const COUNT: &str = "ERR numkeys does not match the arguments: tb.mtake takes numkeys keys, then capacity rate n for each key, then an optional now";
const DUPLICATE: &str = "ERR tb.mtake got the same key more than once";

const IP: &str = "rl:{user42}:ip";
const USER: &str = "rl:{user42}:user";
const ORDERS: &str = "rl:{user42}:orders";

fn mtake(allowed: bool, remaining: f64, retry: f64, reset: f64, keys: Vec<Take>) -> MTake {
    MTake {
        allowed,
        remaining,
        retry_after: retry,
        reset_after: reset,
        keys,
    }
}

/// The aggregate the contract derives from the per-key entries: allowed only if all were;
/// the smallest remaining; retry 0 when allowed, else -1 if any key can never have its n,
/// else the largest wait; the largest reset.
fn aggregate_of(keys: &[Take]) -> Take {
    let allowed = keys.iter().all(|k| k.allowed);
    let retry_after = if allowed {
        0.0
    } else if keys.iter().any(|k| k.retry_after == -1.0) {
        -1.0
    } else {
        keys.iter().map(|k| k.retry_after).fold(0.0, f64::max)
    };
    take(
        allowed,
        keys.iter()
            .map(|k| k.remaining)
            .fold(f64::INFINITY, f64::min),
        retry_after,
        keys.iter().map(|k| k.reset_after).fold(0.0, f64::max),
    )
}

#[test]
fn mtake_on_missing_keys_deducts_each_and_reports_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    let m = c.mtake(
        &[
            (IP, "10", "2", "1"),
            (USER, "100", "1", "5"),
            (ORDERS, "5", "0.5", "2"),
        ],
        Some(T0),
    );
    assert_eq!(
        m,
        mtake(
            true,
            3.0,
            0.0,
            5.0,
            vec![
                take(true, 9.0, 0.0, 0.5),
                take(true, 95.0, 0.0, 5.0),
                take(true, 3.0, 0.0, 4.0),
            ]
        )
    );
    for (key, tokens) in [(IP, "9"), (USER, "95"), (ORDERS, "3")] {
        assert_eq!(
            hget(&mut c, key, "tokens").as_deref(),
            Some(tokens),
            "{key}"
        );
        assert_eq!(
            hget(&mut c, key, "last_refill_time").as_deref(),
            Some(T0),
            "{key}"
        );
    }
}

#[test]
fn mtake_reply_is_five_elements_with_a_nested_array_under_resp2_and_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    let r = c.q("TB.MTAKE 2 a b 10 3 1 4 1 4 1000");
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Bulk(b"0".to_vec()),
            Reply::Bulk(b"0".to_vec()),
            Reply::Bulk(b"4".to_vec()),
            Reply::Array(vec![
                bulk_reply(1, ["9", "0", "0.3333333333333333"]),
                bulk_reply(1, ["0", "0", "4"]),
            ]),
        ])
    );
    let r = c.q("HELLO 3");
    assert!(matches!(r, Reply::Array(_)), "{r:?}");
    // b is empty: denied, 1 s to one token, 4 s to full; a would have had enough.
    let r = c.q("TB.MTAKE 2 a b 10 3 1 4 1 1 1000");
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Int(0),
            Reply::Double(0.0),
            Reply::Double(1.0),
            Reply::Double(4.0),
            Reply::Array(vec![
                double_reply(1, [9.0, 0.0, 1.0 / 3.0]),
                double_reply(0, [0.0, 1.0, 4.0]),
            ]),
        ])
    );
    let r = c.q("TB.MTAKE 2 a b 10 3 11 4 1 1 1000");
    assert_eq!(r.array()[2], Reply::Double(-1.0));
}

#[test]
fn denied_mtake_reports_each_bucket_as_it_stands_and_touches_none() {
    let s = Server::start();
    let mut c = s.conn();
    let buckets = |n_orders: &'static str| {
        [
            (IP, "10", "2", "1"),
            (USER, "100", "1", "5"),
            (ORDERS, "5", "0.5", n_orders),
        ]
    };
    assert!(c.mtake(&buckets("2"), Some(T0)).allowed);
    let before = fingerprint(&mut c, &[IP, USER, ORDERS]);
    // One second later: ip is full again (10), user has 96, orders only 3.5 of the 4 asked.
    let m = c.mtake(&buckets("4"), Some(&at(1.0)));
    assert_eq!(
        m,
        mtake(
            false,
            3.5,
            1.0,
            4.0,
            vec![
                take(true, 10.0, 0.0, 0.0),
                take(true, 96.0, 0.0, 4.0),
                take(false, 3.5, 1.0, 3.0),
            ]
        )
    );
    assert_eq!(fingerprint(&mut c, &[IP, USER, ORDERS]), before);
    // After the largest retry_after every bucket has enough, and all are deducted.
    let m = c.mtake(&buckets("4"), Some(&at(2.0)));
    assert_eq!(
        m,
        mtake(
            true,
            0.0,
            0.0,
            10.0,
            vec![
                take(true, 9.0, 0.0, 0.5),
                take(true, 92.0, 0.0, 8.0),
                take(true, 0.0, 0.0, 10.0),
            ]
        )
    );
    assert_eq!(hget(&mut c, ORDERS, "tokens").as_deref(), Some("0"));
    assert_eq!(hget(&mut c, USER, "tokens").as_deref(), Some("92"));
    assert_eq!(hget(&mut c, IP, "tokens").as_deref(), Some("9"));
    for key in [IP, USER, ORDERS] {
        assert_eq!(hget(&mut c, key, "last_refill_time").unwrap(), at(2.0));
    }
}

#[test]
fn mtake_retry_after_is_the_largest_wait_and_every_bucket_has_enough_after_it() {
    let s = Server::start();
    let mut c = s.conn();
    // Empty three buckets with different rates, then ask for different amounts.
    c.mtake(
        &[
            ("a", "4", "2", "4"),
            ("b", "6", "0.5", "6"),
            ("c", "3", "4", "3"),
        ],
        Some(T0),
    );
    let ask = [
        ("a", "4", "2", "3"),
        ("b", "6", "0.5", "1"),
        ("c", "3", "4", "2"),
    ];
    let m = c.mtake(&ask, Some(T0));
    assert_eq!(
        m,
        mtake(
            false,
            0.0,
            2.0,
            12.0,
            vec![
                take(false, 0.0, 1.5, 2.0),
                take(false, 0.0, 2.0, 12.0),
                take(false, 0.0, 0.5, 0.75),
            ]
        )
    );
    // Just before the largest wait: still denied (b is short), nothing written.
    let before = fingerprint(&mut c, &["a", "b", "c"]);
    let m = c.mtake(&ask, Some(&at(1.9)));
    assert!(!m.allowed, "{m:?}");
    assert_eq!(
        m.keys.iter().map(|k| k.allowed).collect::<Vec<_>>(),
        [true, false, true]
    );
    assert_eq!(fingerprint(&mut c, &["a", "b", "c"]), before);
    let m = c.mtake(&ask, Some(&at(2.0)));
    assert!(m.allowed, "{m:?}");
}

#[test]
fn mtake_with_any_n_above_its_capacity_retries_never() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("short", "10", "1", "10", Some(T0));
    let before = fingerprint(&mut c, &["full", "short", "never"]);
    let m = c.mtake(
        &[
            ("full", "5", "1", "1"),
            ("short", "10", "1", "3"),
            ("never", "5", "1", "6"),
        ],
        Some(T0),
    );
    assert_eq!(
        m,
        mtake(
            false,
            0.0,
            -1.0,
            10.0,
            vec![
                take(true, 5.0, 0.0, 0.0),
                take(false, 0.0, 3.0, 10.0),
                take(false, 5.0, -1.0, 0.0),
            ]
        )
    );
    assert_eq!(fingerprint(&mut c, &["full", "short", "never"]), before);
    assert_eq!(c.q("EXISTS full never").int(), 0);
    // Even when every other bucket has enough.
    let m = c.mtake(
        &[("full", "5", "1", "1"), ("never", "5", "1", "5.5")],
        Some(T0),
    );
    assert_eq!(m.total(), take(false, 5.0, -1.0, 0.0));
    assert_eq!(c.q("EXISTS full never").int(), 0);
}

#[test]
fn mtake_aggregates_follow_the_per_key_entries() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0x5EED_0001);
    let keys = ["k0", "k1", "k2", "k3"];
    let mut now = T0F;
    for step in 0..300 {
        let count = 1 + rng.below(4) as usize;
        let mut buckets: Vec<Bucket> = Vec::new();
        for key in keys.iter().take(count) {
            buckets.push((
                key,
                rng.pick(&["3", "10", "2.5"]),
                rng.pick(&["0.5", "1", "1.6666666666666667", "4"]),
                rng.pick(&["0", "1", "1", "2", "0.5", "3", "20"]),
            ));
        }
        now += rng.below(800) as f64 / 1000.0;
        let m = c.mtake(&buckets, Some(&format!("{now}")));
        assert_eq!(m.keys.len(), count, "step {step}");
        assert_eq!(
            m.total(),
            aggregate_of(&m.keys),
            "step {step}: {buckets:?} {m:?}"
        );
        if m.allowed {
            assert!(m.keys.iter().all(|k| k.retry_after == 0.0), "{m:?}");
        }
    }
}

/// One MTAKE step checked against TB.TAKE on a parallel set of buckets: per key, the entry
/// TB.TAKE's answers imply, and the same stored bytes afterwards.
fn check_step_against_take(
    c: &mut Conn,
    m_keys: &[String],
    t_keys: &[String],
    triples: &[(&str, &str, &str)],
    now: &str,
) -> bool {
    let buckets: Vec<Bucket> = m_keys
        .iter()
        .zip(triples)
        .map(|(k, &(cap, rate, n))| (k.as_str(), cap, rate, n))
        .collect();
    // What each bucket holds now, and whether it alone has its n (TB.TAKE n=0 writes nothing).
    let queries: Vec<Take> = t_keys
        .iter()
        .zip(triples)
        .map(|(k, &(cap, rate, _))| c.take(k, cap, rate, "0", Some(now)))
        .collect();
    let alone: Vec<bool> = triples
        .iter()
        .zip(&queries)
        .map(|(&(cap, _, n), q)| {
            let (cap, n): (f64, f64) = (cap.parse().unwrap(), n.parse().unwrap());
            n <= cap && q.remaining >= n
        })
        .collect();
    let m = c.mtake(&buckets, Some(now));
    assert_eq!(
        m.allowed,
        alone.iter().all(|a| *a),
        "{buckets:?} at {now}: {m:?}"
    );
    let mut want = Vec::new();
    for (i, (k, &(cap, rate, n))) in t_keys.iter().zip(triples).enumerate() {
        if m.allowed || !alone[i] {
            // Allowed: exactly TB.TAKE's deduction. Short: TB.TAKE's denial (writes nothing).
            want.push(c.take(k, cap, rate, n, Some(now)));
        } else {
            // Had enough, but another key did not: as it stands, nothing deducted.
            let q = queries[i];
            want.push(take(true, q.remaining, 0.0, q.reset_after));
        }
    }
    assert_eq!(m.keys, want, "{buckets:?} at {now}");
    assert_eq!(m.total(), aggregate_of(&want), "{buckets:?} at {now}");
    for (mk, tk) in m_keys.iter().zip(t_keys) {
        assert_eq!(
            hgetall(c, mk.as_bytes()),
            hgetall(c, tk.as_bytes()),
            "{mk} vs {tk} after {buckets:?} at {now}"
        );
        let (me, te) = (c.cmd(&["PTTL", mk]).int(), c.cmd(&["PTTL", tk]).int());
        assert_eq!(me < 0, te < 0, "{mk} pttl {me} vs {tk} pttl {te}");
    }
    m.allowed
}

#[test]
fn allowed_mtake_deducts_each_key_exactly_as_take_would() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0x0A11_0FA1);
    let m_keys: Vec<String> = (0..5).map(|i| format!("m{i}")).collect();
    let t_keys: Vec<String> = (0..5).map(|i| format!("t{i}")).collect();
    let mut now = T0F;
    let (mut allowed, mut denied) = (0, 0);
    for _ in 0..400 {
        // A random subset of the keys, in random order, each with its own triple.
        let mut order: Vec<usize> = (0..5).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        order.truncate(1 + rng.below(4) as usize);
        let triples: Vec<(&str, &str, &str)> = order
            .iter()
            .map(|_| {
                (
                    rng.pick(&["5", "10", "2.5", "100"]),
                    rng.pick(&["0.5", "1", "1.6666666666666667", "0.1", "3"]),
                    rng.pick(&["0", "1", "1", "2", "0.5", "3", "200"]),
                )
            })
            .collect();
        // Time mostly moves on; now and then a client clock is behind.
        now += rng.below(600) as f64 / 1000.0 - 0.05;
        let now_text = format!("{now}");
        let ms: Vec<String> = order.iter().map(|&i| m_keys[i].clone()).collect();
        let ts: Vec<String> = order.iter().map(|&i| t_keys[i].clone()).collect();
        if check_step_against_take(&mut c, &ms, &ts, &triples, &now_text) {
            allowed += 1;
        } else {
            denied += 1;
        }
    }
    assert!(
        allowed > 80 && denied > 80,
        "allowed {allowed} denied {denied}"
    );
}

#[test]
fn allowed_mtake_gives_each_written_key_a_ttl_covering_its_time_to_full() {
    let s = Server::start();
    let mut c = s.conn();
    let m = c.mtake(
        &[
            ("a", "100", "10", "30"),
            ("b", "10", "1", "4"),
            ("q", "5", "1", "0"),
        ],
        Some(T0),
    );
    assert_eq!(
        m.keys.iter().map(|k| k.reset_after).collect::<Vec<_>>(),
        [3.0, 4.0, 0.0]
    );
    for (key, reset_ms) in [("a", 3000), ("b", 4000)] {
        let pttl = c.cmd(&["PTTL", key]).int();
        assert!(
            (reset_ms - 100..=reset_ms * 5 / 4 + 1000 + 100).contains(&pttl),
            "{key}: pttl {pttl}"
        );
    }
    assert_eq!(c.q("EXISTS q").int(), 0, "n = 0 creates nothing");
}

#[test]
fn mtake_on_the_server_clock_uses_one_time_for_every_key() {
    let s = Server::start();
    let mut c = s.conn();
    let m = c.mtake(&[("a", "10", "2", "1"), ("b", "5", "1", "4")], None);
    assert_eq!(
        m,
        mtake(
            true,
            1.0,
            0.0,
            4.0,
            vec![take(true, 9.0, 0.0, 0.5), take(true, 1.0, 0.0, 4.0)]
        )
    );
    let ta = hget(&mut c, "a", "last_refill_time").unwrap();
    let tb = hget(&mut c, "b", "last_refill_time").unwrap();
    assert_eq!(ta, tb, "one now for all keys");
    let (secs, micros) = ta.split_once('.').unwrap();
    assert_eq!(micros.len(), 6, "{ta}");
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(secs.parse::<u64>().unwrap().abs_diff(wall) <= 2, "{ta}");
    // A moment later on the server clock b has refilled a little, not yet 4 tokens.
    let m = c.mtake(&[("a", "10", "2", "1"), ("b", "5", "1", "4")], None);
    assert!(!m.allowed, "{m:?}");
    assert!(m.retry_after > 2.0 && m.retry_after < 3.0 + 1e-5, "{m:?}");
    assert!(m.keys[0].allowed && !m.keys[1].allowed, "{m:?}");
    // "Never" stays -1 on the server clock (waits there are rounded up to microseconds).
    let m = c.mtake(&[("a", "10", "2", "11"), ("b", "5", "1", "4")], None);
    assert_eq!(m.retry_after, -1.0, "{m:?}");
    assert_eq!(m.keys[0].retry_after, -1.0, "{m:?}");
}

#[test]
fn mtake_with_n_zero_reports_that_key_and_writes_only_the_others() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("q", "10", "1", "4", Some(T0));
    let q_before = fingerprint(&mut c, &["q", "missing"]);
    let m = c.mtake(
        &[
            ("q", "10", "1", "0"),
            ("missing", "7", "1", "0"),
            ("w", "10", "1", "2"),
        ],
        Some(&at(1.0)),
    );
    assert_eq!(
        m,
        mtake(
            true,
            7.0,
            0.0,
            3.0,
            vec![
                take(true, 7.0, 0.0, 3.0),
                take(true, 7.0, 0.0, 0.0),
                take(true, 8.0, 0.0, 2.0),
            ]
        )
    );
    assert_eq!(fingerprint(&mut c, &["q", "missing"]), q_before);
    assert_eq!(hget(&mut c, "w", "tokens").as_deref(), Some("8"));
}

#[test]
fn mtake_with_every_n_zero_writes_nothing_and_emits_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "4", Some(T0));
    let before = fingerprint(&mut c, &["a", "b"]);
    let events = notifications_during(&s, |c| {
        let m = c.mtake(
            &[("a", "10", "1", "0"), ("b", "5", "1", "0")],
            Some(&at(1.0)),
        );
        assert_eq!(
            m,
            mtake(
                true,
                5.0,
                0.0,
                3.0,
                vec![take(true, 7.0, 0.0, 3.0), take(true, 5.0, 0.0, 0.0)]
            )
        );
    });
    assert_eq!(events, Vec::<String>::new());
    assert_eq!(fingerprint(&mut c, &["a", "b"]), before);
    assert!(watch_survives(
        &s,
        &["a", "b"],
        &mtake_args(
            &[("a", "10", "1", "0"), ("b", "5", "1", "0")],
            Some(&at(1.0))
        )
    ));
}

#[test]
fn bad_arguments_get_the_spec_errors_in_check_order_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "3", Some(T0));
    c.take("b", "10", "1", "4", Some(T0));
    c.q("SET str v");
    let keys = ["a", "b", "str", "k", "c", "x"];
    let cases: &[(&[&str], &str)] = &[
        // Arity: fewer than 6 arguments.
        (&["TB.MTAKE"], ARITY),
        (&["TB.MTAKE", "1"], ARITY),
        (&["TB.MTAKE", "1", "k"], ARITY),
        (&["TB.MTAKE", "1", "k", "10", "1"], ARITY),
        (&["TB.MTAKE", "x", "k"], ARITY),
        // numkeys: not a positive integer (checked before the count).
        (&["TB.MTAKE", "0", "k", "10", "1", "1"], NUMKEYS),
        (&["TB.MTAKE", "0", "k", "10", "1", "1", T0], NUMKEYS),
        (&["TB.MTAKE", "-1", "k", "10", "1", "1"], NUMKEYS),
        (&["TB.MTAKE", "1.5", "k", "10", "1", "1"], NUMKEYS),
        (&["TB.MTAKE", "x", "k", "10", "1", "1"], NUMKEYS),
        (&["TB.MTAKE", "", "k", "10", "1", "1"], NUMKEYS),
        (&["TB.MTAKE", " 1", "k", "10", "1", "1"], NUMKEYS),
        (
            &["TB.MTAKE", "0", "k", "10", "1", "1", "extra", "more"],
            NUMKEYS,
        ),
        // The count: neither 2 + 4 numkeys nor 3 + 4 numkeys.
        (&["TB.MTAKE", "2", "a", "b", "10", "1", "1"], COUNT),
        (&["TB.MTAKE", "2", "a", "b", "10", "1", "1", T0], COUNT),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1"],
            COUNT,
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1", "1", T0, "x",
            ],
            COUNT,
        ),
        (&["TB.MTAKE", "1", "k", "10", "1", "1", T0, "extra"], COUNT),
        (
            &["TB.MTAKE", "3", "a", "b", "10", "1", "1", "10", "1", "1"],
            COUNT,
        ),
        (&["TB.MTAKE", "5", "a", "b", "10", "1", "1"], COUNT),
        (&["TB.MTAKE", "65", "k", "10", "1", "1"], TOO_MANY),
        (&["TB.MTAKE", "1000000", "k", "10", "1", "1"], TOO_MANY),
        // 4 x numkeys wraps to 4 modulo 2^64: the count never gets as far as a match.
        (
            &["TB.MTAKE", "4611686018427387905", "k", "10", "1", "1"],
            TOO_MANY,
        ),
        (
            &["TB.MTAKE", "9223372036854775807", "k", "10", "1", "1"],
            TOO_MANY,
        ),
        // A count of 3 + 4 numkeys means a now: here "b" is the first capacity.
        (
            &["TB.MTAKE", "1", "a", "b", "10", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        // Numbers, left to right, every triple.
        (
            &["TB.MTAKE", "2", "a", "b", "nan", "1", "1", "10", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "0", "1", "1", "10", "1", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "x", "1", "0", "1", "1"],
            "ERR rate is not a valid number",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "0", "1", "10", "1", "1"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "one", "10", "1", "1"],
            "ERR n is not a valid number",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1e20", "10", "1", "1"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "abc", "1", "1"],
            "ERR capacity is not a valid number",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "1e300", "x", "1"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "-inf", "1"],
            "ERR rate is not a valid number",
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1e-300", "1",
            ],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1", "-1"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1", " 1"],
            "ERR n is not a valid number",
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1", "1", "now",
            ],
            "ERR now is not a valid number",
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "b", "10", "1", "1", "10", "1", "1", "",
            ],
            "ERR now is not a valid number",
        ),
        (
            &[
                "TB.MTAKE",
                "2",
                "a",
                "b",
                "10",
                "1",
                "1",
                "10",
                "1",
                "1",
                "1764456268123",
            ],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (
            &["TB.MTAKE", "1", "a", "10", "1", "1", "-5"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        // Numbers before duplicates, duplicates before the keys' types.
        (
            &["TB.MTAKE", "2", "a", "a", "10", "1", "1", "10", "1", "x"],
            "ERR n is not a valid number",
        ),
        (
            &["TB.MTAKE", "2", "a", "a", "10", "1", "1", "10", "1", "1"],
            DUPLICATE,
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "a", "10", "1", "1", "10", "1", "1", T0,
            ],
            DUPLICATE,
        ),
        (
            &[
                "TB.MTAKE", "3", "a", "b", "a", "10", "1", "1", "10", "1", "1", "5", "1", "1",
            ],
            DUPLICATE,
        ),
        (
            &[
                "TB.MTAKE", "2", "str", "str", "10", "1", "1", "10", "1", "1",
            ],
            DUPLICATE,
        ),
        (
            &["TB.MTAKE", "2", "str", "a", "10", "1", "1", "10", "x", "1"],
            "ERR rate is not a valid number",
        ),
        (
            &[
                "TB.MTAKE", "2", "a", "str", "10", "1", "1", "10", "1", "1", T0,
            ],
            WRONGTYPE,
        ),
        (
            &[
                "TB.MTAKE", "2", "str", "a", "10", "1", "1", "10", "1", "1", T0,
            ],
            WRONGTYPE,
        ),
    ];
    assert_errors_change_nothing(&mut c, &[], &keys, cases);
    assert_eq!(c.q("DBSIZE").int(), 3);
    assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn keys_that_differ_only_in_case_or_bytes_are_not_duplicates() {
    let s = Server::start();
    let mut c = s.conn();
    let m = c.mtake(&[("a", "5", "1", "1"), ("A", "5", "1", "2")], Some(T0));
    assert_eq!(
        m.keys,
        vec![take(true, 4.0, 0.0, 1.0), take(true, 3.0, 0.0, 2.0)]
    );
    let k1: &[u8] = b"rl:\x00a";
    let k2: &[u8] = b"rl:\x00a\xff";
    let args: Vec<&[u8]> = vec![
        b"TB.MTAKE",
        b"2",
        k1,
        k2,
        b"5",
        b"1",
        b"1",
        b"5",
        b"1",
        b"3",
        T0.as_bytes(),
    ];
    let m = MTake::from_reply(&c.cmd(&args));
    assert!(m.allowed, "{m:?}");
    assert_eq!(
        c.cmd(&[b"HGET".as_slice(), k1, b"tokens"]),
        Reply::Bulk(b"4".to_vec())
    );
    assert_eq!(
        c.cmd(&[b"HGET".as_slice(), k2, b"tokens"]),
        Reply::Bulk(b"2".to_vec())
    );
    let dup: Vec<&[u8]> = vec![
        b"TB.MTAKE",
        b"2",
        k2,
        k2,
        b"5",
        b"1",
        b"1",
        b"5",
        b"1",
        b"3",
    ];
    assert_eq!(c.cmd(&dup), Reply::Error(DUPLICATE.into()));
}

#[test]
fn wrongtype_on_one_key_changes_nothing_anywhere() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "3", Some(T0));
    c.q("SET str v");
    c.q("RPUSH list x");
    for bad in ["str", "list"] {
        let keys = ["a", bad, "fresh"];
        let before = fingerprint(&mut c, &keys);
        for order in [
            ["a", bad, "fresh"],
            [bad, "a", "fresh"],
            ["a", "fresh", bad],
        ] {
            let buckets: Vec<Bucket> = order.iter().map(|k| (*k, "10", "1", "1")).collect();
            let r = c.cmd(&mtake_args(&buckets, Some(&at(1.0))));
            assert_eq!(r, Reply::Error(WRONGTYPE.into()), "{order:?}");
            assert_eq!(fingerprint(&mut c, &keys), before, "{order:?}");
        }
    }
    assert_eq!(c.q("EXISTS fresh").int(), 0);
}

#[test]
fn a_corrupt_bucket_on_one_key_changes_nothing_anywhere() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "3", Some(T0));
    let cases: &[(&[&str], &str)] = &[
        (&["tokens", "abc", "last_refill_time", "1"], CORRUPT_TOKENS),
        (&["tokens", "nan", "last_refill_time", "1"], CORRUPT_TOKENS),
        (
            &["tokens", "-9007199254740994", "last_refill_time", "1"],
            CORRUPT_TOKENS,
        ),
        (
            &["tokens", "-1e300", "last_refill_time", "1"],
            CORRUPT_TOKENS,
        ),
        (&["tokens", "5", "last_refill_time", "soon"], CORRUPT_TIME),
        (&["tokens", "5"], CORRUPT_TIME),
        (&["last_refill_time", "5"], CORRUPT_TOKENS),
    ];
    for (i, (fields, want)) in cases.iter().enumerate() {
        let bad = format!("bad{i}");
        let mut hset = vec!["HSET", bad.as_str()];
        hset.extend_from_slice(fields);
        c.cmd(&hset);
        let keys = ["a", bad.as_str(), "fresh"];
        let before = fingerprint(&mut c, &keys);
        for (order, n_bad) in [
            (["a", bad.as_str(), "fresh"], "1"),
            ([bad.as_str(), "a", "fresh"], "1"),
            (["a", "fresh", bad.as_str()], "1"),
            (["a", "fresh", bad.as_str()], "0"),
        ] {
            let buckets: Vec<Bucket> = order
                .iter()
                .map(|k| (*k, "10", "1", if *k == bad { n_bad } else { "1" }))
                .collect();
            let r = c.cmd(&mtake_args(&buckets, Some(&at(1.0))));
            assert_eq!(
                r,
                Reply::Error(want.to_string()),
                "{fields:?} {order:?} n={n_bad}"
            );
            assert_eq!(fingerprint(&mut c, &keys), before, "{fields:?} {order:?}");
        }
    }
    // The deepest debt that is not corrupt: exactly -2^53.
    c.q("HSET deep tokens -9007199254740992 last_refill_time 1");
    let m = c.mtake(&[("a", "10", "1", "1"), ("deep", "10", "1", "1")], Some(T0));
    assert!(!m.allowed, "{m:?}");
    assert_eq!(m.keys[1].remaining, -9007199254740992.0 + (T0F - 1.0));
}

#[test]
fn denied_mtake_and_errors_do_not_abort_a_transaction_watching_any_key() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "3", Some(T0));
    c.take("b", "2", "1", "2", Some(T0)); // empty
    c.q("SET str v");
    c.q("HSET bad tokens x last_refill_time 1");
    let denied = mtake_args(&[("a", "10", "1", "1"), ("b", "2", "1", "1")], Some(T0));
    let never = mtake_args(&[("a", "10", "1", "1"), ("b", "2", "1", "3")], Some(T0));
    let wrongtype = mtake_args(&[("a", "10", "1", "1"), ("str", "2", "1", "1")], Some(T0));
    let corrupt = mtake_args(&[("a", "10", "1", "1"), ("bad", "2", "1", "1")], Some(T0));
    let dup = mtake_args(&[("a", "10", "1", "1"), ("a", "2", "1", "1")], Some(T0));
    let parse = mtake_args(&[("a", "10", "1", "1"), ("b", "2", "x", "1")], Some(T0));
    for args in [&denied, &never, &wrongtype, &corrupt, &dup, &parse] {
        for watched in [&["a"][..], &["b"], &["a", "b"]] {
            assert!(
                watch_survives(&s, watched, args),
                "{args:?} watching {watched:?}"
            );
        }
    }
    // The allowed call is a write to each key it deducts.
    let allowed = |t: &str| mtake_args(&[("a", "10", "1", "1"), ("b", "2", "1", "1")], Some(t));
    assert!(!watch_survives(&s, &["a"], &allowed(&at(1.0))));
    assert!(!watch_survives(&s, &["b"], &allowed(&at(2.0))));
}

#[test]
fn allowed_mtake_does_not_signal_a_key_it_only_reported() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("q", "10", "1", "4", Some(T0));
    let args = mtake_args(&[("q", "10", "1", "0"), ("w", "10", "1", "2")], Some(T0));
    assert!(watch_survives(&s, &["q"], &args));
    assert!(!watch_survives(&s, &["w"], &args));
}

#[test]
fn allowed_mtake_emits_hset_and_expire_per_written_key_and_denied_emits_nothing() {
    let s = Server::start();
    let mut events = notifications_during(&s, |c| {
        let m = c.mtake(
            &[
                ("a", "10", "1", "1"),
                ("q", "10", "1", "0"),
                ("b", "10", "1", "1"),
            ],
            Some(T0),
        );
        assert!(m.allowed);
    });
    events.sort();
    assert_eq!(
        events,
        vec![
            "__keyevent@0__:expire a",
            "__keyevent@0__:expire b",
            "__keyevent@0__:hset a",
            "__keyevent@0__:hset b",
            "__keyspace@0__:a expire",
            "__keyspace@0__:a hset",
            "__keyspace@0__:b expire",
            "__keyspace@0__:b hset",
        ]
    );
    let events = notifications_during(&s, |c| {
        let m = c.mtake(&[("a", "10", "1", "1"), ("b", "10", "1", "20")], Some(T0));
        assert!(!m.allowed);
        let m = c.mtake(&[("a", "10", "1", "1"), ("b", "1", "1", "2")], Some(T0));
        assert!(!m.allowed);
        c.q("TB.MTAKE 2 a b 10 1 1 10 x 1");
    });
    assert_eq!(events, Vec::<String>::new());
}

#[test]
fn mtake_and_take_share_buckets_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let pair = [(IP, "10", "2", "3"), (USER, "5", "1", "1")];
    assert!(c.mtake(&pair, Some(T0)).allowed);
    assert_eq!(c.take(IP, "10", "2", "0", Some(T0)).remaining, 7.0);
    assert_eq!(c.take(USER, "5", "1", "0", Some(T0)).remaining, 4.0);
    assert!(c.take(USER, "5", "1", "4", Some(T0)).allowed);
    // TB.TAKE emptied the user bucket: the MTAKE sees it and is denied.
    let m = c.mtake(&pair, Some(T0));
    assert_eq!(
        m,
        mtake(
            false,
            0.0,
            1.0,
            5.0,
            vec![take(true, 7.0, 0.0, 1.5), take(false, 0.0, 1.0, 5.0)]
        )
    );
    let m = c.mtake(&pair, Some(&at(1.0)));
    assert!(m.allowed, "{m:?}");
    assert_eq!(m.keys[0].remaining, 6.0);
    assert_eq!(m.keys[1].remaining, 0.0);
    let t = c.take(IP, "10", "2", "6", Some(&at(1.0)));
    assert_eq!(t, take(true, 0.0, 0.0, 5.0));
}

#[test]
fn mtake_and_the_seed_lua_script_share_buckets_both_ways() {
    let s = Server::start();
    let mut c = s.conn();
    let lua = |c: &mut Conn, key: &str, n: &str, now: &str| {
        let r = c.cmd(&["EVAL", LUA_SEED, "1", key, "10", "2", n, now]);
        (r.array()[0].int(), r.array()[1].text())
    };
    // Module first: the script reads what MTAKE wrote.
    assert!(
        c.mtake(&[("a", "10", "2", "4"), ("b", "10", "2", "6")], Some(T0))
            .allowed
    );
    assert_eq!(lua(&mut c, "a", "1", &at(1.0)), (1, "7".to_string()));
    assert_eq!(lua(&mut c, "b", "1", &at(1.0)), (1, "5".to_string()));
    // Script then module: MTAKE reads what the script wrote (a: 8, b: 6 at 1.5 s).
    let before = fingerprint(&mut c, &["a", "b"]);
    let m = c.mtake(
        &[("a", "10", "2", "7"), ("b", "10", "2", "7")],
        Some(&at(1.5)),
    );
    assert_eq!(
        m,
        mtake(
            false,
            6.0,
            0.5,
            2.0,
            vec![take(true, 8.0, 0.0, 1.0), take(false, 6.0, 0.5, 2.0)]
        )
    );
    assert_eq!(fingerprint(&mut c, &["a", "b"]), before);
    let m = c.mtake(
        &[("a", "10", "2", "7"), ("b", "10", "2", "5")],
        Some(&at(1.5)),
    );
    assert_eq!(
        m,
        mtake(
            true,
            1.0,
            0.0,
            4.5,
            vec![take(true, 1.0, 0.0, 4.5), take(true, 1.0, 0.0, 4.5)]
        )
    );
    assert_eq!(lua(&mut c, "a", "2", &at(1.5)), (0, "1".to_string()));
    assert_eq!(lua(&mut c, "b", "1", &at(1.5)), (1, "0".to_string()));
    let m = c.mtake(
        &[("a", "10", "2", "1"), ("b", "10", "2", "1")],
        Some(&at(1.5)),
    );
    assert_eq!(m.total(), take(false, 0.0, 0.5, 5.0));
}

#[test]
fn mtake_runs_inside_multi_and_from_lua() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("MULTI");
    for _ in 0..3 {
        c.q(&format!("TB.MTAKE 2 a b 2 1 1 3 1 1 {T0}"));
    }
    let r = c.q("EXEC");
    let allowed: Vec<bool> = r
        .array()
        .iter()
        .map(|m| MTake::from_reply(m).allowed)
        .collect();
    assert_eq!(allowed, [true, true, false]);
    let r = c.cmd(&[
        "EVAL",
        "return redis.call('TB.MTAKE', 2, KEYS[1], KEYS[2], 5, 1, 1, 5, 1, 2)",
        "2",
        "{x}1",
        "{x}2",
    ]);
    let m = MTake::from_reply(&r);
    assert!(m.allowed && m.remaining == 3.0, "{m:?}");
}

#[test]
fn mtake_takes_up_to_64_keys_in_one_call() {
    let s = Server::start();
    let mut c = s.conn();
    let names: Vec<String> = (0..65).map(|i| format!("rl:{{u}}:{i}")).collect();
    let buckets: Vec<Bucket> = names.iter().map(|k| (k.as_str(), "10", "1", "1")).collect();
    let m = c.mtake(&buckets[..64], Some(T0));
    assert!(m.allowed && m.keys.len() == 64, "{m:?}");
    assert_eq!(c.q("DBSIZE").int(), 64);
    let r = c.cmd(&mtake_args(&buckets[..63], None));
    assert_eq!(MTake::from_reply(&r).keys.len(), 63);
    // 65: the bound on one call's work, nothing written.
    let r = c.cmd(&mtake_args(&buckets, None));
    assert_eq!(r, Reply::Error(TOO_MANY.into()));
    assert_eq!(c.q("DBSIZE").int(), 64);
}

#[test]
fn command_getkeys_returns_exactly_the_keys() {
    let s = Server::start();
    let mut c = s.conn();
    let bulk = |ks: &[&str]| {
        Reply::Array(
            ks.iter()
                .map(|k| Reply::Bulk(k.as_bytes().to_vec()))
                .collect(),
        )
    };
    assert_eq!(
        c.q("COMMAND GETKEYS TB.MTAKE 2 a b 1 1 1 1 1 1"),
        bulk(&["a", "b"])
    );
    assert_eq!(
        c.q(&format!("COMMAND GETKEYS TB.MTAKE 2 a b 1 1 1 1 1 1 {T0}")),
        bulk(&["a", "b"])
    );
    assert_eq!(c.q("COMMAND GETKEYS TB.MTAKE 1 k 10 1 1"), bulk(&["k"]));
    assert_eq!(
        c.q("COMMAND GETKEYS tb.mtake 3 x y z 1 1 1 1 1 1 1 1 1"),
        bulk(&["x", "y", "z"])
    );
}

#[test]
fn command_metadata_declares_movable_keys_flags_and_docs() {
    let s = Server::start();
    let mut c = s.conn();
    let (arity, flags, specs) = command_info(&mut c, "tb.mtake");
    assert_eq!(arity, -6);
    for f in ["write", "denyoom", "fast", "movablekeys"] {
        assert!(flags.contains(&f.to_string()), "{flags:?}");
    }
    assert!(specs.contains("keynum") && specs.contains("RW"), "{specs}");
    assert_documented(
        &mut c,
        "tb.mtake",
        &[
            "numkeys", "key", "capacity", "rate", "n", "now", "optional", "multiple",
        ],
    );
}

#[test]
fn at_the_memory_limit_mtake_gets_the_standard_oom_error() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("a", "10", "1", "1", Some(T0));
    let before = fingerprint(&mut c, &["a", "b"]);
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    let r = c.cmd(&mtake_args(
        &[("a", "10", "1", "1"), ("b", "10", "1", "1")],
        Some(T0),
    ));
    assert_eq!(
        r,
        Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into())
    );
    c.q("CONFIG SET maxmemory 0");
    assert_eq!(fingerprint(&mut c, &["a", "b"]), before);
}

#[test]
fn a_user_limited_to_a_key_pattern_gets_noperm_if_any_key_is_outside() {
    let s = Server::start();
    let mut admin = s.conn();
    let r = admin.q("ACL SETUSER limiter on >secret ~rl:* resetchannels -@all +tb.mtake +ping");
    assert_eq!(r, Reply::Simple("OK".into()));
    let mut c = s.conn();
    assert_eq!(c.q("AUTH limiter secret"), Reply::Simple("OK".into()));
    let m = c.mtake(
        &[("rl:a", "10", "1", "1"), ("rl:b", "10", "1", "1")],
        Some(T0),
    );
    assert!(m.allowed);
    for keys in [["rl:a", "session:1"], ["session:1", "rl:a"]] {
        let r = c.cmd(&mtake_args(
            &[(keys[0], "10", "1", "1"), (keys[1], "10", "1", "1")],
            Some(&at(1.0)),
        ));
        assert!(r.error().starts_with("NOPERM"), "{r:?}");
    }
    assert_eq!(admin.q("EXISTS session:1").int(), 0);
    assert_eq!(hget(&mut admin, "rl:a", "tokens").as_deref(), Some("9"));
}

#[test]
fn in_a_cluster_keys_of_different_slots_get_crossslot() {
    let (s, _bus) = start_cluster_node();
    let mut c = s.conn();
    assert_eq!(
        c.q("CLUSTER ADDSLOTSRANGE 0 16383"),
        Reply::Simple("OK".into())
    );
    wait_for(Duration::from_secs(20), "cluster_state:ok", || {
        c.q("CLUSTER INFO").text().contains("cluster_state:ok")
    });
    let m = c.mtake(
        &[
            (IP, "10", "1", "1"),
            (USER, "10", "1", "1"),
            (ORDERS, "10", "1", "1"),
        ],
        Some(T0),
    );
    assert!(m.allowed, "{m:?}");
    let r = c.cmd(&mtake_args(
        &[("a", "10", "1", "1"), ("b", "10", "1", "1")],
        Some(T0),
    ));
    assert_eq!(
        r,
        Reply::Error("CROSSSLOT Keys in request don't hash to the same slot".into())
    );
    // One key per EXISTS: a cluster refuses a multi-key EXISTS across slots too.
    assert_eq!(c.q("EXISTS a").int(), 0);
    assert_eq!(c.q("EXISTS b").int(), 0);
}

#[test]
fn in_a_cluster_mtake_is_redirected_to_the_node_that_owns_its_slot() {
    let (a, b) = start_two_node_cluster();
    let mut ca = a.conn();
    let mut cb = b.conn();
    // "a" (slot 15495) lives on b; "b" (slot 3300) on a.
    assert_eq!(ca.q("CLUSTER KEYSLOT a").int(), 15495);
    assert_eq!(ca.q("CLUSTER KEYSLOT b").int(), 3300);
    let moved = format!("MOVED 15495 127.0.0.1:{}", b.port);
    // The harness itself: a single-key TB.TAKE is redirected.
    assert_eq!(
        ca.q(&format!("TB.TAKE a 10 1 1 {T0}")),
        Reply::Error(moved.clone())
    );
    let cases: Vec<(Vec<Bucket>, Reply)> = vec![
        (vec![("a", "10", "1", "1")], Reply::Error(moved.clone())),
        (
            vec![("{a}1", "10", "1", "1"), ("{a}2", "10", "1", "1")],
            Reply::Error(moved.clone()),
        ),
        (
            vec![("b", "10", "1", "1"), ("a", "10", "1", "1")],
            Reply::Error("CROSSSLOT Keys in request don't hash to the same slot".into()),
        ),
    ];
    for (buckets, want) in &cases {
        assert_eq!(&ca.cmd(&mtake_args(buckets, Some(T0))), want, "{buckets:?}");
    }
    assert_eq!(
        ca.q("DBSIZE").int(),
        0,
        "a wrote keys of slots it does not own"
    );
    let m = cb.mtake(
        &[("{a}1", "10", "1", "1"), ("{a}2", "10", "1", "1")],
        Some(T0),
    );
    assert!(m.allowed, "{m:?}");
}

#[test]
fn mtake_replicates_effects_only_and_nothing_when_nothing_changes() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    c.q("SET str v");
    assert!(
        c.mtake(&[("a", "10", "1", "3"), ("b", "4", "1", "4")], Some(T0))
            .allowed
    );
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = repl_offset(&mut c);
    // Denied, never, all n = 0, and errors of every kind: nothing replicated.
    for line in [
        format!("TB.MTAKE 2 a b 10 1 1 4 1 1 {T0}"),
        format!("TB.MTAKE 2 a b 10 1 1 4 1 5 {T0}"),
        format!("TB.MTAKE 2 a b 10 1 0 4 1 0 {T0}"),
        format!("TB.MTAKE 2 a str 10 1 1 4 1 1 {T0}"),
        format!("TB.MTAKE 2 a a 10 1 1 4 1 1 {T0}"),
        "TB.MTAKE 2 a b 10 1 1 4 x 1".to_string(),
        "TB.MTAKE 0 a 10 1 1".to_string(),
        "TB.MTAKE 2 a 10 1 1".to_string(),
    ] {
        c.q(&line);
        assert_eq!(repl_offset(&mut c), before, "{line}");
    }
    let m = c.mtake(
        &[("a", "10", "1", "1"), ("b", "4", "1", "1")],
        Some(&at(1.5)),
    );
    assert!(m.allowed, "{m:?}");
    assert!(repl_offset(&mut c) > before);
    let m = c.mtake(&[("a", "10", "1", "1"), ("c", "4", "1", "1")], None);
    assert!(m.allowed, "{m:?}");
    c.q("DEL str");
    let want = assert_replica_matches(&mut c, &replica);
    assert_eq!(want.len(), 3);
}

#[test]
fn info_counts_mtake_calls_allowed_denied_and_errors() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(tb_counters(&mut c, "mtake"), [0, 0, 0, 0]);
    c.mtake(&[("a", "1", "1", "1"), ("b", "1", "1", "1")], Some(T0)); // allowed
    c.mtake(&[("a", "1", "1", "1"), ("b", "1", "1", "1")], Some(T0)); // denied
    c.mtake(&[("c", "1", "1", "1"), ("d", "1", "1", "2")], Some(T0)); // never: denied
    c.mtake(&[("c", "1", "1", "0")], Some(T0)); // a query: allowed
    c.q("TB.MTAKE 1 a x 1 1"); // error
    c.q("TB.MTAKE 0 a 1 1 1"); // error
    c.q("TB.MTAKE 2 a a 1 1 1 1 1 1"); // error
    c.q("SET str v");
    c.q("TB.MTAKE 1 str 1 1 1"); // error
    assert_eq!(tb_counters(&mut c, "mtake"), [8, 2, 2, 4]);
    assert_eq!(
        tb_counters(&mut c, "take"),
        [0, 0, 0, 0],
        "an MTAKE is not a TAKE"
    );
}

#[test]
fn allowed_mtake_replicates_only_changed_fields_per_key_wrapped_in_multi_exec() {
    let master = start_master();
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    let m = c.mtake(
        &[
            ("a", "10", "1", "1"),
            ("q", "10", "1", "0"),
            ("b", "5", "1", "2"),
        ],
        Some(T0),
    );
    assert!(m.allowed, "{m:?}");
    c.q("SET m1 1");
    let cmds = stream.until_marker("m1");
    let mut body = cmds.clone();
    assert_eq!(
        body.first().map(|c| c[0].as_str()),
        Some("MULTI"),
        "{cmds:?}"
    );
    assert_eq!(body.last().map(|c| c[0].as_str()), Some("EXEC"), "{cmds:?}");
    body.remove(0);
    body.pop();
    // PEXPIREAT's absolute time comes from the server clock: only its presence is exact.
    let mut shape: Vec<Vec<String>> = body
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c[0] == "PEXPIREAT" {
                assert!(c[2].parse::<i64>().unwrap() > 0, "{c:?}");
                c[2] = "*".into();
            }
            c
        })
        .collect();
    shape.sort();
    let want: Vec<Vec<String>> = [
        vec!["HSET", "a", "tokens", "9", "last_refill_time", T0],
        vec!["HSET", "b", "tokens", "3", "last_refill_time", T0],
        vec!["PEXPIREAT", "a", "*"],
        vec!["PEXPIREAT", "b", "*"],
    ]
    .iter()
    .map(|v| v.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(shape, want, "{cmds:?}");
    // Denied, never, all n = 0, errors: nothing at all in the stream.
    c.q(&format!("TB.MTAKE 2 a b 10 1 1 5 1 4 {T0}"));
    c.q(&format!("TB.MTAKE 2 a b 10 1 1 5 1 6 {T0}"));
    c.q(&format!("TB.MTAKE 2 a b 10 1 0 5 1 0 {T0}"));
    c.q(&format!("TB.MTAKE 2 a b 10 1 1 5 x 1 {T0}"));
    c.q("SET m2 1");
    assert_eq!(stream.until_marker("m2"), Vec::<Vec<String>>::new());
    // Same now again: only the tokens field changes, and a key with n = 0 is not written.
    let m = c.mtake(&[("a", "10", "1", "1"), ("b", "5", "1", "0")], Some(T0));
    assert!(m.allowed, "{m:?}");
    c.q("SET m3 1");
    let cmds = stream.until_marker("m3");
    let hsets: Vec<&Vec<String>> = cmds.iter().filter(|c| c[0] == "HSET").collect();
    assert_eq!(hsets, [&vec!["HSET", "a", "tokens", "8"]], "{cmds:?}");
    assert!(
        cmds.iter().all(|c| c.get(1).is_none_or(|k| k != "b")),
        "{cmds:?}"
    );
    assert!(
        !cmds.iter().any(|c| c[0].starts_with("TB.")),
        "the command itself was replicated: {cmds:?}"
    );
    if cmds.len() > 1 {
        assert_eq!(cmds[0], ["MULTI"], "{cmds:?}");
        assert_eq!(cmds[cmds.len() - 1], ["EXEC"], "{cmds:?}");
    }
}

#[test]
fn client_side_caching_is_invalidated_only_by_an_mtake_that_writes() {
    let s = Server::start();
    let mut cache = s.conn();
    let mut c = s.conn();
    c.take("a", "10", "1", "3", Some(T0));
    c.take("b", "2", "1", "2", Some(T0)); // now empty
    cache.q("HELLO 3");
    assert_eq!(cache.q("CLIENT TRACKING ON"), Reply::Simple("OK".into()));
    cache.q("HGETALL a");
    cache.q("HGETALL b");
    assert!(
        !c.mtake(&[("a", "10", "1", "1"), ("b", "2", "1", "1")], Some(T0))
            .allowed
    );
    assert!(
        c.mtake(&[("a", "10", "1", "0"), ("b", "2", "1", "0")], Some(T0))
            .allowed
    );
    c.q(&format!("TB.MTAKE 2 a b 10 1 1 2 x 1 {T0}"));
    assert_eq!(cache.q("PING"), Reply::Simple("PONG".into()));
    assert!(
        c.mtake(
            &[("a", "10", "1", "1"), ("b", "2", "1", "1")],
            Some(&at(1.0))
        )
        .allowed
    );
    cache.send(&["PING"]);
    let mut invalidated = Vec::new();
    loop {
        match cache.read() {
            Reply::Simple(s) if s == "PONG" => break,
            Reply::Array(push) if push[0] == Reply::Bulk(b"invalidate".to_vec()) => {
                invalidated.extend(push[1].array().iter().map(Reply::text));
            }
            other => panic!("{other:?}"),
        }
    }
    invalidated.sort();
    assert_eq!(invalidated, ["a", "b"]);
}

#[test]
fn a_wrongtype_or_corrupt_key_after_a_short_or_never_key_is_still_an_error() {
    let s = Server::start();
    let mut c = s.conn();
    c.take("short", "2", "1", "2", Some(T0));
    c.q("SET str v");
    c.q("HSET bad tokens x last_refill_time 1");
    let keys = ["short", "str", "bad", "full"];
    let before = fingerprint(&mut c, &keys);
    let cases: &[(&[Bucket], &str)] = &[
        (
            &[("short", "2", "1", "1"), ("str", "2", "1", "1")],
            WRONGTYPE,
        ),
        (
            &[("full", "2", "1", "3"), ("str", "2", "1", "1")],
            WRONGTYPE,
        ),
        (
            &[
                ("short", "2", "1", "1"),
                ("full", "2", "1", "1"),
                ("bad", "2", "1", "1"),
            ],
            CORRUPT_TOKENS,
        ),
        (
            &[("full", "2", "1", "3"), ("bad", "2", "1", "0")],
            CORRUPT_TOKENS,
        ),
    ];
    for (buckets, want) in cases {
        let r = c.cmd(&mtake_args(buckets, Some(T0)));
        assert_eq!(r, Reply::Error(want.to_string()), "{buckets:?}");
        assert_eq!(fingerprint(&mut c, &keys), before, "{buckets:?}");
    }
}

#[test]
fn a_denied_mtake_is_allowed_after_retry_after_and_not_noticeably_before() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0x03E7_012A);
    let mut now = T0F;
    let mut waits = 0;
    for step in 0..600 {
        let buckets: Vec<Bucket> = vec![
            (
                "x",
                "3",
                rng.pick(&["1.6666666666666667", "0.3", "7"]),
                rng.pick(&["1", "0.5"]),
            ),
            (
                "y",
                "5",
                rng.pick(&["1000", "0.001", "2"]),
                rng.pick(&["1", "2", "0"]),
            ),
            (
                "z",
                "2",
                rng.pick(&["0.1", "3", "1"]),
                rng.pick(&["1", "2"]),
            ),
        ];
        let m = c.mtake(&buckets, Some(&format!("{now}")));
        if m.allowed {
            now += rng.below(50) as f64 / 1000.0;
            continue;
        }
        assert!(m.retry_after > 0.0, "step {step}: {m:?}");
        let before = fingerprint(&mut c, &["x", "y", "z"]);
        let early = (m.retry_after * 0.99).min(m.retry_after - 1e-5).max(0.0);
        let probe = c.mtake(&buckets, Some(&format!("{}", now + early)));
        assert!(
            !probe.allowed,
            "step {step}: allowed {early} s into a wait of {}: {buckets:?}",
            m.retry_after
        );
        assert_eq!(fingerprint(&mut c, &["x", "y", "z"]), before);
        now += m.retry_after;
        let retry = c.mtake(&buckets, Some(&format!("{now}")));
        assert!(
            retry.allowed,
            "step {step}: waited {} and was denied: {buckets:?} {retry:?}",
            m.retry_after
        );
        waits += 1;
    }
    assert!(waits > 100, "only {waits} waits");
}
