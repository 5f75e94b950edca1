//! The tree's layers, checked: `src/algo/` (the pure algorithms) imports nothing but
//! itself, `src/parse/` and `src/error.rs` only what lies below them, and none of the three
//! touches the Redis module API or holds `unsafe` code. ARCHITECTURE.md describes the
//! layers; this test keeps the description true when a file grows a new `use`.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Every `crate::<module>` path a file names (`use` lines and inline paths alike), and the
/// lines that reach the module API or hold `unsafe`.
fn crate_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

fn check_layer(dir: &str, allowed: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = if dir.ends_with(".rs") {
        vec![root.join(dir)]
    } else {
        rust_files(&root.join(dir))
    };
    assert!(!files.is_empty(), "{dir} holds no Rust file");
    let mut problems = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).expect("a readable source file");
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for name in crate_paths(&text) {
            if !allowed.contains(&name.as_str()) {
                problems.push(format!("{shown} names crate::{name}"));
            }
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for banned in ["redis_module", "unsafe", "libc::", "extern \"C\""] {
                if code.contains(banned) {
                    problems.push(format!("{shown}:{} uses {banned}", n + 1));
                }
            }
        }
    }
    problems
}

#[test]
fn the_pure_algorithms_import_nothing_above_them_and_no_redis() {
    let problems = check_layer("src/algo", &["algo"]);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn parsing_and_errors_sit_between_the_algorithms_and_the_binding() {
    let mut problems = check_layer("src/parse", &["algo", "error", "parse"]);
    problems.extend(check_layer("src/error.rs", &["algo"]));
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_binding_never_reaches_up_into_the_command_handlers() {
    let problems: Vec<String> = check_layer("src/binding", &["algo", "binding", "error", "parse"])
        .into_iter()
        // The binding is where the module API and unsafe code live: only imports count here.
        .filter(|p| p.contains("names crate::"))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_layer_check_sees_a_forbidden_import() {
    // The checker itself: a pure file that reached into the binding would be reported.
    assert_eq!(
        crate_paths("use crate::binding::store::Key; // crate::commands in a comment"),
        vec!["binding".to_string()]
    );
    assert_eq!(
        crate_paths("let x = crate::algo::bucket::take(a, crate::algo::num::ONE);"),
        vec!["algo".to_string(), "algo".to_string()]
    );
}
