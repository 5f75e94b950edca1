//! The script library (clients/lua, SPEC E2) as this crate ships it: `tb.lua` for `SCRIPT
//! LOAD`, its SHA-1 as the client computes it, and the Functions build made from the two
//! files as clients/lua/README.md says (`#!lua name=tb`, tb.lua above its EVAL entry line,
//! functions.lua). The two files are compiled in from the crate's `lua/` folder, whose
//! entries are links to clients/lua (the one source): `cargo package` stores their
//! contents, so a packaged crate builds without the repository.

use std::sync::OnceLock;

use sha1::{Digest, Sha1};

/// tb.lua's text.
const SCRIPT: &str = include_str!("../../lua/tb.lua");
/// functions.lua's text: the Functions build's entry.
const FUNCTIONS_ENTRY: &str = include_str!("../../lua/functions.lua");
/// The line that starts tb.lua's EVAL entry: the library is everything above it.
const EVAL_ENTRY: &str = "-- EVAL entry:";

/// tb.lua's text (what `SCRIPT LOAD` sends).
pub fn script() -> &'static str {
    SCRIPT
}

/// tb.lua's SHA-1, 40 lowercase hex digits, computed here (SPEC E2: checked against the
/// `SCRIPT LOAD` reply).
pub fn sha() -> &'static str {
    static SHA: OnceLock<String> = OnceLock::new();
    SHA.get_or_init(|| {
        Sha1::digest(SCRIPT.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    })
}

/// The Functions library's text (what `FUNCTION LOAD REPLACE` sends).
pub fn functions() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        // tb.lua always has the line (a unit test holds it to that).
        let end = SCRIPT.find(EVAL_ENTRY).unwrap_or(SCRIPT.len());
        format!("#!lua name=tb\n{}{FUNCTIONS_ENTRY}", &SCRIPT[..end])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_built_as_the_readme_says() {
        assert!(SCRIPT.contains(EVAL_ENTRY));
        assert_eq!(sha().len(), 40);
        assert!(
            sha()
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        let f = functions();
        assert!(f.starts_with("#!lua name=tb\n"));
        assert!(f.ends_with(FUNCTIONS_ENTRY));
        assert!(!f.contains(EVAL_ENTRY));
    }
}
