//! The differential run: the same seeded random calls sent to a server with the module and
//! to one running the script library (clients/lua), every reply and every touched key's
//! stored bytes (DUMP) and TTL compared after each call. What may differ, and why, is in
//! clients/lua/README.md; here only the TTL is compared within a tolerance (the two servers
//! read their clocks microseconds apart).

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::clock::SharedClock;
use super::scripts::{Backend, random_id};
use super::{Conn, Reply, Rng};

/// TTLs of one key on both servers within this many ms of each other, plus the time the
/// call took from sending to the last reply (each server sets a TTL on its own clock, and
/// reads it back, somewhere in that time), are the same TTL.
const TTL_TOLERANCE_MS: i64 = 10;
/// A key whose TTL is about to run out on either server (or ran out moments ago) is deleted
/// on both before a call touches it: otherwise one server could expire it and the other
/// not, at the same `now`, which is a race of the two clocks, not a difference of the
/// backends. Keys further past their expiry are left to Redis to expire on both.
const GUARD_MS: i64 = 80;

/// One server and how calls reach it.
pub struct Side {
    pub conn: Conn,
    pub backend: Backend,
    /// A second way to the same server (the module and the scripts side by side): each call
    /// goes one way or the other at random, so every key is continued by both backends.
    pub alternate: Option<Backend>,
}

impl Side {
    pub fn new(conn: Conn, backend: Backend) -> Side {
        Side {
            conn,
            backend,
            alternate: None,
        }
    }
}

/// What a run saw, by kind: calls and outcomes per command, and the events of the clock.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub calls: u64,
    /// (command, "allowed" | "denied" | "error") -> count.
    pub outcomes: HashMap<(String, &'static str), u64>,
    /// Error texts seen, with counts.
    pub errors: HashMap<String, u64>,
    /// Keys Redis expired on both servers before a call touched them again.
    pub natural_expiries: u64,
    /// Keys deleted on both because their TTL was within GUARD_MS of running out.
    pub guarded_expiries: u64,
    /// Calls after which one server kept a key's TTL and the other reset it (both within
    /// the expiry rule's bounds: the keep-or-set decision falls on a millisecond edge).
    pub ttl_keep_or_set: u64,
    /// Keys changed directly between calls (foreign values, corrupt fields, DEL).
    pub vandalized: u64,
    /// TB.HOLD refused by a full table of 100 live holds (on a bucket with tokens to spare).
    pub full_tables: u64,
}

impl Stats {
    fn count(&mut self, command: &str, reply: &Reply) {
        self.calls += 1;
        let outcome = match reply {
            Reply::Error(e) => {
                *self.errors.entry(e.clone()).or_default() += 1;
                "error"
            }
            Reply::Array(items) if matches!(items.first(), Some(Reply::Int(1))) => "allowed",
            _ => "denied",
        };
        *self
            .outcomes
            .entry((command.to_string(), outcome))
            .or_default() += 1;
    }

    pub fn outcome(&self, command: &str, outcome: &str) -> u64 {
        self.outcomes
            .iter()
            .filter(|((c, o), _)| c == command && *o == outcome)
            .map(|(_, n)| n)
            .sum()
    }
}

/// A key's PTTL on both servers, read at `at`.
#[derive(Debug, Clone, Copy)]
struct Ttl {
    a: i64,
    b: i64,
    at: Instant,
}

/// Quiet keys per kind (`bq0`, `fq12`, ...): each is called about once a second.
const QUIET: u64 = 300;
const BUCKETS: [&str; 5] = ["b0", "b1", "b2", "b3", "b4"];
const FIXED: [&str; 3] = ["f0", "f1", "f2"];
const SLIDING: [&str; 3] = ["s0", "s1", "s2"];
const LOG: [&str; 3] = ["l0", "l1", "l2"];
const LEASES: [&str; 4] = ["e0", "e1", "e2", "e3"];
/// Buckets that a burst fills with holds (a full table of 100, and what follows it).
const HOLD_BURST: [&str; 2] = ["bh0", "bh1"];
/// Keys seeded with someone else's data or a corrupt state, and a bucket and a window with
/// fields of their own beside the module's (these keep working).
const FOREIGN: [&str; 15] = [
    "user",
    "board",
    "text",
    "mixed",
    "half",
    "badtok",
    "badlog",
    "leases",
    "split",
    "owned",
    "badcounts",
    "legacy",
    "lookalike",
    "badholds",
    "oldholds",
];

const CAPACITIES: [&str; 9] = ["1", "2", "5", "10", "20", "0.5", "1e1", "3.5", "100"];
const RATES: [&str; 9] = [
    "0.5",
    "1",
    "2",
    "10",
    "50",
    "1.6666666666666667",
    "0.1",
    "0.001",
    "3e1",
];
const NS: [&str; 13] = [
    "0", "1", "1", "1", "1", "2", "0.5", "3", "1.5", "25", "-0", "1e0", "0.1",
];
const MAX_WAITS: [&str; 6] = ["0", "0.5", "1", "10", "1e308", "2.5"];
const LIMITS: [&str; 7] = ["1", "2", "3", "5", "10", "2.5", "100"];
const LOG_LIMITS: [&str; 6] = ["1", "2", "3", "5", "8", "20"];
const WINDOWS: [&str; 7] = ["0.1", "0.5", "1", "2", "0.25", "3.7", "0.05"];
const WINDOW_NS: [&str; 7] = ["0", "1", "1", "1", "2", "0.5", "3"];
const LOG_NS: [&str; 6] = ["0", "1", "1", "1", "2", "3"];
const LEASE_LIMITS: [&str; 8] = ["1", "2", "2", "3", "5", "1e1", "2.0", "100"];
const LEASE_MS: [&str; 9] = ["1", "5", "50", "200", "200", "1000", "3000", "1e3", "60000"];
const ESTIMATES: [&str; 8] = ["1", "2", "0.5", "5", "5e-324", "1e9", "3.5", "1"];
const HOLD_TTLS: [&str; 7] = ["1", "50", "200", "1000", "5000", "60000", "1e3"];
const ACTUALS: [&str; 10] = ["0", "1", "2", "5", "10", "100", "2.5", "1e9", "1", "-1"];
/// Whole-number arguments that are not accepted (TB.ACQUIRE's limit, lease_ms, ttl_ms).
const BAD_WHOLES: [&str; 8] = ["0", "1.5", "-1", "10001", "31536000001", "x", "", "1e-3"];
/// Texts no command accepts as a number (docs/commands.md's grammar), and numbers out of
/// every range.
const BAD_NUMBERS: [&str; 17] = [
    "+5",
    ".5",
    "5.",
    "abc",
    "",
    "1e400",
    "0x10",
    "nan",
    "inf",
    " 1",
    "1 ",
    "-1",
    "0",
    "1e-400",
    "99999999999999999999",
    "1_000",
    "2.5e",
];

/// The seeded random calls and the two servers they go to.
pub struct Differential {
    rng: Rng,
    pub a: Side,
    pub b: Side,
    ttl: HashMap<String, Ttl>,
    /// Each key's current shape (capacity, rate), changed now and then.
    shapes: HashMap<String, (String, String)>,
    last_now: String,
    pub stats: Stats,
    /// Whether to send times beyond the clock bound (refused by both). Off against a
    /// server that refuses TIME in scripts, where a key's first call cannot be bounded.
    pub far_ahead: bool,
    /// The wall clock both servers read (tests/common/clock_shim.c), set before each call:
    /// calls on the server's clock are then decided at the same instant on both, and
    /// leases and holds (server clock only in the module) are part of the run. Without
    /// it, the run sends only calls with a client's `now`.
    pub clock: Option<SharedClock>,
    /// The script server refuses TIME: lease and hold calls send it `NOW <the clock>`.
    pub no_time: bool,
    /// Percent of calls that are lease and hold commands (with a clock).
    pub lease_share: u64,
    /// Ids granted per key (TB.ACQUIRE's on lease keys, TB.HOLD's on buckets), newest last.
    ids: HashMap<String, Vec<String>>,
    /// The module's reply to the last call.
    last_reply: Option<Reply>,
}

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// The keys a module command names.
fn keys_of(cmd: &[String]) -> Vec<String> {
    if cmd[0] == "TB.MTAKE" {
        let n: usize = cmd[1].parse().unwrap_or(0);
        cmd[2..(2 + n).min(cmd.len())].to_vec()
    } else if cmd[0] == "TB.ACQUIRE" && cmd.len() > 6 && cmd[4] == "TAKE" {
        let n: usize = cmd[5].parse().unwrap_or(0);
        let mut keys = vec![cmd[1].clone()];
        keys.extend(cmd[6..(6 + n).min(cmd.len())].iter().cloned());
        keys
    } else {
        cmd.get(1).cloned().into_iter().collect()
    }
}

impl Differential {
    /// A run over two fresh servers (`a` the module's, `b` the scripts'), seeded with the
    /// foreign and corrupt keys.
    pub fn new(seed: u64, a: Side, b: Side) -> Differential {
        let mut d = Differential {
            rng: Rng(seed | 1),
            a,
            b,
            ttl: HashMap::new(),
            shapes: HashMap::new(),
            last_now: format!("{}", wall()),
            stats: Stats::default(),
            far_ahead: true,
            clock: None,
            no_time: false,
            lease_share: 28,
            ids: HashMap::new(),
            last_reply: None,
        };
        for key in FOREIGN {
            d.seed_foreign(key);
        }
        d
    }

    fn unit(&mut self) -> f64 {
        self.rng.next() as f64 / u64::MAX as f64
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.rng.below(items.len() as u64) as usize]
    }

    /// The same commands on both servers, replies compared (they are plain writes).
    fn both(&mut self, commands: &[Vec<String>]) {
        self.a.conn.send_all(commands);
        self.b.conn.send_all(commands);
        for _ in commands {
            let ra = self.a.conn.read();
            let rb = self.b.conn.read();
            assert_eq!(ra, rb, "{commands:?}");
        }
    }

    /// DEL on both servers; the replies may differ (the key may just have expired on one).
    fn del_both(&mut self, key: &str) {
        let cmd = [s(&["DEL", key])];
        self.a.conn.send_all(&cmd);
        self.b.conn.send_all(&cmd);
        self.a.conn.read();
        self.b.conn.read();
        self.ttl.remove(key);
    }

    fn micros_now(&self) -> String {
        format!("{}", (wall() * 1e6) as u64)
    }

    /// Writes one of the foreign or corrupt values at `key` on both servers.
    fn seed_foreign(&mut self, key: &str) {
        let micros = self.micros_now();
        let t = format!("{}", wall().floor());
        let far = format!("{}", (wall() as u64 + 86_400) * 1000);
        let mut cmds = vec![s(&["DEL", key])];
        cmds.push(match key {
            "user" => s(&["HSET", key, "name", "bob", "email", "bob@example.com"]),
            "board" => s(&["ZADD", key, "1500", "alice", "1200", "bob"]),
            "text" => s(&["SET", key, "hello"]),
            "mixed" => s(&[
                "HSET",
                key,
                "tokens",
                "5",
                "last_refill_time",
                &t,
                "start",
                &t,
                "count",
                "1",
            ]),
            "half" => s(&["HSET", key, "tokens", "5"]),
            "badtok" => s(&["HSET", key, "tokens", "abc", "last_refill_time", &t]),
            // An entry-shaped member whose score is past the year 10000.
            "badlog" => s(&["ZADD", key, "1e20", "100000000000000000000-0"]),
            "leases" => s(&["ZADD", key, &micros, "lease:0123456789abcdef"]),
            // SLIDING as earlier builds stored it: rewritten as `counts` by the next write.
            "split" => s(&["HSET", key, "start", &t, "count", "1", "previous", "2"]),
            "owned" => s(&[
                "HSET",
                key,
                "tokens",
                "3",
                "last_refill_time",
                &t,
                "owner",
                "alice",
            ]),
            "badcounts" => s(&["HSET", key, "start", &t, "counts", "1 x"]),
            // Leases from before the marker: adopted, and marked by the next write.
            "legacy" => s(&[
                "ZADD",
                key,
                &far,
                "lease:00000000000000a1",
                &format!("{}", (wall() * 1000.0) as u64 + 500),
                "lease:00000000000000a2",
            ]),
            // A user's set whose lowest member looks like a lease: never written.
            "lookalike" => s(&["ZADD", key, &far, "lease:00000000000000b1", "1e15", "alice"]),
            "badholds" => s(&[
                "HSET",
                key,
                "tokens",
                "5",
                "last_refill_time",
                &t,
                "holds",
                "zz",
            ]),
            // Holds as a hand or an older writer may have spelled them: a '+' and capitals in
            // ids, an amount as 1e0, an expired one; read, and rewritten plainly.
            "oldholds" => s(&[
                "HSET",
                key,
                "tokens",
                "5",
                "last_refill_time",
                &t,
                "holds",
                &format!("+00000000000000A:2:{far}  00000000000000C1:1e0:5"),
            ]),
            _ => unreachable!("{key}"),
        });
        if self.rng.below(2) == 0 {
            cmds.push(s(&["PEXPIREAT", key, &far]));
        }
        self.both(&cmds);
        self.read_ttls(&[key.to_string()]);
        let known: &[&str] = match key {
            "legacy" => &["00000000000000a1", "00000000000000a2"],
            "lookalike" => &["00000000000000b1"],
            "oldholds" => &["000000000000000a", "00000000000000c1"],
            _ => &[],
        };
        self.ids.insert(
            key.to_string(),
            known.iter().map(|k| k.to_string()).collect(),
        );
    }

    /// Changes a key directly between calls, the same way on both servers: someone else's
    /// value, a corrupt field, a foreign member in a log, a field of its own, or DEL.
    fn vandalize(&mut self) {
        self.stats.vandalized += 1;
        let pools: [&[&str]; 6] = [&BUCKETS, &FIXED, &SLIDING, &LOG, &FOREIGN, &LEASES];
        let pool = pools[self.rng.below(if self.clock.is_some() { 6 } else { 5 }) as usize];
        let key = self.pick(pool);
        // Not a key about to expire on one server and not the other.
        self.guard(&[key.to_string()]);
        if pool == FOREIGN.as_slice() {
            self.seed_foreign(key);
            return;
        }
        let micros = self.micros_now();
        let far = format!("{}", (wall() as u64 + 86_400) * 1000);
        let choice = if pool == LEASES.as_slice() {
            [8, 9, 9, 7, 5][self.rng.below(5) as usize]
        } else {
            self.rng.below(if self.clock.is_some() { 11 } else { 8 })
        };
        let cmd = match choice {
            8 => s(&["ZADD", key, "1e15", "alice"]),
            9 => s(&["ZADD", key, &far, "lease:0123456789abcdef"]),
            10 => s(&["HSET", key, "holds", "0123456789abcdef:1:x"]),
            0 => s(&["HSET", key, "tokens", "abc"]),
            1 => s(&["HSET", key, "owner", "alice"]),
            2 => s(&["HSET", key, "start", "5"]),
            3 => s(&["ZADD", key, &micros, "zed"]),
            4 => s(&["HDEL", key, "last_refill_time"]),
            5 => s(&["SET", key, "x"]),
            6 => s(&["HSET", key, "counts", "1 x"]),
            _ => s(&["DEL", key]),
        };
        // On a key of another type these are WRONGTYPE on both servers: nothing changes.
        if let Ok(k) = std::env::var("TB_DIFF_TRACE")
            && k == key
        {
            eprintln!("trace: vandal {cmd:?}");
        }
        self.both(&[cmd]);
        self.read_ttls(&[key.to_string()]);
    }

    fn read_ttls(&mut self, keys: &[String]) {
        let cmds: Vec<Vec<String>> = keys
            .iter()
            .map(|k| vec!["PTTL".to_string(), k.clone()])
            .collect();
        self.a.conn.send_all(&cmds);
        self.b.conn.send_all(&cmds);
        let ra: Vec<i64> = keys.iter().map(|_| self.a.conn.read().int()).collect();
        let rb: Vec<i64> = keys.iter().map(|_| self.b.conn.read().int()).collect();
        let at = Instant::now();
        for (i, k) in keys.iter().enumerate() {
            self.ttl.insert(
                k.clone(),
                Ttl {
                    a: ra[i],
                    b: rb[i],
                    at,
                },
            );
        }
    }

    /// A client's `now`: mostly near the server's clock (a little behind or ahead, as app
    /// servers' clocks are), sometimes the previous call's text again, far behind, beyond
    /// the clock bound, or outside the accepted range; written as clients write it.
    fn now_text(&mut self) -> String {
        let wall = wall();
        let r = self.rng.below(100);
        let t = match r {
            0..=44 => wall + self.unit() * 2.5 - 0.5,
            45..=59 => return self.last_now.clone(),
            60..=69 => wall - self.unit() * 5.0,
            70..=74 => wall - 3600.0 * (1.0 + self.unit() * 24.0),
            75..=89 => wall + 2.0 + self.unit() * 7.0,
            90..=92 if self.far_ahead => wall + 12.0 + self.unit() * 1000.0,
            93 => return (wall * 1000.0).floor().to_string(),
            94 => return "-1".to_string(),
            95 => return "253402300800".to_string(),
            _ => wall + self.unit() * 0.01,
        };
        let text = match self.rng.below(20) {
            0 | 1 => format!("{t:.6}"),
            2 => format!("{t:e}"),
            3 => format!("{}", t.floor()),
            _ => format!("{t}"),
        };
        self.last_now = text.clone();
        text
    }

    fn shape(&mut self, key: &str) -> (String, String) {
        if !self.shapes.contains_key(key) || self.rng.below(20) == 0 {
            let shape = (
                self.pick(&CAPACITIES).to_string(),
                self.pick(&RATES).to_string(),
            );
            self.shapes.insert(key.to_string(), shape);
        }
        self.shapes[key].clone()
    }

    /// A key of `prefix`: mostly one of five busy keys, sometimes one of many quiet ones,
    /// which their TTLs expire between calls.
    fn pooled(&mut self, busy: &[&str], prefix: &str) -> String {
        if self.rng.below(100) < 15 {
            return format!("{prefix}q{}", self.rng.below(QUIET));
        }
        self.pick(busy).to_string()
    }

    fn bucket_key(&mut self) -> String {
        if self.rng.below(100) < 6 {
            return self.pick(&FOREIGN).to_string();
        }
        if self.rng.below(100) < 3 {
            let all = [FIXED[0], SLIDING[1], LOG[2], LEASES[3]];
            return self.pick(&all).to_string();
        }
        self.pooled(&BUCKETS, "b")
    }

    fn window_key(&mut self, pool: &[&str]) -> String {
        if self.rng.below(100) < 6 {
            return self.pick(&FOREIGN).to_string();
        }
        if self.rng.below(100) < 4 {
            let all = [BUCKETS[0], FIXED[1], SLIDING[2], LOG[0], LEASES[3]];
            return self.pick(&all).to_string();
        }
        let prefix = &pool[0][..1];
        self.pooled(pool, prefix)
    }

    /// One random command, in the module's words.
    fn command(&mut self) -> Vec<String> {
        if self.clock.is_some() && self.rng.below(100) < self.lease_share {
            return self.lease_command();
        }
        let now = self.now_text();
        // TB.WINDOW places `now` before its mode word; the others end with it.
        let mut placed = false;
        let mut cmd: Vec<String> = match self.rng.below(100) {
            0..=29 => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                let n = self.pick(&NS);
                s(&["TB.TAKE", &key, &c, &r, n])
            }
            30..=39 => {
                let count = 1 + self.rng.below(3) as usize;
                let mut keys: Vec<String> = (0..count).map(|_| self.bucket_key()).collect();
                if self.rng.below(10) != 0 {
                    keys.sort();
                    keys.dedup();
                }
                let mut cmd = s(&["TB.MTAKE", &keys.len().to_string()]);
                cmd.extend(keys.iter().cloned());
                for key in &keys {
                    let (c, r) = self.shape(key);
                    let n = self.pick(&NS).to_string();
                    cmd.extend([c, r, n]);
                }
                cmd
            }
            40..=49 => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                let n = self.pick(&NS);
                let w = self.pick(&MAX_WAITS);
                s(&["TB.RESERVE", &key, &c, &r, n, w])
            }
            50..=57 => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                s(&["TB.PEEK", &key, &c, &r])
            }
            58..=64 => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                let n = self.pick(&NS);
                s(&["TB.REFUND", &key, &c, &r, n])
            }
            r => {
                let (pool, mode): (&[&str], &str) = match r {
                    65..=74 => (&FIXED, "FIXED"),
                    75..=86 => (&SLIDING, "SLIDING"),
                    _ => (&LOG, "LOG"),
                };
                let key = self.window_key(pool);
                let (limit, n) = if mode == "LOG" {
                    (self.pick(&LOG_LIMITS), self.pick(&LOG_NS))
                } else {
                    (self.pick(&LIMITS), self.pick(&WINDOW_NS))
                };
                let window = self.pick(&WINDOWS);
                let mut cmd = s(&["TB.WINDOW", &key, limit, window, n]);
                // The mode word in any case, or SLIDING's default without one.
                let word = match self.rng.below(10) {
                    0 => mode.to_lowercase(),
                    1..=3 if mode == "SLIDING" => String::new(),
                    _ => mode.to_string(),
                };
                cmd.push(now.clone());
                if !word.is_empty() {
                    cmd.push(word);
                }
                placed = true;
                cmd
            }
        };
        if !placed {
            cmd.push(now);
        }
        // Now and then a bad number or a wrong argument count.
        match self.rng.below(100) {
            0..=2 => {
                let i = 2 + self.rng.below((cmd.len() - 2) as u64) as usize;
                cmd[i] = self.pick(&BAD_NUMBERS).to_string();
            }
            // Too few or too many arguments (never one fewer: without `now` a call is on
            // each server's own clock, compared elsewhere).
            3 => cmd.truncate(3),
            4 => cmd.extend(["1".to_string(), "1".to_string()]),
            _ => {}
        }
        cmd
    }

    /// A lease key: mostly a busy one, sometimes a quiet one, a foreign key, or a key of
    /// another command's kind.
    fn lease_key(&mut self) -> String {
        if self.rng.below(100) < 7 {
            return self.pick(&FOREIGN).to_string();
        }
        if self.rng.below(100) < 3 {
            let all = [BUCKETS[1], FIXED[2], LOG[1]];
            return self.pick(&all).to_string();
        }
        self.pooled(&LEASES, "e")
    }

    /// A lease or hold id to send back: mostly one granted on `key`, sometimes one of
    /// another key, an unknown one, the same in capitals, or no id at all.
    fn id_for(&mut self, key: &str) -> String {
        let r = self.rng.below(100);
        let known = self.ids.get(key).filter(|v| !v.is_empty()).cloned();
        match (r, known) {
            (0..=71, Some(ids)) => {
                // The newer ones mostly: those are the live ones.
                let n = ids.len() as u64;
                let back = self.rng.below(n.min(8)).min(n - 1);
                ids[(n - 1 - back) as usize].clone()
            }
            (72..=77, Some(ids)) => ids[self.rng.below(ids.len() as u64) as usize].to_uppercase(),
            (78..=85, _) => {
                let keys: Vec<String> = self.ids.keys().cloned().collect();
                let other = keys.get(self.rng.below(keys.len().max(1) as u64) as usize);
                match other.and_then(|k| self.ids.get(k)).and_then(|v| v.last()) {
                    Some(id) => id.clone(),
                    None => random_id(),
                }
            }
            (86..=88, _) => [
                "xyz",
                "0123456789abcde",
                "0123456789abcdefa",
                "0123456789abcdeg",
            ][self.rng.below(4) as usize]
                .to_string(),
            _ => random_id(),
        }
    }

    fn whole_or_bad(&mut self, good: &[&str]) -> String {
        if self.rng.below(100) < 2 {
            self.pick(&BAD_WHOLES).to_string()
        } else {
            self.pick(good).to_string()
        }
    }

    /// One random lease or hold command, in the module's words.
    fn lease_command(&mut self) -> Vec<String> {
        let mut cmd = match self.rng.below(100) {
            0..=29 => {
                let key = self.lease_key();
                let limit = self.whole_or_bad(&LEASE_LIMITS);
                let ms = self.whole_or_bad(&LEASE_MS);
                let mut cmd = s(&["TB.ACQUIRE", &key, &limit, &ms]);
                if self.rng.below(100) < 25 {
                    let count = 1 + self.rng.below(2) as usize;
                    let mut buckets: Vec<String> = (0..count).map(|_| self.bucket_key()).collect();
                    if self.rng.below(10) != 0 {
                        buckets.sort();
                        buckets.dedup();
                    }
                    if self.rng.below(50) == 0 {
                        buckets.push(key.clone());
                    }
                    cmd.push("TAKE".into());
                    cmd.push(buckets.len().to_string());
                    cmd.extend(buckets.iter().cloned());
                    for b in &buckets {
                        let (c, r) = self.shape(b);
                        let n = self.pick(&NS).to_string();
                        cmd.extend([c, r, n]);
                    }
                }
                cmd
            }
            30..=44 => {
                let key = self.lease_key();
                let id = self.id_for(&key);
                s(&["TB.RELEASE", &key, &id])
            }
            45..=57 => {
                // A lease's key, or a bucket whose hold is renewed.
                let key = if self.rng.below(3) == 0 {
                    self.bucket_key()
                } else {
                    self.lease_key()
                };
                let id = self.id_for(&key);
                let ms = self.whole_or_bad(&LEASE_MS);
                s(&["TB.RENEW", &key, &id, &ms])
            }
            58..=63 => {
                let key = self.lease_key();
                let mut cmd = s(&["TB.PEEK", &key, "LEASES"]);
                if self.rng.below(30) == 0 {
                    cmd.push("x".into());
                }
                if self.rng.below(20) == 0 {
                    cmd[2] = "leases".into();
                }
                cmd
            }
            64..=69 => {
                let key = if self.rng.below(10) == 0 {
                    self.lease_key()
                } else {
                    self.bucket_key()
                };
                let mut cmd = s(&["TB.PEEK", &key, "HOLDS"]);
                if self.rng.below(30) == 0 {
                    cmd.push("x".into());
                }
                cmd
            }
            70..=86 => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                let estimate = self.pick(&ESTIMATES).to_string();
                let ttl = self.whole_or_bad(&HOLD_TTLS);
                s(&["TB.HOLD", &key, &c, &r, &estimate, &ttl])
            }
            _ => {
                let key = self.bucket_key();
                let (c, r) = self.shape(&key);
                let id = self.id_for(&key);
                let actual = self.pick(&ACTUALS).to_string();
                let mut cmd = s(&["TB.SETTLE", &key, &c, &r, &id, &actual]);
                if self.rng.below(2) == 0 {
                    cmd.push(self.pick(&MAX_WAITS).to_string());
                }
                cmd
            }
        };
        // Now and then a bad number where the command takes one, or a wrong count.
        match self.rng.below(100) {
            0..=1 if cmd[0] != "TB.PEEK" && cmd[0] != "TB.RELEASE" => {
                let i = 2 + self.rng.below(3.min(cmd.len() as u64 - 2)) as usize;
                if cmd[0] != "TB.RENEW" && cmd[0] != "TB.SETTLE" || i != 2 {
                    cmd[i] = self.pick(&BAD_NUMBERS).to_string();
                }
            }
            2 if cmd[0] != "TB.ACQUIRE" => cmd.truncate(cmd.len() - 1),
            3 if cmd[0] != "TB.ACQUIRE" => cmd.extend(["1".to_string(), "1".to_string()]),
            _ => {}
        }
        cmd
    }

    /// A bucket filled with holds beyond the 100 places, a few settled, more asked for.
    fn hold_burst(&mut self) -> Result<(), String> {
        let key = self.pick(&HOLD_BURST).to_string();
        // The last shape refills faster than the holds take: its table, not its tokens, is
        // what refuses.
        let (capacity, rate) =
            [("1e4", "1"), ("50", "1"), ("100", "1e6")][self.rng.below(3) as usize];
        self.shapes
            .insert(key.clone(), (capacity.to_string(), rate.to_string()));
        let ttl = ["60000", "2000", "300"][self.rng.below(3) as usize];
        for i in 0..110 {
            let cmd = if i % 23 == 22 {
                // A renewal past the key's TTL: the key must come to outlive it.
                let id = self.id_for(&key);
                s(&["TB.RENEW", &key, &id, "120000"])
            } else if i % 37 == 36 {
                let id = self.id_for(&key);
                s(&["TB.SETTLE", &key, capacity, rate, &id, "0"])
            } else {
                s(&["TB.HOLD", &key, capacity, rate, "1", ttl])
            };
            self.step(&cmd)
                .map_err(|e| format!("hold burst: {cmd:?}\n{e}"))?;
            if rate == "1e6"
                && let Some(Reply::Array(r)) = &self.last_reply
                && r.first() == Some(&Reply::Int(0))
                && cmd[0] == "TB.HOLD"
            {
                self.stats.full_tables += 1;
            }
        }
        Ok(())
    }

    /// Deletes, on both servers, a key whose TTL is about to run out on either, so neither
    /// expires it alone under the call (see GUARD_MS).
    fn guard(&mut self, keys: &[String]) {
        for k in keys {
            let Some(t) = self.ttl.get(k).copied() else {
                continue;
            };
            let elapsed = t.at.elapsed().as_millis() as i64;
            let left = |pttl: i64| (pttl >= 0).then(|| pttl - elapsed);
            let (a, b) = (left(t.a), left(t.b));
            let soon = [a, b]
                .into_iter()
                .flatten()
                .any(|l| (-GUARD_MS..=GUARD_MS).contains(&l));
            let gone = [a, b].into_iter().flatten().all(|l| l < -GUARD_MS) && a.is_some();
            if soon && self.clock.is_none() {
                self.del_both(k);
                self.stats.guarded_expiries += 1;
            } else if (gone || (self.clock.is_some() && a.is_some_and(|l| l < 0)))
                && a.is_some()
                && b.is_some()
            {
                self.stats.natural_expiries += 1;
                self.ttl.remove(k);
            }
        }
    }

    /// Runs `calls` random calls; the first difference found is the error.
    pub fn run(&mut self, calls: u64) -> Result<(), String> {
        for step in 0..calls {
            match self.rng.below(1000) {
                0..=4 => self.vandalize(),
                // Vandalized keys do not stay so for good: a busy key is deleted now and then.
                5..=14 => {
                    let pools: [&[&str]; 5] = [&BUCKETS, &FIXED, &SLIDING, &LOG, &LEASES];
                    let pool =
                        pools[self.rng.below(if self.clock.is_some() { 5 } else { 4 }) as usize];
                    let key = self.pick(pool);
                    self.del_both(key);
                }
                _ => {}
            }
            if self.clock.is_some() && self.lease_share > 0 && self.rng.below(2000) == 0 {
                self.hold_burst().map_err(|e| format!("call {step}: {e}"))?;
            }
            let cmd = self.command();
            self.step(&cmd)
                .map_err(|e| format!("call {step}: {cmd:?}\n{e}"))?;
        }
        Ok(())
    }

    /// One call on both servers, then its keys' DUMP and PTTL on each, compared.
    pub fn step(&mut self, cmd: &[String]) -> Result<(), String> {
        if let Ok(k) = std::env::var("TB_DIFF_TRACE")
            && cmd.contains(&k)
        {
            eprintln!("trace: {cmd:?}");
        }
        let traced = std::env::var("TB_DIFF_TRACE")
            .ok()
            .filter(|k| cmd.contains(k));
        let r = self.step_inner(cmd);
        if let Some(k) = traced {
            eprintln!(
                "  module: {}\n  script: {}",
                self.show(true, &k),
                self.show(false, &k)
            );
        }
        r
    }

    fn step_inner(&mut self, cmd: &[String]) -> Result<(), String> {
        let mut keys = keys_of(cmd);
        keys.sort();
        keys.dedup();
        self.guard(&keys);
        let mut reads = Vec::new();
        for k in &keys {
            reads.push(vec!["DUMP".to_string(), k.clone()]);
            reads.push(vec!["PTTL".to_string(), k.clone()]);
        }
        let mut for_a = vec![self.a.backend.argv(cmd)];
        for_a.extend(reads.iter().cloned());
        // A grant's id comes from the module on A; B's scripts are sent the same one, so
        // both servers store the same bytes (README.md: the scripts take the client's id).
        let grants = cmd[0] == "TB.ACQUIRE" || cmd[0] == "TB.HOLD";
        let lease_call = grants
            || ["TB.RELEASE", "TB.RENEW", "TB.SETTLE"].contains(&cmd[0].as_str())
            || (cmd[0] == "TB.PEEK"
                && cmd.get(2).is_some_and(|w| {
                    w.eq_ignore_ascii_case("LEASES") || w.eq_ignore_ascii_case("HOLDS")
                }));
        let backend_b = match &self.b.alternate {
            Some(_) if grants => self
                .b
                .alternate
                .iter()
                .chain([&self.b.backend])
                .find(|b| **b != Backend::Module)
                .cloned()
                .unwrap_or(Backend::Module),
            Some(other) if self.rng.below(2) == 0 => other.clone(),
            _ => self.b.backend.clone(),
        };
        let micros = self.clock.as_ref().map(SharedClock::sync);
        let sent = Instant::now();
        self.a.conn.send_all(&for_a);
        let id = if grants && backend_b != Backend::Module {
            let ra: Vec<Reply> = for_a.iter().map(|_| self.a.conn.read()).collect();
            let id = granted_id(cmd, &ra[0]);
            Some((ra, id))
        } else {
            None
        };
        let mut argv_b = backend_b.argv_with(cmd, id.as_ref().and_then(|(_, id)| id.as_deref()));
        if self.no_time && lease_call && backend_b != Backend::Module {
            let us = micros.expect("a run without TIME has a clock");
            argv_b.extend([
                "NOW".to_string(),
                format!("{}.{:06}", us / 1_000_000, us % 1_000_000),
            ]);
        }
        let mut for_b = vec![argv_b];
        for_b.extend(reads.iter().cloned());
        self.b.conn.send_all(&for_b);
        let (ra, granted) = match id {
            Some((ra, id)) => (ra, id),
            None => {
                let ra: Vec<Reply> = for_a.iter().map(|_| self.a.conn.read()).collect();
                let id = if grants {
                    granted_id(cmd, &ra[0])
                } else {
                    None
                };
                (ra, id)
            }
        };
        let rb: Vec<Reply> = for_b.iter().map(|_| self.b.conn.read()).collect();
        let at = Instant::now();
        if let Some(id) = granted {
            let ids = self.ids.entry(cmd[1].clone()).or_default();
            ids.push(id);
            if ids.len() > 300 {
                ids.drain(..100);
            }
        }
        // One clock: the same TTL to the millisecond.
        let tolerance = if self.clock.is_some() {
            0
        } else {
            TTL_TOLERANCE_MS + (at - sent).as_millis() as i64
        };
        self.stats.count(&cmd[0], &ra[0]);
        self.last_reply = Some(ra[0].clone());
        if ra[0] != rb[0] {
            return Err(format!(
                "replies differ:\n  module: {}\n  script: {}",
                ra[0].flat(),
                rb[0].flat()
            ));
        }
        for (i, k) in keys.iter().enumerate() {
            let (da, db) = (&ra[1 + 2 * i], &rb[1 + 2 * i]);
            if da != db && !self.same_hashtable(k) {
                return Err(format!(
                    "{k} differs:\n  module: {}\n  script: {}",
                    self.show(true, k),
                    self.show(false, k)
                ));
            }
            let (pa, pb) = (ra[2 + 2 * i].int(), rb[2 + 2 * i].int());
            self.compare_ttl(k, pa, pb, tolerance)?;
            self.ttl.insert(k.clone(), Ttl { a: pa, b: pb, at });
        }
        Ok(())
    }

    /// The id a TB.ACQUIRE or TB.HOLD reply granted.
    pub fn ids_granted(&self) -> usize {
        self.ids.values().map(Vec::len).sum()
    }

    /// Whether `key` is a hash in hashtable encoding on both servers (a bucket whose `holds`
    /// outgrew a listpack) with the same fields and values: its DUMP lists the fields in the
    /// order of a table hashed with each process's random seed, so only the contents compare.
    fn same_hashtable(&mut self, key: &str) -> bool {
        let contents = |c: &mut Conn| {
            let encoding = match c.cmd(&["OBJECT", "ENCODING", key]) {
                Reply::Bulk(e) => String::from_utf8_lossy(&e).into_owned(),
                _ => return None,
            };
            let mut fields = match c.cmd(&["HGETALL", key]) {
                Reply::Array(items) => items
                    .chunks(2)
                    .map(|p| (p[0].text(), p[1].text()))
                    .collect::<Vec<_>>(),
                _ => return None,
            };
            fields.sort();
            (encoding == "hashtable").then_some(fields)
        };
        let a = contents(&mut self.a.conn);
        let b = contents(&mut self.b.conn);
        a.is_some() && a == b
    }

    /// A key's type and contents on one server, for a difference's message.
    fn show(&mut self, module: bool, key: &str) -> String {
        let c = if module {
            &mut self.a.conn
        } else {
            &mut self.b.conn
        };
        let kind = c.cmd(&["TYPE", key]).text();
        let body = match kind.as_str() {
            "hash" => c.cmd(&["HGETALL", key]).flat(),
            "zset" => c.cmd(&["ZRANGE", key, "0", "-1", "WITHSCORES"]).flat(),
            "string" => c.cmd(&["GET", key]).flat(),
            other => other.to_string(),
        };
        let pttl = c.cmd(&["PTTL", key]).int();
        format!("{kind} {body} pttl {pttl}")
    }

    /// The TTLs after a call: equal within `tolerance` ms, or one server kept the TTL
    /// the key had while the other set a new one, and the kept one is within the bounds
    /// the other's new one says (expiry.rs: at least time-to-full, at most 1 s + 25% more).
    fn compare_ttl(&mut self, key: &str, a: i64, b: i64, tolerance: i64) -> Result<(), String> {
        if a == b || (a >= 0 && b >= 0 && (a - b).abs() <= tolerance) {
            return Ok(());
        }
        let why = format!("{key}: PTTL {a} (module) against {b} (script)");
        let (Some(before), true, true) = (self.ttl.get(key).copied(), a >= 0, b >= 0) else {
            return Err(why);
        };
        let elapsed = before.at.elapsed().as_millis() as i64;
        let kept = |after: i64, before: i64| {
            before >= 0 && (after - (before - elapsed)).abs() <= tolerance
        };
        let (keeper, setter) = match (kept(a, before.a), kept(b, before.b)) {
            (true, false) => (a, b),
            (false, true) => (b, a),
            _ => return Err(why),
        };
        // A new TTL is ttl + (1000 + ttl / 4) / 2 ms: solve for the time-to-full.
        let ttl = ((setter - 500) as f64 / 1.125).round() as i64;
        let (lo, hi) = (ttl - 2 * tolerance, ttl + 1000 + ttl / 4 + 2 * tolerance);
        if !(lo..=hi).contains(&keeper) {
            return Err(format!("{why}: the kept TTL is outside {lo}..={hi}"));
        }
        self.stats.ttl_keep_or_set += 1;
        // The same expiry on both from here on.
        let at = self.a.conn.cmd(&["PEXPIRETIME", key]).int();
        self.b.conn.cmd(&["PEXPIREAT", key, &at.to_string()]);
        Ok(())
    }
}

/// The id in a granting TB.ACQUIRE (third element) or TB.HOLD (fifth) reply.
fn granted_id(cmd: &[String], reply: &Reply) -> Option<String> {
    let at = if cmd[0] == "TB.ACQUIRE" { 2 } else { 4 };
    match reply {
        Reply::Array(items) => match items.get(at) {
            Some(Reply::Bulk(id)) => Some(String::from_utf8_lossy(id).into_owned()),
            _ => None,
        },
        _ => None,
    }
}
