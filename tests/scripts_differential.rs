//! The script library (clients/lua) held to the module: the same seeded random calls (costs,
//! shapes changing between calls, `now` near, behind, ahead of and far from the server's
//! clock, expiries as time passes, foreign and corrupt keys, bad arguments) to a server with
//! the module and one with only the scripts, every reply and every touched key's bytes and
//! TTL compared after each call (tests/common/differential.rs). A planted divergence in the
//! script is caught.
//!
//! Leases and holds are part of the run (acquire with and without TAKE, release, renew of
//! leases and holds, hold, settle, peek, full hold tables, legacy and look-alike sets). They
//! are timed on the server's clock only, so both servers read one wall clock that the test
//! sets before each call (tests/common/clock_shim.c): a call is decided at the same
//! microsecond on both, and bytes and TTLs compare exactly. A grant's id comes from the
//! module and is sent to the scripts as the client's id.
//!
//! `TB_DIFF_CALLS` (default 100,000, split over two pairs of servers) and `TB_DIFF_SEED`
//! replay or lengthen a run; `TB_DIFF_TRACE=key` prints every call on that key and the key on
//! both servers after it.

mod common;

use std::time::Instant;

use common::clock::SharedClock;
use common::differential::{Differential, Side, Stats};
use common::scripts::{self, Backend, LIBRARY};
use common::{Options, Server};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A module server and a script server (with `source` as the script), paired for a run,
/// both reading `clock`.
fn pair(source: &str, function: bool, clock: &SharedClock) -> (Server, Server, Side, Side) {
    let a = Server::start_with_env(Options::default(), clock.env());
    let b = Server::start_with_env(
        Options {
            with_module: false,
            extra: Vec::new(),
        },
        clock.env(),
    );
    let mut cb = b.conn();
    let backend = if function {
        scripts::load_functions(&mut cb, source);
        Backend::Function
    } else {
        Backend::Eval(scripts::load_script(&mut cb, source))
    };
    let sa = Side::new(a.conn(), Backend::Module);
    let sb = Side::new(cb, backend);
    (a, b, sa, sb)
}

/// One run of `calls` on a fresh pair; its stats, or the first difference.
fn run(seed: u64, calls: u64, source: &str, function: bool) -> Result<Stats, String> {
    let dir = std::env::temp_dir().join(format!("redis-tb-clock-{}-{seed:x}", std::process::id()));
    let clock = SharedClock::new(&dir);
    let (_a, _b, sa, sb) = pair(source, function, &clock);
    let mut d = Differential::new(seed, sa, sb);
    d.clock = Some(clock);
    let result = d.run(calls);
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    // What the scripts called underneath (their effects' commands), for coverage.
    let info = d.b.conn.cmd(&["INFO", "commandstats"]).text();
    for needed in ["hset", "hdel", "zadd", "zrem", "pexpire", "zrange"] {
        assert!(
            info.contains(&format!("cmdstat_{needed}:")),
            "seed {seed}: the scripts never called {needed}"
        );
    }
    Ok(d.stats)
}

fn merge(all: &mut Stats, one: Stats) {
    all.calls += one.calls;
    for (k, v) in one.outcomes {
        *all.outcomes.entry(k).or_default() += v;
    }
    for (k, v) in one.errors {
        *all.errors.entry(k).or_default() += v;
    }
    all.natural_expiries += one.natural_expiries;
    all.guarded_expiries += one.guarded_expiries;
    all.ttl_keep_or_set += one.ttl_keep_or_set;
    all.vandalized += one.vandalized;
    all.full_tables += one.full_tables;
}

#[test]
fn scripts_match_the_module_over_random_calls() {
    // The run holds both servers to one instant (leases and holds on the server's clock):
    // on a server whose wall clock does not follow the shared one (Valkey 9.1), it cannot.
    if !common::clock::server_follows_shared_clock() {
        return;
    }
    let calls = env_u64("TB_DIFF_CALLS", 100_000);
    let seed = env_u64("TB_DIFF_SEED", 0x005e_ed42);
    let start = Instant::now();
    // Two pairs of servers at once (EVALSHA and FCALL), half the calls each.
    let runs: Vec<_> = [(seed, false), (seed ^ 0x9e37_79b9, true)]
        .into_iter()
        .map(|(seed, function)| {
            std::thread::spawn(move || (seed, run(seed, calls / 2, LIBRARY, function)))
        })
        .collect();
    let mut all = Stats::default();
    for handle in runs {
        let (seed, result) = handle.join().unwrap();
        match result {
            Ok(stats) => merge(&mut all, stats),
            Err(e) => panic!("seed {seed} (TB_DIFF_SEED replays it): {e}"),
        }
    }
    let mut errors: Vec<_> = all.errors.iter().collect();
    errors.sort_by(|a, b| b.1.cmp(a.1));
    eprintln!(
        "{} calls in {:.1} s; expiries: {} by Redis, {} guarded; TTL keep-or-set edges: {}; keys vandalized: {}; holds refused by a full table: {}",
        all.calls,
        start.elapsed().as_secs_f64(),
        all.natural_expiries,
        all.guarded_expiries,
        all.ttl_keep_or_set,
        all.vandalized,
        all.full_tables
    );
    let mut outcomes: Vec<_> = all.outcomes.iter().collect();
    outcomes.sort();
    for ((command, outcome), n) in outcomes {
        eprintln!("  {command} {outcome}: {n}");
    }
    for (text, n) in &errors {
        eprintln!("  {n:6} {text}");
    }
    // Hold bursts (a full table and beyond) come on top of the random calls.
    assert!(all.calls >= calls / 2 * 2, "{}", all.calls);
    // The run covered what it is for: every command admitted, refused and failed, keys
    // expiring between calls, and the errors of every kind of hostile key.
    for command in [
        "TB.TAKE",
        "TB.MTAKE",
        "TB.RESERVE",
        "TB.PEEK",
        "TB.REFUND",
        "TB.WINDOW",
        "TB.ACQUIRE",
        "TB.RELEASE",
        "TB.RENEW",
        "TB.HOLD",
        "TB.SETTLE",
    ] {
        for outcome in ["allowed", "denied", "error"] {
            // A refund always answers allowed.
            if command == "TB.REFUND" && outcome == "denied" {
                continue;
            }
            assert!(
                all.outcome(command, outcome) > 0,
                "no {command} {outcome} in the run"
            );
        }
    }
    if calls >= 100_000 {
        assert!(all.natural_expiries > 100, "{all:?}");
        assert!(all.full_tables > 10, "{all:?}");
        for needle in [
            "WRONGTYPE",
            "not a token bucket",
            "not a TB.WINDOW window",
            "not a TB.WINDOW LOG",
            "both a token bucket's",
            "field 'tokens'",
            "field 'counts'",
            "window log is corrupt",
            "TB.ACQUIRE's leases",
            "further ahead",
            "now must be seconds",
            "is not a valid number",
            "wrong number of arguments",
            "numkeys does not match",
            "same key more than once",
            "FIXED window, not a SLIDING",
            "not a TB.WINDOW window",
            "not TB.ACQUIRE's leases",
            "field 'holds'",
            "limit must be a whole number",
            "lease_ms must be",
            "lease_id must be",
            "hold_id must be",
            "ttl_ms must be",
            "estimate must be",
            "actual must be",
            "syntax: TB.PEEK key LEASES",
            "syntax: TB.PEEK key HOLDS",
            "tb.acquire got the same key",
        ] {
            assert!(
                errors.iter().any(|(text, _)| text.contains(needle)),
                "no error containing {needle:?}"
            );
        }
    }
}

/// Changes to the script that a careless port could make, each caught by the differential
/// run within a few thousand calls: the run compares what it claims to.
#[test]
fn a_planted_divergence_in_the_script_is_caught() {
    // The run holds both servers to one instant (leases and holds on the server's clock):
    // on a server whose wall clock does not follow the shared one (Valkey 9.1), it cannot.
    if !common::clock::server_follows_shared_clock() {
        return;
    }
    let plants = [
        // Lua's own %.17g instead of the shortest round-trip text.
        (
            "fmt: %.17g for every stored and replied number",
            "local digits, e = M.shortest_digits(a)",
            "do return sign .. sfmt('%.17g', a) end local digits, e = M.shortest_digits(a)",
        ),
        // A refill that forgets the bucket's clock never runs backwards.
        (
            "tokens_at: a time behind the stored one refills negatively",
            "local v = st.t + elapsed * rate",
            "local v = st.t + (t - st.l) * rate",
        ),
        // SLIDING weighing the previous window by the time elapsed instead of what is left.
        (
            "sliding: the previous window weighed by elapsed",
            "return start, e, count, previous, 1 - elapsed",
            "return start, e, count, previous, elapsed",
        ),
        // LOG numbering new members from the size before the removal.
        (
            "log: members numbered before the removal",
            "local first = L.count - d.removed",
            "local first = L.count",
        ),
        // An expiry 25% + 1 s shorter than the module's.
        (
            "expire: no slack",
            "rcall('PEXPIRE', key, sfmt('%.0f', ttl + floor(slack / 2)))",
            "rcall('PEXPIRE', key, sfmt('%.0f', ttl))",
        ),
        // Leases and holds (part 2): a lease that may end before its lease_ms,
        (
            "acquire: the expiry from the millisecond rounded down",
            "local expiry = ceil(now_us / 1000) + lease_ms",
            "local expiry = floor(now_us / 1000) + lease_ms",
        ),
        // the marker removed with the last lease (the module keeps it for the key's TTL),
        (
            "remove: the marker gone with the last lease",
            "L.count = left > 0 and left or 0",
            "L.count = left > 0 and left or 0 if L.count == 0 and L.marked then \
             members[#members + 1] = MARKER L.marked = false end",
        ),
        // holds of no real cost,
        (
            "hold: no minimum charge",
            "if cap / MAX_HOLDS > amount then",
            "if false then",
        ),
        // a table of 101,
        (
            "hold: a place too many",
            "if #live >= MAX_HOLDS then",
            "if #live > MAX_HOLDS then",
        ),
        // a settlement that refunds above the capacity,
        (
            "settle: the surplus back beyond capacity",
            "                    if tokens > cap then\n                        tokens = cap\n                    end\n                    if current > tokens then",
            "                    if current > tokens then",
        ),
        // and a renewed hold whose key may expire before it.
        (
            "renew hold: the key's TTL not moved",
            "                    M.cover_expiry(key, current, renewed, ttl_ms)",
            "                    local _ = current",
        ),
    ];
    for (name, from, to) in plants {
        assert_eq!(LIBRARY.matches(from).count(), 1, "{name}: {from:?}");
        let planted = LIBRARY.replacen(from, to, 1);
        let err = run(7, 20_000, &planted, false)
            .expect_err(&format!("the plant '{name}' went unnoticed"));
        eprintln!(
            "plant '{name}' caught at {}",
            err.lines().next().unwrap_or("")
        );
        eprintln!("  {}", err.lines().skip(1).collect::<Vec<_>>().join("\n  "));
    }
}
