//! Running it in production: ACL key patterns, ACL categories where the server has them,
//! MODULE UNLOAD/LOAD, maxmemory, keyspace notifications.

mod common;

use common::{Conn, Options, Reply, Server, Take, info_field};

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
        let members = c.q("ACL CAT ratelimit");
        assert_eq!(
            members,
            Reply::Array(vec![Reply::Bulk(b"tb.take".to_vec())])
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
    let mut c = s.conn();
    c.q("CONFIG SET notify-keyspace-events KEA");
    let mut sub = s.conn();
    sub.q("PSUBSCRIBE __key*@0__:*");
    c.q(&format!("TB.TAKE k 10 100 1 {T0}"));
    c.q(&format!("TB.TAKE k 10 100 1 {T0}")); // the expiry still covers: hset only
    c.q(&format!("TB.TAKE k 10 100 100 {T0}")); // never: nothing
    c.q("PING");
    c.q("HSET marker f v");
    let mut events = Vec::new();
    loop {
        let r = sub.read();
        let a = r.array();
        let channel = a[2].text();
        let payload = a[3].text();
        if payload == "marker" || channel.ends_with(":marker") {
            break;
        }
        events.push(format!("{channel} {payload}"));
    }
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
