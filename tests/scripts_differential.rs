//! The script library (clients/lua) held to the module: the same seeded random calls (costs,
//! shapes changing between calls, `now` near, behind, ahead of and far from the server's
//! clock, expiries as time passes, foreign and corrupt keys, bad arguments) to a server with
//! the module and one with only the scripts, every reply and every touched key's bytes and
//! TTL compared after each call (tests/common/differential.rs). A planted divergence in the
//! script is caught.
//!
//! `TB_DIFF_CALLS` (default 100,000, split over two pairs of servers) and `TB_DIFF_SEED`
//! replay or lengthen a run.

mod common;

use std::time::Instant;

use common::differential::{Differential, Side, Stats};
use common::scripts::{self, Backend, LIBRARY};
use common::{Options, Server};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A module server and a script server (with `source` as the script), paired for a run.
fn pair(source: &str, function: bool) -> (Server, Server, Side, Side) {
    let a = Server::start();
    let b = Server::start_with(Options {
        with_module: false,
        extra: Vec::new(),
    });
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
    let (_a, _b, sa, sb) = pair(source, function);
    let mut d = Differential::new(seed, sa, sb);
    d.run(calls)?;
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
}

#[test]
fn scripts_match_the_module_over_random_calls() {
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
        "{} calls in {:.1} s; expiries: {} by Redis, {} guarded; TTL keep-or-set edges: {}; keys vandalized: {}",
        all.calls,
        start.elapsed().as_secs_f64(),
        all.natural_expiries,
        all.guarded_expiries,
        all.ttl_keep_or_set,
        all.vandalized
    );
    let mut outcomes: Vec<_> = all.outcomes.iter().collect();
    outcomes.sort();
    for ((command, outcome), n) in outcomes {
        eprintln!("  {command} {outcome}: {n}");
    }
    for (text, n) in &errors {
        eprintln!("  {n:6} {text}");
    }
    assert_eq!(all.calls, calls / 2 * 2);
    // The run covered what it is for: every command admitted, refused and failed, keys
    // expiring between calls, and the errors of every kind of hostile key.
    for command in [
        "TB.TAKE",
        "TB.MTAKE",
        "TB.RESERVE",
        "TB.PEEK",
        "TB.REFUND",
        "TB.WINDOW",
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
