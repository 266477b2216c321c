//! The guide cites tests as `cargo test` arguments (`--test <binary> <module>::<test>`, and
//! `…::<test>` for another test of the module cited just before): every cited test exists
//! where the citation says, so a moved or renamed test fails here instead of leaving the
//! guide pointing at nothing.

use std::fs;
use std::path::{Path, PathBuf};

/// The file of `module` (`a::b`, empty for the root) in test binary `binary`.
fn module_file(binary: &str, module: &str) -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(binary);
    if module.is_empty() {
        return Some(dir.join("main.rs")).filter(|p| p.exists());
    }
    let rel: PathBuf = module.split("::").collect();
    [
        dir.join(&rel).with_extension("rs"),
        dir.join(&rel).join("mod.rs"),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// Whether `file` defines a test function `name`.
fn defines(file: &Path, name: &str) -> bool {
    let text = fs::read_to_string(file).unwrap();
    text.contains(&format!("fn {name}("))
}

#[test]
fn every_test_the_guide_cites_exists_where_it_says() {
    let guide = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide");
    let (mut checked, mut missing) = (0, Vec::new());
    for entry in fs::read_dir(&guide).unwrap() {
        let page = entry.unwrap().path();
        let text = fs::read_to_string(&page).unwrap();
        let mut last: Option<(String, String)> = None;
        for cited in text.split('`').skip(1).step_by(2) {
            let (binary, module, name) = if let Some(rest) = cited.strip_prefix("--test ") {
                let Some((binary, path)) = rest.split_once(' ') else {
                    continue;
                };
                let (module, name) = path.rsplit_once("::").unwrap_or(("", path));
                (binary.to_string(), module.to_string(), name.to_string())
            } else if let Some(name) = cited.strip_prefix("…::").filter(|n| !n.is_empty()) {
                let Some((binary, module)) = last.clone() else {
                    missing.push(format!("{}: `{cited}` follows no citation", page.display()));
                    continue;
                };
                (binary, module, name.to_string())
            } else {
                continue;
            };
            checked += 1;
            match module_file(&binary, &module) {
                Some(file) if defines(&file, &name) => {}
                _ => missing.push(format!(
                    "{}: `--test {binary} {module}::{name}` does not exist",
                    page.display()
                )),
            }
            last = Some((binary, module));
        }
    }
    assert!(checked > 20, "only {checked} citations found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
