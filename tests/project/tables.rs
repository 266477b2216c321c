//! The guide's reference tables against the code they describe: every `ClientBuilder` option
//! has a row in the configuration table (`docs/guide/deployments.md`), and every `Error`
//! variant is named in the `Error` row of `docs/guide/concepts.md`. A new option or variant
//! fails here until the guide says what it does.

use std::fs;
use std::path::Path;

fn read(rel: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The names of the `pub fn name(mut self, ..)` setters in `file`.
fn setters(file: &str) -> Vec<String> {
    read(file)
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("pub fn "))
        .filter(|rest| rest.contains("(mut self"))
        .map(|rest| rest[..rest.find('(').unwrap()].to_string())
        .collect()
}

#[test]
fn the_configuration_table_has_every_builder_option() {
    let options = setters("src/client/builder/mod.rs");
    assert!(options.len() >= 15, "{options:?}");
    let guide = read("docs/guide/deployments.md");
    let table: Vec<&str> = guide
        .split("\n# Configuration\n")
        .nth(1)
        .expect("the guide's Configuration section")
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .collect();
    let missing: Vec<&String> = options
        .iter()
        .filter(|o| !table.iter().any(|row| row.contains(&format!("`{o}("))))
        .collect();
    assert!(
        missing.is_empty(),
        "no row in the configuration table: {missing:?}"
    );
}

#[test]
fn the_error_row_names_every_variant() {
    let source = read("src/error/mod.rs");
    let body = source
        .split("pub enum Error {")
        .nth(1)
        .expect("enum Error")
        .split("\n}\n")
        .next()
        .unwrap();
    let variants: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_ascii_alphanumeric())
                .next()
                .unwrap()
        })
        .collect();
    assert!(variants.len() >= 13, "{variants:?}");
    let guide = read("docs/guide/concepts.md");
    let row = guide
        .lines()
        .find(|l| l.starts_with("| `Error` |"))
        .expect("the Error row");
    let missing: Vec<&&str> = variants
        .iter()
        .filter(|v| !row.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the guide's Error row: {missing:?}"
    );
}
