//! One version per package: the module reports Cargo.toml's version in `MODULE LIST` and
//! `INFO tb`, each client package states its version in one place (or copies that agree),
//! and CHANGELOG.md has a heading for every released version.

mod common;

use std::path::Path;

use common::{Reply, Server, info_field};

fn repo_file(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

/// The first `version = "..."` of a Cargo.toml's [package] table.
fn cargo_version(path: &str) -> String {
    let text = repo_file(path);
    let package = text.split("[package]").nth(1).expect("a [package] table");
    quoted_after(package, "version = ").unwrap_or_else(|| panic!("{path}: no version"))
}

/// The text between the quotes that follow the first `key`.
fn quoted_after(text: &str, key: &str) -> Option<String> {
    let rest = &text[text.find(key)? + key.len()..];
    let rest = rest.trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

/// `MODULE LIST`'s `ver` for a version: major * 10000 + minor * 100 + patch.
fn module_ver(version: &str) -> i64 {
    let parts: Vec<i64> = version
        .split('.')
        .map(|p| p.parse().expect("numeric version"))
        .collect();
    assert_eq!(parts.len(), 3, "{version}");
    parts[0] * 10000 + parts[1] * 100 + parts[2]
}

#[test]
fn module_list_and_info_report_the_cargo_version() {
    let version = cargo_version("Cargo.toml");
    let s = Server::start();
    let mut c = s.conn();
    let list = c.q("MODULE LIST");
    let tb = list
        .array()
        .iter()
        .find(|m| {
            m.array()
                .chunks(2)
                .any(|kv| kv[0].text() == "name" && kv[1].text() == "tb")
        })
        .unwrap_or_else(|| panic!("tb not in MODULE LIST: {list:?}"));
    let ver = tb
        .array()
        .chunks(2)
        .find(|kv| kv[0].text() == "ver")
        .map(|kv| kv[1].clone());
    assert_eq!(ver, Some(Reply::Int(module_ver(&version))), "{tb:?}");
    assert_eq!(info_field(&mut c, "tb", "tb_version"), Some(version));
}

#[test]
fn each_package_states_one_version() {
    // The Rust client: Cargo.toml, and the lock file's copy.
    let lock = repo_file("Cargo.lock");
    for (name, manifest) in [
        ("redis-tb", "Cargo.toml"),
        ("redis-tb-client", "clients/rust/Cargo.toml"),
    ] {
        let entry = format!("name = \"{name}\"\nversion = ");
        assert_eq!(
            quoted_after(&lock, &entry),
            Some(cargo_version(manifest)),
            "Cargo.lock's {name} is not {manifest}'s version"
        );
    }
    // Python: pyproject.toml reads the version from the package (no second copy).
    let pyproject = repo_file("clients/python/pyproject.toml");
    assert!(
        pyproject.contains("dynamic = [\"version\"]")
            && pyproject.contains("path = \"src/redis_tb/__init__.py\""),
        "pyproject.toml must take its version from redis_tb.__version__"
    );
    assert!(
        !pyproject.contains("\nversion = "),
        "pyproject.toml states a second version"
    );
    let py = quoted_after(
        &repo_file("clients/python/src/redis_tb/__init__.py"),
        "__version__ = ",
    );
    assert!(py.is_some(), "redis_tb.__version__ is missing");
    // Node: package.json, and package-lock.json's two copies of it.
    let package = quoted_after(&repo_file("clients/node/package.json"), "\"version\": ");
    let node_lock = repo_file("clients/node/package-lock.json");
    let root = &node_lock[node_lock.find("\"\": {").expect("lock root entry")..];
    assert_eq!(quoted_after(&node_lock, "\"version\": "), package);
    assert_eq!(quoted_after(root, "\"version\": "), package);
}

#[test]
fn the_changelog_names_every_released_version() {
    let changelog = repo_file("CHANGELOG.md");
    assert!(
        changelog.contains("\n## [Unreleased]\n"),
        "no Unreleased section"
    );
    let version = cargo_version("Cargo.toml");
    assert!(
        changelog.contains(&format!("\n## [{version}] - ")),
        "CHANGELOG.md has no heading for the module's version {version}"
    );
}
