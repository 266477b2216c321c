//! The crate's floor plan, checked from the source text (no Redis needed), on the import
//! graph between files that [`super::floor_plan`] reads:
//! - layers: the foundation's modules import only what lies below them (the engine
//!   `src/engine/` over the deployments `src/deploy/` over the layout room `src/layout/`
//!   over `src/wire/` (keys and scripts) over `error` over the `KeyLayout` type); every
//!   other module (the kinds in `src/lock/` and `src/sync/`, the
//!   client, the admin views, RedLock: any module added later too) stands above the engine,
//!   so the engine can never import it;
//! - no import cycle between the crate's top-level modules, nor between any two files
//!   (a folder's `mod.rs` included), but for the groups still listed in `KNOWN_CYCLES`;
//! - the layout room: the engine names no key layout and imports nothing from
//!   `src/layout/redisson.rs`; outside `src/layout/` only the files still listed in
//!   `LAYOUT_BRANCHES` name `KeyLayout::Redisson` in code;
//! - the crate map in `lib.rs` names every top-level module and every file of the layers
//!   it maps file by file; the engine's `mod.rs` names each of its modules;
//! - no source file much over 500 lines besides its doc comments, in the library and in
//!   the workspace's other crates.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use super::floor_plan::{cyclic_groups, find_cycle, sources, FloorPlan};

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
const FOUNDATION: &[&[&str]] = &[
    &["engine"],
    &["deploy"],
    &["layout"],
    &["wire"],
    &["error"],
    &["key_layout", "backoff"],
];

/// The layer of a top-level module: its index in [`FOUNDATION`], or `None` above the engine.
fn layer(module: &str) -> Option<usize> {
    FOUNDATION.iter().position(|l| l.contains(&module))
}

/// Groups of files that import each other today, each to be broken up by the
/// restructure in progress (the engine and the read-write lock over both key layouts).
/// The test fails when a cycle appears outside them, or when one of them is gone (then
/// the entry goes): the list only shrinks.
const KNOWN_CYCLES: &[&[&str]] = &[];

fn shown(module: &[String]) -> String {
    match module {
        [] => "lib".to_string(),
        _ => module.join("::"),
    }
}

#[test]
fn engine_imports_nothing_above_it_and_no_file_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let plan = FloorPlan::read(&src);
    let mut problems = Vec::new();
    let units: BTreeSet<String> = plan
        .files
        .keys()
        .filter_map(|m| m.first().cloned())
        .collect();
    for (module, file) in &plan.files {
        let lines = code_lines(&fs::read_to_string(file).unwrap());
        if lines > MAX_LINES {
            problems.push(format!(
                "{}: {lines} lines besides doc comments (at most {MAX_LINES})",
                file.strip_prefix(src.parent().unwrap()).unwrap().display()
            ));
        }
        let Some(from_top) = module.first() else {
            continue; // lib.rs
        };
        for to in &plan.edges[module] {
            let Some(to_top) = to.first() else { continue };
            if from_top != to_top {
                if let Some(mine) = layer(from_top) {
                    if layer(to_top).is_none_or(|theirs| theirs <= mine) {
                        problems.push(format!(
                            "src/{} imports crate::{}, a module not below it",
                            shown(module),
                            shown(to)
                        ));
                    }
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
    // Cycles between top-level modules, then between files.
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &plan.edges {
        for to in tos {
            if let (Some(a), Some(b)) = (from.first(), to.first()) {
                if a != b {
                    top.entry(a.clone()).or_default().insert(b.clone());
                }
            }
        }
    }
    if let Some(cycle) = find_cycle(&top) {
        problems.push(format!(
            "import cycle between modules: {}",
            cycle.join(" -> ")
        ));
    }
    let groups: Vec<BTreeSet<String>> = cyclic_groups(&plan.edges)
        .iter()
        .map(|g| g.iter().map(|m| shown(m)).collect())
        .collect();
    for group in &groups {
        let known = KNOWN_CYCLES
            .iter()
            .any(|k| group.iter().all(|m| k.contains(&m.as_str())));
        if !known {
            let sub: BTreeMap<_, _> = plan
                .edges
                .iter()
                .filter(|(f, _)| group.contains(&shown(f)))
                .map(|(f, to)| {
                    let to: BTreeSet<_> = to
                        .iter()
                        .filter(|t| group.contains(&shown(t)))
                        .cloned()
                        .collect();
                    (f.clone(), to)
                })
                .collect();
            let cycle = find_cycle(&sub).unwrap_or_default();
            problems.push(format!(
                "import cycle between files: {} (files that import each other: {})",
                cycle
                    .iter()
                    .map(|m| shown(m))
                    .collect::<Vec<_>>()
                    .join(" -> "),
                group.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for known in KNOWN_CYCLES {
        if !groups
            .iter()
            .any(|g| g.iter().filter(|m| known.contains(&m.as_str())).count() > 1)
        {
            problems.push(format!(
                "the known cycle among {known:?} is gone: remove it from KNOWN_CYCLES"
            ));
        }
    }
    problems.extend(crate_maps(&src, &plan));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Files outside the layout room (`src/layout/`) that name `KeyLayout::Redisson` in code:
/// the ACL check's unit tests, which check what each layout's scripts need. The list only
/// shrinks: the test fails when another file names it, and when a listed file no longer
/// does (then it goes).
const LAYOUT_BRANCHES: &[&str] = &["deploy/acl.rs"];

#[test]
fn only_the_layout_room_decides_by_layout() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let plan = FloorPlan::read(&src);
    let mut problems = Vec::new();
    let mut naming = BTreeSet::new();
    for (module, file) in &plan.files {
        let rel = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let in_room = rel.starts_with("layout/") || rel == "key_layout.rs";
        let text = fs::read_to_string(file).unwrap();
        let names = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .any(|l| l.contains("KeyLayout::Redisson"));
        if module.first().is_some_and(|m| m == "engine") {
            if text.contains("KeyLayout::") {
                problems.push(format!("src/{rel} names a key layout: ask crate::layout"));
            }
            if plan.edges[module].contains(&vec!["layout".to_string(), "redisson".to_string()]) {
                problems.push(format!("src/{rel} imports from src/layout/redisson.rs"));
            }
        }
        if names && !in_room {
            naming.insert(rel);
        }
    }
    for rel in &naming {
        if !LAYOUT_BRANCHES.contains(&rel.as_str()) {
            problems.push(format!(
                "src/{rel} names KeyLayout::Redisson: ask crate::layout (src/layout/)"
            ));
        }
    }
    for listed in LAYOUT_BRANCHES {
        if !naming.contains(*listed) {
            problems.push(format!(
                "src/{listed} no longer names KeyLayout::Redisson: remove it from LAYOUT_BRANCHES"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The maps readers find their way by: the crate map at the top of `lib.rs` names every
/// top-level module and every file or folder of the layers it lists file by file (the
/// engine, `wire/`, the kinds); the engine's `mod.rs` names each of its modules under
/// "# Layout".
fn crate_maps(src: &Path, plan: &FloorPlan) -> Vec<String> {
    let mut problems = Vec::new();
    let map: Vec<String> = fs::read_to_string(src.join("lib.rs"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("//") && !l.starts_with("///") && !l.starts_with("//!"))
        .map(str::to_string)
        .collect();
    let entry = |module: &[String]| -> String {
        let name = module.last().unwrap();
        let as_dir = src.join(module.join("/")).is_dir();
        if as_dir {
            format!("{name}/")
        } else {
            format!("{name}.rs")
        }
    };
    let mapped = |module: &[String]| {
        let entry = entry(module);
        map.iter().any(|l| {
            l.split_whitespace()
                .any(|w| w == entry || w.ends_with(&format!("({entry}")))
        })
    };
    for module in plan.files.keys() {
        let listed = match module.as_slice() {
            [_] => true,
            [top, _] => ["engine", "wire", "lock", "sync"].contains(&top.as_str()),
            _ => false,
        };
        if listed && module.last().is_some_and(|m| m != "tests") && !mapped(module) {
            problems.push(format!(
                "the crate map in src/lib.rs does not name {} (src/{})",
                entry(module),
                module.join("/")
            ));
        }
    }
    let engine = fs::read_to_string(src.join("engine/mod.rs")).unwrap();
    let layout = engine
        .split("//! # Layout")
        .nth(1)
        .expect("src/engine/mod.rs has a `# Layout` section")
        .split("\n\n")
        .next()
        .unwrap()
        .to_string();
    for module in plan.files.keys() {
        if let [top, name] = module.as_slice() {
            if top == "engine" && !layout.contains(&format!("[`{name}`]")) {
                problems.push(format!(
                    "src/engine/mod.rs's `# Layout` does not name [`{name}`]"
                ));
            }
        }
    }
    problems
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
