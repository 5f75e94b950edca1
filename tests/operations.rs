//! Running it in production: ACL key patterns, ACL categories where the server has them,
//! command metadata, MODULE UNLOAD/LOAD, maxmemory, keyspace notifications; for TB.TAKE
//! and for TB.MTAKE, TB.RESERVE, TB.PEEK and TB.REFUND.

mod common;

use std::collections::BTreeMap;

use common::{Conn, Options, Reply, Server, Take, info_field, notifications_during};

const T0: &str = "1764456268.5";

fn server_version(c: &mut Conn) -> (u32, u32, bool) {
    let v = info_field(c, "server", "redis_version").unwrap();
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    let is_valkey = info_field(c, "server", "valkey_version").is_some();
    (parts.next().unwrap(), parts.next().unwrap(), is_valkey)
}

#[test]
fn a_user_limited_to_a_key_pattern_gets_noperm_elsewhere() {
    let s = Server::start();
    let mut admin = s.conn();
    let r = admin.q("ACL SETUSER limiter on >secret ~rl:* resetchannels -@all +tb.take +ping");
    assert_eq!(r, Reply::Simple("OK".into()));
    let mut c = s.conn();
    assert_eq!(c.q("AUTH limiter secret"), Reply::Simple("OK".into()));
    let t = Take::from_reply(&c.q(&format!("TB.TAKE rl:user:1 10 1 1 {T0}")));
    assert!(t.allowed);
    let r = c.q(&format!("TB.TAKE session:1 10 1 1 {T0}"));
    assert!(r.error().starts_with("NOPERM"), "{r:?}");
    assert_eq!(admin.q("EXISTS session:1").int(), 0);
    // And the pattern user cannot touch the hash with other commands.
    assert!(c.q("HGETALL rl:user:1").error().starts_with("NOPERM"));
}

#[test]
fn acl_categories_show_up_where_the_server_supports_them() {
    let s = Server::start();
    let mut c = s.conn();
    let (major, minor, valkey) = server_version(&mut c);
    let info = c.q("COMMAND INFO tb.take");
    let categories: Vec<String> = info.array()[0].array()[6]
        .array()
        .iter()
        .map(Reply::text)
        .collect();
    if (major, minor) < (7, 2) {
        // 7.0 has no API for module command categories; the module still loads and works.
        assert!(categories.is_empty(), "{categories:?}");
        return;
    }
    for want in ["@write", "@fast"] {
        assert!(categories.contains(&want.to_string()), "{categories:?}");
    }
    if valkey || (major, minor) >= (7, 4) {
        assert!(
            categories.contains(&"@ratelimit".to_string()),
            "{categories:?}"
        );
        let mut members: Vec<String> = c
            .q("ACL CAT ratelimit")
            .array()
            .iter()
            .map(Reply::text)
            .collect();
        members.sort();
        assert_eq!(
            members,
            [
                "tb.acquire",
                "tb.hold",
                "tb.mtake",
                "tb.peek",
                "tb.refund",
                "tb.release",
                "tb.renew",
                "tb.reserve",
                "tb.settle",
                "tb.take",
                "tb.throttle",
                "tb.window"
            ]
        );
        c.q("ACL SETUSER rl on >pw ~* -@all +@ratelimit");
        let mut u = s.conn();
        u.q("AUTH rl pw");
        assert!(Take::from_reply(&u.q("TB.TAKE k 1 1 1")).allowed);
        assert!(u.q("GET k").error().starts_with("NOPERM"));
    }
}

#[test]
fn module_unload_and_load_keeps_every_bucket() {
    let s = Server::start_with(Options {
        with_module: true,
        extra: vec!["--enable-module-command".into(), "yes".into()],
    });
    let mut c = s.conn();
    for i in 0..50 {
        c.q(&format!("TB.TAKE rl:{i} 10 1 {} {T0}", i % 7));
    }
    let before: Vec<_> = (0..50)
        .map(|i| common::dump(&mut c, format!("rl:{i}").as_bytes()))
        .collect();
    assert_eq!(c.q("MODULE UNLOAD tb"), Reply::Simple("OK".into()));
    assert!(
        c.q("TB.TAKE rl:1 10 1 1")
            .error()
            .contains("unknown command")
    );
    let path = common::module_path();
    let r = c.cmd(&["MODULE", "LOAD", path.to_str().unwrap()]);
    assert_eq!(r, Reply::Simple("OK".into()));
    let after: Vec<_> = (0..50)
        .map(|i| common::dump(&mut c, format!("rl:{i}").as_bytes()))
        .collect();
    assert_eq!(before, after);
    let t = Take::from_reply(&c.q(&format!("TB.TAKE rl:3 10 1 1 {T0}")));
    assert_eq!(t.remaining, 6.0, "the bucket continues where it was");
}

#[test]
fn at_the_memory_limit_takes_get_the_standard_oom_error() {
    let s = Server::start();
    let mut c = s.conn();
    c.q(&format!("TB.TAKE k 10 1 1 {T0}"));
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    let r = c.q(&format!("TB.TAKE k 10 1 1 {T0}"));
    assert_eq!(
        r,
        Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into())
    );
    c.q("CONFIG SET maxmemory 0");
    let t = Take::from_reply(&c.q(&format!("TB.TAKE k 10 1 1 {T0}")));
    assert_eq!(t.remaining, 8.0, "the refused call changed nothing");
}

#[test]
fn an_evicted_bucket_simply_starts_full() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("CONFIG SET maxmemory-policy volatile-lru");
    for i in 0..2000 {
        c.q(&format!("TB.TAKE rl:{i} 10 0.001 10 {T0}"));
    }
    let used: u64 = info_field(&mut c, "memory", "used_memory")
        .unwrap()
        .parse()
        .unwrap();
    c.q(&format!("CONFIG SET maxmemory {}", used - 60_000));
    // Writing more forces evictions of TTL'd buckets.
    for i in 2000..2600 {
        let r = c.q(&format!("TB.TAKE rl:{i} 10 0.001 10 {T0}"));
        assert!(matches!(r, Reply::Array(_)), "{r:?}");
    }
    let evicted: u64 = info_field(&mut c, "stats", "evicted_keys")
        .unwrap()
        .parse()
        .unwrap();
    assert!(evicted > 0);
    c.q("CONFIG SET maxmemory 0");
    let mut full = 0;
    for i in 0..2000 {
        if c.q(&format!("EXISTS rl:{i}")).int() == 0 {
            let t = Take::from_reply(&c.q(&format!("TB.TAKE rl:{i} 10 0.001 0 {T0}")));
            assert_eq!(t.remaining, 10.0);
            full += 1;
        }
    }
    assert!(full > 0);
}

#[test]
fn a_take_emits_the_notifications_hset_and_pexpireat_would() {
    let s = Server::start();
    let events = notifications_during(&s, |c| {
        c.q(&format!("TB.TAKE k 10 100 1 {T0}"));
        c.q(&format!("TB.TAKE k 10 100 1 {T0}")); // the expiry still covers: hset only
        c.q(&format!("TB.TAKE k 10 100 100 {T0}")); // never: nothing
    });
    assert_eq!(
        events,
        vec![
            "__keyspace@0__:k hset",
            "__keyevent@0__:hset k",
            "__keyspace@0__:k expire",
            "__keyevent@0__:expire k",
            "__keyspace@0__:k hset",
            "__keyevent@0__:hset k",
        ]
    );
}

// ---------------------------------------------------------------------------------------
// TB.MTAKE, TB.RESERVE, TB.PEEK, TB.REFUND

/// The four commands that joined TB.TAKE, and TB.TAKE.
const COMMANDS: [&str; 5] = ["tb.take", "tb.mtake", "tb.reserve", "tb.peek", "tb.refund"];

/// A call of `command` on `keys` (one (capacity, rate, n) per key for TB.MTAKE) at T0.
fn call(command: &str, keys: &[&str]) -> Vec<String> {
    let mut args = vec![command.to_uppercase()];
    match command {
        "tb.mtake" => {
            args.push(keys.len().to_string());
            args.extend(keys.iter().map(|k| k.to_string()));
            for _ in keys {
                args.extend(["10", "1", "1"].map(String::from));
            }
        }
        "tb.reserve" => args.extend([keys[0], "10", "1", "1", "5"].map(String::from)),
        "tb.peek" => args.extend([keys[0], "10", "1"].map(String::from)),
        _ => args.extend([keys[0], "10", "1", "1"].map(String::from)),
    }
    args.push(T0.to_string());
    args
}

/// Every key's DUMP (`common::dumps` without the expiry), to prove that a refused call
/// changed nothing.
fn dumps(c: &mut Conn) -> BTreeMap<Vec<u8>, Option<Vec<u8>>> {
    common::dumps(c)
        .into_iter()
        .map(|(key, (dump, _))| (key, dump))
        .collect()
}

#[test]
fn an_mtake_needs_every_key_inside_the_users_key_pattern() {
    let s = Server::start();
    let mut admin = s.conn();
    let r = admin.q("ACL SETUSER limiter on >secret ~rl:* resetchannels -@all \
         +tb.take +tb.mtake +tb.reserve +tb.peek +tb.refund +ping");
    assert_eq!(r, Reply::Simple("OK".into()));
    let mut c = s.conn();
    assert_eq!(c.q("AUTH limiter secret"), Reply::Simple("OK".into()));
    // One key outside the pattern, wherever it stands, refuses the whole call.
    for keys in [
        ["rl:a", "session:b", "rl:c"],
        ["session:b", "rl:a", "rl:c"],
        ["rl:a", "rl:c", "session:b"],
    ] {
        let r = c.cmd(&call("tb.mtake", &keys));
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with("NOPERM")),
            "{keys:?}: {r:?}"
        );
    }
    assert_eq!(admin.q("DBSIZE").int(), 0, "a refused call wrote something");
    // Every key inside: allowed.
    let r = c.cmd(&call("tb.mtake", &["rl:a", "rl:b", "rl:c"]));
    assert_eq!(r.array()[0], Reply::Int(1), "{r:?}");
    assert_eq!(admin.q("EXISTS rl:a rl:b rl:c").int(), 3);
    // The single-key commands follow the pattern too.
    for command in ["tb.reserve", "tb.peek", "tb.refund"] {
        let r = c.cmd(&call(command, &["session:1"]));
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with("NOPERM")),
            "{command}: {r:?}"
        );
        let r = c.cmd(&call(command, &["rl:a"]));
        assert!(matches!(r, Reply::Array(_)), "{command}: {r:?}");
    }
    assert_eq!(admin.q("EXISTS session:1 session:b").int(), 0);
}

#[test]
fn a_read_only_key_pattern_admits_peek_but_not_the_writing_commands() {
    let s = Server::start();
    let mut admin = s.conn();
    let r = admin.q("ACL SETUSER reader on >pw %R~rl:* resetchannels -@all \
         +tb.take +tb.mtake +tb.reserve +tb.peek +tb.refund");
    assert_eq!(r, Reply::Simple("OK".into()));
    let mut c = s.conn();
    assert_eq!(c.q("AUTH reader pw"), Reply::Simple("OK".into()));
    // TB.PEEK only reads its key.
    let t = Take::from_reply(&c.cmd(&call("tb.peek", &["rl:a"])));
    assert!(t.allowed && t.remaining == 10.0, "{t:?}");
    for command in ["tb.take", "tb.mtake", "tb.reserve", "tb.refund"] {
        let r = c.cmd(&call(command, &["rl:a"]));
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with("NOPERM")),
            "{command}: {r:?}"
        );
    }
    assert_eq!(admin.q("DBSIZE").int(), 0);
}

/// COMMAND INFO of one command: (arity, flags, ACL categories).
fn command_info(c: &mut Conn, name: &str) -> (i64, Vec<String>, Vec<String>) {
    let info = c.cmd(&["COMMAND", "INFO", name]);
    let entry = info.array()[0].array();
    let texts = |r: &Reply| r.array().iter().map(Reply::text).collect::<Vec<_>>();
    (entry[1].int(), texts(&entry[2]), texts(&entry[6]))
}

#[test]
fn every_new_command_declares_its_arity_flags_and_acl_categories() {
    let s = Server::start();
    let mut c = s.conn();
    let (major, minor, valkey) = server_version(&mut c);
    for (name, arity) in [
        ("tb.mtake", -6),
        ("tb.reserve", -6),
        // -3: TB.PEEK key LEASES and TB.PEEK key HOLDS (the bucket form still needs
        // capacity and rate: the module replies the wrong-arity error).
        ("tb.peek", -3),
        ("tb.refund", -5),
    ] {
        let (got_arity, flags, categories) = command_info(&mut c, name);
        assert_eq!(got_arity, arity, "{name}");
        let has = |list: &[String], f: &str| list.iter().any(|x| x == f);
        let (want, never): (&[&str], &[&str]) = if name == "tb.peek" {
            (&["readonly", "fast"], &["write", "denyoom"])
        } else {
            (&["write", "denyoom", "fast"], &["readonly"])
        };
        for f in want {
            assert!(has(&flags, f), "{name} lacks {f}: {flags:?}");
        }
        for f in never {
            assert!(!has(&flags, f), "{name} has {f}: {flags:?}");
        }
        assert_eq!(
            has(&flags, "movablekeys"),
            name == "tb.mtake",
            "{name}: {flags:?}"
        );
        if (major, minor) < (7, 2) {
            // 7.0 has no API for module command categories.
            assert!(categories.is_empty(), "{name}: {categories:?}");
            continue;
        }
        let (want, never) = if name == "tb.peek" {
            (["@read", "@fast"], "@write")
        } else {
            (["@write", "@fast"], "@read")
        };
        for cat in want {
            assert!(has(&categories, cat), "{name} not in {cat}: {categories:?}");
        }
        assert!(
            !has(&categories, never),
            "{name} in {never}: {categories:?}"
        );
        if valkey || (major, minor) >= (7, 4) {
            assert!(has(&categories, "@ratelimit"), "{name}: {categories:?}");
        }
    }
    if valkey || (major, minor) >= (7, 4) {
        // A user given only the module's category runs all five, and nothing else.
        c.q("ACL SETUSER rl on >pw ~* -@all +@ratelimit");
        let mut u = s.conn();
        assert_eq!(u.q("AUTH rl pw"), Reply::Simple("OK".into()));
        for command in COMMANDS {
            let keys: &[&str] = if command == "tb.mtake" {
                &["k1", "k2"]
            } else {
                &["k1"]
            };
            let r = u.cmd(&call(command, keys));
            assert!(matches!(r, Reply::Array(_)), "{command}: {r:?}");
        }
        assert!(u.q("GET k1").error().starts_with("NOPERM"));
    }
    if (major, minor) >= (7, 2) {
        // @read admits the read and nothing that writes.
        c.q("ACL SETUSER ro on >pw ~* -@all +@read");
        let mut u = s.conn();
        assert_eq!(u.q("AUTH ro pw"), Reply::Simple("OK".into()));
        assert!(matches!(u.cmd(&call("tb.peek", &["k3"])), Reply::Array(_)));
        for command in ["tb.take", "tb.mtake", "tb.reserve", "tb.refund"] {
            let r = u.cmd(&call(command, &["k3"]));
            assert!(
                matches!(&r, Reply::Error(e) if e.starts_with("NOPERM")),
                "{command}: {r:?}"
            );
        }
    }
}

/// A RESP2 map (flat array of name, value) as (name, value) pairs.
fn pairs(r: &Reply) -> Vec<(String, Reply)> {
    r.array()
        .chunks(2)
        .map(|p| (p[0].text(), p[1].clone()))
        .collect()
}

/// The names of an argument list's leaves (block arguments opened), in order, each with
/// its `type` and `flags`.
fn leaf_arguments(args: &Reply) -> Vec<(String, String, Vec<String>)> {
    let mut out = Vec::new();
    for arg in args.array() {
        let fields: BTreeMap<String, Reply> = pairs(arg).into_iter().collect();
        let kind = fields.get("type").map(Reply::text).unwrap_or_default();
        if kind == "block" || kind == "oneof" {
            out.extend(leaf_arguments(&fields["arguments"]));
            continue;
        }
        let flags = fields
            .get("flags")
            .map(|f| f.array().iter().map(Reply::text).collect())
            .unwrap_or_default();
        out.push((fields["name"].text(), kind, flags));
    }
    out
}

#[test]
fn command_docs_describe_every_new_command_and_its_arguments() {
    let s = Server::start();
    let mut c = s.conn();
    let docs = c.q("COMMAND DOCS tb.mtake tb.reserve tb.peek tb.refund");
    let docs: BTreeMap<String, Reply> = pairs(&docs).into_iter().collect();
    for (name, arguments) in [
        (
            "tb.mtake",
            &["numkeys", "key", "capacity", "rate", "n", "now"][..],
        ),
        (
            "tb.reserve",
            &["key", "capacity", "rate", "n", "max_wait", "now"][..],
        ),
        ("tb.peek", &["key", "capacity", "rate", "now"][..]),
        ("tb.refund", &["key", "capacity", "rate", "n", "now"][..]),
    ] {
        let doc = docs
            .get(name)
            .unwrap_or_else(|| panic!("no COMMAND DOCS for {name}: {docs:?}"));
        let fields: BTreeMap<String, Reply> = pairs(doc).into_iter().collect();
        for field in ["summary", "since", "complexity"] {
            let text = fields
                .get(field)
                .map(Reply::text)
                .unwrap_or_else(|| panic!("{name} has no {field}: {doc:?}"));
            assert!(!text.trim().is_empty(), "{name}: empty {field}");
        }
        assert_eq!(fields["module"].text(), "tb", "{name}");
        let leaves = leaf_arguments(&fields["arguments"]);
        let names: Vec<&str> = leaves.iter().map(|l| l.0.as_str()).collect();
        assert_eq!(names, arguments, "{name}: {leaves:?}");
        for (arg, kind, flags) in &leaves {
            if arg == "key" {
                assert_eq!(kind, "key", "{name} {arg}");
            }
            assert_eq!(
                flags.iter().any(|f| f == "optional"),
                arg == "now",
                "{name} {arg}: {flags:?}"
            );
        }
    }
}

/// The keyspace events one call produces: the call, then a marker write, read from a
/// subscriber until the marker's keyevent (marker events left out).
fn events_of(c: &mut Conn, sub: &mut Conn, line: &str, step: usize) -> Vec<String> {
    let r = c.q(line);
    assert!(matches!(r, Reply::Array(_)), "{line}: {r:?}");
    let marker = format!("marker:{step}");
    c.q(&format!("HSET {marker} f v"));
    let mut events = Vec::new();
    loop {
        let r = sub.read();
        let a = r.array();
        let (channel, payload) = (a[2].text(), a[3].text());
        if channel.ends_with(":hset") && payload == marker {
            return events;
        }
        if payload.starts_with("marker:") || channel.contains(":marker:") {
            continue;
        }
        events.push(format!("{channel} {payload}"));
    }
}

/// The events on `key`'s keyspace channel, in order.
fn on_key(events: &[String], key: &str) -> Vec<String> {
    let prefix = format!("__keyspace@0__:{key} ");
    events
        .iter()
        .filter_map(|e| e.strip_prefix(&prefix).map(String::from))
        .collect()
}

#[test]
fn the_write_commands_notify_hset_and_expire_and_a_peek_or_denied_call_notifies_nothing() {
    let s = Server::start();
    let mut c = s.conn();
    c.q("CONFIG SET notify-keyspace-events KEA");
    let mut sub = s.conn();
    sub.q("PSUBSCRIBE __key*@0__:*");
    let mut step = 0;
    let mut events = |c: &mut Conn, line: &str| {
        step += 1;
        events_of(c, &mut sub, &format!("{line} {T0}"), step)
    };
    // A new pair of buckets: each gets its fields, then its expiry. (Refills are slow
    // enough that no key expires during the test.)
    let got = events(&mut c, "TB.MTAKE 2 ka kb 10 0.01 5 10 0.01 5");
    for key in ["ka", "kb"] {
        assert_eq!(on_key(&got, key), ["hset", "expire"], "{got:?}");
    }
    let mut keyevents: Vec<&String> = got.iter().filter(|e| e.starts_with("__keyevent")).collect();
    keyevents.sort();
    assert_eq!(
        keyevents,
        [
            "__keyevent@0__:expire ka",
            "__keyevent@0__:expire kb",
            "__keyevent@0__:hset ka",
            "__keyevent@0__:hset kb",
        ]
    );
    assert_eq!(got.len(), 8, "{got:?}");
    // Calls that write nothing notify nothing.
    for line in [
        "TB.MTAKE 2 ka kb 10 0.01 1 10 0.01 6",  // kb has 5: denied
        "TB.MTAKE 2 ka kb 10 0.01 1 10 0.01 11", // never
        "TB.MTAKE 2 ka kb 10 0.01 0 10 0.01 0",  // n = 0
        "TB.PEEK ka 10 0.01",
        "TB.PEEK missing 10 0.01",
        "TB.RESERVE ka 10 0.01 0 5",   // n = 0
        "TB.RESERVE kb 10 0.01 6 5",   // one token is 100 s away
        "TB.REFUND missing 10 0.01 1", // a missing key is full
        "TB.REFUND ka 10 0.01 0",      // n = 0
    ] {
        assert_eq!(events(&mut c, line), Vec::<String>::new(), "{line}");
    }
    // A reservation on a new bucket: fields and expiry; a refused one: nothing.
    let got = events(&mut c, "TB.RESERVE kr 1 0.01 1 0");
    assert_eq!(on_key(&got, "kr"), ["hset", "expire"], "{got:?}");
    assert_eq!(
        events(&mut c, "TB.RESERVE kr 1 0.01 1 0"),
        Vec::<String>::new()
    );
    // A refund into a bucket whose expiry is still within bounds: the fields only. (Full in
    // 5 s, the key expires in 5 s + half of 1 s + 25%, 6.125 s; after half a token back
    // the bucket is full in 4.5 s, and 6.125 s is inside 4.5 s + 1 s + 25%. A larger
    // refund would move the expiry: it may not linger more than that past full.)
    let got = events(&mut c, "TB.TAKE kf 10 1 5");
    assert_eq!(on_key(&got, "kf"), ["hset", "expire"], "{got:?}");
    let got = events(&mut c, "TB.REFUND kf 10 1 0.5");
    assert_eq!(
        got,
        ["__keyspace@0__:kf hset", "__keyevent@0__:hset kf"],
        "{got:?}"
    );
    // An MTAKE that takes from one key and only reports the other: events for the first
    // only (whether its expiry moves is the expiry rule's business).
    let got = events(&mut c, "TB.MTAKE 2 ka kb 10 0.01 1 10 0.01 0");
    assert_eq!(on_key(&got, "ka").first().map(String::as_str), Some("hset"));
    assert!(
        got.iter().all(|e| e.contains(":ka ") || e.ends_with(" ka")),
        "{got:?}"
    );
}

#[test]
fn module_unload_and_load_keeps_buckets_usable_by_every_command() {
    let s = Server::start_with(Options {
        with_module: true,
        extra: vec!["--enable-module-command".into(), "yes".into()],
    });
    let mut c = s.conn();
    let ok = |c: &mut Conn, line: &str| -> Reply {
        let r = c.q(&format!("{line} {T0}"));
        assert_eq!(r.array()[0], Reply::Int(1), "{line}: {r:?}");
        r
    };
    // Slow refills: nothing expires during the test.
    ok(
        &mut c,
        "TB.MTAKE 3 {u}:ip {u}:user {u}:orders 10 0.01 2 10 0.01 3 10 0.01 4",
    );
    ok(&mut c, "TB.RESERVE {u}:debt 2 0.01 2 1000");
    ok(&mut c, "TB.RESERVE {u}:debt 2 0.01 2 1000"); // a debt of 2
    ok(&mut c, "TB.TAKE {u}:back 10 0.01 5");
    ok(&mut c, "TB.REFUND {u}:back 10 0.01 2"); // 7
    let before = dumps(&mut c);
    assert_eq!(before.len(), 5);

    assert_eq!(c.q("MODULE UNLOAD tb"), Reply::Simple("OK".into()));
    for command in COMMANDS {
        let r = c.cmd(&call(command, &["{u}:ip"]));
        assert!(
            matches!(&r, Reply::Error(e) if e.contains("unknown command")),
            "{command}: {r:?}"
        );
    }
    let path = common::module_path();
    let r = c.cmd(&["MODULE", "LOAD", path.to_str().unwrap()]);
    assert_eq!(r, Reply::Simple("OK".into()));
    assert_eq!(dumps(&mut c), before);

    // Every bucket continues where it was, with every command.
    let peek = |c: &mut Conn, line: &str| Take::from_reply(&c.q(&format!("{line} {T0}")));
    assert_eq!(peek(&mut c, "TB.PEEK {u}:ip 10 0.01").remaining, 8.0);
    assert_eq!(peek(&mut c, "TB.PEEK {u}:debt 2 0.01").remaining, -2.0);
    assert_eq!(peek(&mut c, "TB.PEEK {u}:back 10 0.01").remaining, 7.0);
    let r = ok(&mut c, "TB.MTAKE 2 {u}:user {u}:orders 10 0.01 1 10 0.01 1");
    let remaining: Vec<f64> = r.array()[4]
        .array()
        .iter()
        .map(|k| Take::from_reply(k).remaining)
        .collect();
    assert_eq!(remaining, [6.0, 5.0]);
    let t = Take::from_reply(&ok(&mut c, "TB.RESERVE {u}:debt 2 0.01 1 1000"));
    assert_eq!(t.remaining, -3.0, "{t:?}");
    assert!(
        t.retry_after >= 300.0 && t.retry_after < 300.0 + 1e-5,
        "{t:?}"
    );
    let t = Take::from_reply(&ok(&mut c, "TB.REFUND {u}:back 10 0.01 3"));
    assert_eq!(t.remaining, 10.0, "{t:?}");
}

#[test]
fn at_the_memory_limit_the_write_commands_get_oom_and_peek_still_answers() {
    let s = Server::start();
    let mut c = s.conn();
    c.q(&format!("TB.TAKE {{u}}:a 10 1 1 {T0}"));
    c.q(&format!("TB.TAKE {{u}}:b 10 1 4 {T0}"));
    let before = dumps(&mut c);
    c.q("CONFIG SET maxmemory-policy noeviction");
    c.q("CONFIG SET maxmemory 1");
    let oom = Reply::Error("OOM command not allowed when used memory > 'maxmemory'.".into());
    for command in ["tb.mtake", "tb.reserve", "tb.refund"] {
        for keys in [["{u}:a", "{u}:b"], ["{u}:new", "{u}:b"]] {
            let keys = if command == "tb.mtake" {
                &keys[..]
            } else {
                &keys[..1]
            };
            assert_eq!(c.cmd(&call(command, keys)), oom, "{command} {keys:?}");
        }
    }
    // Reads go on: the state as it was, and a missing bucket is full.
    let t = Take::from_reply(&c.q(&format!("TB.PEEK {{u}}:b 10 1 {T0}")));
    assert_eq!(
        (t.allowed, t.remaining, t.retry_after, t.reset_after),
        (true, 6.0, 0.0, 4.0)
    );
    let t = Take::from_reply(&c.q("TB.PEEK {u}:new 10 1"));
    assert_eq!((t.allowed, t.remaining), (true, 10.0));
    c.q("CONFIG SET maxmemory 0");
    assert_eq!(dumps(&mut c), before, "a refused call changed something");
}
