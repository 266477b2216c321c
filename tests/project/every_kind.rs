//! The tests that promise to cover every lock kind do: the kinds are read from the source
//! (each `Client` constructor whose type implements the `Lock` contract, or hands out
//! sides that do), so a kind added later fails here until each of these tests uses it.
//! No server needed.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// Tests that run every lock kind (each says so in its docs).
const EVERY_KIND: &[&str] = &[
    "tests/client/shutdown.rs",
    "tests/client/acl.rs",
    "tests/client/client_closed.rs",
    "tests/compile_fail/forgotten_guard.rs",
    "tests/locks/contract.rs",
    "tests/faults/server/mod.rs",
];

fn read(rel: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The types that implement the contract (the method-table test's scan of `impl_lock!`),
/// and the handles whose sides are such types (`RwLock`).
fn contract_types() -> BTreeSet<String> {
    let (_, mut types) = super::method_table::in_source();
    if types.contains("ReadLock") && types.contains("WriteLock") {
        types.insert("RwLock".to_string());
    }
    types
}

/// The `Client` constructors of lock kinds: `(method, type)`.
fn lock_constructors() -> Vec<(String, String)> {
    let types = contract_types();
    read("src/client/handles.rs")
        .split("pub fn ")
        .skip(1)
        .filter_map(|f| {
            let name: String = f
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let ret = f.split("->").nth(1)?.split(['{', '\n']).next()?.trim();
            let ret = ret.trim_start_matches("crate::").to_string();
            types.contains(&ret).then_some((name, ret))
        })
        .collect()
}

#[test]
fn every_kind_tests_use_every_lock_kind() {
    let kinds = lock_constructors();
    let names: BTreeSet<&str> = kinds.iter().map(|(m, _)| m.as_str()).collect();
    for expected in [
        "lock",
        "spin_lock",
        "fair_lock",
        "fenced_lock",
        "rw_lock",
        "multi_lock",
    ] {
        assert!(
            names.contains(expected),
            "{expected} not read from the source: {kinds:?}"
        );
    }
    let mut missing = Vec::new();
    for file in EVERY_KIND {
        let text = read(file);
        for (method, ty) in &kinds {
            if !text.contains(&format!(".{method}(")) {
                missing.push(format!("{file} never uses {ty} (`.{method}(`)"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
