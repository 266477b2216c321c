//! Compile-time checks: every public handle and guard is `Send + Sync` (so it can live in an
//! `Arc`, a static or a struct shared across tasks), `Error` is `Send + Sync + 'static` (so it
//! fits `Box<dyn Error + Send + Sync>` and `anyhow`), and the future of every public `async fn`
//! is `Send` (so it can be `tokio::spawn`ed). Nothing here talks to Redis: if this file
//! compiles, the checks passed.
//!
//! A new public type or async method belongs here.

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
    send_sync::<RLock>();
    send_sync::<RLockGuard>();
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
