//! The crate's floor plan, checked from the source text (no Redis needed):
//! - layers: the foundation's modules import only what lies below them (the engine
//!   `src/raw/` over the deployments `src/deploy/` over `keys` and `scripts` over `error`);
//!   every other module (each lock kind, the client, the contract, the admin views: any
//!   module added later too) stands above the engine, so the engine can never import it;
//! - no import cycle between the crate's top-level modules, nor between the files of one
//!   folder module (edges through its `mod.rs` re-exports aside);
//! - the crate map in `lib.rs` names every top-level module;
//! - no source file much over 500 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Files longer than this fail the check (the aim is about 500).
const MAX_LINES: usize = 550;

/// The foundation, from the top down: a module may import only modules of a later entry.
/// Any module not listed here is above the engine (a new kind needs no entry).
const FOUNDATION: &[&[&str]] = &[&["raw"], &["deploy"], &["keys", "scripts"], &["error"]];

/// The layer of a top-level module: its index in [`FOUNDATION`], or `None` above the engine.
fn layer(module: &str) -> Option<usize> {
    FOUNDATION.iter().position(|l| l.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/raw/call.rs` -> ("raw", "call"); `src/raw/mod.rs` -> ("raw", "mod");
/// `src/client.rs` -> ("client", "").
fn unit(src: &Path, path: &Path) -> (String, String) {
    let rel = path.strip_prefix(src).unwrap();
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    match parts.as_slice() {
        [file] => (file.clone(), String::new()),
        [dir, rest @ ..] => (dir.clone(), rest.join("/")),
        [] => unreachable!(),
    }
}

/// The names that follow `prefix` in `text` (`crate::raw::x` with prefix `crate::` gives `raw`).
fn names_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = &'a str> {
    text.match_indices(prefix).filter_map(move |(i, _)| {
        let rest = &text[i + prefix.len()..];
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (end > 0).then(|| &rest[..end])
    })
}

/// Code only: line comments and doc comments (which link to other modules) are dropped.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|n| n == next).unwrap();
                    let mut cycle = stack[at..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if !state.contains_key(node) {
            if let Some(c) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn engine_imports_nothing_above_it_and_no_module_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let units: BTreeSet<String> = files.iter().map(|f| unit(&src, f).0).collect();

    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut inner: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let lines = text.lines().count();
        let shown = file.strip_prefix(src.parent().unwrap()).unwrap().display();
        if lines > MAX_LINES {
            problems.push(format!("{shown}: {lines} lines (at most {MAX_LINES})"));
        }
        let code = code(&text);
        let (me, sub) = unit(&src, file);
        for used in names_after(&code, "crate::") {
            if used == me || !units.contains(used) {
                continue;
            }
            if let Some(mine) = layer(&me) {
                if layer(used).is_none_or(|theirs| theirs <= mine) {
                    problems.push(format!(
                        "{shown} imports crate::{used}, a module not below it"
                    ));
                }
            }
            if me != "lib" {
                top.entry(me.clone()).or_default().insert(used.to_string());
            }
        }
        // Files of one folder module refer to each other as `super::file`.
        if !sub.is_empty() && sub != "mod" && !sub.contains('/') {
            for used in names_after(&code, "super::") {
                let sibling = src.join(&me).join(format!("{used}.rs"));
                let sibling_dir = src.join(&me).join(used).join("mod.rs");
                if used != sub && (sibling.exists() || sibling_dir.exists()) {
                    inner
                        .entry(me.clone())
                        .or_default()
                        .entry(sub.clone())
                        .or_default()
                        .insert(used.to_string());
                }
            }
        }
    }
    for layer in FOUNDATION {
        for module in *layer {
            assert!(
                units.contains(*module),
                "no module src/{module}: update FOUNDATION"
            );
        }
    }
    // The crate map (the comment at the top of lib.rs) names every top-level module.
    let map = fs::read_to_string(src.join("lib.rs")).unwrap();
    for module in units.iter().filter(|u| *u != "lib" && *u != "bin") {
        let as_dir = src.join(module).is_dir();
        let entry = if as_dir {
            format!("{module}/")
        } else {
            format!("{module}.rs")
        };
        if !map
            .lines()
            .any(|l| l.starts_with("//") && l.contains(&entry))
        {
            problems.push(format!("the crate map in src/lib.rs does not name {entry}"));
        }
    }
    if let Some(cycle) = find_cycle(&top) {
        problems.push(format!(
            "import cycle between modules: {}",
            cycle.join(" -> ")
        ));
    }
    for (folder, graph) in &inner {
        if let Some(cycle) = find_cycle(graph) {
            problems.push(format!(
                "import cycle in src/{folder}/: {}",
                cycle.join(" -> ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
