//! Many clients hammering one bucket at one instant: exactly `capacity` are admitted,
//! whichever commands they mix (TB.TAKE, TB.MTAKE all-or-nothing over several buckets,
//! TB.RESERVE, TB.REFUND, TB.PEEK), and reservations queue up one interval apart.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use common::{Conn, MTake, Reply, Server, Take};

fn hammer(
    server: &Server,
    threads: usize,
    per_thread: usize,
    args: &'static [&'static str],
    pipelined: bool,
) -> usize {
    let allowed = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let allowed = allowed.clone();
            let mut c = server.conn();
            scope.spawn(move || {
                if pipelined {
                    for _ in 0..per_thread {
                        c.send(args);
                    }
                }
                for _ in 0..per_thread {
                    let r = if pipelined { c.read() } else { c.cmd(args) };
                    match r.array()[0] {
                        Reply::Int(1) => {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                        Reply::Int(0) => {}
                        ref other => panic!("{other:?}"),
                    }
                }
            });
        }
    });
    allowed.load(Ordering::Relaxed)
}

#[test]
fn one_instant_many_clients_admit_exactly_capacity() {
    let s = Server::start();
    let n = hammer(
        &s,
        32,
        60,
        &["TB.TAKE", "hot", "500", "10", "1", "1764456268.5"],
        false,
    );
    assert_eq!(n, 500);
}

#[test]
fn pipelined_clients_admit_exactly_capacity() {
    let s = Server::start();
    let n = hammer(
        &s,
        16,
        200,
        &["TB.TAKE", "hot", "1000", "3", "1", "1764456268.5"],
        true,
    );
    assert_eq!(n, 1000);
}

#[test]
fn server_clock_clients_admit_capacity_plus_refill_only() {
    let s = Server::start();
    // Rate 1e-9/s: no whole token refills during the test, so exactly capacity pass.
    let n = hammer(
        &s,
        24,
        80,
        &["TB.TAKE", "hot", "777", "0.000000001", "1"],
        false,
    );
    assert_eq!(n, 777);
}

#[test]
fn fractional_takes_admit_exactly_what_fits() {
    let s = Server::start();
    // 0.25 is exact in binary: 100 / 0.25 = 400 takes fit.
    let n = hammer(
        &s,
        20,
        40,
        &["TB.TAKE", "hot", "100", "1", "0.25", "1764456268.5"],
        false,
    );
    assert_eq!(n, 400);
}

// ---------------------------------------------------------------------------------------
// Every command on shared buckets

const T0: &str = "1764456268.5";

/// Checks a TB.MTAKE reply is consistent with itself: allowed only if every key was, the
/// smallest remaining, the largest waits.
fn check_mtake(m: &MTake, what: &str) {
    let all = m.total();
    let keys = &m.keys;
    assert_eq!(all.allowed, keys.iter().all(|k| k.allowed), "{what}: {m:?}");
    let min_remaining = keys
        .iter()
        .map(|k| k.remaining)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(all.remaining, min_remaining, "{what}: {m:?}");
    let max_reset = keys.iter().map(|k| k.reset_after).fold(0.0, f64::max);
    assert_eq!(all.reset_after, max_reset, "{what}: {m:?}");
    if all.allowed {
        assert_eq!(all.retry_after, 0.0, "{what}: {m:?}");
    } else {
        let max_retry = keys.iter().map(|k| k.retry_after).fold(0.0, f64::max);
        assert_eq!(all.retry_after, max_retry, "{what}: {m:?}");
        // Denied: nothing was deducted, so nothing went below zero.
        assert!(keys.iter().all(|k| k.remaining >= 0.0), "{what}: {m:?}");
    }
}

/// Admissions counted per bucket (net of refunds) by the threads of one test.
#[derive(Debug, Default)]
struct Admitted {
    a: usize,
    b: usize,
    c: usize,
    mtakes: usize,
    refunds: usize,
}

/// Sends `args` `times` times on one connection, pipelined, and returns the replies.
fn pipelined(c: &mut Conn, args: &[String], times: usize) -> Vec<Reply> {
    for _ in 0..times {
        c.send(args);
    }
    (0..times).map(|_| c.read()).collect()
}

fn line(text: &str) -> Vec<String> {
    text.split_whitespace().map(String::from).collect()
}

fn allowed(r: &Reply) -> bool {
    match r.array()[0] {
        Reply::Int(1) => true,
        Reply::Int(0) => false,
        ref other => panic!("{r:?}: {other:?}"),
    }
}

#[test]
fn mixed_commands_at_one_instant_admit_exactly_capacity_and_no_mtake_is_half_applied() {
    let s = Server::start();
    // Three buckets of one user at one instant (no refill): A (300) and B (200) are
    // shared by every command, C (120) is only ever taken from by 3-key MTAKEs.
    let (a, b, c) = ("{u}:a", "{u}:b", "{u}:c");
    let mtake_ab = line(&format!("TB.MTAKE 2 {a} {b} 300 1 1 200 1 1 {T0}"));
    let mtake_ba = line(&format!("TB.MTAKE 2 {b} {a} 200 1 1 300 1 1 {T0}"));
    let mtake_cab = line(&format!(
        "TB.MTAKE 3 {c} {a} {b} 120 1 1 300 1 1 200 1 1 {T0}"
    ));
    let take = |key: &str, cap: &str| line(&format!("TB.TAKE {key} {cap} 1 1 {T0}"));
    // max_wait 0: a reservation only when the token is there now, like a take.
    let reserve = |key: &str, cap: &str| line(&format!("TB.RESERVE {key} {cap} 1 1 0 {T0}"));
    let refund = |key: &str, cap: &str| line(&format!("TB.REFUND {key} {cap} 1 1 {T0}"));
    let peek = |key: &str, cap: &str| line(&format!("TB.PEEK {key} {cap} 1 {T0}"));

    // In lock-step rounds, every thread sends a batch of its command, all at once; a
    // round asks A and B for about 40 tokens each, so both run dry half-way, while
    // MTAKEs, takes and refunds still interleave.
    const THREADS: usize = 13;
    const ROUNDS: usize = 12;
    const BATCH: usize = 5;
    let total = Mutex::new(Admitted::default());
    let round_done = Barrier::new(THREADS);
    std::thread::scope(|scope| {
        for role in 0..THREADS {
            let (total, round_done) = (&total, &round_done);
            let (mtake_ab, mtake_ba, mtake_cab) = (&mtake_ab, &mtake_ba, &mtake_cab);
            let mut conn = s.conn();
            scope.spawn(move || {
                let mut mine = Admitted::default();
                let count_mtakes = |replies: Vec<Reply>, with_c: bool, mine: &mut Admitted| {
                    for r in &replies {
                        let m = MTake::from_reply(r);
                        check_mtake(&m, "TB.MTAKE");
                        if m.allowed {
                            mine.mtakes += 1;
                            mine.a += 1;
                            mine.b += 1;
                            mine.c += usize::from(with_c);
                        }
                    }
                };
                let count = |replies: Vec<Reply>| replies.iter().filter(|r| allowed(r)).count();
                for _ in 0..ROUNDS {
                    round_done.wait();
                    match role {
                        0..=3 => {
                            let args = if role % 2 == 0 { mtake_ab } else { mtake_ba };
                            count_mtakes(pipelined(&mut conn, args, BATCH), false, &mut mine);
                        }
                        4 | 5 => {
                            count_mtakes(pipelined(&mut conn, mtake_cab, BATCH), true, &mut mine)
                        }
                        6 => mine.a += count(pipelined(&mut conn, &take(a, "300"), BATCH)),
                        7 => mine.b += count(pipelined(&mut conn, &take(b, "200"), BATCH)),
                        8 => mine.a += count(pipelined(&mut conn, &reserve(a, "300"), BATCH)),
                        9 => mine.b += count(pipelined(&mut conn, &reserve(b, "200"), BATCH)),
                        10 | 11 => {
                            // Take a token and, when it was granted, give it back: a
                            // refund after a granted take never meets a full bucket.
                            let (key, cap) = if role == 10 { (a, "300") } else { (b, "200") };
                            for _ in 0..BATCH {
                                if allowed(&conn.cmd(&take(key, cap))) {
                                    let r = Take::from_reply(&conn.cmd(&refund(key, cap)));
                                    assert!(r.allowed && r.remaining >= 1.0, "{r:?}");
                                    mine.refunds += 1;
                                }
                            }
                        }
                        _ => {
                            // Reads see a whole number of tokens within the bucket.
                            for _ in 0..BATCH {
                                for (key, cap) in [(a, 300.0), (b, 200.0), (c, 120.0)] {
                                    let r = Take::from_reply(
                                        &conn.cmd(&peek(key, &f64::to_string(&cap))),
                                    );
                                    assert!(
                                        r.remaining >= 0.0
                                            && r.remaining <= cap
                                            && r.remaining == r.remaining.floor(),
                                        "{key}: {r:?}"
                                    );
                                }
                            }
                        }
                    }
                }
                // Once every refund is back, the plain takers empty what is left of A
                // and B (as many tries as the capacity), with 3-key MTAKEs alongside.
                round_done.wait();
                match role {
                    6 => mine.a += count(pipelined(&mut conn, &take(a, "300"), 300)),
                    7 => mine.b += count(pipelined(&mut conn, &take(b, "200"), 200)),
                    4 => count_mtakes(pipelined(&mut conn, mtake_cab, 50), true, &mut mine),
                    _ => {}
                }
                let mut t = total.lock().unwrap();
                t.a += mine.a;
                t.b += mine.b;
                t.c += mine.c;
                t.mtakes += mine.mtakes;
                t.refunds += mine.refunds;
            });
        }
    });
    let total = total.into_inner().unwrap();
    eprintln!("admitted: {total:?}");
    let mut conn = s.conn();
    let tokens = |conn: &mut Conn, key: &str| -> f64 {
        common::hget(conn, key, "tokens")
            .unwrap_or_else(|| panic!("{key} was never written"))
            .parse()
            .unwrap()
    };
    // What each bucket holds is its capacity less what was admitted from it: no MTAKE
    // took from one bucket without the others, none was admitted without taking.
    assert_eq!(tokens(&mut conn, a), 300.0 - total.a as f64, "{total:?}");
    assert_eq!(tokens(&mut conn, b), 200.0 - total.b as f64, "{total:?}");
    assert_eq!(tokens(&mut conn, c), 120.0 - total.c as f64, "{total:?}");
    // A and B were emptied: exactly capacity admitted from each.
    assert_eq!((total.a, total.b), (300, 200), "{total:?}");
    // (The first round alone, with every bucket well stocked, admits MTAKEs of both
    // kinds and take-refund pairs.)
    assert!(
        total.mtakes >= 6 * BATCH && total.c >= 2 * BATCH && total.refunds >= 2 * BATCH,
        "{total:?}"
    );
    // TB.PEEK reads the same.
    let p = Take::from_reply(&conn.q(&format!("TB.PEEK {c} 120 1 {T0}")));
    assert_eq!(p.remaining, 120.0 - total.c as f64, "{p:?}");
}

/// Sorted waits and remaining counts of the allowed reservations, and the replies of the
/// denied ones.
fn reserve_concurrently(
    s: &Server,
    threads: usize,
    per_thread: usize,
    args: &[String],
) -> (Vec<f64>, Vec<f64>, Vec<Take>) {
    let replies = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let mut conn = s.conn();
            let replies = &replies;
            scope.spawn(move || {
                let got: Vec<Take> = pipelined(&mut conn, args, per_thread)
                    .iter()
                    .map(Take::from_reply)
                    .collect();
                replies.lock().unwrap().extend(got);
            });
        }
    });
    let replies = replies.into_inner().unwrap();
    let (granted, denied): (Vec<Take>, Vec<Take>) = replies.into_iter().partition(|t| t.allowed);
    let mut waits: Vec<f64> = granted.iter().map(|t| t.retry_after).collect();
    waits.sort_by(f64::total_cmp);
    let mut remaining: Vec<f64> = granted.iter().map(|t| t.remaining).collect();
    remaining.sort_by(|x, y| y.total_cmp(x));
    (waits, remaining, denied)
}

/// `waits[i]` is `i - zeros` intervals of `1 / rate` (0 for the first `zeros`), never
/// early and at most a few float steps late: every caller got its own slot.
fn assert_one_interval_apart(waits: &[f64], zeros: usize, rate: f64) {
    for (i, &w) in waits.iter().enumerate() {
        let want = if i < zeros {
            0.0
        } else {
            (i + 1 - zeros) as f64 / rate
        };
        assert!(
            w >= want && w < want + 1e-5,
            "wait {i} is {w}, not {want}: {waits:?}"
        );
    }
    assert!(
        waits.windows(2).all(|p| p[0] < p[1] || p[1] == 0.0),
        "two callers share a slot: {waits:?}"
    );
}

#[test]
fn concurrent_reservations_at_one_instant_get_distinct_waits_one_interval_apart() {
    let s = Server::start();
    // Capacity 1 at 4 tokens/s: waits 0, 0.25, 0.5, ... for 16 x 8 callers.
    let (waits, remaining, denied) =
        reserve_concurrently(&s, 16, 8, &line(&format!("TB.RESERVE one 1 4 1 1000 {T0}")));
    assert!(denied.is_empty(), "{denied:?}");
    assert_eq!(waits.len(), 128);
    assert_one_interval_apart(&waits, 1, 4.0);
    let want: Vec<f64> = (0..128).map(|i| -(i as f64)).collect();
    assert_eq!(remaining, want);

    // Capacity 5 at 2 tokens/s: five callers go now, then 0.5, 1, 1.5, ...
    let (waits, remaining, denied) = reserve_concurrently(
        &s,
        16,
        8,
        &line(&format!("TB.RESERVE five 5 2 1 1000 {T0}")),
    );
    assert!(denied.is_empty(), "{denied:?}");
    assert_eq!(waits.len(), 128);
    assert_one_interval_apart(&waits, 5, 2.0);
    let want: Vec<f64> = (0..128).map(|i| 4.0 - i as f64).collect();
    assert_eq!(remaining, want);

    // A longest wait of 10.1 s at 4 tokens/s: the callers whose turn comes within it
    // (waits 0 to 10 s: 41) are admitted, every other one is told when to retry.
    let (waits, remaining, denied) = reserve_concurrently(
        &s,
        16,
        8,
        &line(&format!("TB.RESERVE bounded 1 4 1 10.1 {T0}")),
    );
    assert_eq!(waits.len(), 41, "{waits:?}");
    assert_one_interval_apart(&waits, 1, 4.0);
    assert_eq!(remaining.last(), Some(&-40.0));
    assert_eq!(denied.len(), 128 - 41);
    for t in &denied {
        // The next caller's turn is 41 intervals away (10.25 s): 0.15 s too far.
        assert_eq!(t.remaining, -40.0, "{t:?}");
        assert!(
            t.retry_after >= 0.15 - 1e-9 && t.retry_after < 0.15 + 1e-5,
            "{t:?}"
        );
    }
}
