//! The crate's import graph between files, read from the source text: which file each
//! path (`crate::`, `super::`, `self::`, a child module's name) leads to, following
//! re-exports (`pub use`) to the file that defines the item. The layout tests check this
//! graph; `a_cycle_between_files_is_found` checks the reader itself on a small tree.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A module path: `["engine", "call"]` for `src/engine/call.rs`, `[]` for `src/lib.rs`.
pub type ModPath = Vec<String>;

/// The files of a source tree and the imports between them.
pub struct FloorPlan {
    /// Every file, by its module path.
    pub files: BTreeMap<ModPath, PathBuf>,
    /// File -> the files it imports from (never itself). `pub use` re-exports are not
    /// edges: they pass an item through, the importer's edge goes to the defining file.
    pub edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl FloorPlan {
    /// Reads every `.rs` file under `src`.
    pub fn read(src: &Path) -> FloorPlan {
        let mut paths = Vec::new();
        sources(src, &mut paths);
        paths.sort();
        let mut files = BTreeMap::new();
        let mut texts = BTreeMap::new();
        for path in paths {
            let module = module_path(src, &path);
            texts.insert(module.clone(), strip(&fs::read_to_string(&path).unwrap()));
            files.insert(module, path);
        }
        let mut plan = FloorPlan {
            files,
            edges: BTreeMap::new(),
        };
        let exports: BTreeMap<ModPath, Vec<(String, ModPath)>> = texts
            .iter()
            .map(|(module, text)| (module.clone(), plan.reexports(module, text)))
            .collect();
        for (module, text) in &texts {
            let mut out = BTreeSet::new();
            for (scope, path, is_pub_use) in plan.paths_in(module, text) {
                // A re-export passes an item through; it is an import only when the file
                // uses the name itself too.
                if is_pub_use && !uses_name(text, &path) {
                    continue;
                }
                let full = absolute(&scope, &path);
                out.extend(plan.defining_file(&full, &exports, 0));
            }
            out.remove(module);
            plan.edges.insert(module.clone(), out);
        }
        plan
    }

    /// The file (module path) a path to a module or an item leads to, following
    /// re-exports; `None` when it names nothing in the crate.
    fn defining_file(
        &self,
        path: &[String],
        exports: &BTreeMap<ModPath, Vec<(String, ModPath)>>,
        depth: usize,
    ) -> Option<ModPath> {
        let module_len = (0..=path.len())
            .rev()
            .find(|&n| self.files.contains_key(&path[..n]))?;
        let module = path[..module_len].to_vec();
        if depth < 8 {
            if let Some(item) = path.get(module_len) {
                for (name, target) in exports.get(&module).into_iter().flatten() {
                    if name == item || name == "*" {
                        let mut next = target.clone();
                        if name == "*" {
                            next.push(item.clone());
                        }
                        if let Some(found) = self.defining_file(&next, exports, depth + 1) {
                            return Some(found);
                        }
                    }
                }
            }
        }
        if module_len == 0 && !path.is_empty() {
            return None; // an extern crate or a name `lib.rs` does not define
        }
        Some(module)
    }

    /// The names a module re-exports (`pub use`, any visibility), each with the absolute
    /// path it stands for; a glob is named `*`.
    fn reexports(&self, module: &ModPath, text: &str) -> Vec<(String, ModPath)> {
        let mut out = Vec::new();
        for (scope, path, is_pub_use) in self.paths_in(module, text) {
            if is_pub_use && &scope == module {
                let full = absolute(&scope, &path);
                let name = path
                    .alias
                    .clone()
                    .unwrap_or_else(|| full.last().cloned().unwrap_or_default());
                let target = if path.alias.is_some() || name == "*" {
                    full.iter().filter(|s| *s != "*").cloned().collect()
                } else {
                    full
                };
                out.push((name, target));
            }
        }
        out
    }

    /// Every path in a file's code: the module it is written in (the file's, or an inline
    /// `mod x { .. }` inside it), the path, and whether it is part of a `pub use`.
    fn paths_in(&self, file: &ModPath, text: &str) -> Vec<(ModPath, UsePath, bool)> {
        let bytes = text.as_bytes();
        let mut out = Vec::new();
        // Inline modules: (name, brace depth at which it closes).
        let mut inline: Vec<(String, usize)> = Vec::new();
        let mut depth = 0usize;
        let mut pub_use_until = None;
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i] as char;
            if c == '{' {
                depth += 1;
                i += 1;
                continue;
            }
            if c == '}' {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            if c == ';' && pub_use_until.is_some() {
                pub_use_until = None;
            }
            let starts_word = is_ident(c) && (i == 0 || !is_ident(bytes[i - 1] as char));
            if !starts_word {
                i += 1;
                continue;
            }
            let word_end = i + text[i..]
                .find(|ch: char| !is_ident(ch))
                .unwrap_or(text.len() - i);
            let word = &text[i..word_end];
            let mut scope = file.clone();
            scope.extend(inline.iter().map(|(n, _)| n.clone()));
            if word == "mod" {
                let rest = text[word_end..].trim_start();
                let name: String = rest.chars().take_while(|&ch| is_ident(ch)).collect();
                if rest[name.len()..].trim_start().starts_with('{') {
                    inline.push((name, depth));
                }
            } else if word == "pub" {
                let rest = &text[word_end..];
                let rest = match rest.trim_start().strip_prefix('(') {
                    Some(r) => r.split_once(')').map_or("", |(_, after)| after),
                    None => rest,
                };
                if rest.trim_start().starts_with("use ") {
                    pub_use_until = Some(());
                }
            }
            let preceded_by_colons = i >= 2 && &text[i - 2..i] == "::";
            // `pub(in crate::x)` names where an item is visible, not an import.
            let in_visibility = text[..i].trim_end().ends_with("(in");
            let path_start = !preceded_by_colons
                && !in_visibility
                && text[word_end..].starts_with("::")
                && (matches!(word, "crate" | "super" | "self") || {
                    let mut child = scope.clone();
                    child.push(word.to_string());
                    self.files.contains_key(&child) || is_inline_child(text, word)
                });
            if path_start {
                let (path, end) = parse_tree(text, i);
                for p in path {
                    out.push((scope.clone(), p, pub_use_until.is_some()));
                }
                i = end.max(i + 1);
                continue;
            }
            i = word_end;
        }
        out
    }
}

/// One path of a use tree, as written, with its `as` alias.
#[derive(Clone, Debug)]
pub struct UsePath {
    segments: Vec<String>,
    alias: Option<String>,
}

/// Whether `text` names the item a `pub use` path brings in (its alias or last segment)
/// anywhere besides that `use` itself.
fn uses_name(text: &str, path: &UsePath) -> bool {
    let Some(name) = path.alias.as_ref().or(path.segments.last()) else {
        return false;
    };
    if name == "*" || name == "self" {
        return false;
    }
    let code = without_uses(text);
    let words = code
        .match_indices(name.as_str())
        .filter(|(at, _)| {
            let before = code[..*at].chars().next_back();
            let after = code[at + name.len()..].chars().next();
            // Not a part of a longer word, a method or a path's later segment, nor the
            // name of a module or function declared here.
            let head = code[..*at].trim_end();
            !before.is_some_and(|c| is_ident(c) || c == '.')
                && !after.is_some_and(is_ident)
                && !["::", "mod", "fn"].iter().any(|w| head.ends_with(w))
        })
        .count();
    words > 0
}

/// `text` with every `use ...;` item blanked out.
fn without_uses(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let starts_item = rest[..at].chars().next_back().is_none_or(|c| !is_ident(c));
        if !starts_item {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            continue;
        }
        out.push_str(&rest[..at]);
        let end = rest[at..].find(';').map_or(rest.len(), |e| at + e + 1);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `text` declares an inline module `name` (resolved loosely: any `mod name {`).
fn is_inline_child(text: &str, name: &str) -> bool {
    text.contains(&format!("mod {name} {{"))
}

/// The absolute module path of `path` written in module `scope`.
fn absolute(scope: &ModPath, path: &UsePath) -> ModPath {
    let mut out = scope.clone();
    let mut segments = path.segments.iter().peekable();
    let mut first = true;
    while let Some(seg) = segments.next() {
        match seg.as_str() {
            "crate" if first => out.clear(),
            "super" => {
                out.pop();
            }
            "self" => {}
            _ => {
                out.push(seg.clone());
                out.extend(segments.by_ref().cloned());
                break;
            }
        }
        first = false;
    }
    out
}

/// Parses the use tree or path starting at `at`: `a::b::{c, d::e as f, *}`. Returns each
/// leaf path and where the tree ends.
fn parse_tree(text: &str, at: usize) -> (Vec<UsePath>, usize) {
    fn skip_ws(text: &str, mut i: usize) -> usize {
        while text[i..].starts_with(char::is_whitespace) {
            i += text[i..].chars().next().unwrap().len_utf8();
        }
        i
    }
    fn tree(text: &str, mut i: usize, prefix: Vec<String>, out: &mut Vec<UsePath>) -> usize {
        let mut segments = prefix;
        loop {
            i = skip_ws(text, i);
            if text[i..].starts_with('{') {
                i += 1;
                loop {
                    i = skip_ws(text, i);
                    if text[i..].starts_with('}') {
                        return i + 1;
                    }
                    i = tree(text, i, segments.clone(), out);
                    i = skip_ws(text, i);
                    if text[i..].starts_with(',') {
                        i += 1;
                    } else if text[i..].starts_with('}') {
                        return i + 1;
                    } else {
                        return i;
                    }
                }
            }
            if text[i..].starts_with('*') {
                segments.push("*".to_string());
                out.push(UsePath {
                    segments,
                    alias: None,
                });
                return i + 1;
            }
            let end = i + text[i..]
                .find(|c: char| !is_ident(c))
                .unwrap_or(text.len() - i);
            if end == i {
                out.push(UsePath {
                    segments,
                    alias: None,
                });
                return i;
            }
            segments.push(text[i..end].to_string());
            i = end;
            if text[i..].starts_with("::") && !text[i + 2..].starts_with('<') {
                i += 2;
                continue;
            }
            let after = skip_ws(text, i);
            let alias = text[after..].strip_prefix("as ").map(|rest| {
                let rest = rest.trim_start();
                rest[..rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len())].to_string()
            });
            out.push(UsePath { segments, alias });
            return i;
        }
    }
    let mut out = Vec::new();
    let end = tree(text, at, Vec::new(), &mut out);
    (out, end)
}

/// Code only: comments removed, string and character literals emptied (so braces and
/// paths inside them count for nothing).
pub fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nest = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    nest += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    nest -= 1;
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !prev_ident(&chars, i) {
            let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            i += 2 + hashes;
            let close: String = std::iter::once('"')
                .chain((0..hashes).map(|_| '#'))
                .collect();
            let close: Vec<char> = close.chars().collect();
            while i < chars.len() && !chars[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && !prev_ident(&chars, i) {
            // A character literal ('x', '\n', '{'), or a lifetime ('a) kept as is.
            let lit = match (chars.get(i + 1), chars.get(i + 2), chars.get(i + 3)) {
                (Some('\\'), _, _) => chars[i + 2..]
                    .iter()
                    .position(|&q| q == '\'')
                    .map(|p| i + 2 + p + 1),
                (Some(_), Some('\''), _) => Some(i + 3),
                _ => None,
            };
            match lit {
                Some(end) => {
                    out.push_str("' '");
                    i = end;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn prev_ident(chars: &[char], i: usize) -> bool {
    i > 0 && is_ident(chars[i - 1])
}

/// Every `.rs` file under `dir`, recursively.
pub fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
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
/// `src/lock/multi/mod.rs` -> `[lock, multi]`, `src/lib.rs` -> `[]`.
pub fn module_path(src: &Path, path: &Path) -> ModPath {
    let rel = path.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

/// A cycle in a directed graph, as the nodes along it (first = last), if there is one.
pub fn find_cycle<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        graph: &BTreeMap<N, BTreeSet<N>>,
        state: &mut BTreeMap<N, u8>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next) {
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
        state.insert(node.clone(), 2);
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

/// Every cycle's edges at once would be noisy; this lists the strongly connected groups
/// of more than one file (each holds at least one cycle).
pub fn cyclic_groups<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Reachability by depth-first search from every node: fine for a few hundred files.
    let reach = |from: &N| -> BTreeSet<N> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<N, BTreeSet<N>> = graph.keys().map(|n| (n.clone(), reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut groups = Vec::new();
    for (n, r) in &reaches {
        if done.contains(n) || !r.contains(n) {
            continue;
        }
        let group: Vec<N> = r
            .iter()
            .filter(|m| reaches.get(*m).is_some_and(|back| back.contains(n)))
            .cloned()
            .collect();
        if group.len() > 1 {
            done.extend(group.iter().cloned());
            groups.push(group);
        }
    }
    groups
}

/// The reader on a small tree written for the purpose: `super::` from a file that is not
/// a `mod.rs`, a path through a re-export, a use group, an inline test module; it finds
/// the cycle the tree has and no other.
#[test]
fn a_cycle_between_files_is_found() {
    let dir = std::env::temp_dir().join(format!("floor-plan-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let path = dir.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    write("lib.rs", "mod a;\nmod b;\nmod c;\n");
    write(
        "a/mod.rs",
        "mod x;\nmod y;\npub(crate) use x::X;\npub(crate) struct Shared;\n\
         pub(in crate::a) fn private() {}\n",
    );
    // x -> y through a use group written from a non-mod.rs file's `super::`.
    write(
        "a/x.rs",
        "use super::{y::Y, Shared};\npub struct X(Y, Shared);\n",
    );
    // y -> x only through the re-export `crate::a::X`: the cycle x <-> y.
    write(
        "a/y.rs",
        "pub struct Y;\nfn f() -> usize { std::mem::size_of::<crate::a::X>() }\n",
    );
    // b -> a::y by `super::` from a top-level file; its test module's `super::` is b.
    write(
        "b.rs",
        "use super::a::y::Y; // crate::c::C in a comment is not an edge\n\
         const S: &str = \"crate::c::C\";\n\
         #[cfg(test)]\nmod tests {\n    use super::*;\n    fn g() { let _ = super::S; }\n}\n",
    );
    write("c.rs", "pub struct C;\n");
    // A re-export the file also uses itself is an import of it (lib -> c); one it only
    // passes through is not (lib's `pub use a::Shared` below is unused there).
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod c;\npub use c::C;\npub(crate) use a::Shared;\nfn f(_: C) {}\n",
    );
    let plan = FloorPlan::read(&dir);
    let m = |s: &str| -> ModPath { s.split("::").map(str::to_string).collect() };
    let edges = |s: &str| plan.edges[&m(s)].clone();
    assert_eq!(edges("a::x"), BTreeSet::from([m("a::y"), m("a")]));
    assert_eq!(edges("a::y"), BTreeSet::from([m("a::x")]));
    assert_eq!(edges("b"), BTreeSet::from([m("a::y")]));
    assert!(edges("c").is_empty() && edges("a").is_empty());
    assert_eq!(plan.edges[&Vec::new()], BTreeSet::from([m("c")]));
    let groups = cyclic_groups(&plan.edges);
    assert_eq!(groups, vec![vec![m("a::x"), m("a::y")]]);
    assert!(find_cycle(&plan.edges).is_some());
    // Without y's use of X, the tree has no cycle.
    write("a/y.rs", "pub struct Y;\n");
    let plan = FloorPlan::read(&dir);
    assert!(cyclic_groups(&plan.edges).is_empty());
    assert!(find_cycle(&plan.edges).is_none());
    fs::remove_dir_all(&dir).unwrap();
}

/// The reader sees the crate's own imports: the engine's files import each other dozens
/// of times, `wire/` and the kinds' folders too (the old check, which resolved `super::`
/// wrongly, saw 4 of the engine's).
#[test]
fn the_reader_sees_the_crates_imports() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let plan = FloorPlan::read(&src);
    let within = |folder: &str| -> usize {
        plan.edges
            .iter()
            .filter(|(f, _)| f.first().is_some_and(|t| t == folder))
            .map(|(_, to)| {
                to.iter()
                    .filter(|t| t.first().is_some_and(|t| t == folder))
                    .count()
            })
            .sum()
    };
    assert!(within("engine") > 60, "{} engine edges", within("engine"));
    assert!(within("wire") >= 1, "{} wire edges", within("wire"));
    assert!(within("layout") >= 4, "{} layout edges", within("layout"));
    assert!(within("lock") > 20, "{} lock edges", within("lock"));
}
