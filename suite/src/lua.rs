//! The engine's scripts as Redis receives them, read from the repository: for the checks
//! that run a script outside the library (the model's conformance test, the benchmark's raw
//! script calls). A script is declared in `src/wire/scripts.rs` as `NAME = "a.lua" +
//! "b.lua";`: its files one after the other, each `--#include <part>` line replaced by the
//! code of `lua/<part>` (the part's header comment left out). A unit test of the library
//! checks that this gives every script byte for byte.

use std::path::{Path, PathBuf};

/// The repository root (this crate lives in `suite/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("suite/ has a parent")
        .to_path_buf()
}

/// The source of the engine's script `name` (`"LOCK"`, `"UNLOCK"`, ...).
///
/// # Panics
/// When `src/wire/scripts.rs` declares no such script or a file is missing: a defect of
/// the caller or of the repository.
///
/// # Example
///
/// ```no_run
/// let lock = suite::lua::script("LOCK");
/// assert!(lock.contains("redis.call('hset'"));
/// ```
pub fn script(name: &str) -> String {
    let root = root();
    let decl = std::fs::read_to_string(root.join("src/wire/scripts.rs"))
        .expect("src/wire/scripts.rs is readable");
    // The declaration may wrap: from `NAME =` to the next `;`.
    let start = decl
        .lines()
        .position(|l| l.trim_start().starts_with(&format!("{name} =")))
        .unwrap_or_else(|| panic!("no script {name} in src/wire/scripts.rs"));
    let mut files = String::new();
    for line in decl.lines().skip(start) {
        files.push_str(line);
        if line.trim_end().ends_with(';') {
            break;
        }
    }
    let files = files
        .split_once('=')
        .expect("NAME = files;")
        .1
        .trim()
        .trim_end_matches(';');
    let mut out = String::new();
    for file in files.split('+') {
        let file = file.trim().trim_matches('"');
        for line in read(&root, file).lines() {
            match line.trim_start().strip_prefix("--#include ") {
                Some(part) => {
                    for code in read(&root, part.trim())
                        .lines()
                        .skip_while(|l| l.starts_with("--"))
                    {
                        out.push_str(code);
                        out.push('\n');
                    }
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn read(root: &Path, file: &str) -> String {
    std::fs::read_to_string(root.join("lua").join(file))
        .unwrap_or_else(|e| panic!("lua/{file}: {e}"))
}
