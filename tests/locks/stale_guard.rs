//! Stale guards, every lock kind (invariants 5 and 6): a guard that no longer holds (its lease
//! ran out, the lock was force-unlocked, the same task took it anew) answers `NotHeld` on
//! unlock and never releases a hold taken after it, by another client, another task or its own
//! task, explicitly or from `Drop`.
//!
//! Related elsewhere: a guard found forgotten on re-entry (tests/locks/hold_accounting.rs), an old
//! Redlock guard after a partial release (tests/redlock/redlock_subsets.rs), an unlock after the lease
//! or a force unlock (tests/locks/rlock_leases.rs, tests/locks/rlock.rs).

use suite::kit::*;
use suite::OrNone;

use suite::hget;

use suite::exists;

use std::future::Future;

use std::time::Duration;

use lockwise::{Client, Error, RedLockSet};
use suite::RedisServer;

// ---------------------------------------------------------------------------------------------
// RLock

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_unlock_after_expiry_does_not_release_the_new_owner() {
    let server = RedisServer::start();
    let a = fresh_client(&server, "takeover").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let (la, lb) = (a.lock("res"), b.lock("res"));

    let l = la.clone();
    let stale =
        in_task(async move { l.lock_with_lease(Duration::from_millis(150)).await.unwrap() }).await;
    tokio::time::sleep(Duration::from_millis(400)).await;

    // B takes over (twice: hold count 2) and keeps its task alive while A unlocks.
    let (tx_held, rx_held) = tokio::sync::oneshot::channel::<String>();
    let (tx_go, rx_go) = tokio::sync::oneshot::channel::<()>();
    let l = lb.clone();
    let c = conn.clone();
    let b_task = tokio::spawn(async move {
        let mut c = c;
        let g1 = l.lock().await.unwrap();
        let g2 = l.lock().await.unwrap();
        tx_held.send(g1.owner().to_string()).unwrap();
        rx_go.await.unwrap();
        assert_eq!(
            l.hold_count().await.unwrap(),
            2,
            "B's holds survived A's stale unlock"
        );
        assert!(l.is_held_by_current_task().await.unwrap());
        assert_eq!(
            hget::<String>(&mut c, l.key(), g1.owner()).await.as_deref(),
            Some("2")
        );
        g2.unlock().await.unwrap();
        g1.unlock().await.unwrap();
    });
    let b_owner = within(5, rx_held).await.unwrap();

    assert_not_held(stale.unlock().await, "res");
    assert!(la.is_locked().await.unwrap());
    assert_eq!(
        hget::<String>(&mut conn, la.key(), &b_owner)
            .await
            .as_deref(),
        Some("2")
    );
    assert_eq!(hlen(&mut conn, la.key()).await, 1);
    tx_go.send(()).unwrap();
    within(5, b_task).await.unwrap();
    assert!(!exists(&mut conn, la.key()).await);
    assert_ns_clean(&mut conn, a.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_unlock_after_force_unlock_does_not_release_another_task() {
    // Same Client, different task: force_unlock, task 2 takes the lock, task 1's guard fails.
    let server = RedisServer::start();
    let client = fresh_client(&server, "takeover-task").await;
    let mut conn = server.conn().await;
    let lock = client.lock("res");

    let l = lock.clone();
    let stale = in_task(async move { l.lock().await.unwrap() }).await;
    assert!(lock.force_unlock().await.unwrap());

    let (tx_held, rx_held) = tokio::sync::oneshot::channel::<String>();
    let (tx_go, rx_go) = tokio::sync::oneshot::channel::<()>();
    let l = lock.clone();
    let task2 = tokio::spawn(async move {
        let g = l.lock().await.unwrap();
        tx_held.send(g.owner().to_string()).unwrap();
        rx_go.await.unwrap();
        assert_eq!(l.hold_count().await.unwrap(), 1, "task 2's hold survived");
        g.unlock().await.unwrap();
    });
    let owner2 = within(5, rx_held).await.unwrap();
    assert_ne!(owner2, stale.owner());

    assert_not_held(stale.unlock().await, "res");
    assert_eq!(
        hget::<String>(&mut conn, lock.key(), &owner2)
            .await
            .as_deref(),
        Some("1")
    );
    let pttl: i64 = lockwise::redis::cmd("PTTL")
        .arg(lock.key())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 0, "task 2's lock keeps its TTL: {pttl}");
    tx_go.send(()).unwrap();
    within(5, task2).await.unwrap();
    assert!(!exists(&mut conn, lock.key()).await);
    assert_ns_clean(&mut conn, client.namespace()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_guard_of_the_same_task_does_not_release_its_new_hold() {
    // Each guard is one hold: a guard whose hold expired must not "unlock" a newer hold the
    // same task took afterwards (same owner string, different acquisition).
    let server = RedisServer::start();
    let client = fresh_client(&server, "same-task").await;
    let other = peer(&server, &client).await;
    let mut conn = server.conn().await;
    let lock = client.lock("res");
    let other_lock = other.lock("res");

    let (l, ol, c) = (lock.clone(), other_lock.clone(), conn.clone());
    in_task(async move {
        let (l, ol, mut c) = (l, ol, c);
        let stale = l.lock_with_lease(Duration::from_millis(100)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!exists(&mut c, l.key()).await);
        let fresh = l.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        assert_eq!(fresh.owner(), stale.owner());

        let r = stale.unlock().await;
        assert_not_held(r, "res");
        assert_eq!(l.hold_count().await.unwrap(), 1, "the fresh hold is intact");
        assert!(
            ol.try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
                .is_none(),
            "another client must still be excluded"
        );
        fresh.unlock().await.unwrap();
        assert!(!exists(&mut c, l.key()).await);

        // Same story with a dropped (not unlocked) stale guard: its background release
        // must not take the newer hold either.
        let stale = l.lock_with_lease(Duration::from_millis(100)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let fresh = l.lock_with_lease(Duration::from_secs(5)).await.unwrap();
        drop(stale);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            l.hold_count().await.unwrap(),
            1,
            "the fresh hold survived the drop"
        );
        assert_eq!(
            hget::<String>(&mut c, l.key(), fresh.owner())
                .await
                .as_deref(),
            Some("1")
        );
        fresh.unlock().await.unwrap();
        assert!(!exists(&mut c, l.key()).await);
    })
    .await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

/// A guard from an earlier run of holds (its lease ran out, the same task took the lock
/// again and released it, so the registry has no entry for the owner any more) is stale.
/// Unlocking it while the same task is taking the lock anew (script ran, guard not yet
/// registered) must not release that new hold: the stale guard must report `NotHeld`, and
/// the new guard must really hold the lock. (Review finding: `released()` used to answer
/// "not tracked, let the server decide" and sent a blind release.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_guard_never_releases_a_hold_being_registered() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("rc-stale");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("build client");
    let other = suite::client(&server, &ns, Duration::from_secs(10)).await;
    let mut conn = server.conn().await;
    let lock = c.lock("stale");
    let key = lock.key().to_string();

    let (g1_tx, g1_rx) = tokio::sync::oneshot::channel();
    let (phase_tx, phase_rx) = tokio::sync::oneshot::channel::<()>();
    let (g3_tx, g3_rx) = tokio::sync::oneshot::channel();
    let t_lock = lock.clone();
    // The owner task runs on its own single-threaded runtime, so it can be kept from
    // registering its guard while the client's connection (on the test runtime) already
    // delivered the reply.
    let owner_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let owner = tokio::spawn(async move {
                let g1 = t_lock
                    .lock_with_lease(Duration::from_millis(150))
                    .await
                    .unwrap();
                g1_tx.send(g1).unwrap();
                tokio::time::sleep(Duration::from_millis(400)).await; // g1's lease runs out
                let g2 = t_lock.lock().await.unwrap(); // a new run of holds
                g2.unlock().await.unwrap(); // ... ended: no registry entry for the owner
                phase_tx.send(()).unwrap();
                // Send the lock script (first poll), then keep this thread busy for a while
                // before the reply is looked at: the hold exists, its guard does not yet.
                let mut acquire = Box::pin(t_lock.lock());
                let mut first = true;
                let g3 = std::future::poll_fn(|cx| {
                    let polled = acquire.as_mut().poll(cx);
                    if first && polled.is_pending() {
                        first = false;
                        std::thread::sleep(Duration::from_millis(1500));
                    }
                    polled
                })
                .await
                .unwrap();
                g3_tx.send(g3).unwrap();
            });
            owner.await.unwrap();
        });
    });

    let g1 = g1_rx.await.expect("g1");
    let owner = g1.owner().to_string();
    phase_rx.await.expect("phase");
    // The owner's new lock script has run: the hold is on the server, not yet registered.
    let ran = suite::eventually(Duration::from_secs(1), || {
        let mut c = conn.clone();
        let (key, owner) = (key.clone(), owner.clone());
        async move { hget(&mut c, &key, &owner).await == Some(1) }
    })
    .await;
    assert!(ran, "the owner's lock script did not run");
    let stale = g1.unlock().await;
    let held_after = hget(&mut conn, &key, &owner).await;
    let g3 = g3_rx.await.expect("g3");
    owner_thread.join().unwrap();
    let intruder = other
        .lock("stale")
        .try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
        .await
        .or_none()
        .expect("try_lock");
    let both_hold = intruder.is_some();
    assert!(
        matches!(stale, Err(Error::NotHeld { .. })),
        "a stale guard's unlock answered {stale:?}; the owner's hold is now {held_after:?}; \
         another client acquired while the new guard is live: {both_hold}"
    );
    assert_eq!(held_after, Some(1), "the stale guard released the new hold");
    assert!(!both_hold, "two owners hold the lock at once");
    g3.unlock().await.expect("unlock g3");
}

// ---------------------------------------------------------------------------------------------
// FairLock

/// The counterpart of the RedLock stale-guard bug: a fair lease guard whose hold expired must
/// not release the hold its task took afterwards; its unlock is NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_stale_lease_guard_does_not_release_the_next_hold_of_its_task() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("review-fair-stale");
    let c = suite::client(&server, &ns, Duration::from_secs(30)).await;
    let c2 = suite::client(&server, &ns, Duration::from_secs(30)).await;
    let (lock, other) = (c.fair_lock("stale"), c2.fair_lock("stale"));
    suite::in_task(stale_lease_guard_keeps_the_next_hold(lock, other, false)).await;
}

/// For a lock kind: a lease guard whose hold expired, its task having taken the lock again,
/// answers NotHeld (or, with `drop_it`, is dropped) and leaves the new hold alone; another
/// owner stays out.
async fn stale_lease_guard_keeps_the_next_hold<L: lockwise::Lock>(
    lock: L,
    other: L,
    drop_it: bool,
) {
    use lockwise::LockGuard;
    let old = lock
        .try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
        .await
        .or_none()
        .unwrap()
        .expect("first hold");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let new = lock
        .try_lock(Duration::ZERO, Some(Duration::from_secs(8)))
        .await
        .or_none()
        .unwrap()
        .expect("second hold");
    assert!(!new.is_lost(), "the new hold inherits no loss");
    if drop_it {
        drop(old);
        tokio::time::sleep(Duration::from_millis(200)).await;
    } else {
        let stale = old.unlock().await;
        assert!(
            matches!(&stale, Err(e) if e.is_not_held()),
            "stale unlock answered {stale:?}"
        );
    }
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    let intruder = other
        .try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
        .await
        .or_none()
        .unwrap();
    assert!(intruder.is_none(), "another owner got in");
    new.unlock().await.unwrap();
    assert!(!lock.is_locked().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// SpinLock

/// A spin lock's stale lease guard (its hold expired, its task took the lock again, both
/// by the polling acquire) answers NotHeld and leaves the new hold alone; dropping it
/// instead of unlocking does the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_stale_lease_guard_does_not_release_the_next_hold_of_its_task() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("spin-stale");
    let c = suite::client(&server, &ns, Duration::from_secs(30)).await;
    let c2 = suite::client(&server, &ns, Duration::from_secs(30)).await;
    let (lock, other) = (c.spin_lock("stale"), c2.spin_lock("stale"));
    suite::in_task(async move {
        for drop_it in [false, true] {
            stale_lease_guard_keeps_the_next_hold(lock.clone(), other.clone(), drop_it).await;
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// RedLock

/// A lease guard whose hold expired must not release the hold the same task took afterwards
/// (invariants 5 and 6). RLock/FairLock guard against this with hold epochs; RedLock does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_stale_lease_guard_does_not_release_the_next_hold_of_its_task() {
    let servers = suite::servers(3);
    let ns = suite::unique_ns("review-redlock-stale");
    let set = RedLockSet::with_options(
        &suite::node_clients(&servers, &ns).await,
        suite::redlock_options(Duration::from_secs(10)),
    );
    let other_set = RedLockSet::with_options(
        &suite::node_clients(&servers, &ns).await,
        suite::redlock_options(Duration::from_secs(10)),
    );
    let mut conns = suite::conns(&servers).await;
    suite::in_task(async move {
        let lock = set.lock("stale");
        let key = lock.key(0).unwrap().to_string();
        let old = lock
            .try_lock(Duration::ZERO, Some(Duration::from_millis(300)))
            .await
            .or_none()
            .unwrap()
            .expect("first hold");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(old.is_lost(), "the lease ran out");
        // The same task takes the lock again: a new hold (count 1 on every node).
        let new = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(8)))
            .await
            .or_none()
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
            .or_none()
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
