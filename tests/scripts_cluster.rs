//! The script library (clients/lua) on a real 3 + 3 Redis Cluster without the module: keys
//! declared in KEYS route every call to its slot's master (EVALSHA and FCALL alike), keys of
//! one hash tag work together in TB.MTAKE, keys of different slots get CROSSSLOT and change
//! nothing, replicas hold the masters' bytes and serve FCALL_RO tb_peek, and a bucket
//! continues on the replica promoted by a failover.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::scripts::{LIBRARY, load_functions, load_script};
use common::{Conn, Options, Reply, Server, free_port, info_field, wait_for};
use redis::Value;
use redis::cluster::ClusterClient;

fn wall() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Six nodes without the module, joined by `redis-cli --cluster create` as 3 masters and 3
/// replicas, each with the library loaded (SCRIPT LOAD is not replicated; FUNCTION LOAD is,
/// so it goes to the masters). Returns the nodes and the script's SHA.
fn start_cluster() -> (Vec<Server>, String) {
    let mut buses = BTreeSet::new();
    let nodes: Vec<Server> = (0..6)
        .map(|_| {
            let bus = loop {
                let p = free_port();
                if buses.insert(p) {
                    break p;
                }
            };
            Server::start_with(Options {
                with_module: false,
                extra: [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus.to_string(),
                    "--repl-diskless-sync-delay",
                    "0",
                ]
                .map(String::from)
                .to_vec(),
            })
        })
        .collect();
    let cli = std::env::var("REDIS_CLI").unwrap_or_else(|_| "redis-cli".to_string());
    let mut args = vec!["--cluster".to_string(), "create".to_string()];
    args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
    args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
    let status = Command::new(cli)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("redis-cli");
    assert!(status.success(), "redis-cli --cluster create failed");
    for n in &nodes {
        let mut c = n.conn();
        wait_for(Duration::from_secs(30), "cluster_state:ok", || {
            c.q("CLUSTER INFO").text().contains("cluster_state:ok")
        });
        // Every node knows every role (gossip has spread the replicas), or masters deny a
        // replica's failover as "a master node".
        wait_for(
            Duration::from_secs(30),
            "3 masters and 3 replicas seen",
            || {
                let text = c.q("CLUSTER NODES").text();
                let count = |role: &str| text.lines().filter(|l| l.contains(role)).count();
                count("master") == 3 && count("slave") == 3
            },
        );
        if info_field(&mut c, "replication", "role").as_deref() == Some("slave") {
            wait_for(Duration::from_secs(30), "replica link up", || {
                info_field(&mut c, "replication", "master_link_status").as_deref() == Some("up")
            });
        }
    }
    let mut sha = String::new();
    for n in &nodes {
        let mut c = n.conn();
        sha = load_script(&mut c, LIBRARY);
        if info_field(&mut c, "replication", "role").as_deref() == Some("master") {
            load_functions(&mut c, LIBRARY);
        }
    }
    (nodes, sha)
}

/// The master serving `key`'s slot: the one master that answers a read of the key without
/// a MOVED redirect.
fn master_of<'a>(nodes: &'a [Server], key: &str) -> &'a Server {
    nodes
        .iter()
        .find(|n| {
            let mut c = n.conn();
            info_field(&mut c, "replication", "role").as_deref() == Some("master")
                && !matches!(c.cmd(&["EXISTS", key]), Reply::Error(_))
        })
        .expect("a master for the key")
}

fn replica_of<'a>(nodes: &'a [Server], master: &Server) -> &'a Server {
    nodes
        .iter()
        .find(|n| {
            let mut c = n.conn();
            info_field(&mut c, "replication", "master_port") == Some(master.port.to_string())
        })
        .expect("a replica of the master")
}

fn ints(v: &Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => *n,
                Value::BulkString(b) => String::from_utf8_lossy(b).parse::<f64>().unwrap() as i64,
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_scripts_serve_a_cluster_slot_by_slot() {
    let (nodes, sha) = start_cluster();
    let client = ClusterClient::builder(
        nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port)),
    )
    .build()
    .unwrap();
    let mut con = client.get_connection().expect("cluster connection");
    let now = format!("{}", wall());

    // 600 keys over about as many slots, on all three masters: each admits exactly its
    // capacity at one instant, through EVALSHA and FCALL alike.
    for i in 0..600 {
        let key = format!("k{i}");
        for call in 0..4 {
            let reply: Value = if call % 2 == 0 {
                redis::cmd("EVALSHA")
                    .arg(&sha)
                    .arg(1)
                    .arg(&key)
                    .arg("TAKE")
                    .arg(3)
                    .arg(0.001)
                    .arg(1)
                    .arg(&now)
                    .query(&mut con)
                    .unwrap()
            } else {
                redis::cmd("FCALL")
                    .arg("tb_take")
                    .arg(1)
                    .arg(&key)
                    .arg(3)
                    .arg(0.001)
                    .arg(1)
                    .arg(&now)
                    .query(&mut con)
                    .unwrap()
            };
            let got = ints(&reply);
            assert_eq!(got[0], i64::from(call < 3), "{key} call {call}: {reply:?}");
        }
    }
    let held: i64 = nodes
        .iter()
        .map(|n| {
            let mut c = n.conn();
            if info_field(&mut c, "replication", "role").as_deref() == Some("master") {
                c.q("DBSIZE").int()
            } else {
                0
            }
        })
        .sum();
    assert_eq!(held, 600);

    // One hash tag: one slot, one master; TB.MTAKE takes from all or none.
    let tagged = ["rl:{user42}:ip", "rl:{user42}:user"];
    let owner = master_of(&nodes, tagged[0]);
    let mut oc = owner.conn();
    let mtake = |c: &mut Conn, keys: &[&str], n: &str| {
        let mut cmd = vec!["EVALSHA", sha.as_str(), "2"];
        cmd.extend(keys);
        cmd.extend(["MTAKE", "5", "0.001", "1", "3", "0.001", n, now.as_str()]);
        c.cmd(&cmd)
    };
    let r = mtake(&mut oc, &tagged, "1");
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    let r = mtake(&mut oc, &tagged, "3");
    assert_eq!(r.array()[0], Reply::Int(0), "{r:?}");
    // Different slots: CROSSSLOT, as for the module, and nothing written anywhere.
    let (a, b) = ("rl:user42:ip", "rl:user42:user");
    let r = mtake(&mut oc, &[a, b], "1");
    assert!(r.error().starts_with("CROSSSLOT"), "{r:?}");
    for n in &nodes {
        let mut c = n.conn();
        c.q("READONLY");
        for k in [a, b] {
            assert!(!matches!(c.cmd(&["EXISTS", k]), Reply::Int(1)), "{k}");
        }
    }

    // The replica holds the master's bytes and serves FCALL_RO tb_peek after READONLY.
    let replica = replica_of(&nodes, owner);
    assert_eq!(oc.q("WAIT 1 10000").int(), 1);
    let mut rc = replica.conn();
    assert_eq!(rc.q("READONLY"), Reply::Simple("OK".into()));
    for k in tagged {
        assert_eq!(
            common::dump(&mut rc, k.as_bytes()),
            common::dump(&mut oc, k.as_bytes())
        );
    }
    let peek = |c: &mut Conn| c.cmd(&["FCALL_RO", "tb_peek", "1", tagged[1], "3", "1", &now]);
    assert_eq!(peek(&mut rc), peek(&mut oc));

    // A failover: the replica takes over and continues the buckets it received (WAIT 1
    // above); TAKEOVER (no election) if the manual failover stalls on a loaded machine.
    let promoted = |rc: &mut Conn, limit: Duration| {
        let start = Instant::now();
        while info_field(rc, "replication", "role").as_deref() != Some("master") {
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        true
    };
    assert_eq!(rc.q("CLUSTER FAILOVER"), Reply::Simple("OK".into()));
    if !promoted(&mut rc, Duration::from_secs(10)) {
        assert_eq!(
            rc.q("CLUSTER FAILOVER TAKEOVER"),
            Reply::Simple("OK".into())
        );
        assert!(promoted(&mut rc, Duration::from_secs(20)), "no failover");
    }
    let r = mtake(&mut rc, &tagged, "2");
    // 5 - 1 = 4 and 3 - 1 = 2 left at `now`: a further 2 from each fits.
    let a = r.array();
    assert_eq!(a[0], Reply::Int(1), "{r:?}");
    assert_eq!(a[1].text(), "0", "{r:?}");
}
