//! The crate's floor plan, checked from the source text (no Redis needed):
//! - layers: the foundation's modules import only what lies below them (the engine
//!   `src/engine/` over the deployments `src/deploy/` over `src/wire/` (keys and scripts)
//!   over `error`); every other module (the kinds in `src/lock/` and `src/sync/`, the
//!   client, the admin views, RedLock: any module added later too) stands above the engine,
//!   so the engine can never import it;
//! - no import cycle between the crate's top-level modules, nor between the modules of one
//!   folder (`lock::fenced` and `lock::reentrant`, `engine::hold` and `engine::registry`;
//!   edges to the folder's own `mod.rs` aside);
//! - the crate map in `lib.rs` names every top-level module;
//! - no source file much over 500 lines besides its doc comments, in the library and in
//!   the workspace's other crates.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Files with more lines than this fail the check (the aim is about 500). Doc comment lines
/// (`///`, `//!`) do not count: an example on every public item is documentation, not
/// code to find one's way through.
const MAX_LINES: usize = 550;

/// The lines of `text` that count against [`MAX_LINES`]: all but doc comments.
fn code_lines(text: &str) -> usize {
    text.lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("///") || l.starts_with("//!"))
        })
        .count()
}

/// The foundation, from the top down: a module may import only modules of a later entry.
/// Any module not listed here is above the engine (a new kind needs no entry).
const FOUNDATION: &[&[&str]] = &[&["engine"], &["deploy"], &["wire"], &["error"], &["layout"]];

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

/// The module path of a file: `src/engine/call.rs` -> `[engine, call]`,
/// `src/lock/multi/mod.rs` -> `[lock, multi]`, `src/lib.rs` -> `[lib]`.
fn module_path(src: &Path, path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Whether `path` (a module path) names a module file or folder under `src`.
fn is_module(src: &Path, path: &[&str]) -> bool {
    let joined: PathBuf = path.iter().collect();
    src.join(&joined).with_extension("rs").is_file() || src.join(&joined).join("mod.rs").is_file()
}

/// The module path a reference leads to, cut to at most two segments (the unit the cycle
/// checks look at), or `None` when it names no module of the crate.
fn target(src: &Path, path: &[&str]) -> Option<Vec<String>> {
    let mut found = None;
    for len in 1..=path.len().min(2) {
        if is_module(src, &path[..len]) {
            found = Some(path[..len].iter().map(|s| s.to_string()).collect());
        }
    }
    found
}

/// The `::`-separated identifiers that follow each `prefix` in `text`.
fn paths_after<'a>(text: &'a str, prefix: &'a str) -> impl Iterator<Item = Vec<&'a str>> {
    text.match_indices(prefix).map(move |(i, _)| {
        let mut rest = &text[i + prefix.len()..];
        let mut out = Vec::new();
        loop {
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            out.push(&rest[..end]);
            match rest[end..].strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        out
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
    let units: BTreeSet<String> = files
        .iter()
        .map(|f| module_path(&src, f)[0].clone())
        .collect();

    // Top-level modules, and the modules of each folder (keyed by the folder).
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut inner: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut problems = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let lines = code_lines(&text);
        let shown = file.strip_prefix(src.parent().unwrap()).unwrap().display();
        if lines > MAX_LINES {
            problems.push(format!(
                "{shown}: {lines} lines besides doc comments (at most {MAX_LINES})"
            ));
        }
        let me = module_path(&src, file);
        let code = code(&text);
        let is_mod_rs = file.ends_with("mod.rs");
        // Where `super::` and `self::` lead from this file.
        let parent: Vec<&str> = me[..me.len() - usize::from(!is_mod_rs)]
            .iter()
            .map(String::as_str)
            .collect();
        let mut used: Vec<Vec<String>> = Vec::new();
        for path in paths_after(&code, "crate::") {
            used.extend(target(&src, &path));
        }
        for (prefix, base) in [
            ("super::", parent.len().saturating_sub(1)),
            ("self::", parent.len()),
        ] {
            for path in paths_after(&code, prefix) {
                let mut full: Vec<&str> = parent[..base.min(parent.len())].to_vec();
                full.extend(path);
                used.extend(target(&src, &full));
            }
        }
        for to in used {
            let (from_top, to_top) = (&me[0], &to[0]);
            if from_top != to_top {
                if let Some(mine) = layer(from_top) {
                    if layer(to_top).is_none_or(|theirs| theirs <= mine) {
                        problems.push(format!(
                            "{shown} imports crate::{}, a module not below it",
                            to.join("::")
                        ));
                    }
                }
                if from_top != "lib" {
                    top.entry(from_top.clone())
                        .or_default()
                        .insert(to_top.clone());
                }
            } else if me.len() >= 2 && to.len() == 2 && me[1] != to[1] {
                inner
                    .entry(from_top.clone())
                    .or_default()
                    .entry(me[1].clone())
                    .or_default()
                    .insert(to[1].clone());
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
    for module in units.iter().filter(|u| *u != "lib") {
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

/// The other crates of the workspace (the testkit, the CLI, the bench programs) keep the
/// same limit on file length.
#[test]
fn workspace_crates_keep_files_short() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("a [workspace] members list");
    let mut long = Vec::new();
    let mut seen = 0;
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        if member.is_empty() {
            continue;
        }
        let mut files = Vec::new();
        sources(&root.join(member).join("src"), &mut files);
        seen += files.len();
        for file in files {
            let lines = code_lines(&fs::read_to_string(&file).unwrap());
            if lines > MAX_LINES {
                let shown = file.strip_prefix(root).unwrap().display().to_string();
                long.push(format!(
                    "{shown}: {lines} lines besides doc comments (at most {MAX_LINES})"
                ));
            }
        }
    }
    assert!(seen > 10, "read only {seen} files of the workspace members");
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The test binaries are a few areas, `tests/<area>/main.rs` (or a lone `tests/<name>.rs`),
/// and every file under an area is a module its parent declares: none compiled through a
/// `path` attribute (what the binaries share is the `lockwise-suite` crate), none left out
/// (a file nobody declares would silently never run).
#[test]
fn tests_are_a_few_binaries_of_declared_modules() {
    const MAX_BINARIES: usize = 10;
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let path_attr = concat!("#[", "path");
    let (mut binaries, mut problems) = (Vec::new(), Vec::new());
    for entry in fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        let main = path.join("main.rs");
        if path.extension().is_some_and(|e| e == "rs") {
            binaries.push(path);
            continue;
        }
        if !main.exists() {
            continue; // fixtures (the compile-fail cases), not a binary
        }
        let mut files = Vec::new();
        sources(&path, &mut files);
        for file in files.iter().filter(|f| **f != main) {
            let (dir, stem) = match file.file_name().unwrap().to_str().unwrap() {
                "mod.rs" => {
                    let dir = file.parent().unwrap();
                    (
                        dir.parent().unwrap(),
                        dir.file_name().unwrap().to_str().unwrap(),
                    )
                }
                _ => (
                    file.parent().unwrap(),
                    file.file_stem().unwrap().to_str().unwrap(),
                ),
            };
            let parent = [dir.join("main.rs"), dir.join("mod.rs")]
                .into_iter()
                .find(|p| p.exists())
                .expect("a folder of test modules has a main.rs or mod.rs");
            let declared = fs::read_to_string(&parent)
                .unwrap()
                .lines()
                .any(|l| l.trim() == format!("mod {stem};"));
            if !declared {
                problems.push(format!(
                    "{} is not declared in {}",
                    file.display(),
                    parent.display()
                ));
            }
        }
        binaries.push(main);
    }
    let mut all = Vec::new();
    sources(&tests, &mut all);
    for file in all {
        if fs::read_to_string(&file).unwrap().contains(path_attr) {
            problems.push(format!("{} includes a file by path", file.display()));
        }
    }
    assert!(
        binaries.len() <= MAX_BINARIES,
        "{} test binaries (at most {MAX_BINARIES}): {binaries:?}",
        binaries.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
