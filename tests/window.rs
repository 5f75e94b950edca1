//! TB.WINDOW's contract (issue 11), checked against a real redis-server with the module
//! loaded: `TB.WINDOW key limit window n [now] [FIXED | SLIDING | LOG]`, replying
//! `[allowed, remaining, retry_after, reset_after]` like TB.TAKE.
//!
//! - FIXED: one counter per aligned window (a hash `start`, `count`); admits 2N across a
//!   window boundary, as the notes' INCR + EXPIRE does.
//! - SLIDING (the default): the current and previous aligned windows' counts (a hash
//!   `start`, `counts` = `"<count> <previous>"`), the previous weighted by overlap. Keys
//!   written as `start`, `count`, `previous` by earlier builds are read, and rewritten.
//! - LOG: a sorted set, one member `<score>-<k>` per admitted request, scored by its time
//!   in whole microseconds since the epoch (`now` rounded to the nearest one); exact.
//!
//! Most calls pass an explicit `now` on a window-aligned base, `B` (a multiple of 60 and of
//! every window used with it), so every window start and wait is exact and readable.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{
    Conn, ReplStream, Reply, Rng, Server, Take, WRONGTYPE, assert_each_seen,
    assert_replicas_hold_the_masters_bytes, assert_same_dumps, bulk_reply, command_docs,
    command_info, doc_field, double_reply, dumps, fingerprint, hgetall, lasting,
    notifications_during, repl_offset, server_ms, start_aof_server, start_master, start_replica,
    start_two_node_cluster, take as reply, tb_counters, watch_survives, without,
};

/// A multiple of 60 (2025-11-29 22:44:00 UTC): the aligned windows of 60 s (and of 0.5 s,
/// 7.5 s, 3600 s... every window below whose multiples it is) start at `B + k * window`.
const B: f64 = 1_764_456_240.0;

/// `B + offset` as the shortest round-trip text, as a client's `time.time()` is sent.
fn at(offset: f64) -> String {
    format!("{}", B + offset)
}

/// One limiter: a key, its limit and window, and the mode word ("" sends none).
#[derive(Clone, Copy)]
struct Lim<'a> {
    key: &'a str,
    limit: &'a str,
    window: &'a str,
    mode: &'a str,
}

impl<'a> Lim<'a> {
    const fn new(key: &'a str, limit: &'a str, window: &'a str, mode: &'a str) -> Self {
        Lim {
            key,
            limit,
            window,
            mode,
        }
    }

    /// `TB.WINDOW key limit window n [now] [mode]`, `now` absolute seconds.
    fn args(&self, n: &str, now: Option<f64>) -> Vec<String> {
        let mut args: Vec<String> = ["TB.WINDOW", self.key, self.limit, self.window, n]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(now.map(|t| format!("{t}")));
        if !self.mode.is_empty() {
            args.push(self.mode.to_string());
        }
        args
    }

    /// A call at `now` (absolute seconds), decoded.
    fn at(&self, c: &mut Conn, n: &str, now: f64) -> Take {
        let r = c.cmd(&self.args(n, Some(now)));
        Take::from_reply(&r)
    }

    /// A call on the server's clock, decoded.
    fn srv(&self, c: &mut Conn, n: &str) -> Take {
        let r = c.cmd(&self.args(n, None));
        Take::from_reply(&r)
    }

    fn limit_f(&self) -> f64 {
        self.limit.parse().unwrap()
    }

    fn window_f(&self) -> f64 {
        self.window.parse().unwrap()
    }
}

/// HGETALL as sorted (field, value) text pairs.
fn hash(c: &mut Conn, key: &str) -> Vec<(String, String)> {
    hgetall(c, key.as_bytes())
        .into_iter()
        .map(|(f, v)| (String::from_utf8(f).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

/// A sorted set's (member, score text) pairs in order.
fn zset(c: &mut Conn, key: &str) -> Vec<(String, String)> {
    let r = c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
    r.array()
        .chunks(2)
        .map(|p| (p[0].text(), p[1].text()))
        .collect()
}

/// Expected (member, score) pairs: `count` entries at `score` numbered from `first`, in
/// ZRANGE's order (one score: the members' byte order, so `-10` before `-2`).
fn entries(score: &str, first: usize, count: usize) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = (first..first + count)
        .map(|k| (format!("{score}-{k}"), score.to_string()))
        .collect();
    out.sort();
    out
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The server's clock in µs.
fn server_micros(c: &mut Conn) -> u64 {
    let t = c.q("TIME");
    let a = t.array();
    a[0].text().parse::<u64>().unwrap() * 1_000_000 + a[1].text().parse::<u64>().unwrap()
}

/// The key's absolute expiry covers `want_ms` from the call (made between `before` and
/// `after`, server ms) and is at most the module's slack (25% + 1 s) more.
fn assert_expiry(c: &mut Conn, key: &str, before: i64, after: i64, want_ms: i64) {
    let at = c.cmd(&["PEXPIRETIME", key]).int();
    assert!(
        at >= before + want_ms && at <= after + want_ms + want_ms / 4 + 1000,
        "{key}: expires at {at}, want {want_ms} ms after [{before}, {after}] (+25% + 1 s)"
    );
}

const FIXED_NOT_SLIDING: &str = "ERR key holds a FIXED window, not a SLIDING one";
const SLIDING_NOT_FIXED: &str = "ERR key holds a SLIDING window, not a FIXED one";
const BUCKET_NOT_WINDOW: &str = "ERR key holds a token bucket, not a TB.WINDOW window";
const WINDOW_NOT_BUCKET: &str = "ERR key holds a TB.WINDOW window, not a token bucket";
const CORRUPT_LOG: &str =
    "ERR window log is corrupt: an entry's score is not a valid time in microseconds";
const CORRUPT_START: &str =
    "ERR window state is corrupt: field 'start' is not a valid time in seconds";
const CORRUPT_COUNT: &str = "ERR window state is corrupt: field 'count' is not a valid count";
const CORRUPT_PREVIOUS: &str = "ERR window state is corrupt: field 'previous' is not a valid count";
const CORRUPT_COUNTS: &str = "ERR window state is corrupt: field 'counts' is not two valid counts";

// ---------------------------------------------------------------------------------------
// Reply fields, mode by mode

#[test]
fn fixed_counts_in_the_aligned_window_and_replies_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    let f = Lim::new("f", "3", "60", "FIXED");
    // The window [B, B + 60): remaining falls, reset_after is the time to its end.
    assert_eq!(f.at(&mut c, "1", B), reply(true, 2.0, 0.0, 60.0));
    assert_eq!(
        hash(&mut c, "f"),
        pairs(&[("count", "1"), ("start", "1764456240")])
    );
    assert_eq!(f.at(&mut c, "1", B + 10.0), reply(true, 1.0, 0.0, 50.0));
    assert_eq!(f.at(&mut c, "1", B + 20.0), reply(true, 0.0, 0.0, 40.0));
    // Full: denied until the window ends, exactly.
    assert_eq!(f.at(&mut c, "1", B + 30.0), reply(false, 0.0, 30.0, 30.0));
    assert_eq!(f.at(&mut c, "0", B + 30.0), reply(true, 0.0, 0.0, 30.0));
    assert_eq!(f.at(&mut c, "1", B + 59.5), reply(false, 0.0, 0.5, 0.5));
    assert_eq!(f.at(&mut c, "4", B + 59.5), reply(false, 0.0, -1.0, 0.5));
    // The next window starts empty, whatever the last one held.
    assert_eq!(f.at(&mut c, "1", B + 60.0), reply(true, 2.0, 0.0, 60.0));
    assert_eq!(
        hash(&mut c, "f"),
        pairs(&[("count", "1"), ("start", "1764456300")])
    );
    // 3 more do not fit before B + 120; 2 do.
    assert_eq!(f.at(&mut c, "3", B + 60.0), reply(false, 2.0, 60.0, 60.0));
    assert_eq!(f.at(&mut c, "2", B + 90.0), reply(true, 0.0, 0.0, 30.0));
    // Fractional costs count as they are.
    assert_eq!(f.at(&mut c, "2.5", B + 200.0), reply(true, 0.5, 0.0, 40.0));
    assert_eq!(
        hash(&mut c, "f"),
        pairs(&[("count", "2.5"), ("start", "1764456420")])
    );
    assert_eq!(f.at(&mut c, "0.5", B + 201.0), reply(true, 0.0, 0.0, 39.0));
    assert_eq!(
        f.at(&mut c, "0.25", B + 202.0),
        reply(false, 0.0, 38.0, 38.0)
    );
    // A fractional window: [B + 0.5, B + 1) holds B + 0.75.
    let half = Lim::new("half", "2", "0.5", "FIXED");
    assert_eq!(half.at(&mut c, "1", B + 0.75), reply(true, 1.0, 0.0, 0.25));
    assert_eq!(
        hash(&mut c, "half"),
        pairs(&[("count", "1"), ("start", "1764456240.5")])
    );
    assert_eq!(
        half.at(&mut c, "2", B + 0.875),
        reply(false, 1.0, 0.125, 0.125)
    );
}

/// The start of the aligned window holding `t`: the largest `j * window` (as rounded)
/// not above `t`.
fn aligned_start(t: f64, window: f64) -> f64 {
    let mut j = (t / window).floor();
    loop {
        if j * window > t {
            j -= 1.0;
        } else if (j + 1.0) * window <= t {
            j += 1.0;
        } else {
            return j * window;
        }
    }
}

#[test]
fn windows_are_aligned_to_multiples_of_the_window_since_the_epoch() {
    let s = Server::start();
    let mut c = s.conn();
    let now = B + 12.345;
    for (i, window) in [
        "7.3",
        "0.3",
        "86400",
        "0.001",
        "1000000",
        "1000000000",
        "1000000000000",
    ]
    .iter()
    .enumerate()
    {
        let w: f64 = window.parse().unwrap();
        let start = aligned_start(now, w);
        let end = aligned_start(start + 1.5 * w, w);
        for (mode, reset) in [("FIXED", end - now), ("SLIDING", end + w - now)] {
            let key = format!("{mode}{i}");
            let t = Lim::new(&key, "3", window, mode).at(&mut c, "1", now);
            assert!(t.allowed && t.remaining == 2.0, "{mode} {window}: {t:?}");
            let stored: f64 = common::hget(&mut c, &key, "start")
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(stored, start, "{mode} {window}");
            assert!(
                (t.reset_after - reset).abs() <= 1e-6 * reset.max(1.0),
                "{mode} {window}: {t:?}, want reset_after {reset}"
            );
        }
    }
    // A window longer than any time: every call falls in the window that starts at 0.
    assert_eq!(
        common::hget(&mut c, "FIXED6", "start").as_deref(),
        Some("0")
    );
}

#[test]
fn sliding_weighs_the_previous_window_by_overlap_and_replies_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    let sl = Lim::new("s", "4", "60", "SLIDING");
    // reset_after: the count of [B, B + 60) weighs until it has slid out, at B + 120.
    assert_eq!(sl.at(&mut c, "1", B), reply(true, 3.0, 0.0, 120.0));
    assert_eq!(
        hash(&mut c, "s"),
        pairs(&[("counts", "1 0"), ("start", "1764456240")])
    );
    assert_eq!(sl.at(&mut c, "3", B + 10.0), reply(true, 0.0, 0.0, 110.0));
    // Full: at B + 60 + x the estimate is 4 (1 - x/60); 1 fits from x = 15.
    assert_eq!(sl.at(&mut c, "1", B + 15.0), reply(false, 0.0, 60.0, 105.0));
    // 25% into the next window: 4 x 0.75 = 3.
    assert_eq!(sl.at(&mut c, "0", B + 75.0), reply(true, 1.0, 0.0, 45.0));
    assert_eq!(sl.at(&mut c, "1", B + 75.0), reply(true, 0.0, 0.0, 105.0));
    assert_eq!(
        hash(&mut c, "s"),
        pairs(&[("counts", "1 4"), ("start", "1764456300")])
    );
    // 2 more: 4 (1 - x/60) + 1 <= 2 from x = 45.
    assert_eq!(sl.at(&mut c, "2", B + 75.0), reply(false, 0.0, 30.0, 105.0));
    assert_eq!(sl.at(&mut c, "5", B + 75.0), reply(false, 0.0, -1.0, 105.0));
    // Half way: 4 x 0.5 + 1 = 3.
    assert_eq!(sl.at(&mut c, "0", B + 90.0), reply(true, 1.0, 0.0, 90.0));
    // Both windows over: the whole limit, nothing to wait for.
    assert_eq!(sl.at(&mut c, "0", B + 180.0), reply(true, 4.0, 0.0, 0.0));
    assert_eq!(sl.at(&mut c, "1", B + 180.0), reply(true, 3.0, 0.0, 120.0));
    assert_eq!(
        hash(&mut c, "s"),
        pairs(&[("counts", "1 0"), ("start", "1764456420")])
    );
}

#[test]
fn sliding_remaining_is_the_weighted_estimate() {
    let s = Server::start();
    let mut c = s.conn();
    let sl = Lim::new("s", "20", "60", "");
    assert_eq!(sl.at(&mut c, "10", B + 30.0), reply(true, 10.0, 0.0, 90.0));
    // 25% into the next window: 10 x 0.75 = 7.5 of the previous, + 2 now.
    assert_eq!(sl.at(&mut c, "2", B + 75.0), reply(true, 10.5, 0.0, 105.0));
    let r = c.q(&format!("TB.WINDOW s 20 60 0 {}", at(75.0)));
    assert_eq!(r, bulk_reply(1, ["10.5", "0", "105"]));
    // Half way: 10 x 0.5 + 2 = 7.
    assert_eq!(sl.at(&mut c, "0", B + 90.0), reply(true, 13.0, 0.0, 90.0));
    // The next window: the 2 are the previous count now, weighed in full, then less.
    assert_eq!(sl.at(&mut c, "0", B + 120.0), reply(true, 18.0, 0.0, 60.0));
    assert_eq!(sl.at(&mut c, "0", B + 150.0), reply(true, 19.0, 0.0, 30.0));
    // A window that weighs more than the room left: 10.5 left, 11 refused until
    // 10 (1 - x/60) + 2 <= 9, x = 18.
    let t = sl.at(&mut c, "11", B + 75.0);
    assert!(
        !t.allowed && t.remaining == 10.5 && t.reset_after == 105.0,
        "{t:?}"
    );
    assert!((t.retry_after - 3.0).abs() < 1e-6, "{t:?}");
}

#[test]
fn log_counts_the_entries_of_the_trailing_window_and_replies_every_field() {
    let s = Server::start();
    let mut c = s.conn();
    let l = Lim::new("l", "3", "60", "LOG");
    assert_eq!(l.at(&mut c, "1", B), reply(true, 2.0, 0.0, 60.0));
    assert_eq!(l.at(&mut c, "1", B), reply(true, 1.0, 0.0, 60.0));
    assert_eq!(l.at(&mut c, "1", B + 10.5), reply(true, 0.0, 0.0, 60.0));
    // Full: the oldest entry leaves at B + 60.
    assert_eq!(l.at(&mut c, "1", B + 10.5), reply(false, 0.0, 49.5, 60.0));
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456240000000-0", "1764456240000000"),
            ("1764456240000000-1", "1764456240000000"),
            ("1764456250500000-2", "1764456250500000"),
        ])
    );
    // At B + 60 both entries of B are out (an entry at exactly now - window is out).
    assert_eq!(l.at(&mut c, "0", B + 60.0), reply(true, 2.0, 0.0, 10.5));
    assert_eq!(l.at(&mut c, "1", B + 60.0), reply(true, 1.0, 0.0, 60.0));
    assert_eq!(l.at(&mut c, "1", B + 60.25), reply(true, 0.0, 0.0, 60.0));
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456250500000-2", "1764456250500000"),
            ("1764456300000000-1", "1764456300000000"),
            ("1764456300250000-2", "1764456300250000"),
        ])
    );
    // 2 need the second oldest (B + 60) to leave: at B + 120.
    assert_eq!(l.at(&mut c, "2", B + 60.25), reply(false, 0.0, 59.75, 60.0));
    assert_eq!(l.at(&mut c, "4", B + 60.25), reply(false, 0.0, -1.0, 60.0));
    assert_eq!(l.at(&mut c, "0", B + 120.25), reply(true, 3.0, 0.0, 0.0));
}

#[test]
fn the_mode_defaults_to_sliding_and_a_fourth_argument_mode_word_is_the_mode() {
    let s = Server::start();
    let mut c = s.conn();
    let r = c.q(&format!("TB.WINDOW d 4 60 1 {B}"));
    assert_eq!(Take::from_reply(&r), reply(true, 3.0, 0.0, 120.0));
    assert_eq!(
        hash(&mut c, "d"),
        pairs(&[("counts", "1 0"), ("start", "1764456240")])
    );
    // Mode words in any case, as the 4th (server clock) or 5th argument.
    for (key, line, kind) in [
        ("a", "TB.WINDOW a 4 60 1 fixed", "hash"),
        ("b", "TB.WINDOW b 4 60 1 Sliding", "hash"),
        ("c", "TB.WINDOW c 4 60 1 log", "zset"),
        ("e", &*format!("TB.WINDOW e 4 60 1 {B} Log"), "zset"),
        ("g", &*format!("TB.WINDOW g 4 60 1 {B} FIXED"), "hash"),
    ] {
        let t = Take::from_reply(&c.q(line));
        assert!(t.allowed && t.remaining == 3.0, "{line}: {t:?}");
        assert_eq!(c.cmd(&["TYPE", key]).text(), kind, "{line}");
    }
    assert_eq!(
        hash(&mut c, "a").iter().map(|p| &*p.0).collect::<Vec<_>>(),
        ["count", "start"]
    );
    assert_eq!(
        hash(&mut c, "b").iter().map(|p| &*p.0).collect::<Vec<_>>(),
        ["counts", "start"]
    );
    assert_eq!(
        hash(&mut c, "g"),
        pairs(&[("count", "1"), ("start", "1764456240")])
    );
}

#[test]
fn the_server_clock_form_decides_at_the_servers_time() {
    let s = Server::start();
    let mut c = s.conn();
    let before = server_micros(&mut c);
    let f = Lim::new("f", "5", "3600", "FIXED").srv(&mut c, "2");
    let sl = Lim::new("s", "5", "3600", "SLIDING").srv(&mut c, "2");
    let l = Lim::new("l", "5", "3600", "LOG").srv(&mut c, "2");
    let after = server_micros(&mut c);
    let (lo, hi) = (before as f64 / 1e6, after as f64 / 1e6);
    // The window holding the server's time: reset_after runs to its end (FIXED), to the
    // end of the next one (SLIDING), one window (LOG).
    let start = |t: f64| (t / 3600.0).floor() * 3600.0;
    for (name, t, extra) in [("FIXED", f, 0.0), ("SLIDING", sl, 3600.0)] {
        assert!(
            t.allowed && t.remaining == 3.0 && t.retry_after == 0.0,
            "{t:?}"
        );
        let end_lo = start(lo) + 3600.0 + extra - hi;
        let end_hi = start(hi) + 3600.0 + extra - lo;
        assert!(
            t.reset_after >= end_lo - 1e-6 && t.reset_after <= end_hi + 1e-6,
            "{name}: {t:?} for a server time in [{lo}, {hi}]"
        );
    }
    // One window, rounded up to the microsecond.
    assert!(
        l.allowed && l.remaining == 3.0 && l.retry_after == 0.0,
        "{l:?}"
    );
    assert!((3600.0..=3600.000001).contains(&l.reset_after), "{l:?}");
    let start_f: f64 = common::hget(&mut c, "f", "start").unwrap().parse().unwrap();
    assert!(start_f == start(lo) || start_f == start(hi), "{start_f}");
    assert_eq!(common::hget(&mut c, "f", "count").as_deref(), Some("2"));
    assert_eq!(
        common::hget(&mut c, "s", "counts").as_deref(),
        Some("2 0"),
        "{:?}",
        hash(&mut c, "s")
    );
    // LOG entries are the server's time in whole microseconds since the epoch: `<µs>-0`,
    // `<µs>-1`, scored by that number (an integer, as the score's text shows too).
    let z = zset(&mut c, "l");
    assert_eq!(z.len(), 2, "{z:?}");
    let time = z[0].0.strip_suffix("-0").unwrap().to_string();
    assert!(
        time.len() == 16 && time.bytes().all(|b| b.is_ascii_digit()),
        "{time}"
    );
    assert_eq!(z[1].0, format!("{time}-1"));
    for (_, score) in &z {
        assert_eq!(score, &time, "{z:?}");
    }
    let t: u64 = time.parse().unwrap();
    assert!(
        (before..=after).contains(&t),
        "{time} not in [{before}, {after}]"
    );
    // Waits on the server's clock are whole microseconds (at most 6 decimals).
    for lim in [
        Lim::new("f2", "1", "0.3", "FIXED"),
        Lim::new("s2", "1", "0.3", "SLIDING"),
        Lim::new("l2", "1", "0.3", "LOG"),
    ] {
        lim.srv(&mut c, "1");
        let r = c.cmd(&lim.args("1", None));
        let a = r.array();
        assert_eq!(a[0], Reply::Int(0), "{r:?}");
        for v in &a[2..] {
            let text = v.text();
            let decimals = text.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(decimals <= 6, "{}: {text}", lim.mode);
        }
    }
}

#[test]
fn replies_are_bulk_text_under_resp2_and_doubles_under_resp3() {
    let s = Server::start();
    let mut c = s.conn();
    /// One mode: its limiter, the n above its limit, the RESP2 replies of two calls of 1
    /// and one of `never` at B + 10, then (RESP3) the call of `fill` that fills it at
    /// B + 10 and two calls at B + 30: 1 (denied) and `never`.
    struct Case<'a> {
        lim: Lim<'a>,
        never: &'a str,
        resp2: [(i64, [&'a str; 3]); 3],
        fill: &'a str,
        resp3: [(i64, [f64; 3]); 3],
    }
    let cases = [
        Case {
            lim: Lim::new("f", "3", "60", "FIXED"),
            never: "4",
            resp2: [
                (1, ["2", "0", "50"]),
                (1, ["1", "0", "50"]),
                (0, ["1", "-1", "50"]),
            ],
            fill: "1",
            resp3: [
                (1, [0.0, 0.0, 50.0]),
                (0, [0.0, 30.0, 30.0]),
                (0, [0.0, -1.0, 30.0]),
            ],
        },
        Case {
            lim: Lim::new("s", "4", "60", "SLIDING"),
            never: "5",
            resp2: [
                (1, ["3", "0", "110"]),
                (1, ["2", "0", "110"]),
                (0, ["2", "-1", "110"]),
            ],
            fill: "2",
            // 4 (1 - x/60) + 1 <= 4 from x = 15, B + 75.
            resp3: [
                (1, [0.0, 0.0, 110.0]),
                (0, [0.0, 45.0, 90.0]),
                (0, [0.0, -1.0, 90.0]),
            ],
        },
        Case {
            lim: Lim::new("l", "3", "60", "LOG"),
            never: "4",
            resp2: [
                (1, ["2", "0", "60"]),
                (1, ["1", "0", "60"]),
                (0, ["1", "-1", "60"]),
            ],
            fill: "1",
            resp3: [
                (1, [0.0, 0.0, 60.0]),
                (0, [0.0, 40.0, 40.0]),
                (0, [0.0, -1.0, 40.0]),
            ],
        },
    ];
    for case in &cases {
        let mode = case.lim.mode;
        for ((allowed, texts), n) in case.resp2.iter().zip(["1", "1", case.never]) {
            let r = c.cmd(&case.lim.args(n, Some(B + 10.0)));
            assert_eq!(r, bulk_reply(*allowed, *texts), "{mode} n={n}");
        }
    }
    assert!(matches!(c.q("HELLO 3"), Reply::Array(_)));
    for case in &cases {
        let mode = case.lim.mode;
        let calls = [
            (case.fill, B + 10.0),
            ("1", B + 30.0),
            (case.never, B + 30.0),
        ];
        for ((allowed, values), (n, now)) in case.resp3.iter().zip(calls) {
            let r = c.cmd(&case.lim.args(n, Some(now)));
            assert_eq!(r, double_reply(*allowed, *values), "{mode} n={n} at {now}");
        }
    }
    // A fractional remaining is a double too.
    let r = c.q(&format!("TB.WINDOW w 20 60 1.5 {B}"));
    assert_eq!(r, double_reply(1, [18.5, 0.0, 120.0]));
}

/// The three algorithms written out naively, for times that move forward: what the notes
/// and the issue describe, to check every decision of the module against.
#[derive(Default)]
struct Model {
    /// FIXED and SLIDING: the window start, its count and (SLIDING) the one before.
    start: f64,
    count: f64,
    previous: f64,
    /// LOG: the admitted requests' times.
    log: Vec<f64>,
}

impl Model {
    /// Returns the reply `(allowed, remaining)` and, for FIXED and LOG, the exact waits.
    fn decide(&mut self, mode: &str, limit: f64, w: f64, n: f64, t: f64) -> (Take, bool) {
        let start = (t / w).floor() * w;
        let end = start + w;
        match mode {
            "FIXED" => {
                if self.start < start {
                    (self.start, self.count) = (start, 0.0);
                }
                let allowed = n <= limit && self.count + n <= limit;
                if allowed {
                    self.count += n;
                }
                let retry = if allowed {
                    0.0
                } else if n > limit {
                    -1.0
                } else {
                    end - t
                };
                let reset = if self.count > 0.0 { end - t } else { 0.0 };
                (reply(allowed, limit - self.count, retry, reset), true)
            }
            "SLIDING" => {
                let (count, previous) = if self.start >= start {
                    (self.count, self.previous)
                } else if self.start >= start - w {
                    (0.0, self.count)
                } else {
                    (0.0, 0.0)
                };
                let weight = 1.0 - ((t - start) / w).clamp(0.0, 1.0);
                let estimate = previous * weight + count;
                let allowed = n <= limit && estimate + n <= limit;
                let after = if allowed { estimate + n } else { estimate };
                if allowed && n > 0.0 {
                    (self.start, self.count, self.previous) = (start, count + n, previous);
                }
                let retry = if allowed {
                    0.0
                } else if n > limit {
                    -1.0
                } else {
                    f64::NAN
                };
                (
                    reply(allowed, (limit - after).clamp(0.0, limit), retry, f64::NAN),
                    false,
                )
            }
            _ => {
                let live: Vec<f64> = self.log.iter().copied().filter(|&e| e > t - w).collect();
                let allowed = n <= limit && live.len() as f64 + n <= limit;
                if allowed && n > 0.0 {
                    self.log = live.clone();
                    self.log.extend(std::iter::repeat_n(t, n as usize));
                }
                let used = live.len() as f64 + if allowed { n } else { 0.0 };
                let retry = if allowed {
                    0.0
                } else if n > limit {
                    -1.0
                } else {
                    // The k-th oldest counted entry has to leave.
                    let k = (live.len() as f64 + n - limit) as usize;
                    live[k - 1] + w - t
                };
                let newest = self.log.last().copied().unwrap_or(t);
                let reset = if used > 0.0 { newest + w - t } else { 0.0 };
                (reply(allowed, limit - used, retry, reset), true)
            }
        }
    }
}

#[test]
fn every_decision_matches_the_algorithms_written_out_naively() {
    let s = Server::start();
    let mut c = s.conn();
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new(mode, "5", "10", mode);
        let mut model = Model::default();
        let mut rng = Rng(43);
        let mut t = B;
        let mut seen = BTreeSet::new();
        for _ in 0..500 {
            // Times on a quarter-second grid: every window start and wait is exact.
            t += 0.25 * rng.below(14) as f64;
            let n = [0.0, 1.0, 1.0, 1.0, 2.0, 3.0, 6.0][rng.below(7) as usize];
            let got = lim.at(&mut c, &format!("{n}"), t);
            let (want, exact) = model.decide(mode, 5.0, 10.0, n, t);
            let at = t - B;
            assert_eq!(got.allowed, want.allowed, "{mode} n={n} at B+{at}: {got:?}");
            assert!(
                (got.remaining - want.remaining).abs() < 1e-9,
                "{mode} n={n} at B+{at}: {got:?}, want {want:?}"
            );
            if exact {
                assert_eq!(got, want, "{mode} n={n} at B+{at}");
            } else if !got.allowed && n <= 5.0 {
                assert!(lim.at(&mut c, "0", t + got.retry_after).remaining >= n);
            } else {
                assert_eq!(got.retry_after, want.retry_after, "{mode} n={n} at B+{at}");
            }
            seen.insert((got.allowed, got.retry_after > 0.0));
        }
        assert_eq!(seen.len(), 3, "{mode}: {seen:?}");
    }
    // Bounded state whatever the traffic: two fields (FIXED and SLIDING); LOG holds at
    // most the limit.
    assert_eq!(c.q("HLEN FIXED").int(), 2);
    assert_eq!(c.q("HLEN SLIDING").int(), 2);
    assert!(c.q("ZCARD LOG").int() <= 5);
}

// ---------------------------------------------------------------------------------------
// n = 0, n > limit, retry_after, reset_after

#[test]
fn n_zero_reports_the_state_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    let modes = ["FIXED", "SLIDING", "LOG"];
    // A missing key: the whole limit, nothing to wait for, and no key created.
    for mode in modes {
        let lim = Lim::new("new", "5", "60", mode);
        assert_eq!(lim.at(&mut c, "0", B), reply(true, 5.0, 0.0, 0.0), "{mode}");
        assert_eq!(lim.srv(&mut c, "0"), reply(true, 5.0, 0.0, 0.0), "{mode}");
        assert_eq!(c.q("EXISTS new").int(), 0, "{mode}: n = 0 created the key");
    }
    // An existing key: its state, and the key left byte for byte (value and expiry), no
    // WATCH aborted, no notification.
    let f = Lim::new("f", "5", "60", "FIXED");
    let sl = Lim::new("s", "5", "60", "SLIDING");
    let l = Lim::new("l", "5", "60", "LOG");
    f.at(&mut c, "5", B);
    sl.at(&mut c, "5", B);
    l.at(&mut c, "2", B);
    l.at(&mut c, "3", B + 30.0);
    let keys = ["f", "s", "l"];
    let before = fingerprint(&mut c, &keys);
    assert_eq!(f.at(&mut c, "0", B + 15.0), reply(true, 0.0, 0.0, 45.0));
    assert_eq!(sl.at(&mut c, "0", B + 75.0), reply(true, 1.25, 0.0, 45.0));
    // The entries of B are out at B + 75 but a read removes nothing.
    assert_eq!(l.at(&mut c, "0", B + 75.0), reply(true, 2.0, 0.0, 15.0));
    assert_eq!(c.q("ZCARD l").int(), 5);
    assert_eq!(fingerprint(&mut c, &keys), before);
    for lim in [f, sl, l] {
        let args = lim.args("0", Some(B + 75.0));
        assert!(watch_survives(&s, &[lim.key], &args), "{}", lim.mode);
        let events = notifications_during(&s, |c| {
            c.cmd(&args);
        });
        assert!(events.is_empty(), "{}: {events:?}", lim.mode);
    }
    assert_eq!(fingerprint(&mut c, &keys), before);
}

#[test]
fn n_above_the_limit_is_never_allowed_and_writes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new("k", "3", "60", mode);
        assert_eq!(
            lim.at(&mut c, "4", B),
            reply(false, 3.0, -1.0, 0.0),
            "{mode}"
        );
        assert_eq!(c.q("EXISTS k").int(), 0, "{mode}");
        assert_eq!(lim.srv(&mut c, "4").retry_after, -1.0, "{mode}");
        assert_eq!(c.q("EXISTS k").int(), 0, "{mode}");
        lim.at(&mut c, "1", B);
        let before = fingerprint(&mut c, &["k"]);
        assert_eq!(
            lim.at(&mut c, "4", B + 1e6),
            reply(false, 3.0, -1.0, 0.0),
            "{mode}"
        );
        assert_eq!(fingerprint(&mut c, &["k"]), before, "{mode}");
        c.q("DEL k");
    }
    let f = Lim::new("k", "3", "60", "FIXED");
    assert_eq!(f.at(&mut c, "3.000001", B).retry_after, -1.0);
}

/// Walks a limiter forward through random times; on every refusal checks that a call at
/// `now + retry_after` is admitted and (`exact`) that one 1 ms earlier is not.
fn walk_retry_after(c: &mut Conn, lim: Lim, seed: u64, steps: usize, exact: bool) -> usize {
    let mut rng = Rng(seed);
    let w = lim.window_f();
    let limit = lim.limit_f();
    let mut now = B + 0.1;
    let mut waits = 0;
    for _ in 0..steps {
        now += w * (rng.below(1000) as f64) / 3000.0;
        let n = ["1", "1", "2"][rng.below(3) as usize];
        let t = lim.at(c, n, now);
        if t.allowed {
            assert_eq!(t.retry_after, 0.0, "{}: {t:?}", lim.mode);
            continue;
        }
        assert!(
            t.retry_after > 0.0 && t.retry_after <= 2.0 * w + 1e-6,
            "{} at {now}: {t:?}",
            lim.mode
        );
        assert!(t.remaining < limit, "{t:?}");
        if exact && t.retry_after > 0.002 {
            let early = lim.at(c, n, now + t.retry_after - 0.001);
            assert!(
                !early.allowed,
                "{} at {now}: retry_after {} is late: 1 ms earlier was admitted",
                lim.mode, t.retry_after
            );
        }
        now += t.retry_after;
        let again = lim.at(c, n, now);
        assert!(
            again.allowed,
            "{}: waited {} and was denied: {again:?}",
            lim.mode, t.retry_after
        );
        waits += 1;
    }
    waits
}

#[test]
fn retry_after_is_exact_for_fixed_and_log() {
    let s = Server::start();
    let mut c = s.conn();
    for (i, window) in ["60", "0.5", "7.3", "0.001"].iter().enumerate() {
        for (j, limit) in ["3", "2.5"].iter().enumerate() {
            let key = format!("f{i}{j}");
            let lim = Lim::new(&key, limit, window, "FIXED");
            let waits = walk_retry_after(&mut c, lim, 7 + i as u64, 300, true);
            assert!(waits > 30, "FIXED {window}: only {waits} waits");
        }
        let key = format!("l{i}");
        let lim = Lim::new(&key, "3", window, "LOG");
        let waits = walk_retry_after(&mut c, lim, 11 + i as u64, 300, true);
        assert!(waits > 30, "LOG {window}: only {waits} waits");
    }
}

#[test]
fn retry_after_for_sliding_is_never_too_early() {
    let s = Server::start();
    let mut c = s.conn();
    for (i, window) in ["60", "0.5", "7.3", "0.001"].iter().enumerate() {
        for (j, limit) in ["3", "2.5", "10"].iter().enumerate() {
            let key = format!("s{i}{j}");
            let lim = Lim::new(&key, limit, window, "SLIDING");
            let waits = walk_retry_after(&mut c, lim, 13 + i as u64, 300, false);
            assert!(waits > 20, "SLIDING {window} {limit}: only {waits} waits");
        }
    }
}

#[test]
fn retry_after_on_the_server_clock_is_honoured() {
    let s = Server::start();
    let mut c = s.conn();
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new("k", "2", "0.2", mode);
        let mut waits = 0;
        for _ in 0..12 {
            let t = lim.srv(&mut c, "1");
            if t.allowed {
                continue;
            }
            assert!(t.retry_after > 0.0 && t.retry_after <= 0.4, "{mode}: {t:?}");
            std::thread::sleep(Duration::from_secs_f64(t.retry_after));
            let again = lim.srv(&mut c, "1");
            assert!(again.allowed, "{mode}: slept {t:?}, then {again:?}");
            waits += 1;
        }
        assert!(waits >= 3, "{mode}: {waits}");
        c.q("DEL k");
    }
}

#[test]
fn reset_after_is_when_the_whole_limit_is_available_again() {
    let s = Server::start();
    let mut c = s.conn();
    for (i, mode) in ["FIXED", "SLIDING", "LOG"].iter().enumerate() {
        for window in ["60", "0.5", "7.3"] {
            let key = format!("k{i}{window}");
            let lim = Lim::new(&key, "4", window, mode);
            let w = lim.window_f();
            let mut rng = Rng(17 + i as u64);
            let mut now = B + 0.1;
            for _ in 0..150 {
                now += w * (rng.below(1000) as f64) / 2500.0;
                let n = ["0", "1", "1", "2"][rng.below(4) as usize];
                let t = lim.at(&mut c, n, now);
                let r = t.reset_after;
                assert!(r >= 0.0 && r <= 2.0 * w + 1e-6, "{mode} {window}: {t:?}");
                if r == 0.0 {
                    assert_eq!(t.remaining, 4.0, "{mode} {window}: {t:?}");
                    continue;
                }
                let full = lim.at(&mut c, "0", now + r);
                assert_eq!(
                    full,
                    reply(true, 4.0, 0.0, 0.0),
                    "{mode} {window}: after reset_after {r}"
                );
                if r > 0.002 {
                    let early = lim.at(&mut c, "0", now + r - 0.001);
                    assert!(
                        early.remaining < 4.0,
                        "{mode} {window}: full 1 ms before reset_after {r}: {early:?}"
                    );
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// The boundary burst, LOG entries, late clocks

#[test]
fn boundary_burst_fixed_admits_2n_sliding_and_log_do_not() {
    let s = Server::start();
    let mut c = s.conn();
    const N: usize = 10;
    let mut admitted = BTreeMap::new();
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new(mode, "10", "60", mode);
        let mut count = 0;
        // N at the end of [B, B + 60), N at the start of the next: one second apart.
        for now in [B + 59.5, B + 60.5] {
            for _ in 0..N {
                count += usize::from(lim.at(&mut c, "1", now).allowed);
            }
        }
        admitted.insert(mode, count);
    }
    assert_eq!(
        admitted,
        BTreeMap::from([("FIXED", 2 * N), ("LOG", N), ("SLIDING", N)])
    );
    // What SLIDING and LOG tell the refused: SLIDING when 10 (1 - x/60) + 1 <= 10 (x = 6),
    // LOG when the entries of B + 59.5 leave (B + 119.5).
    let sl = Lim::new("SLIDING", "10", "60", "SLIDING").at(&mut c, "1", B + 60.5);
    assert!(!sl.allowed && sl.retry_after >= 5.5 - 1e-9, "{sl:?}");
    assert!(
        Lim::new("SLIDING", "10", "60", "SLIDING")
            .at(&mut c, "1", B + 60.5 + sl.retry_after)
            .allowed
    );
    let l = Lim::new("LOG", "10", "60", "LOG").at(&mut c, "1", B + 60.5);
    assert_eq!(l, reply(false, 0.0, 59.0, 59.0));
}

#[test]
fn log_requests_in_the_same_microsecond_are_separate_entries() {
    let s = Server::start();
    let mut c = s.conn();
    let t = "1764456240.000001";
    let score = "1764456240000001";
    let l = Lim::new("l", "100", "60", "LOG");
    for _ in 0..5 {
        assert!(l.at(&mut c, "1", B + 0.000001).allowed);
    }
    let r = c.cmd(&["TB.WINDOW", "l", "100", "60", "3", t, "LOG"]);
    assert_eq!(Take::from_reply(&r), reply(true, 92.0, 0.0, 60.0));
    assert_eq!(c.q("ZCARD l").int(), 8);
    assert_eq!(zset(&mut c, "l"), entries(score, 0, 8));
    // The notes' script (the time as the member) would count these 8 as one and admit
    // all; here 5 of 8 same-instant requests pass a limit of 5.
    let five = Lim::new("five", "5", "60", "LOG");
    let passed = (0..8)
        .filter(|_| five.at(&mut c, "1", B + 0.000001).allowed)
        .count();
    assert_eq!(passed, 5);
    assert_eq!(c.q("ZCARD five").int(), 5);
    // On the server's clock, in one transaction (many calls in the same microsecond).
    c.q("MULTI");
    for _ in 0..50 {
        c.q("TB.WINDOW srv 1000 60 1 LOG");
    }
    let r = c.q("EXEC");
    let allowed = r
        .array()
        .iter()
        .filter(|t| Take::from_reply(t).allowed)
        .count();
    assert_eq!(allowed, 50);
    assert_eq!(c.q("ZCARD srv").int(), 50);
    let members: BTreeSet<String> = zset(&mut c, "srv").into_iter().map(|p| p.0).collect();
    assert_eq!(members.len(), 50);
}

#[test]
fn log_scores_are_whole_microseconds_and_a_sub_microsecond_now_is_rounded() {
    let s = Server::start_unbounded();
    let mut c = s.conn();
    let l = |c: &mut Conn, now: &str| {
        let r = c.cmd(&["TB.WINDOW", "l", "10", "60", "1", now, "LOG"]);
        Take::from_reply(&r)
    };
    // (now as sent, the µs it is stored at, entries held after the call).
    for (k, (now, micros)) in [
        // Whole microseconds: exactly that many.
        ("1764456239.999999", 1_764_456_239_999_999u64),
        // 0.2 µs past a whole one: rounded down (the f64 is ...0.000000238).
        ("1764456240.0000002", 1_764_456_240_000_000),
        // 0.6 and 0.9 µs past: rounded up, to the same microsecond.
        ("1764456240.0000006", 1_764_456_240_000_001),
        ("1764456240.0000009", 1_764_456_240_000_001),
    ]
    .into_iter()
    .enumerate()
    {
        let t = l(&mut c, now);
        let now_f: f64 = now.parse().unwrap();
        // The newest entry is `micros`; every entry leaves 60 s after it.
        let reset = micros as f64 / 1e6 + 60.0 - now_f;
        assert!(t.allowed && t.remaining == (9 - k) as f64, "{now}: {t:?}");
        assert!((t.reset_after - reset).abs() < 1e-6, "{now}: {t:?}");
        assert_eq!(
            c.cmd(&["ZSCORE", "l", &format!("{micros}-{k}")]).text(),
            micros.to_string(),
            "{now}"
        );
    }
    // A slower clock (it rounds to ...239999999) is stored at the newest entry's score.
    assert!(l(&mut c, "1764456239.9999993").allowed);
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456239999999-0", "1764456239999999"),
            ("1764456240000000-1", "1764456240000000"),
            ("1764456240000001-2", "1764456240000001"),
            ("1764456240000001-3", "1764456240000001"),
            ("1764456240000001-4", "1764456240000001"),
        ])
    );
    // Integer scores, shown as integers, in a small sorted set kept as a listpack.
    let r = c.q("ZRANGE l 0 -1 WITHSCORES");
    for score in r.array().iter().skip(1).step_by(2) {
        let text = score.text();
        assert!(text.bytes().all(|b| b.is_ascii_digit()), "{r:?}");
    }
    assert_eq!(c.q("OBJECT ENCODING l").text(), "listpack");
    // Far from today the member and the replicated score are still the integer's digits
    // (not `1.00000000005e16`): from 1e16 µs (the year 2286) to the last accepted time.
    for (now, micros) in [
        ("10000000000.5", "10000000000500000"),
        ("253402300799.5", "253402300799500000"),
    ] {
        let key = format!("far:{now}");
        let r = c.cmd(&["TB.WINDOW", &key, "10", "60", "1", now, "LOG"]);
        assert!(Take::from_reply(&r).allowed, "{r:?}");
        // (Redis itself shows scores beyond 2^53 in exponent form; the value is the same.)
        let got = zset(&mut c, &key);
        assert_eq!(got.len(), 1, "{now}");
        assert_eq!(got[0].0, format!("{micros}-0"), "{now}");
        let score: f64 = got[0].1.parse().unwrap();
        assert_eq!(score, micros.parse::<f64>().unwrap(), "{now}");
    }
}

/// `now` is rounded to the nearest microsecond, once. `1764456240.0000004` (and
/// `.0000005`) is the f64 1764456240.000000476837..., 0.477 µs past a whole microsecond, so
/// it belongs at ...240000000; multiplying first (`(now * 1e6).round()`) rounded the
/// product to ...240000000.5 and then up.
#[test]
fn log_a_now_less_than_half_a_microsecond_past_a_whole_one_is_rounded_down() {
    let s = Server::start();
    let mut c = s.conn();
    for now in ["1764456240.0000004", "1764456240.0000005"] {
        let key = format!("k{now}");
        let r = c.cmd(&["TB.WINDOW", &key, "10", "60", "1", now, "LOG"]);
        assert!(Take::from_reply(&r).allowed, "{r:?}");
        assert_eq!(
            zset(&mut c, &key),
            entries("1764456240000000", 0, 1),
            "{now}"
        );
    }
}

#[test]
fn log_retry_after_from_a_sub_microsecond_now_is_enough() {
    let s = Server::start();
    let mut c = s.conn();
    let mut rng = Rng(53);
    for window in ["1", "0.3333333", "7.5", "0.0000015"] {
        let w: f64 = window.parse().unwrap();
        for i in 0..40u64 {
            let key = format!("r:{window}:{i}");
            let l = Lim::new(&key, "1", window, "LOG");
            // Times with a 7th decimal that is not 0: never whole microseconds.
            let sub = |rng: &mut Rng, below: u64| {
                let k = rng.below(below.max(1)) * 10 + 1 + rng.below(9);
                k as f64 / 1e7
            };
            let now1 = B + i as f64 + sub(&mut rng, 1_000_000);
            assert!(l.at(&mut c, "1", now1).allowed, "{key} at {now1}");
            // Less than half a window later (under a microsecond for the shortest): full.
            let now2 = now1 + sub(&mut rng, (w * 5e5) as u64);
            let t = l.at(&mut c, "1", now2);
            assert!(!t.allowed && t.remaining == 0.0, "{key} at {now2}: {t:?}");
            assert!(t.retry_after > 0.0 && t.retry_after <= w + 1e-6, "{t:?}");
            let back = now2 + t.retry_after;
            let early = l.at(&mut c, "1", back - 2e-6);
            assert!(
                !early.allowed,
                "{key}: admitted at {} after {now1}, told at {now2} to wait {}",
                back - 2e-6,
                t.retry_after
            );
            let t2 = l.at(&mut c, "1", back);
            assert!(
                t2.allowed,
                "{key}: refused at {back} after {now1}, told at {now2} to wait {}: {t2:?}",
                t.retry_after
            );
        }
    }
}

/// A refusal that needs entries beyond those that left the window: counting what left
/// reads only up to the cutoff's scores, and the wait then reads on from there (the
/// oldest counted entry), then the reset reads the newest; all exact.
#[test]
fn log_refusal_reads_on_past_the_entries_that_left_the_window() {
    let s = Server::start();
    let mut c = s.conn();
    let l = Lim::new("l", "3", "10", "LOG");
    for off in [0.0, 5.0, 8.0] {
        assert!(l.at(&mut c, "1", B + off).allowed);
    }
    // At B + 13 the entry at B has left; B + 5 and B + 8 are counted. Two more need B + 5
    // to leave too (B + 15); everything is gone at B + 18.
    assert_eq!(l.at(&mut c, "2", B + 13.0), reply(false, 1.0, 2.0, 5.0));
    assert_eq!(l.at(&mut c, "0", B + 13.0), reply(true, 1.0, 0.0, 5.0));
    assert_eq!(
        c.q("ZCARD l").int(),
        3,
        "a refusal and a read remove nothing"
    );
    // One is admitted: B goes (rank 0), B + 13 comes.
    assert_eq!(l.at(&mut c, "1", B + 13.0), reply(true, 0.0, 0.0, 10.0));
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456245000000-1", "1764456245000000"),
            ("1764456248000000-2", "1764456248000000"),
            ("1764456253000000-2", "1764456253000000"),
        ])
    );
    // At B + 15, B + 5 has left (not yet removed); two more wait for B + 8 to leave.
    assert_eq!(l.at(&mut c, "2", B + 15.0), reply(false, 1.0, 3.0, 8.0));
    assert_eq!(l.at(&mut c, "2", B + 18.0), reply(true, 0.0, 0.0, 10.0));
    assert_eq!(c.q("ZCARD l").int(), 3);
}

#[test]
fn log_entries_older_than_the_window_are_removed_on_a_writing_call() {
    let s = Server::start();
    let mut c = s.conn();
    let l = Lim::new("l", "4", "60", "LOG");
    for off in [0.0, 10.0, 20.0, 30.0] {
        assert!(l.at(&mut c, "1", B + off).allowed);
    }
    // Full; a refusal and a read remove nothing, even once entries are out.
    assert_eq!(l.at(&mut c, "1", B + 40.0), reply(false, 0.0, 20.0, 50.0));
    assert_eq!(l.at(&mut c, "0", B + 70.0), reply(true, 2.0, 0.0, 20.0));
    assert_eq!(c.q("ZCARD l").int(), 4);
    // A writing call at B + 70 removes B and B + 10 (<= B + 70 - 60) and adds itself.
    let mut stream = ReplStream::attach(&s);
    assert_eq!(l.at(&mut c, "1", B + 70.0), reply(true, 1.0, 0.0, 60.0));
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456260000000-2", "1764456260000000"),
            ("1764456270000000-3", "1764456270000000"),
            ("1764456310000000-2", "1764456310000000"),
        ])
    );
    c.q("SET marker 1");
    let replicated = stream.until_marker("marker");
    let body: Vec<Vec<String>> = replicated
        .into_iter()
        .filter(|cmd| !matches!(cmd[0].as_str(), "MULTI" | "EXEC" | "PING"))
        .collect();
    assert_eq!(
        body[..2],
        [
            vec!["ZREM", "l", "1764456240000000-0", "1764456250000000-1"],
            vec!["ZADD", "l", "1764456310000000", "1764456310000000-2"],
        ]
    );
    // Long after: everything but the new entries goes, and the key (emptied, then
    // created again) still expires when they leave the window.
    let before = server_ms(&mut c);
    assert_eq!(l.at(&mut c, "2", B + 1000.0), reply(true, 2.0, 0.0, 60.0));
    let after = server_ms(&mut c);
    assert_eq!(zset(&mut c, "l"), entries("1764457240000000", 0, 2));
    assert_expiry(&mut c, "l", before, after, 60_000);
}

#[test]
fn the_log_never_holds_more_than_limit_entries() {
    let s = Server::start();
    let mut c = s.conn();
    let limit = 5usize;
    let l = Lim::new("l", "5", "1", "LOG");
    let mut rng = Rng(31);
    let mut now = B;
    // Admitted request times, to check every window-long interval.
    let mut admitted: Vec<f64> = Vec::new();
    for _ in 0..600 {
        now += (rng.below(400) as f64) / 1000.0;
        let n = rng.below(4);
        let t = l.at(&mut c, &n.to_string(), now);
        if t.allowed {
            admitted.extend(std::iter::repeat_n(now, n as usize));
        }
        let held = c.q("ZCARD l").int() as usize;
        assert!(held <= limit, "{held} entries at {now}");
        let in_window = admitted.iter().filter(|&&a| a > now - 1.0).count();
        assert!(in_window <= limit, "{in_window} admitted in (now - 1, now]");
        assert_eq!(t.remaining, (limit - in_window) as f64, "{t:?}");
    }
    assert!(admitted.len() > 300, "{}", admitted.len());
    // A lowered limit: a log over it refuses and keeps what it holds.
    for off in [0.0, 1.0, 2.0, 3.0, 4.0] {
        Lim::new("big", "5", "60", "LOG").at(&mut c, "1", B + off);
    }
    let before = fingerprint(&mut c, &["big"]);
    // 5 + 1 - 3: the third entry (B + 2) has to leave, at B + 62.
    let t = Lim::new("big", "3", "60", "LOG").at(&mut c, "1", B + 10.0);
    assert_eq!(t, reply(false, 0.0, 52.0, 54.0));
    assert_eq!(fingerprint(&mut c, &["big"]), before);
}

/// `clients` connections send `per_client` copies of `args` each, pipelined, all at once;
/// returns how many were admitted.
fn hammer(server: &Server, clients: usize, per_client: usize, args: &[String]) -> usize {
    let barrier = Arc::new(Barrier::new(clients));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|_| {
                let barrier = barrier.clone();
                let mut c = server.conn();
                scope.spawn(move || {
                    barrier.wait();
                    for _ in 0..per_client {
                        c.send(args);
                    }
                    (0..per_client)
                        .filter(|_| Take::from_reply(&c.read()).allowed)
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

#[test]
fn log_is_exact_under_concurrency_many_clients_one_key_one_instant() {
    let s = Server::start();
    let mut c = s.conn();
    let args = Lim::new("hot", "100", "60", "LOG").args("1", Some(B + 0.5));
    assert_eq!(hammer(&s, 16, 40, &args), 100);
    assert_eq!(c.q("ZCARD hot").int(), 100);
    assert_eq!(zset(&mut c, "hot"), entries("1764456240500000", 0, 100));
    // On the server's clock (a window no call outlives): exactly the limit too.
    let args = Lim::new("srv", "150", "3600", "LOG").args("1", None);
    assert_eq!(hammer(&s, 16, 40, &args), 150);
    assert_eq!(c.q("ZCARD srv").int(), 150);
    // FIXED and SLIDING, likewise.
    for (mode, field, count) in [("FIXED", "count", "100"), ("SLIDING", "counts", "100 0")] {
        let args = Lim::new(mode, "100", "60", mode).args("1", Some(B + 0.5));
        assert_eq!(hammer(&s, 16, 40, &args), 100, "{mode}");
        assert_eq!(
            common::hget(&mut c, mode, field).as_deref(),
            Some(count),
            "{mode}"
        );
    }
}

#[test]
fn an_earlier_now_never_admits_more_than_the_limit() {
    let s = Server::start();
    let mut c = s.conn();
    // A full window at B + 100 ([B + 60, B + 120)); a slow clock at B + 30 is served as of
    // the stored state, not as a fresh window.
    let f = Lim::new("f", "3", "60", "FIXED");
    let sl = Lim::new("s", "3", "60", "SLIDING");
    let l = Lim::new("l", "3", "60", "LOG");
    for lim in [f, sl, l] {
        assert!(lim.at(&mut c, "3", B + 100.0).allowed);
    }
    let keys = ["f", "s", "l"];
    let before = fingerprint(&mut c, &keys);
    assert_eq!(f.at(&mut c, "1", B + 30.0), reply(false, 0.0, 90.0, 90.0));
    let t = sl.at(&mut c, "1", B + 30.0);
    assert!(!t.allowed && t.remaining == 0.0, "{t:?}");
    // The stored count slides out of [B + 120, B + 180): 1 fits from B + 140.
    assert!((t.retry_after - 110.0).abs() < 1e-6, "{t:?}");
    assert_eq!(l.at(&mut c, "1", B + 30.0), reply(false, 0.0, 130.0, 130.0));
    assert_eq!(
        l.at(&mut c, "1", B - 1000.0),
        reply(false, 0.0, 1160.0, 1160.0)
    );
    assert_eq!(fingerprint(&mut c, &keys), before);
    // Waiting what the slow clock was told is enough (and, FIXED and LOG, exact).
    for (lim, wait, exact) in [
        (f, 90.0, true),
        (sl, t.retry_after, false),
        (l, 130.0, true),
    ] {
        if exact {
            assert!(!lim.at(&mut c, "1", B + 30.0 + wait - 0.001).allowed);
        }
        assert!(lim.at(&mut c, "1", B + 30.0 + wait).allowed, "{}", lim.mode);
    }
    // Room left: a slow clock's request counts in the stored window (FIXED, SLIDING) or
    // at the newest entry (LOG).
    for (lim, key) in [(f, "f2"), (sl, "s2"), (l, "l2")] {
        let lim = Lim { key, ..lim };
        assert!(lim.at(&mut c, "1", B + 100.0).allowed);
        assert!(lim.at(&mut c, "1", B + 30.0).allowed, "{}", lim.mode);
        assert!(lim.at(&mut c, "1", B - 500.0).allowed, "{}", lim.mode);
        assert!(!lim.at(&mut c, "1", B + 10.0).allowed, "{}", lim.mode);
    }
    assert_eq!(
        hash(&mut c, "f2"),
        pairs(&[("count", "3"), ("start", "1764456300")])
    );
    assert_eq!(
        hash(&mut c, "s2"),
        pairs(&[("counts", "3 0"), ("start", "1764456300")])
    );
    assert_eq!(zset(&mut c, "l2"), entries("1764456340000000", 0, 3));
    // Shuffled clocks within one window: exactly the limit, whichever order.
    let mut rng = Rng(41);
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new("mix", "7", "60", mode);
        let passed = (0..60)
            .filter(|_| {
                let now = B + 60.0 + (rng.below(5990) as f64) / 100.0;
                lim.at(&mut c, "1", now).allowed
            })
            .count();
        assert_eq!(passed, 7, "{mode}");
        c.q("DEL mix");
    }
}

#[test]
fn works_inside_multi_and_from_lua() {
    let s = Server::start();
    let mut c = s.conn();
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new(mode, "2", "60", mode);
        c.q("MULTI");
        for _ in 0..3 {
            assert_eq!(
                c.cmd(&lim.args("1", Some(B))),
                Reply::Simple("QUEUED".into())
            );
        }
        let r = c.q("EXEC");
        let allowed: Vec<bool> = r
            .array()
            .iter()
            .map(|t| Take::from_reply(t).allowed)
            .collect();
        assert_eq!(allowed, [true, true, false], "{mode}");
        let key = format!("lua:{mode}");
        let r = c.cmd(&[
            "EVAL",
            "return redis.call('TB.WINDOW', KEYS[1], 2, 60, 1, ARGV[1])",
            "1",
            &key,
            mode,
        ]);
        assert_eq!(
            r,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Bulk(b"1".to_vec()),
                Reply::Bulk(b"0".to_vec()),
                r.array()[3].clone(),
            ]),
            "{mode}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// TTL

#[test]
fn fixed_expires_with_its_window() {
    let s = Server::start_unbounded();
    let mut c = s.conn();
    let f = Lim::new("f", "3", "60", "FIXED");
    let before = server_ms(&mut c);
    f.at(&mut c, "1", B + 15.0);
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "f", before, after, 45_000);
    // Far from the server's clock, the TTL is still a duration on the server's clock.
    for (key, now) in [("past", 60_015.0), ("future", 200_000_000_055.0)] {
        let before = server_ms(&mut c);
        Lim::new(key, "3", "60", "FIXED").at(&mut c, "1", now);
        let after = server_ms(&mut c);
        assert_expiry(&mut c, key, before, after, 45_000);
    }
    // The next window: its own end.
    let before = server_ms(&mut c);
    f.at(&mut c, "1", B + 110.0);
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "f", before, after, 10_000);
}

#[test]
fn sliding_expires_when_both_windows_are_over() {
    let s = Server::start();
    let mut c = s.conn();
    let sl = Lim::new("s", "3", "60", "SLIDING");
    let before = server_ms(&mut c);
    sl.at(&mut c, "1", B + 15.0);
    let after = server_ms(&mut c);
    // The count of [B, B + 60) weighs until B + 120.
    assert_expiry(&mut c, "s", before, after, 105_000);
    let before = server_ms(&mut c);
    sl.at(&mut c, "1", B + 100.0);
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "s", before, after, 80_000);
}

#[test]
fn log_expires_when_its_newest_entry_leaves_the_window() {
    let s = Server::start();
    let mut c = s.conn();
    let l = Lim::new("l", "3", "60", "LOG");
    let before = server_ms(&mut c);
    l.at(&mut c, "1", B + 15.0);
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "l", before, after, 60_000);
    let before = server_ms(&mut c);
    l.at(&mut c, "1", B + 40.0);
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "l", before, after, 60_000);
    // A slow clock's entry is recorded at the newest one (B + 40), which leaves at
    // B + 100: 90 s from its `now`.
    let before = server_ms(&mut c);
    assert_eq!(l.at(&mut c, "1", B + 10.0), reply(true, 0.0, 0.0, 90.0));
    let after = server_ms(&mut c);
    assert_expiry(&mut c, "l", before, after, 90_000);
    assert_eq!(
        zset(&mut c, "l"),
        pairs(&[
            ("1764456255000000-0", "1764456255000000"),
            ("1764456280000000-1", "1764456280000000"),
            ("1764456280000000-2", "1764456280000000"),
        ])
    );
}

#[test]
fn keys_of_every_mode_really_disappear_when_their_windows_are_over() {
    let s = Server::start();
    let mut c = s.conn();
    let lims = [
        Lim::new("f", "2", "0.5", "FIXED"),
        Lim::new("s", "2", "0.5", "SLIDING"),
        Lim::new("l", "2", "0.5", "LOG"),
    ];
    let start = Instant::now();
    for lim in lims {
        assert!(lim.srv(&mut c, "2").allowed);
        assert!(!lim.srv(&mut c, "1").allowed, "{}", lim.mode);
        let pttl = c.cmd(&["PTTL", lim.key]).int();
        assert!(pttl > 0 && pttl <= 2250, "{}: {pttl}", lim.mode);
    }
    // Within the window(s) plus the slack (1 s + 25%).
    let mut gone = BTreeMap::new();
    while gone.len() < lims.len() {
        for lim in lims {
            if !gone.contains_key(lim.mode) && c.cmd(&["EXISTS", lim.key]).int() == 0 {
                gone.insert(lim.mode, start.elapsed());
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "never expired: {gone:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for lim in lims {
        assert_eq!(lim.srv(&mut c, "0").remaining, 2.0, "{}", lim.mode);
        assert!(lim.srv(&mut c, "2").allowed, "{}", lim.mode);
    }
}

// ---------------------------------------------------------------------------------------
// Wrong modes, wrong types, bad arguments, corrupt state

#[test]
fn a_key_holding_another_modes_state_gets_a_clear_error_and_is_left_as_it_is() {
    let s = Server::start();
    let mut c = s.conn();
    Lim::new("f", "3", "60", "FIXED").at(&mut c, "1", B);
    Lim::new("s", "3", "60", "SLIDING").at(&mut c, "1", B);
    Lim::new("l", "3", "60", "LOG").at(&mut c, "1", B);
    // SLIDING as earlier builds stored it.
    c.q("HSET old start 1764456240 count 1 previous 0");
    c.take("b", "3", "1", "1", Some(&at(0.0)));
    c.q("SET str v");
    c.q("RPUSH list a");
    c.q("SADD set a");
    c.q("XADD stream * f v");
    c.q("ZADD zset 1764456240 a");
    let keys = [
        "f", "s", "old", "l", "b", "str", "list", "set", "stream", "zset",
    ];
    let before = fingerprint(&mut c, &keys);
    let t = at(1.0);
    let mut cases: Vec<(Vec<String>, &str)> = Vec::new();
    let line = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    for (l, want) in [
        (format!("TB.WINDOW f 3 60 1 {t} SLIDING"), FIXED_NOT_SLIDING),
        (format!("TB.WINDOW f 3 60 1 {t}"), FIXED_NOT_SLIDING),
        ("TB.WINDOW f 3 60 0 sliding".to_string(), FIXED_NOT_SLIDING),
        (format!("TB.WINDOW s 3 60 1 {t} FIXED"), SLIDING_NOT_FIXED),
        ("TB.WINDOW s 3 60 0 FIXED".to_string(), SLIDING_NOT_FIXED),
        (format!("TB.WINDOW old 3 60 1 {t} FIXED"), SLIDING_NOT_FIXED),
        (format!("TB.WINDOW old 3 60 1 {t} LOG"), WRONGTYPE),
        (format!("TB.TAKE old 3 1 1 {t}"), WINDOW_NOT_BUCKET),
        (format!("TB.WINDOW f 3 60 1 {t} LOG"), WRONGTYPE),
        (format!("TB.WINDOW s 3 60 1 {t} LOG"), WRONGTYPE),
        (format!("TB.WINDOW l 3 60 1 {t} FIXED"), WRONGTYPE),
        (format!("TB.WINDOW l 3 60 1 {t} SLIDING"), WRONGTYPE),
        (format!("TB.WINDOW l 3 60 0 {t}"), WRONGTYPE),
        (format!("TB.WINDOW b 3 60 1 {t} FIXED"), BUCKET_NOT_WINDOW),
        (format!("TB.WINDOW b 3 60 1 {t} SLIDING"), BUCKET_NOT_WINDOW),
        ("TB.WINDOW b 3 60 0".to_string(), BUCKET_NOT_WINDOW),
        (format!("TB.WINDOW b 3 60 1 {t} LOG"), WRONGTYPE),
        (format!("TB.TAKE f 3 1 1 {t}"), WINDOW_NOT_BUCKET),
        (format!("TB.TAKE s 3 1 1 {t}"), WINDOW_NOT_BUCKET),
        (format!("TB.PEEK f 3 1 {t}"), WINDOW_NOT_BUCKET),
        (format!("TB.PEEK s 3 1 {t}"), WINDOW_NOT_BUCKET),
        ("TB.TAKE s 3 1 0".to_string(), WINDOW_NOT_BUCKET),
        ("TB.RESERVE f 3 1 1 10".to_string(), WINDOW_NOT_BUCKET),
        ("TB.REFUND s 3 1 1".to_string(), WINDOW_NOT_BUCKET),
        ("TB.THROTTLE f 3 1 1".to_string(), WINDOW_NOT_BUCKET),
        (format!("TB.TAKE l 3 1 1 {t}"), WRONGTYPE),
        (format!("TB.PEEK l 3 1 {t}"), WRONGTYPE),
    ] {
        cases.push((line(&l), want));
    }
    for key in ["str", "list", "set", "stream"] {
        for mode in ["FIXED", "SLIDING", "LOG"] {
            cases.push((
                line(&format!("TB.WINDOW {key} 3 60 1 {t} {mode}")),
                WRONGTYPE,
            ));
        }
    }
    cases.push((line(&format!("TB.WINDOW zset 3 60 1 {t} FIXED")), WRONGTYPE));
    cases.push((line(&format!("TB.WINDOW zset 3 60 1 {t}")), WRONGTYPE));
    for (args, want) in &cases {
        assert_eq!(c.cmd(args), Reply::Error(want.to_string()), "{args:?}");
        assert_eq!(fingerprint(&mut c, &keys), before, "{args:?} changed a key");
    }
    // An error is no write: a transaction watching the key still runs.
    for (args, _) in cases.iter().take(4) {
        assert!(watch_survives(&s, &[args[1].as_str()], args), "{args:?}");
    }
    // And the keys still work with their own mode.
    assert!(Lim::new("f", "3", "60", "FIXED").at(&mut c, "1", B).allowed);
    assert!(Lim::new("s", "3", "60", "").at(&mut c, "1", B).allowed);
    assert!(Lim::new("old", "3", "60", "").at(&mut c, "1", B).allowed);
    assert!(Lim::new("l", "3", "60", "LOG").at(&mut c, "1", B).allowed);
}

#[test]
fn sliding_keys_of_earlier_builds_are_read_as_they_are_and_rewritten_by_a_write() {
    let s = Server::start();
    let mut c = s.conn();
    // The same state in both layouts: 3 in [B, B + 60), 2 in the window before.
    c.q("HSET old start 1764456240 count 3 previous 2 owner alice");
    c.cmd(&[
        "HSET",
        "new",
        "start",
        "1764456240",
        "counts",
        "3 2",
        "owner",
        "alice",
    ]);
    let (old, new) = (
        Lim::new("old", "10", "60", ""),
        Lim::new("new", "10", "60", ""),
    );
    // Reads and refusals decide as on the current layout and leave the old one as it is.
    let before = fingerprint(&mut c, &["old"]);
    for (n, t) in [
        ("0", B + 30.0),
        ("9", B + 30.0),
        ("11", B + 30.0),
        ("0", B + 100.0),
    ] {
        assert_eq!(old.at(&mut c, n, t), new.at(&mut c, n, t), "n={n} at {t}");
        assert_eq!(fingerprint(&mut c, &["old"]), before, "n={n} at {t}");
    }
    // The estimate at B + 30: 2 x 0.5 + 3 = 4; the first write rewrites the key.
    assert_eq!(old.at(&mut c, "1", B + 30.0), reply(true, 5.0, 0.0, 90.0));
    assert_eq!(new.at(&mut c, "1", B + 30.0), reply(true, 5.0, 0.0, 90.0));
    let want = pairs(&[
        ("counts", "4 2"),
        ("owner", "alice"),
        ("start", "1764456240"),
    ]);
    assert_eq!(hash(&mut c, "old"), want);
    assert_eq!(hash(&mut c, "new"), want);
    assert!(c.q("PTTL old").int() > 0);
    // A write in the next window moves `start` and the counts, and deletes the old fields
    // as well.
    c.q("HSET old2 start 1764456240 count 3 previous 2");
    assert_eq!(old.at(&mut c, "0", B + 90.0), reply(true, 8.0, 0.0, 30.0));
    let old2 = Lim { key: "old2", ..old };
    assert_eq!(old2.at(&mut c, "2", B + 90.0), reply(true, 6.5, 0.0, 90.0));
    assert_eq!(
        hash(&mut c, "old2"),
        pairs(&[("counts", "2 3"), ("start", "1764456300")])
    );
}

#[test]
fn every_bad_argument_gets_its_error_text_and_changes_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    Lim::new("f", "3", "60", "FIXED").at(&mut c, "1", B);
    Lim::new("s", "3", "60", "SLIDING").at(&mut c, "1", B);
    Lim::new("l", "3", "60", "LOG").at(&mut c, "1", B);
    let keys = ["f", "s", "l", "new"];
    let before = fingerprint(&mut c, &keys);
    const ARITY: &str = "ERR wrong number of arguments for 'tb.window' command";
    const LIMIT_NAN: &str = "ERR limit is not a valid number";
    const LIMIT_RANGE: &str = "ERR limit must be > 0 and <= 9007199254740992";
    const WINDOW_NAN: &str = "ERR window is not a valid number";
    const WINDOW_RANGE: &str = "ERR window must be >= 0.000001 and <= 1000000000000 seconds";
    const N_NAN: &str = "ERR n is not a valid number";
    const N_RANGE: &str = "ERR n must be >= 0 and <= 9007199254740992";
    const NOW_NAN: &str = "ERR now is not a valid number";
    const NOW_RANGE: &str = "ERR now must be seconds since the Unix epoch, >= 0 and < 253402300800";
    const MODE: &str = "ERR mode must be FIXED, SLIDING or LOG";
    const WHOLE: &str = "ERR LOG counts whole requests: limit and n must be whole numbers";
    const TOO_MANY: &str = "ERR n must be <= 100000 with LOG (each request is one entry)";
    const LOG_LIMIT: &str = "ERR limit must be <= 10000 with LOG (each request is one entry)";
    let t = "1764456241";
    let cases: &[(&[&str], &str)] = &[
        (&[], ARITY),
        (&["new"], ARITY),
        (&["new", "10", "60"], ARITY),
        (&["new", "10", "60", "1", t, "LOG", "x"], ARITY),
        (&["f", "10", "60", "1", t, "FIXED", "FIXED"], ARITY),
        (&["new", "x", "60", "1"], LIMIT_NAN),
        (&["new", "", "60", "1"], LIMIT_NAN),
        (&["new", " 10", "60", "1"], LIMIT_NAN),
        (&["new", "10 ", "60", "1"], LIMIT_NAN),
        (&["new", "0x10", "60", "1"], LIMIT_NAN),
        (&["new", "nan", "60", "1"], LIMIT_NAN),
        (&["new", "inf", "60", "1"], LIMIT_NAN),
        (&["new", "1e999", "60", "1"], LIMIT_NAN),
        (&["new", "0", "60", "1"], LIMIT_RANGE),
        (&["new", "-0", "60", "1"], LIMIT_RANGE),
        (&["new", "-3", "60", "1"], LIMIT_RANGE),
        (&["new", "1e16", "60", "1", "LOG"], LIMIT_RANGE),
        (&["f", "0", "60", "1", t, "FIXED"], LIMIT_RANGE),
        (&["new", "10", "x", "1"], WINDOW_NAN),
        (&["new", "10", "-inf", "1"], WINDOW_NAN),
        (&["new", "10", "", "1"], WINDOW_NAN),
        (&["new", "10", "0", "1"], WINDOW_RANGE),
        (&["new", "10", "-60", "1"], WINDOW_RANGE),
        (&["new", "10", "0.0000009", "1"], WINDOW_RANGE),
        (&["new", "10", "1e13", "1"], WINDOW_RANGE),
        (&["s", "10", "0", "1", t], WINDOW_RANGE),
        (&["new", "10", "60", "one"], N_NAN),
        (&["new", "10", "60", ""], N_NAN),
        (&["new", "10", "60", "NaN", "LOG"], N_NAN),
        (&["new", "10", "60", "-1"], N_RANGE),
        (&["new", "10", "60", "1e20"], N_RANGE),
        (&["l", "10", "60", "-1", t, "LOG"], N_RANGE),
        (&["new", "10", "60", "1", "now"], NOW_NAN),
        (&["new", "10", "60", "1", "SLIDE"], NOW_NAN),
        (&["new", "10", "60", "1", ""], NOW_NAN),
        (&["new", "10", "60", "1", "+inf"], NOW_NAN),
        (&["new", "10", "60", "1", "LOG", "FIXED"], NOW_NAN),
        (&["new", "10", "60", "1", "-5"], NOW_RANGE),
        (&["new", "10", "60", "1", "-5", "LOG"], NOW_RANGE),
        (&["new", "10", "60", "1", "1764456268123"], NOW_RANGE),
        (&["new", "10", "60", "1", "253402300800"], NOW_RANGE),
        (&["new", "10", "60", "1", t, "SLIDE"], MODE),
        (&["new", "10", "60", "1", t, "LOGS"], MODE),
        (&["new", "10", "60", "1", t, ""], MODE),
        (&["f", "10", "60", "1", t, "fixed "], MODE),
        (&["new", "10.5", "60", "1", "LOG"], WHOLE),
        (&["new", "10", "60", "1.5", "LOG"], WHOLE),
        (&["l", "3", "60", "0.5", t, "LOG"], WHOLE),
        (&["l", "2.5", "60", "1", t, "log"], WHOLE),
        (&["new", "10000", "60", "100001", "LOG"], TOO_MANY),
        (&["new", "10001", "60", "1", "LOG"], LOG_LIMIT),
        (&["new", "100000", "60", "1", "LOG"], LOG_LIMIT),
        (&["new", "9007199254740992", "60", "1", "LOG"], LOG_LIMIT),
        (&["new", "10", "60", "+5"], N_NAN),
        (&["new", "10", "60", ".5"], N_NAN),
        (&["new", "+10", "60", "1"], LIMIT_NAN),
        (&["new", "10", "60.", "1"], WINDOW_NAN),
        (&["l", "3", "60", "1e6", t, "LOG"], TOO_MANY),
    ];
    let errors_before = tb_counters(&mut c, "window")[3];
    let mut reached = 0;
    for (args, want) in cases {
        let mut full = vec!["TB.WINDOW"];
        full.extend_from_slice(args);
        assert_eq!(c.cmd(&full), Reply::Error(want.to_string()), "{args:?}");
        assert_eq!(fingerprint(&mut c, &keys), before, "{args:?} changed a key");
        // Fewer than 4 arguments after the name: Redis refuses before the module runs.
        reached += usize::from(args.len() >= 4);
    }
    assert_eq!(
        tb_counters(&mut c, "window")[3] - errors_before,
        reached as u64
    );
    // The bounds themselves are accepted.
    for (args, allowed) in [
        (vec!["e1", "10", "0.000001", "1", t, "FIXED"], true),
        (vec!["e2", "10", "1000000000000", "1", t], true),
        (
            vec!["e3", "9007199254740992", "60", "9007199254740992", t],
            true,
        ),
        (vec!["e4", "10", "60", "1", "0", "LOG"], true),
        (vec!["e6", "9999", "60", "10000", t, "LOG"], false),
        (vec!["e9", "10000", "60", "10000", t, "LOG"], true),
        (vec!["e7", "1", "60", "0", t, "LOG"], true),
        (vec!["e8", "2.5", "60", "0.5", t, "SLIDING"], true),
    ] {
        let mut full = vec!["TB.WINDOW"];
        full.extend_from_slice(&args);
        let r = Take::from_reply(&c.cmd(&full));
        assert_eq!(r.allowed, allowed, "{args:?}: {r:?}");
    }
    assert_eq!(c.q("EXISTS e6").int(), 0);
    // The last accepted `now`, where the clock bound allows it.
    let u = Server::start_unbounded();
    let r = u.conn().cmd(&[
        "TB.WINDOW",
        "e5",
        "10",
        "60",
        "1",
        "253402300799.999",
        "FIXED",
    ]);
    assert!(Take::from_reply(&r).allowed, "{r:?}");
    assert_eq!(c.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn log_takes_up_to_its_limit_of_10000_entries_in_one_call() {
    let s = Server::start();
    let mut c = s.conn();
    let l = Lim::new("l", "10000", "60", "LOG");
    assert_eq!(l.at(&mut c, "10000", B), reply(true, 0.0, 0.0, 60.0));
    assert_eq!(c.q("ZCARD l").int(), 10_000);
    assert_eq!(l.at(&mut c, "1", B + 1.0), reply(false, 0.0, 59.0, 59.0));
    let r = c.q("ZRANGE l 9999 9999");
    assert_eq!(r.array()[0].text(), "1764456240000000-9999");
    // Every entry leaves the window: the next call removes all 10,000 and adds 10,000.
    assert_eq!(l.at(&mut c, "10000", B + 61.0), reply(true, 0.0, 0.0, 60.0));
    assert_eq!(c.q("ZCARD l").int(), 10_000);
    // A limit above the cap is refused before the key is read.
    let r = c.q("TB.WINDOW l 10001 60 1 LOG");
    assert_eq!(
        r,
        Reply::Error("ERR limit must be <= 10000 with LOG (each request is one entry)".into())
    );
}

#[test]
fn corrupt_window_state_is_reported_not_reset() {
    let s = Server::start();
    let mut c = s.conn();
    let fixed: &[(&[&str], &str)] = &[
        (&["start", "x", "count", "1"], CORRUPT_START),
        (&["start", "nan", "count", "1"], CORRUPT_START),
        (&["start", "-1", "count", "1"], CORRUPT_START),
        (&["start", "1764456240123", "count", "1"], CORRUPT_START),
        (&["start", "", "count", "1"], CORRUPT_START),
        (&["count", "1"], CORRUPT_START),
        (&["start", "1764456240"], CORRUPT_COUNT),
        (&["start", "1764456240", "count", "-1"], CORRUPT_COUNT),
        (&["start", "1764456240", "count", "inf"], CORRUPT_COUNT),
        (&["start", "1764456240", "count", "1e400"], CORRUPT_COUNT),
        (&["start", "1764456240", "count", "1e16"], CORRUPT_COUNT),
        (&["start", "1764456240", "count", "many"], CORRUPT_COUNT),
    ];
    let sliding: &[(&[&str], &str)] = &[
        (&["start", "x", "counts", "1 0"], CORRUPT_START),
        (&["start", "-1", "counts", "1 0"], CORRUPT_START),
        (&["counts", "1 0"], CORRUPT_START),
        (&["start", "1764456240"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", ""], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1 0 "], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1  0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", " 1 0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1,0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "-1 0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1 -1"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1 nan"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "inf 0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1e16 0"], CORRUPT_COUNTS),
        (&["start", "1764456240", "counts", "1 0 0"], CORRUPT_COUNTS),
        // The layout of earlier builds.
        (
            &["start", "x", "count", "1", "previous", "0"],
            CORRUPT_START,
        ),
        (&["previous", "3"], CORRUPT_START),
        (
            &["start", "1764456240", "count", "-2", "previous", "0"],
            CORRUPT_COUNT,
        ),
        (
            &["start", "1764456240", "count", "1", "previous", "x"],
            CORRUPT_PREVIOUS,
        ),
        (
            &["start", "1764456240", "count", "1", "previous", "-1"],
            CORRUPT_PREVIOUS,
        ),
        (
            &["start", "1764456240", "count", "1", "previous", "nan"],
            CORRUPT_PREVIOUS,
        ),
        (
            &["start", "1764456240", "count", "1", "previous", "1e300"],
            CORRUPT_PREVIOUS,
        ),
    ];
    let mut i = 0;
    for (mode, cases) in [("FIXED", fixed), ("SLIDING", sliding)] {
        for (fields, want) in cases {
            i += 1;
            let key = format!("bad{i}");
            let mut hset = vec!["HSET", &key];
            hset.extend_from_slice(fields);
            c.cmd(&hset);
            let before = fingerprint(&mut c, &[&key]);
            for n in ["1", "0"] {
                let r = c.cmd(&Lim::new(&key, "10", "60", mode).args(n, Some(B)));
                assert_eq!(r, Reply::Error(want.to_string()), "{mode} {fields:?}");
                let r = c.cmd(&Lim::new(&key, "10", "60", mode).args(n, None));
                assert_eq!(r, Reply::Error(want.to_string()), "{mode} {fields:?}");
            }
            assert_eq!(fingerprint(&mut c, &[&key]), before, "{fields:?}");
        }
    }
    // LOG: a score (µs) that is not a time in [0, 253402300800] s, i.e. outside [0,
    // 253402300800000000] µs, set by hand, alone or next to valid entries, oldest or
    // newest. 253402300800000032 is the next score above the last valid one (an f64 there
    // steps by 32); -1 µs is just below the first.
    let logs: &[&[&str]] = &[
        &["-1", "a"],
        &["-inf", "a"],
        &["+inf", "a"],
        &["253402300800000032", "a"],
        &["253402300801000000", "a"],
        &["1e300", "a"],
        &["-1", "a", "1764456240000000", "1764456240000000-0"],
        &[
            "-inf",
            "a",
            "1764456200000000",
            "b",
            "1764456240000000",
            "1764456240000000-0",
        ],
        &[
            "1764456240000000",
            "1764456240000000-0",
            "253402300800000032",
            "z",
        ],
        &["1764456240000000", "1764456240000000-0", "+inf", "z"],
    ];
    for (j, scores) in logs.iter().enumerate() {
        let key = format!("log{j}");
        let mut zadd = vec!["ZADD", &key];
        zadd.extend_from_slice(scores);
        c.cmd(&zadd);
        let before = fingerprint(&mut c, &[&key]);
        for (n, now) in [("1", Some(B + 100.0)), ("0", Some(B + 1.0)), ("1", None)] {
            let r = c.cmd(&Lim::new(&key, "10", "60", "LOG").args(n, now));
            assert_eq!(r, Reply::Error(CORRUPT_LOG.into()), "{scores:?} n={n}");
        }
        assert_eq!(fingerprint(&mut c, &[&key]), before, "{scores:?}");
    }
    // Valid texts written by someone else are read as the numbers they are.
    c.q("HSET ok start 1764456240.0 count 2.0");
    let t = Lim::new("ok", "3", "60", "FIXED").at(&mut c, "0", B + 30.0);
    assert_eq!(t, reply(true, 1.0, 0.0, 30.0));
    // The first and last valid µs times are entries, not corruption: 0 (out of the window,
    // so removed) and 253402300800000000 (MAX_TIME itself: newer than `now`, so the new
    // entry joins it there, and the log lasts until it leaves the window).
    c.q("ZADD okl 0 0-0 1764456240000000 1764456240000000-0");
    let t = Lim::new("okl", "3", "60", "LOG").at(&mut c, "1", B);
    assert_eq!(t, reply(true, 1.0, 0.0, 60.0));
    assert_eq!(
        zset(&mut c, "okl"),
        pairs(&[
            ("1764456240000000-0", "1764456240000000"),
            ("1764456240000000-1", "1764456240000000"),
        ])
    );
    c.q("ZADD last 1764456240000000 1764456240000000-0 253402300800000000 253402300800000000-0");
    let t = Lim::new("last", "3", "60", "LOG").at(&mut c, "0", B + 100.0);
    assert_eq!(t, reply(true, 2.0, 0.0, 253_402_300_860.0 - (B + 100.0)));
    let t = Lim::new("last", "3", "60", "LOG").at(&mut c, "1", B + 100.0);
    assert_eq!(t, reply(true, 1.0, 0.0, 253_402_300_860.0 - (B + 100.0)));
    // The entry at MAX_TIME and the new one, numbered after the one left: both there.
    let z = zset(&mut c, "last");
    assert_eq!(z.len(), 2, "{z:?}");
    assert!(
        z[0].0 == "253402300800000000-0" && z[1].0 == "253402300800000000-1",
        "{z:?}"
    );
    for (_, score) in &z {
        assert_eq!(
            score.parse::<f64>().unwrap(),
            253_402_300_800_000_000.0,
            "{z:?}"
        );
    }
    assert!(c.q("PTTL last").int() > 0);
    // A score the seconds-based format wrote (1764456240, read as µs: 1970) and the old
    // bound in seconds are valid µs times too: long out of the window, so removed.
    c.q("ZADD secs 1764456240 1764456240-0 253402300800 253402300800-1");
    let t = Lim::new("secs", "3", "60", "LOG").at(&mut c, "1", B);
    assert_eq!(t, reply(true, 2.0, 0.0, 60.0));
    assert_eq!(zset(&mut c, "secs"), entries("1764456240000000", 0, 1));
}

#[test]
fn other_fields_of_a_window_hash_are_left_alone() {
    let s = Server::start();
    let mut c = s.conn();
    // Fields added to a window after it was created stay as they are.
    Lim::new("f", "3", "60", "FIXED").at(&mut c, "1", B);
    Lim::new("s", "3", "60", "SLIDING").at(&mut c, "1", B);
    c.q("HSET f owner alice");
    c.q("HSET s owner bob");
    Lim::new("f", "3", "60", "FIXED").at(&mut c, "1", B);
    Lim::new("s", "3", "60", "SLIDING").at(&mut c, "1", B);
    assert_eq!(
        hash(&mut c, "f"),
        pairs(&[("count", "2"), ("owner", "alice"), ("start", "1764456240")])
    );
    assert_eq!(
        hash(&mut c, "s"),
        pairs(&[("counts", "2 0"), ("owner", "bob"), ("start", "1764456240")])
    );
}

// ---------------------------------------------------------------------------------------
// Reads are reads: WATCH and notifications

#[test]
fn only_calls_that_write_touch_watch_and_notify() {
    let s = Server::start();
    let mut c = s.conn();
    let lims = [
        Lim::new("f", "2", "60", "FIXED"),
        Lim::new("s", "2", "60", "SLIDING"),
        Lim::new("l", "2", "60", "LOG"),
    ];
    for lim in lims {
        lim.at(&mut c, "2", B);
        // Denied, n = 0, n > limit: no write.
        for n in ["1", "0", "3"] {
            let args = lim.args(n, Some(B + 1.0));
            assert!(watch_survives(&s, &[lim.key], &args), "{} n={n}", lim.mode);
        }
        // Admitted: a write.
        let args = lim.args("1", Some(B + 200.0));
        assert!(!watch_survives(&s, &[lim.key], &args), "{}", lim.mode);
    }
    let events = notifications_during(&s, |c| {
        for lim in lims {
            lim.at(c, "2", B + 200.0); // denied
            lim.at(c, "0", B + 200.0);
        }
    });
    assert!(events.is_empty(), "{events:?}");
    let events = notifications_during(&s, |c| {
        Lim::new("f2", "2", "60", "FIXED").at(c, "1", B);
        Lim::new("l2", "2", "60", "LOG").at(c, "1", B);
        Lim::new("l2", "2", "60", "LOG").at(c, "1", B + 100.0);
    });
    assert_eq!(
        events,
        [
            "__keyspace@0__:f2 hset",
            "__keyevent@0__:hset f2",
            "__keyspace@0__:f2 expire",
            "__keyevent@0__:expire f2",
            "__keyspace@0__:l2 zadd",
            "__keyevent@0__:zadd l2",
            "__keyspace@0__:l2 expire",
            "__keyevent@0__:expire l2",
            "__keyspace@0__:l2 zrem",
            "__keyevent@0__:zrem l2",
            "__keyspace@0__:l2 zadd",
            "__keyevent@0__:zadd l2",
            "__keyspace@0__:l2 expire",
            "__keyevent@0__:expire l2",
        ]
    );
}

// ---------------------------------------------------------------------------------------
// Replication and AOF

/// Mixed TB.WINDOW traffic over the three modes: explicit clocks (forward, with slow
/// clocks now and then) and the server's clock, allowed and denied, n = 0, n above the
/// limit, errors. Returns how often each outcome was seen.
fn mixed_window_traffic(c: &mut Conn, calls: usize, seed: u64) -> BTreeMap<String, usize> {
    let mut rng = Rng(seed);
    let modes = ["FIXED", "SLIDING", "LOG"];
    // (limit, window): LOG's limits are whole; 150 per hour grows a LOG past a listpack
    // (128 entries) into a skiplist.
    let shapes = [
        ("3", "60"),
        ("10", "7.5"),
        ("5", "3600"),
        ("150", "3600"),
        ("2", "0.25"),
    ];
    let mut clock = B + 0.5;
    let mut seen = BTreeMap::new();
    for _ in 0..calls {
        let m = rng.below(3) as usize;
        let mode = modes[m];
        let i = rng.below(14) as usize;
        let key = format!("w:{}:{i}", mode.to_lowercase());
        let (limit, window) = shapes[i % shapes.len()];
        clock += (rng.below(1500) as f64) / 1000.0;
        // Keys 10.. run on the server's clock; the others on client clocks, 1 in 15
        // of them slow.
        let now = if i >= 10 {
            None
        } else if rng.below(15) == 0 {
            Some(clock - 40.0 + (rng.below(1000) as f64) / 1000.0)
        } else {
            Some(clock)
        };
        let n = match rng.below(12) {
            0 => "0".to_string(),
            1 => "1000".to_string(),
            2 if limit == "150" => "40".to_string(),
            3 | 4 => "2".to_string(),
            5 if mode != "LOG" => "0.5".to_string(),
            _ => "1".to_string(),
        };
        let lim = Lim::new(&key, limit, window, mode);
        let mut args = lim.args(&n, now);
        if let Some(t) = now
            && rng.below(4) == 0
        {
            // A client clock with more digits than an f64 holds (21 significant): parsed
            // by the general path, and (LOG) stored rounded to the microsecond.
            args[5] = format!("{t:.9}{}", 1 + rng.below(9));
        }
        match rng.below(40) {
            // A bad argument.
            0 => args[2] = "x".into(),
            // Another mode on an existing key (the mode word is last).
            1 if c.cmd(&["EXISTS", &key]).int() == 1 => {
                let last = args.len() - 1;
                args[last] = modes[(m + 1) % 3].into();
            }
            _ => {}
        }
        let outcome = match c.cmd(&args) {
            Reply::Error(_) => "error".to_string(),
            r => {
                let t = Take::from_reply(&r);
                let what = if t.allowed { "allowed" } else { "denied" };
                format!("{} {what}", mode.to_lowercase())
            }
        };
        *seen.entry(outcome).or_insert(0) += 1;
    }
    seen
}

#[test]
fn replicas_with_and_without_the_module_hold_the_masters_bytes() {
    let master = start_master();
    let with_module = start_replica(&master, true);
    let without_module = start_replica(&master, false);
    let mut c = master.conn();
    let seen = mixed_window_traffic(&mut c, 4000, 23);
    eprintln!("outcomes on the master: {seen:?}");
    assert_each_seen(
        &seen,
        &[
            "fixed allowed",
            "fixed denied",
            "sliding allowed",
            "sliding denied",
            "log allowed",
            "log denied",
            "error",
        ],
        10,
    );
    rewrite_earlier_sliding_keys(&mut c);
    let (want, _) = assert_replicas_hold_the_masters_bytes(
        &mut c,
        &[
            (&with_module, "replica with the module"),
            (&without_module, "replica without the module"),
        ],
    );
    assert!(want.len() >= 25, "{} lasting", want.len());
    assert!(
        want.keys().any(|k| k.starts_with(b"w:log:")) && want.keys().any(|k| k.ends_with(b":13")),
        "{:?}",
        want.keys()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect::<Vec<_>>()
    );
    // The big LOG keys went past a listpack, on every side alike (the DUMPs hold the
    // encoding too).
    for key in ["w:log:3", "w:log:13"] {
        assert!(c.cmd(&["ZCARD", key]).int() > 128, "{key}");
        for server in [&master, &with_module, &without_module] {
            let enc = server.conn().cmd(&["OBJECT", "ENCODING", key]).text();
            assert_eq!(enc, "skiplist", "{key}");
        }
    }
    assert!(
        !without_module.log().contains("unknown command"),
        "{}",
        without_module.log()
    );
}

#[test]
fn denied_calls_n_zero_and_errors_replicate_nothing() {
    let master = start_master();
    let replica = start_replica(&master, false);
    let mut c = master.conn();
    let lims = [
        Lim::new("f", "2", "60", "FIXED"),
        Lim::new("s", "2", "60", "SLIDING"),
        Lim::new("l", "2", "60", "LOG"),
    ];
    for lim in lims {
        assert!(lim.at(&mut c, "2", B).allowed);
    }
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let before = repl_offset(&mut c);
    for lim in lims {
        for (n, now) in [
            ("1", Some(B + 1.0)),
            ("0", Some(B + 1.0)),
            ("0", Some(B + 500.0)),
            ("3", Some(B + 500.0)),
            ("0", None),
            ("3", None),
        ] {
            let args = lim.args(n, now);
            c.cmd(&args);
            assert_eq!(repl_offset(&mut c), before, "{args:?}");
        }
        for bad in [
            format!("TB.WINDOW {} x 60 1", lim.key),
            format!("TB.WINDOW {} 2 60 1 {B} NOPE", lim.key),
            format!("TB.WINDOW new 2 60 0 {B} {}", lim.mode),
            format!("TB.WINDOW new 2 60 3 {B} {}", lim.mode),
        ] {
            c.q(&bad);
            assert_eq!(repl_offset(&mut c), before, "{bad}");
        }
    }
    for line in [
        format!("TB.WINDOW f 2 60 1 {B} SLIDING"),
        format!("TB.WINDOW s 2 60 1 {B} FIXED"),
        format!("TB.WINDOW l 2 60 1 {B} FIXED"),
        format!("TB.WINDOW f 2 60 1 {B} LOG"),
        format!("TB.TAKE f 2 1 1 {B}"),
    ] {
        c.q(&line);
        assert_eq!(repl_offset(&mut c), before, "{line}");
    }
    // An admitted call moves the offset.
    assert!(lims[0].at(&mut c, "1", B + 60.0).allowed);
    assert!(repl_offset(&mut c) > before);
    assert_eq!(c.q("WAIT 1 10000").int(), 1);
    let mut rc = replica.conn();
    let (got, want) = (dumps(&mut rc), dumps(&mut c));
    assert_same_dumps("replica", &mut rc, &got, &mut c, &want);
    assert_eq!(c.q("EXISTS new").int(), 0);
}

#[test]
fn effects_are_replicated_as_hset_hdel_zrem_zadd_and_pexpireat() {
    let master = start_master();
    let mut stream = ReplStream::attach(&master);
    let mut c = master.conn();
    let mut marker = 0;
    let mut effects = |c: &mut Conn, f: &mut dyn FnMut(&mut Conn)| {
        f(c);
        marker += 1;
        let m = format!("marker{marker}");
        c.cmd(&["SET", &m, "1"]);
        stream.until_marker(&m)
    };
    let f = Lim::new("f", "3", "60", "FIXED");
    let sl = Lim::new("s", "3", "60", "SLIDING");
    let l = Lim::new("l", "3", "60", "LOG");
    let pexpireat = |c: &mut Conn, key: &str| {
        vec![
            "PEXPIREAT".to_string(),
            key.to_string(),
            c.cmd(&["PEXPIRETIME", key]).int().to_string(),
        ]
    };
    let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let wrap = |mut cmds: Vec<Vec<String>>| {
        // Several effects of one command travel as one transaction.
        if cmds.len() > 1 {
            cmds.insert(0, strings(&["MULTI"]));
            cmds.push(strings(&["EXEC"]));
        }
        cmds
    };

    let got = effects(&mut c, &mut |c| {
        f.at(c, "1", B);
    });
    let want = wrap(vec![
        strings(&["HSET", "f", "start", "1764456240", "count", "1"]),
        pexpireat(&mut c, "f"),
    ]);
    assert_eq!(got, want);
    // The same instant: only the count changes; the expiry is still right.
    let got = effects(&mut c, &mut |c| {
        f.at(c, "1", B);
    });
    assert_eq!(got, [strings(&["HSET", "f", "count", "2"])]);

    let got = effects(&mut c, &mut |c| {
        sl.at(c, "2", B);
    });
    let want = wrap(vec![
        strings(&["HSET", "s", "start", "1764456240", "counts", "2 0"]),
        pexpireat(&mut c, "s"),
    ]);
    assert_eq!(got, want);
    let got = effects(&mut c, &mut |c| {
        sl.at(c, "1", B + 60.0);
    });
    assert_eq!(
        got,
        [strings(&[
            "HSET",
            "s",
            "start",
            "1764456300",
            "counts",
            "1 2"
        ])]
    );
    // A SLIDING key of an earlier build (`count`, `previous`): its first write stores
    // `counts` and deletes the old fields, in the same transaction.
    effects(&mut c, &mut |c| {
        c.cmd(&["HSET", "old", "start", "1764456240", "count", "1"]);
        c.cmd(&["HSET", "old", "previous", "2"]);
    });
    let got = effects(&mut c, &mut |c| {
        assert!(Lim { key: "old", ..sl }.at(c, "1", B + 30.0).allowed);
    });
    let want = wrap(vec![
        strings(&["HSET", "old", "counts", "2 2"]),
        strings(&["HDEL", "old", "count", "previous"]),
        pexpireat(&mut c, "old"),
    ]);
    assert_eq!(got, want);

    let got = effects(&mut c, &mut |c| {
        l.at(c, "2", B);
    });
    let want = wrap(vec![
        strings(&[
            "ZADD",
            "l",
            "1764456240000000",
            "1764456240000000-0",
            "1764456240000000",
            "1764456240000000-1",
        ]),
        pexpireat(&mut c, "l"),
    ]);
    assert_eq!(got, want);
    // Within the window: one ZADD, the expiry still right.
    let got = effects(&mut c, &mut |c| {
        l.at(c, "1", B + 30.0);
    });
    assert_eq!(
        got,
        [strings(&[
            "ZADD",
            "l",
            "1764456270000000",
            "1764456270000000-2"
        ])]
    );
    // The two entries of B are out: removed by name, as the master removed them.
    let got = effects(&mut c, &mut |c| {
        l.at(c, "1", B + 60.5);
    });
    assert_eq!(
        got,
        wrap(vec![
            strings(&["ZREM", "l", "1764456240000000-0", "1764456240000000-1"]),
            strings(&["ZADD", "l", "1764456300500000", "1764456300500000-1"]),
        ])
    );
    // Every entry out: the emptied set is deleted and created again, so its expiry is
    // set (and replicated) again.
    let got = effects(&mut c, &mut |c| {
        l.at(c, "1", B + 200.0);
    });
    let want = wrap(vec![
        strings(&["ZREM", "l", "1764456270000000-2", "1764456300500000-1"]),
        strings(&["ZADD", "l", "1764456440000000", "1764456440000000-0"]),
        pexpireat(&mut c, "l"),
    ]);
    assert_eq!(got, want);
    assert!(c.q("PTTL l").int() > 0);
    // One entry out, the only one: ZREM of one member.
    let got = effects(&mut c, &mut |c| {
        l.at(c, "1", B + 260.5);
    });
    let want = wrap(vec![
        strings(&["ZREM", "l", "1764456440000000-0"]),
        strings(&["ZADD", "l", "1764456500500000", "1764456500500000-0"]),
        pexpireat(&mut c, "l"),
    ]);
    assert_eq!(got, want);
    // The server's clock: its time in whole microseconds, as the member too.
    let got = effects(&mut c, &mut |c| {
        Lim::new("srv", "3", "60", "LOG").srv(c, "1");
    });
    let z = zset(&mut c, "srv");
    let member = &z[0].0;
    let time = member.strip_suffix("-0").unwrap();
    assert!(
        time.len() == 16 && time.bytes().all(|b| b.is_ascii_digit()),
        "{member}"
    );
    let want = wrap(vec![
        strings(&["ZADD", "srv", time, member]),
        pexpireat(&mut c, "srv"),
    ]);
    assert_eq!(got, want);
    // Nothing for refusals and reads.
    let got = effects(&mut c, &mut |c| {
        f.at(c, "2", B);
        sl.at(c, "0", B + 60.0);
        l.at(c, "3", B + 60.5);
    });
    assert!(got.is_empty(), "{got:?}");
}

/// SLIDING keys as earlier builds stored them (`start`, `count`, `previous`), each
/// rewritten by one admitted call on the server's clock: its effects (HSET `counts`, HDEL
/// of the old fields, PEXPIREAT) must reach replicas and the AOF like any other.
fn rewrite_earlier_sliding_keys(c: &mut Conn) {
    for i in 0..3 {
        let key = format!("w:old:{i}");
        c.cmd(&[
            "HSET",
            &key,
            "start",
            "1764456240",
            "count",
            "1",
            "previous",
            "2",
        ]);
        assert!(Lim::new(&key, "100", "3600", "SLIDING").srv(c, "1").allowed);
        let fields = hash(c, &key);
        assert_eq!(
            fields.iter().map(|p| &*p.0).collect::<Vec<_>>(),
            ["counts", "start"],
            "{key}"
        );
    }
}

#[test]
fn aof_replay_after_kill_restores_every_window_byte_for_byte() {
    let mut server = start_aof_server("always");
    let mut c = server.conn();
    let seen = mixed_window_traffic(&mut c, 3000, 29);
    assert_each_seen(&seen, &["log allowed"], 10);
    rewrite_earlier_sliding_keys(&mut c);
    let (want, soon) = lasting(&mut c);
    assert!(want.len() >= 25, "{} lasting", want.len());
    drop(c);
    // kill -9: no shutdown, no rewrite; only what appendfsync always wrote survives.
    for with_module in [true, false] {
        server.restart(with_module);
        let mut rc = server.conn();
        let got = without(&dumps(&mut rc), &soon);
        let mut again = server.conn();
        assert_same_dumps(
            if with_module {
                "after restart with the module"
            } else {
                "after restart without the module"
            },
            &mut rc,
            &got,
            &mut again,
            &want,
        );
    }
}

// ---------------------------------------------------------------------------------------
// Cluster routing, metadata, INFO

#[test]
fn tb_window_declares_its_key() {
    let s = Server::start();
    let mut c = s.conn();
    for line in [
        "COMMAND GETKEYS tb.window user:42 10 60 1",
        "COMMAND GETKEYS tb.window user:42 10 60 1 LOG",
        "COMMAND GETKEYS tb.window user:42 10 60 1 1764456240",
        "COMMAND GETKEYS tb.window user:42 10 60 1 1764456240 FIXED",
    ] {
        assert_eq!(
            c.q(line),
            Reply::Array(vec![Reply::Bulk(b"user:42".to_vec())]),
            "{line}"
        );
    }
    let (arity, flags, specs) = command_info(&mut c, "tb.window");
    assert_eq!(arity, -5);
    assert_eq!(flags, ["write", "denyoom", "module"]);
    assert!(
        specs.contains("RW") && specs.contains("update") && specs.contains("index"),
        "{specs}"
    );
}

#[test]
fn in_a_cluster_tb_window_runs_on_the_node_that_owns_its_key() {
    let (a, b) = start_two_node_cluster();
    let mut ca = a.conn();
    let mut cb = b.conn();
    // "a" (slot 15495) lives on b.
    assert_eq!(ca.q("CLUSTER KEYSLOT a").int(), 15495);
    let moved = Reply::Error(format!("MOVED 15495 127.0.0.1:{}", b.port));
    for mode in ["FIXED", "SLIDING", "LOG"] {
        let lim = Lim::new("a", "3", "60", mode);
        assert_eq!(ca.cmd(&lim.args("1", Some(B))), moved, "{mode}");
        assert_eq!(ca.cmd(&lim.args("0", None)), moved, "{mode}");
    }
    assert_eq!(
        ca.q("DBSIZE").int(),
        0,
        "a wrote a key of a slot it does not own"
    );
    let t = Lim::new("a", "3", "60", "LOG").at(&mut cb, "1", B);
    assert_eq!(t, reply(true, 2.0, 0.0, 60.0));
    let t = Lim::new("{a}f", "3", "60", "FIXED").at(&mut cb, "1", B);
    assert_eq!(t, reply(true, 2.0, 0.0, 60.0));
}

#[test]
fn info_counts_window_calls_allowed_denied_and_errors() {
    let s = Server::start();
    let mut c = s.conn();
    assert_eq!(tb_counters(&mut c, "window"), [0, 0, 0, 0]);
    let f = Lim::new("f", "1", "60", "FIXED");
    f.at(&mut c, "1", B); // allowed
    f.at(&mut c, "1", B); // denied
    f.at(&mut c, "0", B + 60.0); // a read: allowed
    Lim::new("l", "1", "60", "LOG").at(&mut c, "2", B); // never: denied
    c.q("TB.WINDOW f x 60 1"); // error
    c.q(&format!("TB.WINDOW f 1 60 1 {B} SLIDING")); // wrong mode: error
    c.q("TB.WINDOW f 1 60"); // refused by Redis before the module runs
    assert_eq!(tb_counters(&mut c, "window"), [6, 2, 2, 2]);
    // Other commands' counters are their own.
    assert_eq!(tb_counters(&mut c, "take"), [0, 0, 0, 0]);
}

#[test]
fn command_docs_describe_tb_window() {
    let s = Server::start();
    let mut c = s.conn();
    let docs = command_docs(&mut c, "tb.window");
    let field = |name: &str| doc_field(&docs, name);
    assert_eq!(
        field("summary").text(),
        "At most limit requests per window seconds: FIXED window counter, SLIDING window \
         counter (the default) or sliding LOG. Replies [allowed, remaining, retry_after, \
         reset_after]."
    );
    assert_eq!(
        field("complexity").text(),
        "O(1) for FIXED and SLIDING; O(log(N) + M) for LOG, N the entries held and M those \
         added or removed"
    );
    assert_eq!(field("since").text(), "0.2.0");
    assert_eq!(field("module").text(), "tb");
    // Each argument as its fields' text, `display_text` left out (Redis 7.0 has none;
    // 7.2+ and Valkey repeat the name there).
    fn describe(arg: &Reply) -> String {
        let fields: Vec<String> = arg
            .array()
            .chunks(2)
            .filter(|p| p[0].text() != "display_text")
            .map(|p| match p[0].text().as_str() {
                "arguments" => format!(
                    "arguments [{}]",
                    p[1].array()
                        .iter()
                        .map(describe)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                name => format!("{name} {}", p[1].flat()),
            })
            .collect();
        fields.join(" ")
    }
    let args: Vec<String> = field("arguments").array().iter().map(describe).collect();
    assert_eq!(
        args,
        [
            "name key type key key_spec_index 0",
            "name limit type double",
            "name window type double",
            "name n type double",
            "name now type double flags [optional]",
            "name mode type oneof flags [optional] arguments [name FIXED type pure-token \
             token FIXED, name SLIDING type pure-token token SLIDING, name LOG type \
             pure-token token LOG]",
        ]
    );
}
