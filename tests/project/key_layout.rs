//! The key layout is written down in three places that must agree, checked from the source
//! text (no Redis needed): the `Role` enum in `src/wire/role.rs` (its variants, the `Role::ALL`
//! list the admin scan reads keys back with, and the spelling `as_str` gives each), and the
//! key table of the guide (`docs/guide/internals.md`). A new role forgotten in any of them fails here.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

fn read(rel: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The text between `start` and the first `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"))
        + start.len();
    let len = text[from..].find(end).unwrap();
    &text[from..from + len]
}

/// Lines of code only (doc and line comments dropped).
fn code(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
}

#[test]
fn roles_their_list_their_spelling_and_the_readme_agree() {
    let keys = read("src/wire/role.rs");
    let variants: BTreeSet<String> = code(between(&keys, "pub(crate) enum Role {", "\n}"))
        .map(|l| l.trim_end_matches(',').to_string())
        .collect();
    let all: BTreeSet<String> = code(between(&keys, "const ALL:", "];"))
        .filter_map(|l| l.strip_prefix("Role::"))
        .map(|l| l.trim_end_matches(',').to_string())
        .collect();
    let spelled: Vec<(String, String)> = code(between(&keys, "fn as_str(self)", "\n    }\n"))
        .filter_map(|l| l.strip_prefix("Role::"))
        .map(|l| {
            let (variant, text) = l.split_once(" => ").unwrap();
            (
                variant.to_string(),
                text.trim_matches([',', '"']).to_string(),
            )
        })
        .collect();
    assert!(variants.len() > 20, "read {variants:?}");
    assert_eq!(all, variants, "Role::ALL and the Role enum differ");
    let spelled_variants: BTreeSet<String> = spelled.iter().map(|(v, _)| v.clone()).collect();
    assert_eq!(
        spelled_variants, variants,
        "Role::as_str and the Role enum differ"
    );
    let names: BTreeSet<&str> = spelled.iter().map(|(_, s)| s.as_str()).collect();
    assert_eq!(names.len(), spelled.len(), "two roles spelled alike");

    // The guide's key table: one row per key, `<ns>:<role>:{<name>}` in its first cell
    // (a row may name two keys).
    let readme = read("docs/guide/internals.md");
    let mut in_table = BTreeSet::new();
    for row in readme
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("| `<ns>:"))
    {
        let first_cell = row.split('|').nth(1).unwrap();
        for key in first_cell.split("`<ns>:").skip(1) {
            let role = &key[..key.find(':').unwrap()];
            in_table.insert(role.to_string());
        }
    }
    let names: BTreeSet<String> = names.into_iter().map(str::to_string).collect();
    assert_eq!(
        in_table, names,
        "the guide's key table (docs/guide/internals.md, left) and Role::as_str (right) differ"
    );
}
