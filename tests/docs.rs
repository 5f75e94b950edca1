//! The documentation stays navigable and complete: every relative link in README.md and
//! docs/*.md points at a file that exists (and, for `page.md#anchor`, at a heading that
//! exists), every command the loaded module registers has its own section in
//! docs/commands.md, and `make help` (which README.md points to for the targets beyond
//! `make run` and `make test`) names every Makefile target. The command list comes from a
//! real redis-server with the module loaded (`COMMAND LIST FILTERBY MODULE`), so a new
//! command without documentation fails.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{Options, Reply, Server, module_path};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md: the pages a reader follows links from.
fn doc_pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(!docs.is_empty(), "docs/ holds no .md page");
    pages.extend(docs);
    pages
}

/// The lines of a markdown text outside fenced code blocks (``` or ~~~).
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        match fence {
            Some(f) if t.starts_with(f) => fence = None,
            Some(_) => {}
            None if t.starts_with("```") => fence = Some("```"),
            None if t.starts_with("~~~") => fence = Some("~~~"),
            None => out.push(line),
        }
    }
    out
}

/// `line` with its inline code spans (`...`) blanked, so `[a](b)` written as code is not
/// taken for a link.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if in_code {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// The targets of inline links and images, `[text](target)` / `[text](target "title")`,
/// outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose_lines(text) {
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let end = after.find(')').unwrap_or(after.len());
            let target = after[..end].split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            if !target.is_empty() {
                targets.push(target.to_string());
            }
            rest = &after[end.min(after.len())..];
        }
    }
    targets
}

/// GitHub's anchor for a heading: lowercase, punctuation dropped except `-` and `_`,
/// spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The headings (`#` to `######`) of a markdown text, outside code blocks.
fn headings(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter_map(|line| {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            let rest = &line[hashes..];
            ((1..=6).contains(&hashes) && rest.starts_with(' ')).then(|| rest.trim().to_string())
        })
        .collect()
}

/// The anchors a page offers: each heading's slug, repeats numbered `-1`, `-2`, ... as
/// GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for h in headings(text) {
        let base = slug(&h);
        let mut candidate = base.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{base}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// Every broken relative link of the page at `page` (its text given), as readable lines.
fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let dir = page.parent().unwrap();
    let mut broken = Vec::new();
    for target in link_targets(text) {
        let lower = target.to_lowercase();
        if lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("mailto:")
        {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            dir.join(path)
        };
        if !file.exists() {
            broken.push(format!(
                "{}: {target}: no such file or directory",
                page.display()
            ));
            continue;
        }
        if let Some(anchor) = anchor
            && file.extension().is_some_and(|e| e == "md")
        {
            let body = std::fs::read_to_string(&file).unwrap();
            if !anchors(&body).contains(anchor) {
                broken.push(format!(
                    "{}: {target}: no heading with the anchor #{anchor} in {}",
                    page.display(),
                    file.display()
                ));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in doc_pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        checked += link_targets(&text).len();
        broken.extend(broken_links(&page, &text));
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the link parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The checker itself: it finds a missing file and a missing anchor, and accepts what
/// exists (a sibling page, a directory, an anchor with punctuation dropped, a repeated
/// heading's `-1`), while ignoring links inside code and external links.
#[test]
fn the_link_checker_reports_missing_files_and_anchors() {
    let dir = std::env::temp_dir().join(format!("redis-tb-docs-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("other.md"),
        "# Other\n\n## TB.TAKE\n\n## Python: ASGI / FastAPI\n\n## Notes\n\n## Notes\n",
    )
    .unwrap();
    let page = dir.join("page.md");
    let text = "\
# Page
[ok](other.md) [dir](sub) [a](other.md#tbtake) [b](other.md#python-asgi--fastapi)
[c](other.md#notes-1) [self](#page) [web](https://example.invalid/x) [m](mailto:a@b)
`[code](gone.md)`
```
[fenced](gone-too.md)
```
[bad file](missing.md) [bad anchor](other.md#tb-take) [bad dir](sub/nothing/)
";
    std::fs::write(&page, text).unwrap();
    let broken = broken_links(&page, text);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].contains("missing.md: no such file"),
        "{broken:#?}"
    );
    assert!(broken[1].contains("#tb-take"), "{broken:#?}");
    assert!(broken[2].contains("sub/nothing/"), "{broken:#?}");
}

/// The names in an array reply, lowercased.
fn names(reply: &Reply) -> BTreeSet<String> {
    reply
        .array()
        .iter()
        .map(|r| r.text().to_lowercase())
        .collect()
}

/// The name the module registered itself under, from MODULE LIST (the entry whose path is
/// the module file).
fn module_name(server: &Server) -> String {
    let mut c = server.conn();
    let list = c.q("MODULE LIST");
    let path = module_path().display().to_string();
    for entry in list.array() {
        let fields = entry.array();
        let mut name = None;
        let mut matches = false;
        for pair in fields.chunks(2) {
            match pair[0].text().as_str() {
                "name" => name = Some(pair[1].text()),
                "path" => matches = pair[1].text() == path,
                _ => {}
            }
        }
        if let (Some(name), true) = (name, matches) {
            return name;
        }
    }
    panic!("the module is not in MODULE LIST: {list:?}");
}

#[test]
fn every_registered_command_has_a_section_in_docs_commands_md() {
    // Loaded with the CL.THROTTLE argument, so the alias is registered too.
    let server = Server::start_with(Options {
        with_module: false,
        extra: vec![
            "--loadmodule".into(),
            module_path().display().to_string(),
            "CL.THROTTLE".into(),
        ],
    });
    let name = module_name(&server);
    let mut c = server.conn();
    let commands = names(&c.cmd(&["COMMAND", "LIST", "FILTERBY", "MODULE", name.as_str()]));
    for expected in ["tb.take", "tb.throttle", "cl.throttle"] {
        assert!(
            commands.contains(expected),
            "{expected} not registered: {commands:?}"
        );
    }

    let text = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let documented: BTreeSet<String> = prose_lines(&text)
        .into_iter()
        .filter(|l| l.starts_with("## ") || l.starts_with("### "))
        .map(|l| {
            let h = l.trim_start_matches('#').trim();
            let first = h.split([' ', ':']).next().unwrap_or("");
            first.trim_matches('`').to_lowercase()
        })
        .collect();
    let missing: Vec<&String> = commands
        .iter()
        .filter(|c| !documented.contains(*c))
        .collect();
    assert!(
        missing.is_empty(),
        "registered by module '{name}' but without a `## <COMMAND>` heading in docs/commands.md: {missing:?}"
    );
}

/// The Makefile's rules (`name:` at the start of a line; not `NAME := value`, not a special
/// `.TARGET`, not a file target such as `$(VAR)` or a path) and its `.PHONY` names.
fn make_targets(makefile: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut rules, mut phony) = (BTreeSet::new(), BTreeSet::new());
    for line in makefile.lines() {
        if let Some(names) = line.strip_prefix(".PHONY:") {
            phony.extend(names.split_whitespace().map(str::to_string));
            continue;
        }
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let is_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if is_name && !rest.starts_with('=') {
            rules.insert(name.to_string());
        }
    }
    (rules, phony)
}

/// The targets `make help` names: the word after `make` in each `echo "make ..."` line of
/// the help recipe; the bare `make` line is `all`, the default target.
fn help_targets(makefile: &str) -> BTreeSet<String> {
    let mut lines = makefile.lines().skip_while(|l| *l != "help:").skip(1);
    let mut named = BTreeSet::new();
    while let Some(line) = lines.next().filter(|l| l.starts_with('\t')) {
        let Some((_, listed)) = line.split_once("echo \"make ") else {
            continue;
        };
        let word = listed.split_whitespace().next().unwrap_or("");
        if listed.starts_with(' ') || word.is_empty() {
            named.insert("all".to_string());
        } else {
            named.insert(word.to_string());
        }
    }
    named
}

#[test]
fn make_help_names_every_makefile_target_and_every_phony_name_has_a_rule() {
    let makefile = std::fs::read_to_string(repo().join("Makefile")).unwrap();
    let (rules, phony) = make_targets(&makefile);
    let listed = help_targets(&makefile);
    for expected in ["run", "test", "help", "lint", "bench"] {
        assert!(
            rules.contains(expected),
            "no rule `{expected}:` found: {rules:?}"
        );
    }
    let unlisted: Vec<&String> = rules.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "targets `make help` does not name: {unlisted:?}"
    );
    let gone: Vec<&String> = listed.difference(&rules).collect();
    assert!(
        gone.is_empty(),
        "`make help` names targets without a rule: {gone:?}"
    );
    let no_rule: Vec<&String> = phony.difference(&rules).collect();
    assert!(
        no_rule.is_empty(),
        ".PHONY names without a rule: {no_rule:?}"
    );
}

/// The parser itself, on a small Makefile: rules, not assignments or file targets; the
/// help lines' names, the bare `make` as `all`.
#[test]
fn the_makefile_parser_finds_rules_phony_names_and_help_lines() {
    let makefile = "\
PORT ?= 6379
X := $(HOME)/y
.PHONY: all run gone
all: build
help:
\t@echo \"make          build\"
\t@echo \"make run      start it\"
\t@echo \"other text\"

run: build
\tredis-server --port $(PORT)
$(MODULE): build
";
    let (rules, phony) = make_targets(makefile);
    assert_eq!(
        rules.into_iter().collect::<Vec<_>>(),
        ["all", "help", "run"]
    );
    assert_eq!(phony.len(), 3);
    assert_eq!(
        help_targets(makefile).into_iter().collect::<Vec<_>>(),
        ["all", "run"]
    );
}
