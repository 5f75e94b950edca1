//! TB.RESERVE's contract (take now, or book tokens that arrive within max_wait and go into
//! debt), and how every other command sees a bucket in debt, checked against a real
//! redis-server with the module loaded.

mod common;

use common::{
    CORRUPT_TIME, CORRUPT_TOKENS, Conn, LUA_BENCH, LUA_SEED, MTake, Reply, Rng, Server, T0, T0F,
    Take, WRONGTYPE, assert_documented, assert_errors_change_nothing, assert_replica_matches, at,
    command_info, fingerprint, hget, hgetall, notifications_during, repl_offset, start_master,
    start_replica, take, tb_counters, watch_survives,
};

const MAX: f64 = 9007199254740992.0;

const ARITY: &str = "ERR wrong number of arguments for 'tb.reserve' command";

/// Stored tokens as a number, checked to be a value a bucket may hold.
fn stored_tokens(c: &mut Conn, key: &str, capacity: f64) -> f64 {
    let text = hget(c, key, "tokens").unwrap_or_else(|| panic!("{key} has no tokens"));
    let tokens: f64 = text
        .parse()
        .unwrap_or_else(|_| panic!("{key}: tokens {text:?}"));
    assert!(
        tokens.is_finite() && (-MAX..=capacity).contains(&tokens),
        "{key}: stored tokens {text} out of range"
    );
    let time = hget(c, key, "last_refill_time").unwrap();
    let time: f64 = time.parse().unwrap();
    assert!((0.0..253402300800.0).contains(&time), "{key}: time {time}");
    tokens
}

fn finite(t: &Take) -> bool {
    t.remaining.is_finite() && t.retry_after.is_finite() && t.reset_after.is_finite()
}

/// A bucket of capacity 2 at 1 token/s, 3 tokens in debt at T0 (stored `-3`).
fn bucket_in_debt(c: &mut Conn, key: &str) {
    assert_eq!(
        c.reserve(key, "2", "1", "2", "10", Some(T0)),
        take(true, 0.0, 0.0, 2.0)
    );
    assert_eq!(
        c.reserve(key, "2", "1", "2", "10", Some(T0)),
        take(true, -2.0, 2.0, 4.0)
    );
    assert_eq!(
        c.reserve(key, "2", "1", "1", "10", Some(T0)),
        take(true, -3.0, 3.0, 5.0)
    );
    assert_eq!(hget(c, key, "tokens").as_deref(), Some("-3"));
    assert_eq!(hget(c, key, "last_refill_time").as_deref(), Some(T0));
}

#[test]
fn reserve_with_the_tokens_there_takes_them_without_a_wait() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.reserve("k", "10", "2", "3", "5", Some(T0));
    assert_eq!(t, take(true, 7.0, 0.0, 1.5));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("7"));
    assert_eq!(hget(&mut c, "k", "last_refill_time").as_deref(), Some(T0));
    // With no wait allowed at all, too.
    let t = c.reserve("k", "10", "2", "7", "0", Some(T0));
    assert_eq!(t, take(true, 0.0, 0.0, 5.0));
}

#[test]
fn reserve_when_short_takes_anyway_and_replies_the_wait() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(c.reserve("k", "3", "2", "3", "0", Some(T0)).allowed);
    // 2 tokens are 1 s away, and 1 s may be waited: booked, the balance goes to -2.
    let t = c.reserve("k", "3", "2", "2", "1", Some(T0));
    assert_eq!(t, take(true, -2.0, 1.0, 2.5));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("-2"));
    // Half a second later the debt is -1; one more token is 1 s away again.
    let t = c.reserve("k", "3", "2", "1", "1", Some(&at(0.5)));
    assert_eq!(t, take(true, -2.0, 1.0, 2.5));
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("-2"));
    assert_eq!(hget(&mut c, "k", "last_refill_time").unwrap(), at(0.5));
}

#[test]
fn reservers_of_one_token_at_one_instant_on_capacity_one_wait_one_step_each() {
    let s = Server::start();
    let mut c = s.conn();
    // 4 tokens/s: waits 0, 0.25, 0.5, ... (exact in binary at T0's magnitude).
    for i in 0..12 {
        let t = c.reserve("k", "1", "4", "1", "100", Some(T0));
        let i = i as f64;
        assert_eq!(
            t,
            take(true, -i, i * 0.25, (i + 1.0) * 0.25),
            "reserver {i}"
        );
    }
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("-11"));
    // 3 tokens/s: waits 0, 1/3, 2/3, ... within float rounding, never early.
    let mut last = -1.0;
    for i in 0..12 {
        let t = c.reserve("third", "1", "3", "1", "100", Some(T0));
        let want = i as f64 / 3.0;
        assert!(t.allowed, "{t:?}");
        assert!(
            t.retry_after >= want && t.retry_after - want < 1e-6,
            "reserver {i}: {t:?}"
        );
        assert!(t.retry_after > last, "{t:?}");
        last = t.retry_after;
    }
}

#[test]
fn reservers_at_one_instant_on_capacity_c_get_c_zero_waits_then_one_step_each() {
    let s = Server::start();
    let mut c = s.conn();
    for i in 0..10 {
        let t = c.reserve("k", "3", "2", "1", "100", Some(T0));
        let f = i as f64;
        let wait = if i < 3 { 0.0 } else { (f - 2.0) * 0.5 };
        assert_eq!(
            t,
            take(true, 2.0 - f, wait, (f + 1.0) * 0.5),
            "reserver {i}"
        );
    }
}

#[test]
fn concurrent_reservers_at_one_instant_get_distinct_waits() {
    let s = Server::start();
    let waits = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let mut c = s.conn();
            let waits = &waits;
            scope.spawn(move || {
                let t = c.reserve("hot", "2", "4", "1", "100", Some(T0));
                assert!(t.allowed, "{t:?}");
                waits.lock().unwrap().push(t.retry_after);
            });
        }
    });
    let mut waits = waits.into_inner().unwrap();
    waits.sort_by(f64::total_cmp);
    assert_eq!(waits, [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]);
    assert_eq!(s.conn().q("HGET hot tokens").text(), "-6");
}

#[test]
fn the_balance_never_goes_below_max_wait_times_rate_and_a_denial_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    // Capacity 3, 2 tokens/s, at most 2.5 s of waiting: 3 free, then 5 booked, to -5.
    for i in 0..8 {
        let t = c.reserve("k", "3", "2", "1", "2.5", Some(T0));
        assert!(t.allowed, "reserver {i}: {t:?}");
        assert!(stored_tokens(&mut c, "k", 3.0) >= -5.0);
    }
    assert_eq!(hget(&mut c, "k", "tokens").as_deref(), Some("-5"));
    let before = fingerprint(&mut c, &["k"]);
    let t = c.reserve("k", "3", "2", "1", "2.5", Some(T0));
    // The same call is accepted once the wait is 2.5 s again: in 0.5 s.
    assert_eq!(t, take(false, -5.0, 0.5, 4.0));
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    let early = c.reserve("k", "3", "2", "1", "2.5", Some(&at(0.4)));
    assert!(!early.allowed, "{early:?}");
    assert!((early.retry_after - 0.1).abs() < 1e-6, "{early:?}");
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    let t = c.reserve("k", "3", "2", "1", "2.5", Some(&at(0.5)));
    assert_eq!(t, take(true, -5.0, 2.5, 4.0));
}

#[test]
fn with_any_rate_and_max_wait_the_debt_stays_within_max_wait_times_rate() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0xDEB7_0001);
    let mut now = T0F;
    for step in 0..600 {
        let key = format!("k{}", rng.below(4));
        let capacity = rng.pick(&["1", "3", "10", "2.5"]);
        let rate = rng.pick(&["0.5", "1", "1.6666666666666667", "7", "0.1"]);
        let max_wait = rng.pick(&["0", "0.3", "1", "2.5", "10"]);
        let n = rng.pick(&["1", "1", "2", "0.5", "3"]);
        now += rng.below(300) as f64 / 1000.0;
        let t = c.reserve(&key, capacity, rate, n, max_wait, Some(&format!("{now}")));
        let (rate, max_wait): (f64, f64) = (rate.parse().unwrap(), max_wait.parse().unwrap());
        assert!(finite(&t), "step {step}: {t:?}");
        if t.allowed {
            let floor = -(max_wait * rate) * (1.0 + 1e-12) - 1e-9;
            assert!(t.remaining >= floor, "step {step}: {t:?} below {floor}");
            assert!(
                t.retry_after >= 0.0 && t.retry_after <= max_wait * (1.0 + 1e-12) + 1e-9,
                "step {step}: {t:?}"
            );
        } else {
            assert!(t.retry_after > 0.0 || t.retry_after == -1.0, "{t:?}");
        }
        if c.q(&format!("EXISTS {key}")).int() == 1 {
            let tokens = stored_tokens(&mut c, &key, f64::INFINITY);
            assert!(tokens >= -(10.0 * 7.0) - 1e-9, "step {step}: {tokens}");
        }
    }
}

#[test]
fn denied_reserve_is_accepted_after_retry_after_and_not_noticeably_before() {
    let s = Server::start();
    let mut c = s.conn();
    let cases = [
        ("1.6666666666666667", "0.5"),
        ("0.3", "2"),
        ("7", "0.1"),
        ("1000", "0.0005"),
        ("0.001", "100"),
        ("2", "0"),
        ("3", "1e308"),
    ];
    for (i, (rate, max_wait)) in cases.iter().enumerate() {
        let key = format!("k{i}");
        let mut now = T0F;
        let mut waits = 0;
        for _ in 0..300 {
            let n = if i % 2 == 0 { "1" } else { "2" };
            let t = c.reserve(&key, "3", rate, n, max_wait, Some(&format!("{now}")));
            if t.allowed {
                continue;
            }
            if *max_wait == "1e308" {
                panic!("max_wait 1e308 at rate {rate}: denied {t:?}");
            }
            assert!(t.retry_after > 0.0, "{t:?}");
            let before = fingerprint(&mut c, &[&key]);
            let early = (t.retry_after * 0.99).min(t.retry_after - 1e-5).max(0.0);
            let probe = c.reserve(
                &key,
                "3",
                rate,
                n,
                max_wait,
                Some(&format!("{}", now + early)),
            );
            assert!(
                !probe.allowed,
                "rate {rate} max_wait {max_wait}: accepted {early} s into a wait of {}",
                t.retry_after
            );
            assert_eq!(fingerprint(&mut c, &[&key]), before);
            now += t.retry_after;
            let retry = c.reserve(&key, "3", rate, n, max_wait, Some(&format!("{now}")));
            assert!(
                retry.allowed,
                "rate {rate} max_wait {max_wait}: waited {} and was denied: {retry:?}",
                t.retry_after
            );
            waits += 1;
        }
        if *max_wait != "1e308" {
            assert!(waits > 50, "rate {rate}: only {waits} waits");
        }
    }
}

#[test]
fn reserve_of_more_than_capacity_is_never_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.reserve("k", "5", "1", "6", "1000000", Some(T0));
    assert_eq!(t, take(false, 5.0, -1.0, 0.0));
    assert_eq!(c.q("EXISTS k").int(), 0);
    bucket_in_debt(&mut c, "debt");
    let before = fingerprint(&mut c, &["debt"]);
    let t = c.reserve("debt", "2", "1", "2.5", "1e308", Some(T0));
    assert_eq!(t, take(false, -3.0, -1.0, 5.0));
    let t = c.reserve("debt", "2", "1", "9007199254740992", "1e308", Some(T0));
    assert_eq!(t, take(false, -3.0, -1.0, 5.0));
    assert_eq!(fingerprint(&mut c, &["debt"]), before);
}

#[test]
fn reserve_with_n_zero_reports_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.reserve("new", "10", "1", "0", "5", Some(T0));
    assert_eq!(t, take(true, 10.0, 0.0, 0.0));
    assert_eq!(c.q("EXISTS new").int(), 0);
    c.take("k", "10", "1", "4", Some(T0));
    let before = fingerprint(&mut c, &["k"]);
    let t = c.reserve("k", "10", "1", "0", "5", Some(&at(2.0)));
    assert_eq!(t, take(true, 8.0, 0.0, 2.0));
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    assert!(watch_survives(
        &s,
        &["k"],
        &["TB.RESERVE", "k", "10", "1", "0", "5", &at(2.0)]
    ));
}

#[test]
fn reserve_with_zero_max_wait_answers_as_take() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(0x0000_0A17);
    let mut now = T0F;
    for step in 0..500 {
        let i = rng.below(3);
        let (rk, tk) = (format!("r{i}"), format!("t{i}"));
        let capacity = rng.pick(&["5", "10", "2.5"]);
        let rate = rng.pick(&["0.5", "1", "1.6666666666666667", "3"]);
        let n = rng.pick(&["0", "1", "1", "2", "0.5", "3", "20"]);
        now += rng.below(500) as f64 / 1000.0 - 0.05;
        let now_text = format!("{now}");
        let r = c.reserve(&rk, capacity, rate, n, "0", Some(&now_text));
        let t = c.take(&tk, capacity, rate, n, Some(&now_text));
        let ctx = format!("step {step}: {capacity} {rate} {n} at {now_text}");
        assert_eq!(
            (r.allowed, r.remaining, r.reset_after),
            (t.allowed, t.remaining, t.reset_after),
            "{ctx}: reserve {r:?} take {t:?}"
        );
        assert!(
            (r.retry_after - t.retry_after).abs() < 1e-6,
            "{ctx}: {r:?} {t:?}"
        );
        assert_eq!(
            hgetall(&mut c, rk.as_bytes()),
            hgetall(&mut c, tk.as_bytes()),
            "{ctx}"
        );
    }
}

#[test]
fn an_earlier_now_waits_for_the_stored_time_and_never_rewinds_it() {
    let s = Server::start();
    let mut c = s.conn();
    assert!(c.reserve("k", "2", "1", "2", "0", Some(&at(5.0))).allowed);
    // A caller 5 s behind gets no refill: one token is 6 s away from its clock.
    let t = c.reserve("k", "2", "1", "1", "10", Some(T0));
    assert_eq!(t, take(true, -1.0, 6.0, 8.0));
    assert_eq!(hget(&mut c, "k", "last_refill_time").unwrap(), at(5.0));
    let t = c.reserve("k", "2", "1", "1", "6.5", Some(T0));
    assert_eq!(t, take(false, -1.0, 0.5, 8.0));
}

#[test]
fn extreme_arguments_store_only_finite_in_range_values() {
    let s = Server::start();
    let mut c = s.conn();
    let max = "9007199254740992";
    let cases = [
        (max, "0.000000001", max, "1e308"),
        (max, max, max, "1e308"),
        (max, "1e-9", "1", "1e308"),
        ("1", "0.000000001", "1", "1e308"),
        ("10", max, "10", "1e308"),
        (max, "1e-9", max, "1.7976931348623157e308"),
        ("1", "1e-9", "1", "4.9e-324"),
    ];
    for (i, (capacity, rate, n, max_wait)) in cases.iter().enumerate() {
        let key = format!("x{i}");
        let cap: f64 = capacity.parse().unwrap();
        for call in 0..6 {
            let r = c.cmd(&["TB.RESERVE", &key, capacity, rate, n, max_wait, T0]);
            let t = Take::from_reply(&r);
            let ctx = format!("{capacity} {rate} {n} {max_wait}, call {call}: {t:?}");
            assert!(finite(&t), "{ctx}");
            assert!(t.remaining >= -MAX && t.remaining <= cap, "{ctx}");
            assert!(t.reset_after >= 0.0, "{ctx}");
            assert!(t.retry_after >= 0.0 || t.retry_after == -1.0, "{ctx}");
            assert_eq!(
                c.cmd(&["EXISTS", &key]).int(),
                1,
                "{ctx}: the bucket vanished"
            );
            stored_tokens(&mut c, &key, cap);
            let pttl = c.cmd(&["PTTL", &key]).int();
            assert!(pttl == -1 || pttl > 0, "{ctx}: pttl {pttl}");
            // The bucket stays readable by every command.
            let q = c.take(&key, capacity, rate, "0", Some(T0));
            assert_eq!(q.remaining, t.remaining, "{ctx}");
            let p = c.peek(&key, capacity, rate, Some(T0));
            assert_eq!(p.remaining, t.remaining, "{ctx}");
        }
    }
    // A small bucket with the largest max_wait books every call: the bound is internal.
    for i in 0..50 {
        let t = c.reserve("small", "1", "1e-9", "1", "1e308", Some(T0));
        assert!(t.allowed, "call {i}: {t:?}");
        assert_eq!(t.remaining, -(i as f64), "{t:?}");
    }
    assert_eq!(hget(&mut c, "small", "tokens").as_deref(), Some("-49"));
}

#[test]
fn take_sees_the_debt_and_denies_until_it_is_repaid() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    let before = fingerprint(&mut c, &["k"]);
    // One token needs the 3 of debt repaid first: 4 s; full in 5 s.
    assert_eq!(
        c.take("k", "2", "1", "1", Some(T0)),
        take(false, -3.0, 4.0, 5.0)
    );
    assert_eq!(c.take("k", "2", "1", "0", Some(T0)).remaining, -3.0);
    let t = c.take("k", "2", "1", "1", Some(&at(3.5)));
    assert_eq!(t, take(false, 0.5, 0.5, 1.5));
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    assert_eq!(
        c.take("k", "2", "1", "1", Some(&at(4.0))),
        take(true, 0.0, 0.0, 2.0)
    );
}

#[test]
fn peek_and_mtake_see_the_debt_and_deny_until_it_is_repaid() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    let before = fingerprint(&mut c, &["k", "other"]);
    assert_eq!(c.peek("k", "2", "1", Some(T0)), take(false, -3.0, 4.0, 5.0));
    assert_eq!(
        c.peek("k", "2", "1", Some(&at(4.0))),
        take(true, 1.0, 0.0, 1.0)
    );
    let m = c.mtake(&[("other", "10", "1", "1"), ("k", "2", "1", "1")], Some(T0));
    assert_eq!(
        m,
        MTake {
            allowed: false,
            remaining: -3.0,
            retry_after: 4.0,
            reset_after: 5.0,
            keys: vec![take(true, 10.0, 0.0, 0.0), take(false, -3.0, 4.0, 5.0)],
        }
    );
    assert_eq!(fingerprint(&mut c, &["k", "other"]), before);
    let m = c.mtake(
        &[("other", "10", "1", "1"), ("k", "2", "1", "1")],
        Some(&at(4.0)),
    );
    assert!(m.allowed, "{m:?}");
    assert_eq!(m.keys[1], take(true, 0.0, 0.0, 2.0));
}

#[test]
fn the_seed_lua_script_agrees_with_take_on_a_bucket_in_debt() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    c.q("COPY k lua");
    c.q("COPY k mod");
    for offset in [1.0, 2.0, 3.0, 3.5, 4.0, 4.0, 4.5, 5.0, 5.0, 5.25, 7.0] {
        let now = at(offset);
        let r = c.cmd(&["EVAL", LUA_SEED, "1", "lua", "2", "1", "1", &now]);
        let t = c.take("mod", "2", "1", "1", Some(&now));
        let lua_tokens: f64 = r.array()[1].text().parse().unwrap();
        assert_eq!(
            r.array()[0].int() == 1,
            t.allowed,
            "at +{offset}: {r:?} {t:?}"
        );
        assert!(
            (lua_tokens - t.remaining).abs() < 1e-9,
            "at +{offset}: {r:?} {t:?}"
        );
        // The first admission comes exactly when the debt is repaid.
        if offset < 4.0 {
            assert!(!t.allowed, "at +{offset}: {t:?}");
        }
    }
}

#[test]
fn the_bench_lua_script_agrees_with_take_on_a_bucket_in_debt() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    c.q("COPY k lua");
    c.q("COPY k mod");
    for (offset, n) in [
        (0.0, "1"),
        (1.0, "0"),
        (2.0, "1"),
        (3.5, "2"),
        (4.0, "1"),
        (4.0, "1"),
        (5.5, "3"),
        (6.0, "2"),
    ] {
        let now = at(offset);
        let r = c.cmd(&["EVAL", LUA_BENCH, "1", "lua", "2", "1", n, &now]);
        let a = r.array();
        let lua = take(a[0].int() == 1, a[1].num(), a[2].num(), a[3].num());
        let t = c.take("mod", "2", "1", n, Some(&now));
        let ctx = format!("n {n} at +{offset}: lua {lua:?} take {t:?}");
        assert_eq!(
            (lua.allowed, lua.remaining),
            (t.allowed, t.remaining),
            "{ctx}"
        );
        assert!((lua.retry_after - t.retry_after).abs() < 1e-6, "{ctx}");
        assert!((lua.reset_after - t.reset_after).abs() < 1e-6, "{ctx}");
    }
}

#[test]
fn reserve_on_the_server_clock_books_the_next_token() {
    let s = Server::start();
    let mut c = s.conn();
    let t = c.reserve("k", "1", "1", "1", "5", None);
    assert_eq!(t, take(true, 0.0, 0.0, 1.0));
    let t = c.reserve("k", "1", "1", "1", "5", None);
    assert!(t.allowed, "{t:?}");
    assert!(t.retry_after > 0.5 && t.retry_after < 1.0 + 1e-5, "{t:?}");
    assert!(t.remaining >= -1.0 && t.remaining < -0.5, "{t:?}");
    assert!(t.reset_after > 1.5 && t.reset_after < 2.0 + 1e-5, "{t:?}");
    let last = hget(&mut c, "k", "last_refill_time").unwrap();
    let (_, micros) = last.split_once('.').unwrap();
    assert_eq!(micros.len(), 6, "{last}");
    // Denied on the server clock: a positive wait; never: -1.
    let t = c.reserve("k", "1", "1", "1", "0.1", None);
    assert!(!t.allowed && t.retry_after > 0.5, "{t:?}");
    let t = c.reserve("k", "1", "1", "2", "100", None);
    assert_eq!(t.retry_after, -1.0, "{t:?}");
}

#[test]
fn a_reservation_gets_a_ttl_covering_the_time_to_full() {
    let s = Server::start();
    let mut c = s.conn();
    for _ in 0..4 {
        c.reserve("k", "2", "1", "1", "100", Some(T0));
    }
    let t = c.reserve("k", "2", "1", "1", "100", Some(T0));
    assert_eq!(t, take(true, -3.0, 3.0, 5.0));
    let pttl = c.q("PTTL k").int();
    assert!(
        (4900..=5000 * 5 / 4 + 1000 + 100).contains(&pttl),
        "pttl {pttl}"
    );
}

#[test]
fn bad_arguments_get_clear_errors_and_change_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    c.q("SET str v");
    let keys = ["k", "str", "new"];
    let cases: &[(&[&str], &str)] = &[
        (&["k", "10", "1", "1"], ARITY),
        (&["k"], ARITY),
        (&["k", "10", "1", "1", "5", T0, "extra"], ARITY),
        (
            &["k", "x", "1", "1", "5"],
            "ERR capacity is not a valid number",
        ),
        (
            &["k", "0", "1", "1", "5"],
            "ERR capacity must be > 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "inf", "1", "5"],
            "ERR rate is not a valid number",
        ),
        (
            &["k", "10", "0", "1", "5"],
            "ERR rate must be >= 1e-9 and <= 9007199254740992 tokens per second",
        ),
        (&["k", "10", "1", "", "5"], "ERR n is not a valid number"),
        (
            &["k", "10", "1", "-1", "5"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "1e308", "5"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "9007199254740994", "5"],
            "ERR n must be >= 0 and <= 9007199254740992",
        ),
        (
            &["k", "10", "1", "1", "x"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", ""],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", " 5"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "inf"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "nan"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "1e309"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "0x10"],
            "ERR max_wait is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "-1"],
            "ERR max_wait must be >= 0 seconds",
        ),
        (
            &["k", "10", "1", "1", "-0.001"],
            "ERR max_wait must be >= 0 seconds",
        ),
        (
            &["k", "10", "1", "1", "-1e308"],
            "ERR max_wait must be >= 0 seconds",
        ),
        (
            &["k", "10", "1", "1", "5", "now"],
            "ERR now is not a valid number",
        ),
        (
            &["k", "10", "1", "1", "5", "1764456268123"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (
            &["k", "10", "1", "1", "5", "-1"],
            "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800",
        ),
        (&["str", "10", "1", "1", "5"], WRONGTYPE),
    ];
    assert_errors_change_nothing(&mut c, &["TB.RESERVE"], &keys, cases);
}

#[test]
fn a_corrupt_bucket_is_reported_not_reset() {
    let s = Server::start();
    let mut c = s.conn();
    let cases: &[(&[&str], &str)] = &[
        (&["tokens", "abc", "last_refill_time", "1"], CORRUPT_TOKENS),
        (&["tokens", "-inf", "last_refill_time", "1"], CORRUPT_TOKENS),
        (
            &["tokens", "-9007199254740994", "last_refill_time", "1"],
            CORRUPT_TOKENS,
        ),
        (
            &["tokens", "-1e20", "last_refill_time", "1"],
            CORRUPT_TOKENS,
        ),
        (&["tokens", "5", "last_refill_time", "x"], CORRUPT_TIME),
        (&["tokens", "5"], CORRUPT_TIME),
        (&["last_refill_time", "5"], CORRUPT_TOKENS),
    ];
    for (i, (fields, want)) in cases.iter().enumerate() {
        let key = format!("bad{i}");
        let mut hset = vec!["HSET", key.as_str()];
        hset.extend_from_slice(fields);
        c.cmd(&hset);
        let before = dump_of(&mut c, &key);
        for n in ["1", "0"] {
            let r = c.cmd(&["TB.RESERVE", &key, "10", "1", n, "5", T0]);
            assert_eq!(r, Reply::Error(want.to_string()), "{fields:?} n={n}");
        }
        assert_eq!(dump_of(&mut c, &key), before);
    }
    // Exactly -2^53 is the deepest debt that is still a bucket.
    c.q("HSET deep tokens -9007199254740992 last_refill_time 1764456268");
    let t = c.reserve("deep", "10", "1", "1", "0", Some("1764456268"));
    assert_eq!(t.remaining, -MAX);
    assert!(!t.allowed);
}

fn dump_of(c: &mut Conn, key: &str) -> Option<Vec<u8>> {
    common::dump(c, key.as_bytes())
}

#[test]
fn only_reservations_that_write_signal_watchers_and_emit_events() {
    let s = Server::start();
    let mut c = s.conn();
    bucket_in_debt(&mut c, "k");
    for args in [
        ["TB.RESERVE", "k", "2", "1", "1", "3", T0], // denied: 4 s away
        ["TB.RESERVE", "k", "2", "1", "3", "100", T0], // never
        ["TB.RESERVE", "k", "2", "1", "0", "100", T0], // n = 0
        ["TB.RESERVE", "k", "2", "x", "1", "100", T0], // error
    ] {
        assert!(watch_survives(&s, &["k"], &args), "{args:?}");
    }
    let events = notifications_during(&s, |c| {
        c.reserve("k", "2", "1", "1", "3", Some(T0));
        c.reserve("k", "2", "1", "3", "100", Some(T0));
        c.q(&format!("TB.RESERVE k 2 x 1 100 {T0}"));
    });
    assert_eq!(events, Vec::<String>::new());
    // A booking into debt is a write.
    assert!(!watch_survives(
        &s,
        &["k"],
        &["TB.RESERVE", "k", "2", "1", "1", "100", T0]
    ));
    let events = notifications_during(&s, |c| {
        assert!(c.reserve("k", "2", "1", "1", "100", Some(T0)).allowed);
    });
    assert_eq!(
        events[..2],
        ["__keyspace@0__:k hset", "__keyevent@0__:hset k"]
    );
}

#[test]
fn reserve_replicates_its_effects_and_nothing_when_denied() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    bucket_in_debt(&mut c, "k");
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = repl_offset(&mut c);
    for line in [
        format!("TB.RESERVE k 2 1 1 3 {T0}"),
        format!("TB.RESERVE k 2 1 3 100 {T0}"),
        format!("TB.RESERVE k 2 1 0 100 {T0}"),
        format!("TB.RESERVE k 2 1 1 -1 {T0}"),
        "TB.RESERVE k 2 1 1".to_string(),
    ] {
        c.q(&line);
        assert_eq!(repl_offset(&mut c), before, "{line}");
    }
    assert!(c.reserve("k", "2", "1", "1", "100", Some(&at(0.5))).allowed);
    assert!(repl_offset(&mut c) > before);
    assert!(c.reserve("srv", "2", "1", "3", "100", None).retry_after == -1.0);
    assert!(c.reserve("srv", "2", "1", "2", "100", None).allowed);
    assert!(c.reserve("srv", "2", "1", "1", "100", None).allowed);
    let want = assert_replica_matches(&mut c, &replica);
    assert_eq!(want.len(), 2);
}

#[test]
fn at_the_memory_limit_reserve_gets_the_standard_oom_error() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    let r = c.q(&format!("TB.RESERVE k 10 1 1 5 {T0}"));
    assert_eq!(
        r,
        Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into())
    );
    c.q("CONFIG SET maxmemory 0");
    assert_eq!(c.q("EXISTS k").int(), 0);
}

#[test]
fn command_metadata_declares_the_key_flags_and_docs() {
    let s = Server::start();
    let mut c = s.conn();
    let (arity, flags, specs) = command_info(&mut c, "tb.reserve");
    assert_eq!(arity, -6);
    for f in ["write", "denyoom", "fast"] {
        assert!(flags.contains(&f.to_string()), "{flags:?}");
    }
    assert!(specs.contains("RW"), "{specs}");
    assert_eq!(
        c.q("COMMAND GETKEYS tb.reserve user:42 10 1 1 5"),
        Reply::Array(vec![Reply::Bulk(b"user:42".to_vec())])
    );
    assert_documented(
        &mut c,
        "tb.reserve",
        &[
            "key", "capacity", "rate", "n", "max_wait", "now", "optional",
        ],
    );
}

#[test]
fn info_counts_reserve_calls_allowed_denied_and_errors() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(tb_counters(&mut c, "reserve"), [0, 0, 0, 0]);
    c.reserve("k", "1", "1", "1", "1", Some(T0)); // allowed
    c.reserve("k", "1", "1", "1", "1", Some(T0)); // allowed, into debt
    c.reserve("k", "1", "1", "1", "1", Some(T0)); // denied
    c.reserve("k", "1", "1", "2", "1", Some(T0)); // never: denied
    c.q("TB.RESERVE k 1 1 1 x"); // error
    c.q("TB.RESERVE k 1 1 1 -1"); // error
    assert_eq!(tb_counters(&mut c, "reserve"), [6, 2, 2, 2]);
    assert_eq!(tb_counters(&mut c, "take"), [0, 0, 0, 0]);
}

#[test]
fn reserve_refuses_a_wait_half_a_microsecond_over_max_wait() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(
        c.take("k", "1", "1", "1", Some("1000")),
        take(true, 0.0, 0.0, 1.0)
    );
    let before = fingerprint(&mut c, &["k"]);
    // The next token is 1 s away; max_wait is 0.5 µs shorter: refused, nothing written,
    // retry when the wait has shrunk to max_wait.
    let t = c.reserve("k", "1", "1", "1", "0.9999995", Some("1000"));
    assert!(!t.allowed, "{t:?}");
    assert_eq!(t.remaining, 0.0);
    assert!((t.retry_after - 5e-7).abs() < 1e-9, "{t:?}");
    assert_eq!(fingerprint(&mut c, &["k"]), before);
    // A max_wait of exactly the wait books it.
    assert_eq!(
        c.reserve("k", "1", "1", "1", "1", Some("1000")),
        take(true, -1.0, 1.0, 2.0)
    );
}

#[test]
fn reserve_on_the_server_clock_never_books_past_max_wait() {
    let s = Server::start();
    let mut c = s.conn();
    // Empty the bucket on the server clock, then ask for a wait of up to 0.9999995 s at
    // 1 token/s: the wait is a whole second less the whole microseconds elapsed since the
    // take, so it is booked only once one has passed, and never reported above max_wait
    // (the server clock's rounding up to whole microseconds must not push it over).
    for i in 0..200 {
        let key = format!("s{i}");
        assert!(c.take(&key, "1", "1", "1", None).allowed);
        let t = c.reserve(&key, "1", "1", "1", "0.9999995", None);
        if t.allowed {
            assert!(t.retry_after <= 0.9999995, "{t:?}");
        } else {
            assert!(t.retry_after > 0.0 && t.retry_after <= 1e-6, "{t:?}");
        }
    }
}
