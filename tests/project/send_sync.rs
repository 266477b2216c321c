//! Compile-time checks: every public handle and guard is `Send + Sync` (so it can live in an
//! `Arc`, a static or a struct shared across tasks), `Error` is `Send + Sync + 'static` (so it
//! fits `Box<dyn Error + Send + Sync>` and `anyhow`), and the future of every public `async fn`
//! is `Send` (so it can be `tokio::spawn`ed). Nothing here talks to Redis: if this file
//! compiles, the checks passed.
//!
//! A new public async method belongs here; a new public type must (a test below reads
//! `src/lib.rs` and fails when one is missing).

use std::time::Duration;

use lockwise::{
    Client, ClientBuilder, Error, FairLock, FairLockGuard, FencedLock, FencedLockGuard,
    FencedValue, MultiLock, MultiLockGuard, RLock, RLockGuard, RedLock, RedLockGuard,
    RedLockOptions, RedLockSet,
};

fn send_sync<T: Send + Sync>() {}

fn send_sync_static<T: Send + Sync + 'static>() {}

fn send<T: Send>(_: &T) {}

#[test]
fn handles_guards_and_errors_are_send_and_sync() {
    send_sync::<Client>();
    send_sync::<ClientBuilder>();
    send_sync::<lockwise::KeyLayout>();
    send_sync::<RLock>();
    send_sync::<RLockGuard>();
    send_sync::<lockwise::SpinLock>();
    send_sync::<lockwise::SpinLockGuard>();
    send_sync::<FairLock>();
    send_sync::<FairLockGuard>();
    send_sync::<FencedLock>();
    send_sync::<FencedLockGuard>();
    send_sync::<FencedValue>();
    send_sync::<MultiLock>();
    send_sync::<MultiLockGuard>();
    send_sync::<RedLock>();
    send_sync::<RedLockGuard>();
    send_sync::<RedLockSet>();
    send_sync::<RedLockOptions>();
    send_sync::<lockwise::RwLock>();
    send_sync::<lockwise::ReadLock>();
    send_sync::<lockwise::ReadLockGuard>();
    send_sync::<lockwise::WriteLock>();
    send_sync::<lockwise::WriteLockGuard>();
    send_sync::<lockwise::Semaphore>();
    send_sync::<lockwise::SemaphorePermits>();
    send_sync::<lockwise::LeaseSemaphore>();
    send_sync::<lockwise::LeasedPermit>();
    send_sync::<lockwise::LeasedPermits>();
    send_sync::<lockwise::CountDownLatch>();
    send_sync::<lockwise::Admin>();
    send_sync::<lockwise::Held>();
    send_sync::<lockwise::ShutdownReport>();
    send_sync::<lockwise::Ownership>();
    send_sync::<lockwise::HoldMode>();
    send_sync::<lockwise::Holder>();
    send_sync::<lockwise::KeyInfo>();
    send_sync::<lockwise::Leak>();
    send_sync::<lockwise::LeakReason>();
    send_sync::<lockwise::LeakReport>();
    send_sync::<lockwise::Listing>();
    send_sync::<lockwise::LockInfo>();
    send_sync::<lockwise::LockKind>();
    send_sync::<lockwise::OwnerCheck>();
    send_sync::<lockwise::QueueEntry>();
    send_sync_static::<Error>();
    send_sync_static::<lockwise::Result<()>>();
}

#[test]
fn futures_of_public_async_methods_are_send() {
    // Naming the function makes the compiler check its body; it never runs (it would need a
    // server to build its arguments).
    let _ = futures_are_send;
}

/// Builds (never polls) the future of every public async method and checks it is `Send`.
#[allow(clippy::too_many_arguments)]
fn futures_are_send(
    builder: ClientBuilder,
    rlock: RLock,
    rguard: RLockGuard,
    fair: FairLock,
    fguard: FairLockGuard,
    fenced: FencedLock,
    xguard: FencedLockGuard,
    value: FencedValue,
    multi: MultiLock,
    mguard: MultiLockGuard,
    red: RedLock,
    dguard: RedLockGuard,
) {
    let d = Duration::from_secs(1);

    send(&Client::connect("redis://127.0.0.1/"));
    let set = RedLockSet::new(&[]);
    send(&set.shutdown(d));
    send(&builder.build());

    send(&rlock.lock());
    send(&rlock.lock_with_lease(d));
    send(&rlock.try_lock(d, None));
    send(&rlock.try_lock(d, Some(d)));
    send(&rlock.force_unlock());
    send(&rlock.is_locked());
    send(&rlock.is_held_by_current_task());
    send(&rlock.hold_count());
    send(&rlock.remaining_ttl());
    send(&rguard.unlock());

    send(&fair.lock());
    send(&fair.lock_with_lease(d));
    send(&fair.try_lock(d, None));
    send(&fair.force_unlock());
    send(&fair.is_locked());
    send(&fair.is_held_by_current_task());
    send(&fair.hold_count());
    send(&fair.remaining_ttl());
    send(&fair.queue_len());
    send(&fguard.unlock());

    send(&fenced.lock());
    send(&fenced.lock_with_lease(d));
    send(&fenced.try_lock(d, None));
    send(&fenced.force_unlock());
    send(&fenced.is_locked());
    send(&fenced.hold_count());
    send(&fenced.remaining_ttl());
    send(&xguard.unlock());

    send(&value.write(1, "v"));
    send(&value.read::<String>());
    send(&value.highest_token());

    send(&multi.lock());
    send(&multi.lock_with_lease(d));
    send(&multi.try_lock(d, None));
    send(&multi.is_any_locked());
    send(&mguard.unlock());

    send(&red.lock());
    send(&red.lock_with_lease(d));
    send(&red.try_lock(d, None));
    send(&dguard.unlock());
}

#[test]
fn spin_lock_futures_are_send() {
    let _ = spin_futures_are_send;
}

/// Builds (never polls) the future of every public async method of the spin lock.
fn spin_futures_are_send(spin: lockwise::SpinLock, guard: lockwise::SpinLockGuard) {
    let d = Duration::from_secs(1);
    send(&spin.lock());
    send(&spin.lock_with_lease(d));
    send(&spin.try_lock(d, None));
    send(&spin.force_unlock());
    send(&spin.is_locked());
    send(&spin.is_held_by_current_task());
    send(&spin.hold_count());
    send(&spin.remaining_ttl());
    send(&guard.unlock());
}

#[test]
fn semaphore_handles_guards_and_futures_are_send() {
    send_sync::<lockwise::Semaphore>();
    send_sync::<lockwise::SemaphorePermits>();
    let _ = semaphore_futures_are_send;
}

/// Builds (never polls) the future of every public async method of the semaphore.
fn semaphore_futures_are_send(sem: lockwise::Semaphore, permits: lockwise::SemaphorePermits) {
    let d = Duration::from_secs(1);
    send(&sem.try_set_permits(1));
    send(&sem.add_permits(1));
    send(&sem.release(1));
    send(&sem.available_permits());
    send(&sem.drain_permits());
    send(&sem.acquire_many(1));
    send(&sem.try_acquire_many(1, d));
    send(&permits.release());
}

/// Every struct and enum `src/lib.rs` re-exports is checked above: the list is read from
/// the source, so a new public type that is not `Send + Sync`-checked fails here.
#[test]
fn every_public_type_is_checked() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    // Names re-exported by `pub use module::{A, B}` / `pub use module::A;` (not `as`).
    let mut exported = Vec::new();
    for stmt in lib.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let path = &stmt[at + "pub use ".len()..];
        let names = match path.find('{') {
            Some(open) => &path[open + 1..path.rfind('}').unwrap()],
            None => path.rsplit("::").next().unwrap(),
        };
        for name in names.split(',').map(str::trim) {
            if name.starts_with(char::is_uppercase) && !name.contains(' ') {
                exported.push(name.to_string());
            }
        }
    }
    // Of those, the ones src/ defines as a struct or an enum (not traits, not aliases).
    let mut defined = std::collections::BTreeSet::new();
    let mut stack = vec![root.join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines() {
                    for kw in ["pub struct ", "pub enum "] {
                        if let Some(rest) = line.trim_start().strip_prefix(kw) {
                            let end = rest
                                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .unwrap_or(rest.len());
                            defined.insert(rest[..end].to_string());
                        }
                    }
                }
            }
        }
    }
    let this = include_str!("send_sync.rs");
    let checked = |name: &str| {
        ["send_sync::<", "send_sync_static::<"].iter().any(|call| {
            this.contains(&format!("{call}{name}>"))
                || this.contains(&format!("{call}lockwise::{name}>"))
        })
    };
    let public_types: Vec<&String> = exported.iter().filter(|n| defined.contains(*n)).collect();
    assert!(public_types.len() > 30, "found only {public_types:?}");
    let missing: Vec<&&String> = public_types.iter().filter(|n| !checked(n)).collect();
    assert!(
        missing.is_empty(),
        "public types without a Send + Sync check in tests/project/send_sync.rs: {missing:?}"
    );
}
