//! The method tables of the guide (`docs/guide/concepts.md`, "One contract for every kind") kept true, both ways:
//! every method a table gives a kind exists on it (the compiler checks the list below), and
//! every public method the kinds define in `src/` (inherent, from the shared macros of
//! `src/lock/api.rs`, or from the `Lock` trait) is in the table. No server needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use lockwise::{
    FairLock, FairLockGuard, FencedLock, FencedLockGuard, Lock, MultiLock, MultiLockGuard, RLock,
    RLockGuard, ReadLock, ReadLockGuard, RedLock, RedLockGuard, RwLock, SpinLock, SpinLockGuard,
    WriteLock, WriteLockGuard,
};

pub(super) type Methods = BTreeMap<String, BTreeSet<String>>;

/// `(kind, method)` for every method listed, each named in code: a path to the method, or
/// for a generic one a call in a closure that is never run. A method that does not exist
/// on its kind fails to compile.
macro_rules! listed {
    ($($kind:ident: [$($m:ident $(($($arg:expr),*))?),* $(,)?];)*) => {{
        let mut all = Methods::new();
        $(
            $(
                listed!(@check $kind $m $(($($arg),*))?);
                all.entry(stringify!($kind).to_string())
                    .or_default()
                    .insert(stringify!($m).to_string());
            )*
        )*
        all
    }};
    (@check $kind:ident $m:ident) => {
        let _ = <$kind>::$m;
    };
    (@check $kind:ident $m:ident ($($arg:expr),*)) => {
        let _ = |x: &$kind| named(x.$m($($arg),*));
    };
}

/// Takes what a listed call returns (never run).
fn named<T>(_: T) {}

fn body(_: lockwise::Held) -> std::future::Ready<()> {
    std::future::ready(())
}

fn in_code() -> Methods {
    let mut all = listed! {
        RLock: [lock, lock_with_lease, try_lock, run(body), try_run(Duration::ZERO, None, body),
            is_locked, hold_count, is_held_by_current_task, force_unlock, remaining_ttl,
            non_reentrant, with_owner("o"), reentrant, is_reentrant, name, key, channel];
        SpinLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key, with_backoff, backoff];
        FairLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key, queue_key, timeouts_key,
            waiter_lease, queue_len];
        FencedLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key, fence_key];
        ReadLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key];
        WriteLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key];
        RwLock: [is_locked, hold_count, is_held_by_current_task, force_unlock, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, read, write, is_write_locked,
            reader_count];
        MultiLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, names, is_any_locked];
        RedLock: [lock, lock_with_lease, try_lock, run(body),
            try_run(Duration::ZERO, None, body), is_locked, hold_count,
            is_held_by_current_task, force_unlock, remaining_ttl, non_reentrant,
            with_owner("o"), reentrant, is_reentrant, name, key];
        RLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach];
        SpinLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach];
        FairLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach];
        FencedLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach, token];
        ReadLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach];
        WriteLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach];
        MultiLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach, names,
            acquired_in];
        RedLockGuard: [unlock, lost, is_lost, validity, name, owner, lease, detach,
            acquired_nodes];
    };
    // An associated function: a call in a closure that is never run.
    let _ = |clients: &[lockwise::Client]| RedLock::new(clients, "n");
    all.entry("RedLock".into())
        .or_default()
        .insert("new".into());
    all
}

/// The names in backticks in `text`, split at `(`: "`try_lock(wait)`" gives "try_lock".
fn ticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split('(').next().unwrap_or(s).to_string())
        .collect()
}

/// The guide table whose header starts with `first`: kind (from its column header) ->
/// methods. A ✓ cell gives the kind the row's methods (the names in backticks in its first
/// cell); any other cell the names in backticks in it.
fn table(readme: &str, first: &str) -> Methods {
    let mut lines = readme
        .lines()
        .skip_while(|l| !l.starts_with(&format!("| {first} |")));
    let header = lines.next().unwrap_or_else(|| panic!("no table {first:?}"));
    let kinds: Vec<String> = header
        .split('|')
        .skip(2)
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().trim_matches('`').to_string())
        .collect();
    let mut methods = Methods::new();
    for row in lines.skip(1).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').skip(1).collect();
        let shared = ticked(cells[0]);
        for (kind, cell) in kinds.iter().zip(&cells[1..]) {
            let names = if cell.trim() == "✓" {
                shared.clone()
            } else {
                ticked(cell)
            };
            methods.entry(kind.clone()).or_default().extend(names);
        }
    }
    methods
}

/// The public methods `src/` gives each type: `pub fn` / `pub async fn` in its `impl` blocks
/// (at the top level of a file), the methods of the `src/lock/api.rs` macros it invokes, and
/// `run` / `try_run` when it implements `Lock`; and every handle and guard type that
/// implements the contract (`impl_lock!`), wherever its file is.
pub(super) fn in_source() -> (Methods, BTreeSet<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let fn_name = |line: &str, indent: &str| -> Option<String> {
        let rest = line.strip_prefix(indent)?;
        let rest = rest
            .strip_prefix("pub fn ")
            .or_else(|| rest.strip_prefix("pub async fn "))?;
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
        Some(rest[..end].to_string())
    };
    // The methods of each macro of src/lock/api.rs (`guard_accessors` without the `detach` of
    // its short, one-line form, recorded apart).
    let api = std::fs::read_to_string(root.join("lock/api.rs")).unwrap();
    let mut macros: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = None;
    for line in api.lines() {
        if let Some(name) = line.strip_prefix("macro_rules! ") {
            current = Some(name.trim_end_matches(" {").to_string());
        } else if let (Some(m), Some(f)) = (&current, fn_name(line.trim_start(), "")) {
            macros.entry(m.clone()).or_default().insert(f);
        }
    }
    let mut methods = Methods::new();
    let mut contract = BTreeSet::new();
    for text in &files {
        let mut owner: Option<String> = None;
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            if let Some(rest) = line.strip_prefix("impl ") {
                // `impl Type {` only: trait impls (`impl X for Y`) add no inherent method.
                owner = rest
                    .strip_suffix(" {")
                    .filter(|t| !t.contains(' '))
                    .map(str::to_string);
            } else if line == "}" {
                owner = None;
            } else if let (Some(kind), Some(f)) = (&owner, fn_name(line, "    ")) {
                methods.entry(kind.clone()).or_default().insert(f);
            }
            for (m, fns) in &macros {
                let Some(at) = line.find(&format!("{m}!(")) else {
                    continue;
                };
                let mut args = line[at + m.len() + 2..].to_string();
                if args.trim().is_empty() {
                    args = lines
                        .peek()
                        .map(|l| l.trim().to_string())
                        .unwrap_or_default();
                }
                let kind: String = args
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if kind.is_empty() || kind.starts_with(char::is_lowercase) {
                    continue; // the macro's own recursion or a `$guard`
                }
                // The short form, `guard_accessors!(Guard, lock: "...")` on one line, brings
                // `detach`; the long form (its own docs per method, the next lines) does not.
                let one_argument = args.trim_end().ends_with(");");
                let entry = methods.entry(kind).or_default();
                for f in fns {
                    if f != "detach" || m != "guard_accessors" || one_argument {
                        entry.insert(f.clone());
                    }
                }
            }
            let invocation = line.trim_start_matches("crate::lock::contract::");
            if let Some(rest) = invocation.strip_prefix("impl_lock!(") {
                let types: Vec<String> = rest
                    .split(',')
                    .take(2)
                    .map(|t| {
                        t.trim()
                            .trim_start_matches("crate::")
                            .trim_end_matches(");")
                    })
                    .map(str::to_string)
                    .collect();
                let entry = methods.entry(types[0].clone()).or_default();
                entry.insert("run".into());
                entry.insert("try_run".into());
                contract.extend(types);
            }
        }
    }
    (methods, contract)
}

#[test]
fn the_method_tables_match_the_code() {
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guide/concepts.md"),
    )
    .unwrap();
    let mut documented = table(&readme, "Handle method");
    documented.extend(table(&readme, "Guard method"));
    let code = in_code();
    assert_eq!(
        documented, code,
        "the guide's method tables (left) differ from the methods named in this test (right)"
    );
    let (source, contract) = in_source();
    // A kind added to src/ (it implements the contract) must be in the tables.
    for kind in &contract {
        assert!(
            code.contains_key(kind),
            "{kind} implements Lock / LockGuard but is in no method table of the guide"
        );
    }
    for (kind, listed) in &code {
        let defined = source.get(kind).cloned().unwrap_or_default();
        assert_eq!(
            listed, &defined,
            "{kind}: the tables (left) and the public methods in src/ (right) differ"
        );
    }
}

/// The scan of `src/` finds what it should: a sanity check on the parser itself.
#[test]
fn the_source_scan_sees_macros_and_impls() {
    let (source, contract) = in_source();
    assert!(contract.contains("RLock") && contract.contains("RedLockGuard"));
    let rlock = &source["RLock"];
    for m in ["lock", "is_locked", "non_reentrant", "run", "channel"] {
        assert!(rlock.contains(m), "RLock {m}: {rlock:?}");
    }
    assert!(source["RLockGuard"].contains("detach"));
    assert!(source["RedLockGuard"].contains("validity"));
    assert!(
        !source["RedLockGuard"].contains("new"),
        "pub(super) fn new is not public"
    );
}
