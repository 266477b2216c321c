// Every acquire of every kind, written as a statement: the guard (or permits) would be
// dropped, and the lock released, at once. Each must be a compile error under
// `#![deny(unused_must_use)]` (a warning without it).
#![deny(unused_must_use)]

use std::time::Duration;

use lockwise::{Client, RedLockSet};

async fn forgotten(client: Client, set: RedLockSet) -> lockwise::Result<()> {
    let w = Duration::from_secs(1);
    client.lock("a").lock().await?;
    client.lock("a").lock_with_lease(w).await?;
    client.lock("a").try_lock(w, None).await?;
    client.fair_lock("a").try_lock(w, None).await?;
    client.fenced_lock("a").try_lock(w, None).await?;
    client.spin_lock("a").lock().await?;
    client.spin_lock("a").try_lock(w, None).await?;
    client.multi_lock(["a", "b"]).try_lock(w, None).await?;
    client.rw_lock("a").read().try_lock(w, None).await?;
    client.rw_lock("a").write().try_lock(w, None).await?;
    set.lock("a").try_lock(w, None).await?;
    client.semaphore("s").acquire().await?;
    client.semaphore("s").try_acquire(w).await?;
    client.semaphore("s").try_acquire_many(2, w).await?;
    client.lease_semaphore("l").try_acquire(w, w).await?;
    client.lease_semaphore("l").acquire_many(2, w).await?;
    client.lease_semaphore("l").try_acquire_many(2, w, w).await?;
    Ok(())
}

fn main() {
    let _ = forgotten;
}
