//! Review tests for RedLock against three real, independent redis-servers.
mod support;

use support::{conns, hget, node_clients, redlock_options, servers};

use support::in_task;

use std::time::Duration;

use lockwise::RedLockSet;

/// A lease guard whose hold expired must not release the hold the same task took afterwards
/// (invariants 5 and 6). RLock/FairLock guard against this with hold epochs; RedLock does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_lease_guard_does_not_release_the_next_hold_of_its_task() {
    let servers = servers(3);
    let ns = support::unique_ns("review-redlock-stale");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(10)),
    );
    let other_set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_secs(10)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("stale");
        let key = lock.key(0).unwrap().to_string();
        let old = lock
            .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
            .await
            .unwrap()
            .expect("first hold");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(old.is_lost(), "the lease ran out");
        // The same task takes the lock again: a new hold (count 1 on every node).
        let new = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(8)))
            .await
            .unwrap()
            .expect("second hold");
        for c in conns.iter_mut() {
            assert_eq!(hget(c, &key, new.owner()).await, Some(1));
        }
        // The stale guard's unlock must be NotHeld and must leave the new hold alone.
        let stale = old.unlock().await;
        let mut counts = Vec::new();
        for c in conns.iter_mut() {
            counts.push(hget(c, &key, new.owner()).await);
        }
        let intruder = other_set
            .lock("stale")
            .try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
            .await
            .unwrap();
        let stale_ok = matches!(&stale, Err(e) if e.is_not_held());
        assert!(
            stale_ok && counts == vec![Some(1); 3] && intruder.is_none(),
            "stale unlock answered {stale:?}; new hold counts per node afterwards {counts:?}; \
             another owner acquired meanwhile: {}",
            intruder.is_some()
        );
        drop(intruder);
        new.unlock().await.unwrap();
    })
    .await;
}

/// Unlocks racing the extension task (TTL 150 ms: an extension every 50 ms): an extension in
/// flight when the guard is released must never revive or keep the released lock; every
/// node is free right after each unlock and stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_racing_extensions_never_leaves_a_hold() {
    let servers = servers(3);
    let ns = support::unique_ns("review-redlock-extend-race");
    let set = RedLockSet::with_options(
        &node_clients(&servers, &ns).await,
        redlock_options(Duration::from_millis(150)),
    );
    let mut conns = conns(&servers).await;
    in_task(async move {
        let lock = set.lock("race");
        let key = lock.key(0).unwrap().to_string();
        for i in 0..25u64 {
            let g = lock.lock().await.unwrap();
            // Land the unlock at varying points of the 50 ms extension period.
            tokio::time::sleep(Duration::from_millis(40 + (i * 7) % 30)).await;
            assert!(!g.is_lost(), "round {i}: extended hold reported lost");
            g.unlock().await.unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
            for (n, c) in conns.iter_mut().enumerate() {
                let exists: i64 = redis::cmd("EXISTS").arg(&key).query_async(c).await.unwrap();
                assert_eq!(exists, 0, "round {i}: node {n} still holds after unlock");
            }
        }
    })
    .await;
}
