//! docs/operations.md's ACL user, taken from the doc's text: it can run the clients'
//! startup check (`COMMAND INFO`) and every command the module registers, on its key
//! pattern, and nothing else.

mod common;

use std::path::Path;

use common::{Reply, Server};

const T0: &str = "1764456268.5";

/// The `ACL SETUSER limiter ...` line of docs/operations.md, split into arguments.
fn documented_acl_line() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ACL SETUSER limiter "))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one ACL SETUSER limiter line in {path:?}: {lines:?}"
    );
    lines[0].split_whitespace().map(String::from).collect()
}

/// A valid call of each command the module registers, on a key the user may touch.
fn valid_call(command: &str) -> Option<Vec<String>> {
    let args = match command {
        "tb.take" => format!("TB.TAKE rl:acl:a 10 1 1 {T0}"),
        "tb.mtake" => format!("TB.MTAKE 1 rl:acl:a 10 1 1 {T0}"),
        "tb.reserve" => format!("TB.RESERVE rl:acl:r 10 1 1 5 {T0}"),
        "tb.peek" => format!("TB.PEEK rl:acl:a 10 1 {T0}"),
        "tb.refund" => format!("TB.REFUND rl:acl:a 10 1 1 {T0}"),
        "tb.throttle" => "TB.THROTTLE rl:acl:t 15 30 60".to_string(),
        "tb.window" => format!("TB.WINDOW rl:acl:w 10 60 1 {T0}"),
        "tb.acquire" => "TB.ACQUIRE rl:acl:l 2 1000".to_string(),
        "tb.release" => "TB.RELEASE rl:acl:l 00000000000000ff".to_string(),
        "tb.renew" => "TB.RENEW rl:acl:l 00000000000000ff 1000".to_string(),
        "tb.hold" => "TB.HOLD rl:acl:h 10 1 1 1000".to_string(),
        "tb.settle" => "TB.SETTLE rl:acl:h 10 1 00000000000000ff 1".to_string(),
        _ => return None,
    };
    Some(args.split(' ').map(String::from).collect())
}

#[test]
fn the_documented_acl_user_runs_the_startup_check_and_every_command() {
    let s = Server::start();
    let mut admin = s.conn();
    let setuser = documented_acl_line();
    assert_eq!(
        admin.cmd(&setuser),
        Reply::Simple("OK".into()),
        "{setuser:?}"
    );
    let password = setuser
        .iter()
        .find_map(|a| a.strip_prefix('>'))
        .expect("the line sets a password");
    let mut c = s.conn();
    assert_eq!(
        c.cmd(&["AUTH", "limiter", password]),
        Reply::Simple("OK".into())
    );

    // The three clients' startup check, and a health check.
    for probe in ["tb.mtake", "tb.take"] {
        let info = c.cmd(&["COMMAND", "INFO", probe]);
        assert_eq!(info.array().len(), 1, "{info:?}");
        assert_eq!(info.array()[0].array()[0].text(), probe, "{info:?}");
    }
    assert_eq!(c.cmd(&["PING"]), Reply::Simple("PONG".into()));

    // Every command the module registers (asked of the server, so a new one the doc's
    // line lacks fails here), with valid arguments, answered without an error.
    let listed = admin.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", "tb"]);
    let mut commands: Vec<String> = listed.array().iter().map(Reply::text).collect();
    commands.sort();
    assert!(commands.contains(&"tb.take".to_string()), "{commands:?}");
    for command in &commands {
        let call = valid_call(command).unwrap_or_else(|| {
            panic!("{command}: add a valid call here and the command to the doc's ACL line")
        });
        let reply = c.cmd(&call);
        assert!(
            !matches!(reply, Reply::Error(_)),
            "{command} as the documented user: {reply:?}"
        );
        let info = c.cmd(&["COMMAND", "INFO", command]);
        assert_eq!(info.array()[0].array()[0].text(), *command, "{info:?}");
    }

    // And only on its key pattern, and no other command.
    let r = c.cmd(&["TB.TAKE", "session:1", "10", "1", "1", T0]);
    assert!(r.error().starts_with("NOPERM"), "{r:?}");
    assert!(
        c.cmd(&["HGETALL", "rl:acl:a"])
            .error()
            .starts_with("NOPERM")
    );
    assert!(
        c.cmd(&["COMMAND", "DOCS", "tb.take"])
            .error()
            .starts_with("NOPERM")
    );
}
