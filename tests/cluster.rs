//! Redis Cluster, built for real on loopback: 3 masters + 3 replicas, every node a
//! `redis-server` with the module loaded, joined by `redis-cli --cluster create`, driven
//! through a cluster-aware client (the `redis` crate: slot map, MOVED/ASK).
//!
//! - Every one of the 16384 slots holds a bucket: each admits exactly `capacity` at one
//!   instant, then exactly `rate x elapsed` more later, on whichever master owns it.
//! - A master is killed with `kill -9` under traffic; its replica takes over and the
//!   buckets continue from their replicated state. The test measures what the failover
//!   costs (tokens consumed by takes whose reply was lost) and leaks (acknowledged takes
//!   the replica never received), and bounds both soundly; takes confirmed with
//!   `WAIT 1` are never handed out twice.
//! - Keys sharing a hash tag (`{user42}:minute`, `{user42}:hour`) work together in one
//!   MULTI/EXEC or Lua script; keys in different slots get CROSSSLOT, not a wrong answer.
//!
//! By hand, the same cluster (ports are examples):
//!
//! ```text
//! for port in 7001 7002 7003 7004 7005 7006; do
//!   mkdir -p $port && (cd $port && redis-server --port $port --daemonize yes \
//!     --loadmodule /path/to/libredis_tb.so --cluster-enabled yes \
//!     --cluster-config-file nodes.conf --cluster-node-timeout 5000 --logfile redis.log)
//! done
//! redis-cli --cluster create 127.0.0.1:7001 127.0.0.1:7002 127.0.0.1:7003 \
//!   127.0.0.1:7004 127.0.0.1:7005 127.0.0.1:7006 --cluster-replicas 1 --cluster-yes
//! redis-cli -c -p 7001 TB.TAKE '{user42}:minute' 100 1.6666666666666667 1
//! ```
//!
//! The tests of this file run one at a time (they share two cores); each builds its own
//! cluster and drops it (every process killed, every directory removed) at the end.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{Options, Reply, Server, free_port, info_field};
use redis::cluster::{ClusterClient, ClusterConnection, cluster_pipe};
use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};

const SLOTS: usize = 16384;

/// One instant, as an app server would pass `time.time()`: integral, so every elapsed time
/// below is an exact double.
const T0: f64 = 1_764_456_268.0;

// ---------------------------------------------------------------------------------------
// Slots

/// CRC16/XMODEM, the cluster's key hash.
fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The key's slot: the hash of the text between the first `{` and the next `}` when that
/// is not empty (a hash tag), else of the whole key.
fn key_slot(key: &str) -> usize {
    let key = key.as_bytes();
    let tag = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    usize::from(crc16(tag.unwrap_or(key))) % SLOTS
}

/// One key per slot: `keys[slot]` hashes to `slot`.
fn keys_for_every_slot(prefix: &str) -> Vec<String> {
    let mut keys: Vec<Option<String>> = vec![None; SLOTS];
    let mut missing = SLOTS;
    let mut i = 0u64;
    while missing > 0 {
        let key = format!("{prefix}{i}");
        let slot = key_slot(&key);
        if keys[slot].is_none() {
            keys[slot] = Some(key);
            missing -= 1;
        }
        i += 1;
    }
    keys.into_iter().map(Option::unwrap).collect()
}

/// `count` keys `prefix<i>` whose slots satisfy `keep`.
fn keys_where(prefix: &str, count: usize, keep: impl Fn(usize) -> bool) -> Vec<String> {
    (0u64..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| keep(key_slot(k)))
        .take(count)
        .collect()
}

// ---------------------------------------------------------------------------------------
// The cluster

/// The tests of this file share the machine's two cores: one cluster at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Who serves what, as one node sees it (node indices into `Cluster::nodes`).
#[derive(Debug, Clone, PartialEq)]
struct Topology {
    /// The master of each slot.
    slot_owner: Vec<usize>,
    /// replica -> its master.
    replica_of: BTreeMap<usize, usize>,
}

impl Topology {
    fn masters(&self) -> BTreeSet<usize> {
        self.slot_owner.iter().copied().collect()
    }
    fn replicas_of(&self, master: usize) -> Vec<usize> {
        self.replica_of
            .iter()
            .filter(|&(_, &m)| m == master)
            .map(|(&r, _)| r)
            .collect()
    }
}

struct Cluster {
    nodes: Vec<Server>,
}

impl Cluster {
    /// Six nodes with the module, joined as 3 masters + 3 replicas, healthy.
    fn start(node_timeout_ms: u64) -> (Cluster, Topology) {
        let mut nodes = Vec::new();
        let mut bus_ports = BTreeSet::new();
        for _ in 0..6 {
            // The bus port is given explicitly: the default (port + 10000) overflows for
            // ports above 55535, which the harness's free ports may be.
            let bus = loop {
                let p = free_port();
                if bus_ports.insert(p) {
                    break p;
                }
            };
            nodes.push(Server::start_with(Options {
                with_module: true,
                extra: [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    &node_timeout_ms.to_string(),
                    "--cluster-port",
                    &bus.to_string(),
                    // A replica may always stand in for its dead master, however long ago
                    // it last heard from it (the default would refuse a stale replica).
                    "--cluster-replica-validity-factor",
                    "0",
                    "--repl-diskless-sync-delay",
                    "0",
                ]
                .map(String::from)
                .to_vec(),
            }));
        }
        let cluster = Cluster { nodes };
        let mut args = vec!["--cluster".to_string(), "create".to_string()];
        args.extend(
            cluster
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port)),
        );
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        run_cli(&args, &cluster.nodes[0].dir, Duration::from_secs(60));

        let alive: Vec<usize> = (0..6).collect();
        let topo = cluster.wait_healthy(&alive, Duration::from_secs(30));
        assert_eq!(topo.masters().len(), 3, "{topo:?}");
        for m in topo.masters() {
            assert_eq!(topo.replicas_of(m).len(), 1, "{topo:?}");
        }
        (cluster, topo)
    }

    fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port == port)
    }

    fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| {
                let log = n.log();
                let tail: Vec<&str> = log.lines().rev().take(25).collect();
                format!(
                    "---- node :{} ----\n{}",
                    n.port,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The topology node `from` reports in CLUSTER NODES. Failed nodes that serve no slot
    /// (a dead master after its failover) are left out; anything unsettled is an error.
    fn topology_seen_by(&self, from: usize) -> Result<Topology, String> {
        let text = self.nodes[from].conn().q("CLUSTER NODES").text();
        let mut ids = HashMap::new();
        let mut lines = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                return Err(format!("short CLUSTER NODES line: {line}"));
            }
            // ip:port@cport[,hostname]
            let port = f[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| p.parse::<u16>().ok())
                .ok_or_else(|| format!("address in {line}"))?;
            let idx = self
                .index_of_port(port)
                .ok_or_else(|| format!("unknown node in {line}"))?;
            ids.insert(f[0].to_string(), idx);
            lines.push((idx, f));
        }
        let mut slot_owner = vec![usize::MAX; SLOTS];
        let mut replica_of = BTreeMap::new();
        for (idx, f) in lines {
            let flags = f[2];
            let slots = &f[8..];
            if flags.contains("fail") || flags.contains("noaddr") || f[7] != "connected" {
                if slots.is_empty() {
                    continue;
                }
                return Err(format!(
                    "node :{} serves slots but is {flags} {}",
                    self.nodes[idx].port, f[7]
                ));
            }
            if flags.contains("master") {
                for range in slots {
                    if range.starts_with('[') {
                        return Err(format!("slot in migration: {range}"));
                    }
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    let (a, b): (usize, usize) = (a.parse().unwrap(), b.parse().unwrap());
                    slot_owner
                        .get_mut(a..=b)
                        .ok_or_else(|| format!("slot range {range}"))?
                        .fill(idx);
                }
            } else if flags.contains("slave") {
                let master = *ids
                    .get(f[3])
                    .ok_or_else(|| format!("replica of an unknown node: {}", f[3]))?;
                replica_of.insert(idx, master);
            }
        }
        if let Some(slot) = slot_owner.iter().position(|&o| o == usize::MAX) {
            return Err(format!("slot {slot} unassigned"));
        }
        Ok(Topology {
            slot_owner,
            replica_of,
        })
    }

    /// Waits (bounded) until every node in `alive` says cluster_state:ok with all slots ok,
    /// all of them report the same topology, and every replica's link to its master is up.
    fn wait_healthy(&self, alive: &[usize], limit: Duration) -> Topology {
        wait_for(
            "a healthy cluster",
            limit,
            || self.logs(),
            || {
                for &i in alive {
                    let info = self.nodes[i].conn().q("CLUSTER INFO").text();
                    for want in [
                        "cluster_state:ok",
                        "cluster_slots_assigned:16384",
                        "cluster_slots_ok:16384",
                    ] {
                        if !info.lines().any(|l| l.trim() == want) {
                            return Err(format!(
                                "node :{} lacks {want}:\n{info}",
                                self.nodes[i].port
                            ));
                        }
                    }
                }
                let topo = self.topology_seen_by(alive[0])?;
                for &i in &alive[1..] {
                    let other = self.topology_seen_by(i)?;
                    if other != topo {
                        return Err(format!(
                            "nodes :{} and :{} disagree",
                            self.nodes[alive[0]].port, self.nodes[i].port
                        ));
                    }
                }
                for (&replica, &master) in &topo.replica_of {
                    let mut c = self.nodes[replica].conn();
                    let link = info_field(&mut c, "replication", "master_link_status");
                    let port = info_field(&mut c, "replication", "master_port");
                    if link.as_deref() != Some("up")
                        || port != Some(self.nodes[master].port.to_string())
                    {
                        return Err(format!(
                            "replica :{} link {link:?} to {port:?}",
                            self.nodes[replica].port
                        ));
                    }
                }
                Ok(topo)
            },
        )
    }

    /// A cluster client over every node; `retries: None` keeps the crate's default
    /// (follows MOVED/ASK, retries CLUSTERDOWN and I/O errors by itself).
    fn client(&self, retries: Option<u32>) -> ClusterClient {
        let mut builder = ClusterClient::builder(
            self.nodes
                .iter()
                .map(|n| format!("redis://127.0.0.1:{}/", n.port)),
        )
        .connection_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(10));
        if let Some(r) = retries {
            builder = builder.retries(r);
        }
        builder.build().expect("cluster client")
    }

    /// `INFO tb` tb_take_calls of a node.
    fn take_calls(&self, node: usize) -> u64 {
        let mut c = self.nodes[node].conn();
        info_field(&mut c, "tb", "tb_take_calls")
            .expect("tb_take_calls")
            .parse()
            .unwrap()
    }
}

/// Runs redis-cli with a deadline; its output is shown if it fails.
fn run_cli(args: &[String], dir: &Path, limit: Duration) {
    let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string());
    let out_path = dir.join("redis-cli.out");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(&cli)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cli}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cli} {args:?} did not finish in {limit:?}:\n{}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "{cli} {args:?}: {status}\n{}",
        std::fs::read_to_string(&out_path).unwrap_or_default()
    );
}

/// Polls `f` until it returns Ok, at most `limit`; then panics with the last error and
/// `logs()`.
fn wait_for<T>(
    what: &str,
    limit: Duration,
    logs: impl Fn() -> String,
    mut f: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if start.elapsed() > limit => {
                panic!("waited {limit:?} for {what}; last: {e}\n{}", logs())
            }
            Err(_) => std::thread::sleep(Duration::from_millis(25)),
        }
    }
}

/// Waits (at most 20 s) until `replica`'s replication offset reaches `master`'s as it is
/// now: everything the master wrote so far has reached the replica.
fn wait_caught_up(cluster: &Cluster, master: &mut common::Conn, replica: &mut common::Conn) {
    let offset = |c: &mut common::Conn| -> u64 {
        info_field(c, "replication", "master_repl_offset")
            .expect("master_repl_offset")
            .parse()
            .unwrap()
    };
    let target = offset(master);
    wait_for(
        "the replica to catch up",
        Duration::from_secs(20),
        || cluster.logs(),
        || {
            let at = offset(replica);
            if at >= target {
                Ok(())
            } else {
                Err(format!("replica at {at} of {target}"))
            }
        },
    );
}

// ---------------------------------------------------------------------------------------
// TB.TAKE through the cluster client

#[derive(Debug, Clone, Copy)]
struct Decision {
    allowed: bool,
    remaining: f64,
    retry_after: f64,
    reset_after: f64,
}

fn take_cmd(key: &str, capacity: u32, rate: f64, n: u32, now: f64) -> redis::Cmd {
    let mut cmd = redis::cmd("TB.TAKE");
    cmd.arg(key)
        .arg(capacity)
        .arg(rate.to_string())
        .arg(n)
        .arg(now.to_string());
    cmd
}

fn decode(v: &Value) -> Decision {
    let (allowed, remaining, retry_after, reset_after): (i64, f64, f64, f64) =
        redis::from_redis_value_ref(v).unwrap_or_else(|e| panic!("TB.TAKE reply {v:?}: {e}"));
    assert!(allowed == 0 || allowed == 1, "{v:?}");
    Decision {
        allowed: allowed == 1,
        remaining,
        retry_after,
        reset_after,
    }
}

/// Sends a pipeline, or with `atomic()` a MULTI/EXEC block, as one request to the master
/// of its first command's key, and returns the replies (an error reply becomes `Err`).
///
/// The crate's sync cluster connection routes packed commands that way (it skips a
/// leading MULTI to find the key, and follows MOVED by resending the whole block), but its
/// `Pipeline::query` refuses any connection without general pipelining, so the packed
/// request is handed to `req_packed_commands` directly.
fn on_first_keys_master(
    con: &mut ClusterConnection,
    pipe: &redis::Pipeline,
) -> RedisResult<Vec<Value>> {
    let packed = pipe.get_packed_pipeline();
    let replies = if pipe.is_transaction() {
        let exec = con.req_packed_commands(&packed, pipe.len() + 1, 1)?;
        match exec.into_iter().next() {
            Some(Value::Array(items)) => items,
            other => panic!("EXEC replied {other:?}"),
        }
    } else {
        con.req_packed_commands(&packed, 0, pipe.len())?
    };
    replies.into_iter().map(Value::extract_error).collect()
}

/// Runs a cluster pipeline (routed per node, order kept per node) in chunks.
fn run_pipelined(con: &mut ClusterConnection, cmds: &[redis::Cmd]) -> Vec<Value> {
    let mut out = Vec::with_capacity(cmds.len());
    for chunk in cmds.chunks(2000) {
        let mut pipe = cluster_pipe();
        for c in chunk {
            pipe.add_command(c.clone());
        }
        let replies: Vec<Value> = pipe.query(con).expect("cluster pipeline");
        assert_eq!(replies.len(), chunk.len());
        out.extend(replies);
    }
    out
}

// ---------------------------------------------------------------------------------------
// 1. Every slot, every master: exact admissions

/// Rates that are exact binary fractions, so `rate x elapsed` is exact.
/// Powers of two, so refills over `ELAPSED` are exact; slow enough that every bucket takes
/// 32 s or more to fill again, so no key's TTL (time to full) can run out while the test
/// is still counting keys on a loaded machine (rates of 0.125-2/s expired some keys
/// between the traffic and DBSIZE under load).
const RATES: [f64; 4] = [1.0 / 128.0, 1.0 / 256.0, 1.0 / 32.0, 1.0 / 512.0];
/// Seconds between the two rounds of takes, on the client's clock.
const ELAPSED: f64 = 256.0;

#[test]
fn every_slot_admits_exactly_capacity_then_rate_times_elapsed() {
    let _serial = serial();
    let started = Instant::now();
    let (cluster, topo) = Cluster::start(5000);
    let setup = started.elapsed();

    // Our slot function is the cluster's (hash tags included).
    let keys = keys_for_every_slot("rl:slot:");
    let mut c = cluster.nodes[0].conn();
    for key in keys.iter().step_by(331).map(String::as_str).chain([
        "{user42}:minute",
        "{user42}:hour",
        "a{}b",
        "{}{x}",
        "x{y}z{w}",
    ]) {
        assert_eq!(
            c.cmd(&["CLUSTER", "KEYSLOT", key]).int(),
            key_slot(key) as i64,
            "{key}"
        );
    }
    // The module's key spec is what the cluster routes by: a node that does not own the
    // key's slot redirects TB.TAKE before running it.
    assert_eq!(
        c.q("COMMAND GETKEYS TB.TAKE somekey 10 1 1").flat(),
        "[somekey]"
    );
    let key = &keys[0];
    let owner = topo.slot_owner[0];
    let stranger = *topo.masters().iter().find(|&&m| m != owner).unwrap();
    let reply = cluster.nodes[stranger]
        .conn()
        .cmd(&["TB.TAKE", key, "1", "1", "1"]);
    assert_eq!(
        reply,
        Reply::Error(format!("MOVED 0 127.0.0.1:{}", cluster.nodes[owner].port))
    );
    // The replica of the owner redirects too (a write).
    let replica = topo.replicas_of(owner)[0];
    let reply = cluster.nodes[replica]
        .conn()
        .cmd(&["TB.TAKE", key, "1", "1", "1"]);
    assert_eq!(
        reply,
        Reply::Error(format!("MOVED 0 127.0.0.1:{}", cluster.nodes[owner].port))
    );

    // Per slot: capacity 1..=6 and one of RATES. At T0 take one token capacity + 1 times
    // (exactly capacity admitted), then at T0 + ELAPSED take (refill + 1) times, where
    // refill = floor(min(capacity, ELAPSED x rate)).
    let t1 = T0 + ELAPSED;
    let params = |slot: usize| -> (u32, f64) { (1 + (slot % 6) as u32, RATES[(slot / 6) % 4]) };
    let expected_calls: Vec<u64> = {
        let mut per_node = vec![0u64; cluster.nodes.len()];
        for slot in 0..SLOTS {
            let (cap, rate) = params(slot);
            let refill = (f64::from(cap)).min(ELAPSED * rate).floor() as u64;
            per_node[topo.slot_owner[slot]] += u64::from(cap) + 1 + refill + 1;
        }
        per_node
    };

    let client = cluster.client(None);
    let traffic = Instant::now();
    std::thread::scope(|s| {
        for part in 0..2 {
            let (client, keys) = (&client, &keys);
            s.spawn(move || {
                let mut con = client.get_connection().expect("cluster connection");
                let slots: Vec<usize> = (part..SLOTS).step_by(2).collect();
                for batch in slots.chunks(256) {
                    let mut cmds = Vec::new();
                    for &slot in batch {
                        let (cap, rate) = params(slot);
                        let refill = f64::from(cap).min(ELAPSED * rate);
                        for _ in 0..=cap {
                            cmds.push(take_cmd(&keys[slot], cap, rate, 1, T0));
                        }
                        for _ in 0..=(refill.floor() as u32) {
                            cmds.push(take_cmd(&keys[slot], cap, rate, 1, t1));
                        }
                    }
                    let replies = run_pipelined(&mut con, &cmds);
                    let mut replies = replies.iter().map(decode);
                    for &slot in batch {
                        let key = &keys[slot];
                        let (cap, rate) = params(slot);
                        let refill = f64::from(cap).min(ELAPSED * rate);
                        for j in 1..=cap {
                            let d = replies.next().unwrap();
                            assert!(d.allowed, "{key} take {j} at T0: {d:?}");
                            assert_eq!(d.remaining, f64::from(cap - j), "{key}: {d:?}");
                            assert_eq!(d.retry_after, 0.0, "{key}: {d:?}");
                        }
                        let d = replies.next().unwrap();
                        assert!(!d.allowed, "{key}: take {} at T0 admitted: {d:?}", cap + 1);
                        assert_eq!(d.remaining, 0.0, "{key}: {d:?}");
                        let wait = 1.0 / rate;
                        assert!(
                            d.retry_after >= wait && d.retry_after < wait + 1e-3,
                            "{key}: {d:?}"
                        );
                        let full = f64::from(cap) / rate;
                        assert!(
                            d.reset_after >= full && d.reset_after < full + 1e-3,
                            "{key}: {d:?}"
                        );
                        for j in 1..=(refill.floor() as u32) {
                            let d = replies.next().unwrap();
                            assert!(d.allowed, "{key} take {j} at T0 + 4 s: {d:?}");
                            assert_eq!(d.remaining, refill - f64::from(j), "{key}: {d:?}");
                        }
                        let d = replies.next().unwrap();
                        assert!(
                            !d.allowed,
                            "{key}: refill {refill} exceeded at T0 + 4 s: {d:?}"
                        );
                        assert_eq!(d.remaining, refill - refill.floor(), "{key}: {d:?}");
                    }
                    assert!(replies.next().is_none());
                }
            });
        }
    });
    let traffic = traffic.elapsed();

    // Every master ran exactly the calls of the slots it owns; replicas ran none (they get
    // HSET/PEXPIREAT effects) and end up with the same keys.
    let masters = topo.masters();
    for (node, &want) in expected_calls.iter().enumerate() {
        let got = cluster.take_calls(node);
        assert_eq!(
            got, want,
            "TB.TAKE calls on node :{}",
            cluster.nodes[node].port
        );
        assert_eq!(masters.contains(&node), want > 0);
    }
    for &m in &masters {
        let owned = topo.slot_owner.iter().filter(|&&o| o == m).count() as i64;
        let mut mc = cluster.nodes[m].conn();
        assert_eq!(
            mc.q("DBSIZE").int(),
            owned,
            "keys on master :{}",
            cluster.nodes[m].port
        );
        let r = topo.replicas_of(m)[0];
        let mut rc = cluster.nodes[r].conn();
        wait_caught_up(&cluster, &mut mc, &mut rc);
        assert_eq!(
            rc.q("DBSIZE").int(),
            owned,
            "keys on replica :{}",
            cluster.nodes[r].port
        );
        // Same bytes on the replica (READONLY lets it serve its master's slots).
        assert_eq!(rc.q("READONLY"), Reply::Simple("OK".into()));
        for slot in (0..SLOTS).filter(|&s| topo.slot_owner[s] == m).step_by(97) {
            let key = keys[slot].as_bytes();
            assert_eq!(
                common::hgetall(&mut rc, key),
                common::hgetall(&mut mc, key),
                "{}",
                keys[slot]
            );
        }
    }
    let calls: u64 = expected_calls.iter().sum();
    eprintln!(
        "cluster: {SLOTS} buckets (one per slot) on masters {:?}: {calls} TB.TAKE calls exact; \
         cluster setup {setup:?}, traffic {traffic:?}, total {:?}",
        masters
            .iter()
            .map(|&m| cluster.nodes[m].port)
            .collect::<Vec<_>>(),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 2. Failover under traffic

const FO_CAPACITY: u32 = 5;
/// 1/128 token per second: an exhausted bucket is full again after 640 s, so its TTL
/// outlives the test by far (an expired key would be a full bucket and look like a leak).
const FO_RATE: f64 = 0.0078125;
/// How long the WAIT variant waits for the replica's acknowledgement.
const WAIT_MS: u64 = 2000;

/// What one traffic thread saw for one key.
#[derive(Debug, Default, Clone)]
struct KeyCount {
    /// Takes answered "allowed".
    allowed: u32,
    /// ... of which the replica acknowledged (WAIT 1 returned 1).
    confirmed: u32,
    /// ... of which were sent after the dead master was gone (so served by the new one).
    allowed_after_kill: u32,
    /// Takes whose outcome is unknown: sent, then the connection failed.
    ambiguous: u32,
}

#[derive(Debug, Default)]
struct Walk {
    keys: Vec<String>,
    counts: Vec<KeyCount>,
    /// (key index, sent, answered) of every allowed take.
    allowed: Vec<(usize, Instant, Instant)>,
    /// When the takes that WAIT confirmed were sent.
    confirmed_sent: Vec<Instant>,
    /// Allowed takes whose WAIT returned 0 replicas.
    unconfirmed: u32,
    /// Takes refused by the cluster before running (CLUSTERDOWN, MOVED, refused connection).
    refused: u32,
    ambiguous: u32,
    first_error: Option<Instant>,
    last_error: Option<Instant>,
    errors: BTreeMap<String, u32>,
}

/// Shared between the traffic threads and the test.
struct Control {
    /// Set just before the kill: the WAIT thread stops waiting (the promoted replica has no
    /// replica of its own to acknowledge).
    killed: AtomicBool,
    /// Set (with `killed_at`) once the dead master's process is gone.
    gone: AtomicBool,
    stop: AtomicBool,
    /// Answered takes per thread.
    progress: Vec<AtomicU64>,
    /// Threads that ran out of keys.
    finished: Vec<AtomicBool>,
}

/// Sets `stop` when dropped, so a failing test never leaves traffic threads running.
struct StopOnDrop<'a>(&'a AtomicBool);
impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

enum Failure {
    /// The cluster answered without running the command, or no connection was made.
    Refused,
    /// Sent, and the reply was lost: it may or may not have run.
    Ambiguous,
}

fn classify(e: &RedisError) -> Failure {
    match e.kind() {
        ErrorKind::Server(
            ServerErrorKind::Moved
            | ServerErrorKind::Ask
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::BusyLoading,
        ) => Failure::Refused,
        ErrorKind::Server(_) => panic!("unexpected error from TB.TAKE: {e}"),
        _ if e.is_connection_refusal() => Failure::Refused,
        _ => Failure::Ambiguous,
    }
}

fn connect(client: &ClusterClient, ctl: &Control, deadline: Instant) -> Option<ClusterConnection> {
    loop {
        if ctl.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
            return None;
        }
        if let Ok(con) = client.get_connection() {
            return Some(con);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One traffic thread: walks its keys in order, taking one token at T0 until the bucket
/// says no, then the next key. No automatic retries: every attempt is accounted for.
/// With `confirm`, each take is followed by `WAIT 1` on the same connection (until the
/// kill).
fn walk(
    thread: usize,
    client: &ClusterClient,
    keys: &[String],
    confirm: bool,
    ctl: &Control,
) -> Walk {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut w = Walk::default();
    let Some(mut con) = connect(client, ctl, deadline) else {
        return w;
    };
    'keys: for (k, key) in keys.iter().enumerate() {
        w.keys.push(key.clone());
        w.counts.push(KeyCount::default());
        loop {
            if ctl.stop.load(Ordering::SeqCst) || Instant::now() > deadline {
                break 'keys;
            }
            let with_wait = confirm && !ctl.killed.load(Ordering::SeqCst);
            let after_kill = ctl.gone.load(Ordering::SeqCst);
            let take = take_cmd(key, FO_CAPACITY, FO_RATE, 1, T0);
            let sent = Instant::now();
            let result: Result<(Value, Option<bool>), RedisError> = if with_wait {
                let mut pipe = redis::pipe();
                pipe.add_command(take).cmd("WAIT").arg(1).arg(WAIT_MS);
                on_first_keys_master(&mut con, &pipe).map(|mut r| {
                    let acks: i64 = redis::from_redis_value(r.pop().unwrap()).unwrap();
                    (r.pop().unwrap(), Some(acks >= 1))
                })
            } else {
                take.query::<Value>(&mut con).map(|v| (v, None))
            };
            match result {
                Ok((v, confirmed)) => {
                    let answered = Instant::now();
                    let d = decode(&v);
                    ctl.progress[thread].fetch_add(1, Ordering::SeqCst);
                    if !d.allowed {
                        assert!(d.remaining < 1.0, "{key}: {d:?}");
                        continue 'keys;
                    }
                    let c = &mut w.counts[k];
                    c.allowed += 1;
                    if after_kill {
                        c.allowed_after_kill += 1;
                    }
                    w.allowed.push((k, sent, answered));
                    match confirmed {
                        Some(true) => {
                            c.confirmed += 1;
                            w.confirmed_sent.push(sent);
                        }
                        Some(false) => w.unconfirmed += 1,
                        None => {}
                    }
                }
                Err(e) => {
                    let now = Instant::now();
                    w.first_error.get_or_insert(now);
                    w.last_error = Some(now);
                    let kind = match classify(&e) {
                        Failure::Refused => {
                            w.refused += 1;
                            format!("refused: {}", e.code().unwrap_or("connect"))
                        }
                        Failure::Ambiguous => {
                            w.ambiguous += 1;
                            w.counts[k].ambiguous += 1;
                            format!("lost reply: {:?}", e.kind())
                        }
                    };
                    *w.errors.entry(kind).or_default() += 1;
                    std::thread::sleep(Duration::from_millis(10));
                    // A fresh connection: a fresh slot map (the crate refreshes it only
                    // while retrying, and this client does not retry).
                    match connect(client, ctl, deadline) {
                        Some(c) => con = c,
                        None => break 'keys,
                    }
                }
            }
        }
    }
    ctl.finished[thread].store(true, Ordering::SeqCst);
    w
}

#[test]
fn failover_under_traffic_continues_from_replicated_buckets() {
    let _serial = serial();
    let started = Instant::now();
    let (mut cluster, topo) = Cluster::start(2000);

    // The victim: the master of slot 0, and its replica.
    let victim = topo.slot_owner[0];
    let heir = topo.replicas_of(victim)[0];
    let victim_slots: Vec<bool> = topo.slot_owner.iter().map(|&o| o == victim).collect();

    // Threads 0..3 take without waiting, thread 3 with WAIT 1 after each take, all on the
    // victim's keys; thread 4 on the other masters' keys (a control).
    const THREADS: usize = 5;
    const CONFIRMING: usize = 3;
    const CONTROL: usize = 4;
    let key_sets: Vec<Vec<String>> = (0..THREADS)
        .map(|t| {
            let on_victim = t != CONTROL;
            keys_where(&format!("fo:{t}:"), 20_000, |s| {
                victim_slots[s] == on_victim
            })
        })
        .collect();

    let ctl = Control {
        killed: AtomicBool::new(false),
        gone: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        progress: (0..THREADS).map(|_| AtomicU64::new(0)).collect(),
        finished: (0..THREADS).map(|_| AtomicBool::new(false)).collect(),
    };
    let client = cluster.client(Some(0));
    let progress = |t: usize| ctl.progress[t].load(Ordering::SeqCst);

    let mut timeline = Vec::new();
    let (walks, kill_start, kill_done) = std::thread::scope(|s| {
        let _stop = StopOnDrop(&ctl.stop);
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (client, keys, ctl) = (&client, &key_sets[t], &ctl);
                s.spawn(move || walk(t, client, keys, t == CONFIRMING, ctl))
            })
            .collect();

        // Traffic flows on every thread...
        wait_for(
            "traffic before the kill",
            Duration::from_secs(30),
            || cluster.logs(),
            || {
                let done = |t: usize| ctl.finished[t].load(Ordering::SeqCst);
                match (0..THREADS).find(|&t| progress(t) < 1000 && !done(t)) {
                    Some(t) => Err(format!("thread {t}: {} takes", progress(t))),
                    None => Ok(()),
                }
            },
        );
        // ... when the master dies.
        ctl.killed.store(true, Ordering::SeqCst);
        let kill_start = Instant::now();
        cluster.nodes[victim].kill();
        let kill_done = Instant::now();
        ctl.gone.store(true, Ordering::SeqCst);

        // Its replica takes over (node timeout, FAIL agreement, election) ...
        wait_for(
            "the replica to be promoted",
            Duration::from_secs(30),
            || cluster.logs(),
            || {
                let role = cluster.nodes[heir].conn().q("ROLE");
                match role.array().first() {
                    Some(Reply::Bulk(r)) if r == b"master" => Ok(()),
                    _ => Err(role.flat()),
                }
            },
        );
        timeline.push(("replica promoted", kill_done.elapsed()));
        let alive: Vec<usize> = (0..cluster.nodes.len()).filter(|&i| i != victim).collect();
        let after = cluster.wait_healthy(&alive, Duration::from_secs(30));
        timeline.push(("cluster_state:ok on all 5 nodes", kill_done.elapsed()));
        for (slot, &owner) in topo.slot_owner.iter().enumerate() {
            let want = if owner == victim { heir } else { owner };
            assert_eq!(after.slot_owner[slot], want, "slot {slot}");
        }

        // ... and traffic flows again on every thread.
        let base: Vec<u64> = (0..THREADS).map(progress).collect();
        wait_for(
            "traffic after the failover",
            Duration::from_secs(30),
            || cluster.logs(),
            || {
                let done = |t: usize| ctl.finished[t].load(Ordering::SeqCst);
                match (0..THREADS).find(|&t| progress(t) < base[t] + 500 && !done(t)) {
                    Some(t) => Err(format!("thread {t}: {} takes since", progress(t) - base[t])),
                    None => Ok(()),
                }
            },
        );
        ctl.stop.store(true, Ordering::SeqCst);
        let walks: Vec<Walk> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        (walks, kill_start, kill_done)
    });

    // What the surviving cluster says about every key any thread touched: remaining tokens
    // at T0 (n = 0 writes nothing), and the stored refill time.
    let verify_client = cluster.client(None);
    let mut con = verify_client.get_connection().expect("cluster connection");
    let all_keys: Vec<&String> = walks.iter().flat_map(|w| &w.keys).collect();
    let mut cmds = Vec::new();
    for key in &all_keys {
        cmds.push(take_cmd(key, FO_CAPACITY, FO_RATE, 0, T0));
        let mut hget = redis::cmd("HGET");
        hget.arg(key.as_str()).arg("last_refill_time");
        cmds.push(hget);
    }
    let replies = run_pipelined(&mut con, &cmds);
    let mut left: HashMap<&str, u32> = HashMap::new();
    for (key, pair) in all_keys.iter().zip(replies.chunks(2)) {
        let d = decode(&pair[0]);
        assert_eq!(d.remaining, d.remaining.floor(), "{key}: {d:?}");
        left.insert(key.as_str(), d.remaining as u32);
        // Either never written (a full bucket), or written at T0: nothing on the promoted
        // replica was recomputed with a clock of its own.
        match &pair[1] {
            Value::Nil => assert_eq!(d.remaining, f64::from(FO_CAPACITY), "{key}"),
            Value::BulkString(t) => assert_eq!(t, T0.to_string().as_bytes(), "{key}"),
            other => panic!("{key}: last_refill_time {other:?}"),
        }
    }

    // Per key, allowed takes + what is left = capacity, but for two failover effects:
    // - leak: a take the dead master answered "allowed" but never sent to its replica
    //   (replication is asynchronous: the reply and the replication stream leave in the
    //   same event-loop pass, and kill -9 can fall between them, or the replica link can
    //   lag). The promoted replica still has that token and hands it out again.
    // - cost: a take that ran (and was replicated) but whose reply was lost with the
    //   connection: the token is gone, and the client was not admitted.
    // The leak bound: every take answered before the last WAIT-confirmed take was sent is
    // on the replica (one replication stream, applied in order; WAIT returned once the
    // replica had applied everything up to that take). So only allowed takes sent to the
    // dead master and answered after that point can be lost.
    let confirmed_until = walks[CONFIRMING].confirmed_sent.iter().max().copied();
    let mut report = Vec::new();
    let mut victim_totals = (0u32, 0u32, 0u32, 0u32, 0u32); // allowed, leak, bound, cost, ambiguous
    for (t, w) in walks.iter().enumerate() {
        let mut at_risk = vec![0u32; w.keys.len()];
        for &(k, sent, answered) in &w.allowed {
            // (The control thread's keys live on masters that never failed: nothing at risk.)
            if t != CONTROL && sent < kill_done && confirmed_until.is_none_or(|c| answered >= c) {
                at_risk[k] += 1;
            }
        }
        let (mut leak, mut cost, mut bound, mut allowed, mut confirmed_leak) = (0, 0, 0, 0, 0);
        for (k, key) in w.keys.iter().enumerate() {
            let c = &w.counts[k];
            let remaining = left[key.as_str()];
            // Allowed over the whole run, plus what is still there: capacity, unless a
            // take was answered but lost (leak) or ran without its answer arriving (cost).
            let total = c.allowed + remaining;
            let key_leak = total.saturating_sub(FO_CAPACITY);
            let key_cost = FO_CAPACITY.saturating_sub(total);
            assert!(
                key_cost <= c.ambiguous,
                "{key}: {key_cost} tokens gone without an answer, but only {} replies were lost: {c:?}, {remaining} left",
                c.ambiguous
            );
            assert!(
                key_leak <= at_risk[k],
                "{key}: {key_leak} tokens handed out twice, but only {} allowed takes were \
                 unconfirmed when the master died: {c:?}, {remaining} left",
                at_risk[k]
            );
            // With WAIT: what the replica confirmed is never handed out again.
            let reissued = c.confirmed + c.allowed_after_kill + remaining;
            confirmed_leak += reissued.saturating_sub(FO_CAPACITY);
            leak += key_leak;
            cost += key_cost;
            bound += at_risk[k];
            allowed += c.allowed;
        }
        assert_eq!(
            confirmed_leak, 0,
            "thread {t}: WAIT-confirmed takes handed out again"
        );
        if t != CONTROL {
            victim_totals.0 += allowed;
            victim_totals.1 += leak;
            victim_totals.2 += bound;
            victim_totals.3 += cost;
            victim_totals.4 += w.ambiguous;
        }
        let outage = match (w.first_error, w.last_error) {
            (Some(a), Some(b)) => format!("{:?}", b - a),
            _ => "none".into(),
        };
        report.push(format!(
            "  thread {t} ({}): {} keys, {allowed} allowed ({} confirmed, {} unconfirmed by WAIT), \
             leaked {leak} (bound {bound}), cost {cost}, errors {:?} over {outage}",
            match t {
                CONTROL => "control, other masters",
                CONFIRMING => "victim, WAIT 1",
                _ => "victim",
            },
            w.keys.len(),
            w.counts.iter().map(|c| c.confirmed).sum::<u32>(),
            w.unconfirmed,
            w.errors,
        ));
        if t != CONTROL {
            assert!(
                w.counts.iter().map(|c| c.allowed_after_kill).sum::<u32>() > 0,
                "thread {t} never got a take through after the failover"
            );
        }
    }
    assert!(
        walks[CONFIRMING].confirmed_sent.len() >= 50,
        "the WAIT thread confirmed only {} takes",
        walks[CONFIRMING].confirmed_sent.len()
    );

    // Later, every bucket refills from its replicated state, once: at T0 + 256 s exactly
    // 2 more tokens (no reset to full, no double refill).
    let t1 = T0 + 256.0;
    let mut cmds = Vec::new();
    let mut expect = Vec::new();
    for key in &all_keys {
        let e = (left[key.as_str()] + 2).min(FO_CAPACITY);
        for _ in 0..=e {
            cmds.push(take_cmd(key, FO_CAPACITY, FO_RATE, 1, t1));
        }
        expect.push(e);
    }
    let replies = run_pipelined(&mut con, &cmds);
    let mut replies = replies.iter().map(decode);
    for (key, &e) in all_keys.iter().zip(&expect) {
        for j in 0..e {
            let d = replies.next().unwrap();
            assert!(d.allowed, "{key}: take {j} of {e} at T0 + 256 s: {d:?}");
        }
        let d = replies.next().unwrap();
        assert!(!d.allowed, "{key}: more than {e} at T0 + 256 s: {d:?}");
        assert_eq!(d.remaining, 0.0, "{key}: {d:?}");
    }

    let (allowed, leak, bound, cost, ambiguous) = victim_totals;
    eprintln!(
        "failover: kill -9 of master :{} took {:?}; then {}\n\
         on the dead master's keys: {allowed} takes allowed in all; leaked {leak} (allowed \
         beyond capacity: answered by the dead master, never replicated; sound bound {bound} = \
         allowed takes answered after the last WAIT-confirmed take), cost {cost} (tokens \
         consumed by takes whose reply was lost; {ambiguous} replies lost)\n{}\n\
         total {:?}",
        cluster.nodes[victim].port,
        kill_done - kill_start,
        timeline
            .iter()
            .map(|(what, at)| format!("{what} after {at:?}"))
            .collect::<Vec<_>>()
            .join(", "),
        report.join("\n"),
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// 3. Several keys at once: hash tags

/// Admits one request only if both buckets have a token, and then takes from both.
const BOTH_OR_NEITHER: &str = r"
local m = redis.call('TB.TAKE', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[5])
local h = redis.call('TB.TAKE', KEYS[2], ARGV[3], ARGV[4], 0, ARGV[5])
if tonumber(m[2]) >= 1 and tonumber(h[2]) >= 1 then
  redis.call('TB.TAKE', KEYS[1], ARGV[1], ARGV[2], 1, ARGV[5])
  redis.call('TB.TAKE', KEYS[2], ARGV[3], ARGV[4], 1, ARGV[5])
  return 1
end
return 0
";

const MINUTE: (u32, f64) = (3, 0.0625); // 3, then 1 every 16 s
const HOUR: (u32, f64) = (5, 0.001953125); // 5, then 1 every 512 s

fn both_or_neither(
    con: &mut ClusterConnection,
    minute: &str,
    hour: &str,
    now: f64,
) -> Result<i64, RedisError> {
    redis::cmd("EVAL")
        .arg(BOTH_OR_NEITHER)
        .arg(2)
        .arg(minute)
        .arg(hour)
        .arg(MINUTE.0)
        .arg(MINUTE.1.to_string())
        .arg(HOUR.0)
        .arg(HOUR.1.to_string())
        .arg(now.to_string())
        .query(con)
}

fn exists(con: &mut ClusterConnection, key: &str) -> bool {
    redis::cmd("EXISTS").arg(key).query::<i64>(con).unwrap() == 1
}

#[test]
fn hash_tags_put_a_users_limits_in_one_slot_and_cross_slot_is_refused() {
    let _serial = serial();
    let (cluster, topo) = Cluster::start(5000);
    let client = cluster.client(None);
    let mut con = client.get_connection().expect("cluster connection");

    let (minute, hour) = ("{user42}:minute", "{user42}:hour");
    assert_eq!(key_slot(minute), key_slot(hour));
    assert_ne!(key_slot("user42:minute"), key_slot("user42:hour"));

    // MULTI/EXEC of both (the client sends it to the slot's master): six requests at T0,
    // each taking from both. Each bucket decides for itself.
    let mut seen = Vec::new();
    for _ in 0..6 {
        let mut multi = redis::pipe();
        multi
            .atomic()
            .add_command(take_cmd(minute, MINUTE.0, MINUTE.1, 1, T0))
            .add_command(take_cmd(hour, HOUR.0, HOUR.1, 1, T0));
        let replies = on_first_keys_master(&mut con, &multi).expect("MULTI/EXEC on one slot");
        seen.push((decode(&replies[0]).allowed, decode(&replies[1]).allowed));
    }
    let minute_allowed: Vec<bool> = seen.iter().map(|p| p.0).collect();
    let hour_allowed: Vec<bool> = seen.iter().map(|p| p.1).collect();
    assert_eq!(minute_allowed, [true, true, true, false, false, false]);
    assert_eq!(hour_allowed, [true, true, true, true, true, false]);
    // Both keys live on the one master of their slot.
    let owner = topo.slot_owner[key_slot(minute)];
    let mut oc = cluster.nodes[owner].conn();
    assert_eq!(oc.q(&format!("EXISTS {minute} {hour}")).int(), 2);

    // A Lua script takes from both only when both have a token.
    let (m2, h2) = ("{user7}:minute", "{user7}:hour");
    let admitted = |con: &mut ClusterConnection, now: f64, tries: usize| -> usize {
        (0..tries)
            .map(|_| both_or_neither(con, m2, h2, now).expect("EVAL on one slot"))
            .filter(|&r| r == 1)
            .count()
    };
    assert_eq!(admitted(&mut con, T0, 10), 3); // the minute limit binds; hour keeps 2
    assert_eq!(admitted(&mut con, T0 + 32.0, 10), 2); // 2 new minute tokens; hour 2.0625 -> 0.0625
    assert_eq!(admitted(&mut con, T0 + 64.0, 10), 0); // the hour limit binds (0.125) ...
    let state = |con: &mut ClusterConnection, key: &str, cap_rate: (u32, f64), now: f64| {
        decode(
            &take_cmd(key, cap_rate.0, cap_rate.1, 0, now)
                .query::<Value>(con)
                .unwrap(),
        )
        .remaining
    };
    assert_eq!(state(&mut con, m2, MINUTE, T0 + 64.0), 2.0); // ... and the minute bucket was not charged
    assert_eq!(state(&mut con, h2, HOUR, T0 + 64.0), 0.125);

    // Keys in different slots: refused by the cluster, nothing written.
    let (a, b) = ("user42:minute", "user42:hour");
    let err = both_or_neither(&mut con, a, b, T0).expect_err("EVAL across slots");
    assert_eq!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::CrossSlot),
        "{err}"
    );
    assert!(!exists(&mut con, a) && !exists(&mut con, b));

    // MULTI/EXEC across two slots of the same master: queued, then EXEC is refused whole.
    let same_node_other_slot = keys_where("other:", 1, |s| {
        s != key_slot(minute) && topo.slot_owner[s] == owner
    })
    .remove(0);
    let mut multi = redis::pipe();
    multi
        .atomic()
        .add_command(take_cmd(minute, MINUTE.0, MINUTE.1, 1, T0 + 60.0))
        .add_command(take_cmd(&same_node_other_slot, 1, 1.0, 1, T0));
    let err = on_first_keys_master(&mut con, &multi).expect_err("MULTI/EXEC across slots");
    assert_eq!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::CrossSlot),
        "{err}"
    );
    assert!(!exists(&mut con, &same_node_other_slot));
    assert_eq!(
        state(&mut con, minute, MINUTE, T0 + 60.0),
        3.0,
        "the minute bucket was charged"
    );

    // The same on one raw connection to that master, as any client would send it.
    assert_eq!(oc.q("MULTI"), Reply::Simple("OK".into()));
    let queued = oc.cmd(&["TB.TAKE", minute, "3", "0.0625", "1", "1764456328"]);
    assert_eq!(queued, Reply::Simple("QUEUED".into()));
    let queued = oc.cmd(&[
        "TB.TAKE",
        same_node_other_slot.as_str(),
        "1",
        "1",
        "1",
        "1764456268",
    ]);
    assert_eq!(queued, Reply::Simple("QUEUED".into()));
    let exec = oc.q("EXEC");
    assert!(exec.error().starts_with("CROSSSLOT"), "{exec:?}");
    // Across masters, the second key is redirected while queuing and EXEC aborts.
    let elsewhere = keys_where("other:", 1, |s| topo.slot_owner[s] != owner).remove(0);
    assert_eq!(oc.q("MULTI"), Reply::Simple("OK".into()));
    oc.cmd(&["TB.TAKE", minute, "3", "0.0625", "1", "1764456328"]);
    let moved = oc.cmd(&["TB.TAKE", elsewhere.as_str(), "1", "1", "1", "1764456268"]);
    assert!(moved.error().starts_with("MOVED"), "{moved:?}");
    let exec = oc.q("EXEC");
    assert!(exec.error().starts_with("EXECABORT"), "{exec:?}");
    assert!(!exists(&mut con, &elsewhere));
    assert_eq!(state(&mut con, minute, MINUTE, T0 + 60.0), 3.0);

    // Inside a script, TB.TAKE's key spec lets the cluster check keys the script did not
    // declare. A key on another master is refused; with a `#!lua` shebang (no
    // `allow-cross-slot-keys` flag) so is one in another slot of the same master (scripts
    // without a shebang keep the pre-7.0 leniency there); one behind the same hash tag
    // is fine. A refused call runs nothing.
    let undeclared = |shebang: bool| {
        format!(
            "{}redis.call('TB.TAKE', ARGV[1], 5, 1, 1, ARGV[2]) return 1",
            if shebang { "#!lua\n" } else { "" }
        )
    };
    let run = |con: &mut ClusterConnection, shebang: bool, declared: &str, other: &str| {
        redis::cmd("EVAL")
            .arg(undeclared(shebang))
            .arg(1)
            .arg(declared)
            .arg(other)
            .arg(T0.to_string())
            .query::<i64>(con)
    };
    let err = run(&mut con, true, minute, &same_node_other_slot)
        .expect_err("undeclared key in another slot");
    assert!(
        err.to_string().contains("do not hash to the same slot"),
        "{err}"
    );
    assert!(!exists(&mut con, &same_node_other_slot));
    for shebang in [false, true] {
        let err = run(&mut con, shebang, minute, &elsewhere)
            .expect_err("undeclared key on another master");
        assert!(err.to_string().contains("non local key"), "{err}");
        assert!(!exists(&mut con, &elsewhere));
        let day = format!("{{user42}}:day:{shebang}");
        assert_eq!(run(&mut con, shebang, minute, &day).unwrap(), 1);
        assert!(exists(&mut con, &day));
        assert_eq!(oc.q(&format!("EXISTS {day}")).int(), 1);
    }
}

// ---------------------------------------------------------------------------------------
// 4. Several buckets in one call (TB.MTAKE) and reads from replicas (TB.PEEK)

/// `TB.MTAKE numkeys key.. (capacity rate n).. now`.
fn mtake_cmd(keys: &[&str], limits: &[(u32, f64, u32)], now: f64) -> redis::Cmd {
    let mut cmd = redis::cmd("TB.MTAKE");
    cmd.arg(keys.len()).arg(keys);
    for &(capacity, rate, n) in limits {
        cmd.arg(capacity).arg(rate.to_string()).arg(n);
    }
    cmd.arg(now.to_string());
    cmd
}

/// TB.MTAKE's reply: the overall decision and one per key, in key order.
fn decode_mtake(v: &Value) -> (Decision, Vec<Decision>) {
    let Value::Array(items) = v else {
        panic!("TB.MTAKE reply {v:?}")
    };
    assert_eq!(items.len(), 5, "{v:?}");
    let all = decode(&Value::Array(items[..4].to_vec()));
    let Value::Array(per_key) = &items[4] else {
        panic!("TB.MTAKE per-key replies {v:?}")
    };
    (all, per_key.iter().map(decode).collect())
}

/// A node's `INFO tb` counter.
fn tb_counter(cluster: &Cluster, node: usize, field: &str) -> u64 {
    let mut c = cluster.nodes[node].conn();
    info_field(&mut c, "tb", field)
        .unwrap_or_else(|| panic!("{field}"))
        .parse()
        .unwrap()
}

#[test]
fn mtake_runs_on_the_tags_master_cross_slot_is_refused_and_replicas_serve_peek_after_readonly() {
    let _serial = serial();
    let (cluster, topo) = Cluster::start(5000);
    let client = cluster.client(None);
    let mut con = client.get_connection().expect("cluster connection");

    // One user's limits share a hash tag: one slot, one master.
    let keys = ["rl:{user42}:ip", "rl:{user42}:user", "rl:{user42}:orders"];
    let slot = key_slot(keys[0]);
    assert!(keys.iter().all(|k| key_slot(k) == slot));
    let owner = topo.slot_owner[slot];
    let owner_port = cluster.nodes[owner].port;
    let replica = topo.replicas_of(owner)[0];
    let stranger = *topo.masters().iter().find(|&&m| m != owner).unwrap();

    // The key spec (numkeys, then the keys) is what the cluster routes by: a master that
    // does not own the slot redirects before running anything, and so does the owner's
    // replica (a write).
    let mut any = cluster.nodes[stranger].conn();
    let mtake_line = |limits: &str| {
        format!(
            "TB.MTAKE 3 {} {} {} {limits} 1764456268",
            keys[0], keys[1], keys[2]
        )
    };
    assert_eq!(
        any.q(&format!(
            "COMMAND GETKEYS {}",
            mtake_line("3 1 1 5 1 1 2 1 1")
        ))
        .flat(),
        format!("[{} {} {}]", keys[0], keys[1], keys[2])
    );
    let moved = Reply::Error(format!("MOVED {slot} 127.0.0.1:{owner_port}"));
    let line = mtake_line("3 0.0625 1 5 0.03125 1 2 0.015625 1");
    let r = any.q(&line);
    assert_eq!(
        r,
        moved,
        "{line} on a master without the slot: {}",
        r.flat()
    );
    let mut rc = cluster.nodes[replica].conn();
    let r = rc.q(&line);
    assert_eq!(r, moved, "{line} on the slot's replica: {}", r.flat());

    // Through the cluster client (the crate routes an unknown command by its first
    // argument, here numkeys, and follows the MOVED): limits 3, 5 and 2, one token from
    // each at T0. Twice all three have one; the third time `orders` is empty and nothing
    // is taken from the others. (Slow, exact refills: 1 token per 16, 32 and 64 s, so no
    // bucket expires during the test.)
    let limits = [(3, 0.0625, 1), (5, 0.03125, 1), (2, 0.015625, 1)];
    let mut replies = Vec::new();
    for _ in 0..3 {
        let v: Value = mtake_cmd(&keys, &limits, T0)
            .query(&mut con)
            .expect("TB.MTAKE through the cluster client");
        replies.push(decode_mtake(&v));
    }
    let remaining = |per_key: &[Decision]| per_key.iter().map(|d| d.remaining).collect::<Vec<_>>();
    assert!(replies[0].0.allowed && replies[1].0.allowed, "{replies:?}");
    assert_eq!(remaining(&replies[0].1), [2.0, 4.0, 1.0]);
    assert_eq!(remaining(&replies[1].1), [1.0, 3.0, 0.0]);
    let (all, per_key) = &replies[2];
    assert!(!all.allowed, "{all:?}");
    assert_eq!(
        per_key.iter().map(|d| d.allowed).collect::<Vec<_>>(),
        [true, true, false]
    );
    assert_eq!(remaining(per_key), [1.0, 3.0, 0.0]);
    assert!(
        all.retry_after >= 64.0 && all.retry_after < 64.0 + 1e-5,
        "one token of orders is 64 s away: {all:?}"
    );
    // The buckets live on the owner, which ran all three calls; no other node ran one.
    let mut oc = cluster.nodes[owner].conn();
    for (key, want) in keys.iter().zip(["1", "3", "0"]) {
        assert_eq!(common::hget(&mut oc, key, "tokens").as_deref(), Some(want));
    }
    for node in 0..cluster.nodes.len() {
        let want = if node == owner { 3 } else { 0 };
        assert_eq!(
            tb_counter(&cluster, node, "tb_mtake_calls"),
            want,
            "node :{}",
            cluster.nodes[node].port
        );
    }

    // Many users: each user's call lands on the master of its tag, on every master.
    let users: Vec<usize> = (0..60).collect();
    let mut per_master: BTreeMap<usize, u64> = BTreeMap::new();
    for &u in &users {
        let tagged = [
            format!("rl:{{spread{u}}}:ip"),
            format!("rl:{{spread{u}}}:user"),
            format!("rl:{{spread{u}}}:orders"),
        ];
        let tagged: Vec<&str> = tagged.iter().map(String::as_str).collect();
        let one_each = [(1, 0.0625, 1), (1, 0.0625, 1), (1, 0.0625, 1)];
        for expect in [true, false] {
            let v: Value = mtake_cmd(&tagged, &one_each, T0)
                .query(&mut con)
                .expect("TB.MTAKE");
            let (all, _) = decode_mtake(&v);
            assert_eq!(all.allowed, expect, "spread{u}: {all:?}");
        }
        *per_master
            .entry(topo.slot_owner[key_slot(tagged[0])])
            .or_default() += 1;
    }
    assert_eq!(
        per_master.keys().copied().collect::<BTreeSet<_>>(),
        topo.masters(),
        "60 users cover every master"
    );
    for (&m, &owned) in &per_master {
        let extra = if m == owner { 3 } else { 0 };
        assert_eq!(
            tb_counter(&cluster, m, "tb_mtake_calls"),
            2 * owned + extra,
            "master :{}",
            cluster.nodes[m].port
        );
        assert_eq!(
            cluster.nodes[m].conn().q("DBSIZE").int() as u64,
            3 * owned + extra,
            "master :{}",
            cluster.nodes[m].port
        );
    }

    // Keys without a shared tag land in different slots: CROSSSLOT from any node, from
    // the client too, and nothing is written.
    let (a, b) = ("rl:user42:ip", "rl:user42:user");
    assert_ne!(key_slot(a), key_slot(b));
    let err = mtake_cmd(&[a, b], &[(3, 0.0625, 1), (5, 0.03125, 1)], T0)
        .query::<Value>(&mut con)
        .expect_err("TB.MTAKE across slots");
    assert_eq!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::CrossSlot),
        "{err}"
    );
    let same_master_other_slot =
        keys_where("rl:other:", 1, |s| s != slot && topo.slot_owner[s] == owner).remove(0);
    for node in &cluster.nodes {
        let mut c = node.conn();
        for pair in [[a, b], [keys[0], same_master_other_slot.as_str()]] {
            let r = c.q(&format!(
                "TB.MTAKE 2 {} {} 3 0.0625 1 5 0.03125 1 1764456268",
                pair[0], pair[1]
            ));
            assert!(
                r.error().starts_with("CROSSSLOT"),
                "node :{}: {r:?}",
                node.port
            );
        }
    }
    assert!(!exists(&mut con, a) && !exists(&mut con, b));
    assert!(!exists(&mut con, &same_master_other_slot));
    assert_eq!(
        common::hget(&mut oc, keys[0], "tokens").as_deref(),
        Some("1")
    );

    // TB.PEEK on the owner's replica: redirected like any command until the connection
    // says READONLY, then answered from the replica's copy, which is the master's.
    wait_caught_up(&cluster, &mut oc, &mut rc);
    let peeks: Vec<String> = keys
        .iter()
        .zip(["3 0.0625", "5 0.03125", "2 0.015625"])
        .flat_map(|(key, limit)| {
            ["1764456268", "1764456272", "1764456300"]
                .map(|now| format!("TB.PEEK {key} {limit} {now}"))
        })
        .collect();
    for line in &peeks {
        assert_eq!(rc.q(line), moved, "{line} without READONLY");
    }
    let replica_keys = rc.q("DBSIZE").int();
    assert_eq!(rc.q("READONLY"), Reply::Simple("OK".into()));
    for line in &peeks {
        let on_master = oc.q(line);
        assert!(
            matches!(on_master, Reply::Array(_)),
            "{line}: {on_master:?}"
        );
        assert_eq!(rc.q(line), on_master, "{line} on the replica");
    }
    // 4 s after T0, `orders` (0 tokens at 1/64 per second) holds 1/16 of a token: one
    // token is 60 s away, the bucket full 124 s later.
    let t = common::Take::from_reply(&rc.q(&format!("TB.PEEK {} 2 0.015625 1764456272", keys[2])));
    assert!(!t.allowed && t.remaining == 0.0625, "{t:?}");
    assert!(
        t.retry_after >= 60.0 && t.retry_after < 60.0 + 1e-5,
        "{t:?}"
    );
    assert!(
        t.reset_after >= 124.0 && t.reset_after < 124.0 + 1e-5,
        "{t:?}"
    );
    // A missing bucket of the slot reads as full on the replica, and stays missing.
    let missing = "rl:{user42}:never";
    let t = common::Take::from_reply(&rc.q(&format!("TB.PEEK {missing} 7 1 1764456268")));
    assert_eq!(
        (t.allowed, t.remaining, t.retry_after, t.reset_after),
        (true, 7.0, 0.0, 0.0)
    );
    assert_eq!(rc.q("DBSIZE").int(), replica_keys);
    assert!(!exists(&mut con, missing));
    // Writes stay with the master even after READONLY, and so do other masters' slots.
    let r = rc.q(&format!("TB.TAKE {} 3 0.0625 1 1764456268", keys[0]));
    assert_eq!(r, moved);
    let r = rc.q(&line);
    assert_eq!(r, moved, "{line} after READONLY: {}", r.flat());
    let elsewhere = keys_where("rl:peek:", 1, |s| topo.slot_owner[s] != owner).remove(0);
    let r = rc.q(&format!("TB.PEEK {elsewhere} 1 1 1764456268"));
    assert!(r.error().starts_with("MOVED"), "{r:?}");
    // The replica ran every read it answered itself.
    assert_eq!(
        tb_counter(&cluster, replica, "tb_peek_calls"),
        peeks.len() as u64 + 2
    );
    // Through the cluster client (to the master), the same answer.
    let v: Value = redis::cmd("TB.PEEK")
        .arg(keys[2])
        .arg(2)
        .arg("0.015625")
        .arg("1764456272")
        .query(&mut con)
        .expect("TB.PEEK through the cluster client");
    assert_eq!(decode(&v).remaining, 0.0625);
}
