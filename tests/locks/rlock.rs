//! `RLock` basics against a real redis-server: the key layout, re-entry and hold counts, task
//! ownership, guards moved across tasks, force unlock, status queries, independent names.
//! Leases, `try_lock` timing and dropped guards are in tests/locks/rlock_leases.rs; stale guards of
//! every kind in tests/locks/stale_guard.rs.
//!
//! Every scenario ends by checking that each key the library left behind has a TTL.

use suite::kit::*;
use suite::OrNone;

use suite::hget;

use suite::exists;

use std::time::{Duration, Instant};

use lockwise::Client;
use suite::RedisServer;

/// The owner string starts with the client's uuid (hyphenated or simple form) and a ':'.
fn assert_owner_of(owner: &str, client: &Client) {
    let id = client.id();
    let ok = owner.starts_with(&format!("{}:", id.hyphenated()))
        || owner.starts_with(&format!("{}:", id.simple()));
    assert!(ok, "owner {owner:?} does not start with client id {id}");
    let task_part = owner.rsplit(':').next().unwrap();
    assert!(!task_part.is_empty(), "owner {owner:?} has no task part");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_handle_accessors_follow_the_key_layout() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("accessors");
    let client = within(
        10,
        Client::builder(server.url())
            .namespace(ns.clone())
            .watchdog_timeout(WATCHDOG)
            .build(),
    )
    .await
    .unwrap();
    assert_eq!(client.namespace(), ns);
    assert_eq!(client.watchdog_timeout(), WATCHDOG);
    assert_eq!(
        client.clone().id(),
        client.id(),
        "a clone is the same client"
    );

    let lock = client.lock("order:1001");
    assert_eq!(lock.name(), "order:1001");
    assert_eq!(lock.key(), format!("{ns}:lock:{{order:1001}}"));
    assert_eq!(lock.channel(), format!("{ns}:channel:{{order:1001}}"));

    // Another Client is another identity.
    let other = fresh_client(&server, "accessors-other").await;
    assert_ne!(other.id(), client.id());

    // Defaults of Client::connect.
    let default = within(10, Client::connect(server.url())).await.unwrap();
    assert_eq!(default.namespace(), "lockwise");
    assert_eq!(default.watchdog_timeout(), Duration::from_secs(30));
    assert_eq!(
        default.lock("x").key(),
        "lockwise:lock:{x}",
        "default namespace prefixes the key"
    );

    // Creating handles writes nothing.
    let mut conn = server.conn().await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_lock_counts_holds_in_redis() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "reentrant").await;
    let mut conn = server.conn().await;
    let lock = client.lock("reentrant");
    let key = lock.key().to_string();

    let (l, c, k, cl) = (lock.clone(), conn.clone(), key.clone(), client.clone());
    in_task(async move {
        let (lock, mut conn, key) = (l, c, k);
        let g1 = lock.lock().await.unwrap();
        let owner = g1.owner().to_string();
        assert_owner_of(&owner, &cl);
        assert_eq!(g1.name(), "reentrant");
        assert_eq!(g1.lease(), None, "lock() is watchdog mode");
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        assert_eq!(
            hget::<String>(&mut conn, &key, &owner).await.as_deref(),
            Some("1")
        );

        let g2 = lock.lock().await.unwrap();
        assert_eq!(g2.owner(), owner, "same task, same client: same owner");
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        assert_eq!(
            hget::<String>(&mut conn, &key, &owner).await.as_deref(),
            Some("2")
        );
        assert_eq!(hlen(&mut conn, &key).await, 1, "one owner field only");
        let ttl = pttl(&mut conn, &key).await;
        assert!(
            ttl > 0 && ttl <= WATCHDOG.as_millis() as i64,
            "watchdog lock has PTTL in (0, watchdog]: {ttl}"
        );
        assert!(lock.is_held_by_current_task().await.unwrap());

        // Release in acquisition order (not LIFO): each guard is one hold.
        g1.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        assert_eq!(
            hget::<String>(&mut conn, &key, &owner).await.as_deref(),
            Some("1")
        );
        assert!(exists(&mut conn, &key).await);
        assert!(lock.is_locked().await.unwrap());

        g2.unlock().await.unwrap();
        assert_eq!(lock.hold_count().await.unwrap(), 0);
        assert!(
            !exists(&mut conn, &key).await,
            "last unlock deletes the key"
        );
        assert!(!lock.is_locked().await.unwrap());
        assert!(!lock.is_held_by_current_task().await.unwrap());
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_sections_unwind_one_hold_at_a_time() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "nested").await;
    let mut conn = server.conn().await;
    let outer = client.lock("outer");
    let inner = client.lock("inner");

    let (o, i, c) = (outer.clone(), inner.clone(), conn.clone());
    in_task(async move {
        let (outer, inner, mut conn) = (o, i, c);
        let a = outer.lock().await.unwrap();
        let owner = a.owner().to_string();
        {
            let b = outer.lock().await.unwrap();
            {
                // Re-entry with a zero-wait try_lock succeeds at once for the owner.
                let c = outer
                    .try_lock(Duration::ZERO, None)
                    .await
                    .or_none()
                    .unwrap()
                    .expect("re-entrant try_lock(ZERO) by the holder");
                assert_eq!(outer.hold_count().await.unwrap(), 3);
                assert_eq!(
                    hget::<String>(&mut conn, outer.key(), &owner)
                        .await
                        .as_deref(),
                    Some("3")
                );
                {
                    // A different lock nested inside: independent key, independent count.
                    let d = inner.lock().await.unwrap();
                    assert_eq!(inner.hold_count().await.unwrap(), 1);
                    assert_eq!(outer.hold_count().await.unwrap(), 3);
                    assert_ne!(outer.key(), inner.key());
                    assert!(exists(&mut conn, inner.key()).await);
                    d.unlock().await.unwrap();
                    assert!(!exists(&mut conn, inner.key()).await);
                }
                c.unlock().await.unwrap();
            }
            assert_eq!(outer.hold_count().await.unwrap(), 2);
            assert_eq!(
                hget::<String>(&mut conn, outer.key(), &owner)
                    .await
                    .as_deref(),
                Some("2")
            );
            b.unlock().await.unwrap();
        }
        assert_eq!(outer.hold_count().await.unwrap(), 1);
        assert!(pttl(&mut conn, outer.key()).await > 0);
        a.unlock().await.unwrap();
        assert_eq!(outer.hold_count().await.unwrap(), 0);
        assert!(!exists(&mut conn, outer.key()).await);
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_task_is_a_different_owner() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "owners").await;
    let other_client = peer(&server, &client).await;
    let mut conn = server.conn().await;
    let lock = client.lock("owned");
    let key = lock.key().to_string();

    let (l, c, k) = (lock.clone(), conn.clone(), key.clone());
    in_task(async move {
        let (lock, mut conn, key) = (l, c, k);
        let g = lock.lock().await.unwrap();
        let parent_owner = g.owner().to_string();

        // Child task of the same Client: not the owner, cannot enter.
        let child_lock = lock.clone();
        in_task(async move {
            let t = Instant::now();
            let got = child_lock
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap();
            assert!(
                got.is_none(),
                "a child task must not re-enter its parent's lock"
            );
            assert!(t.elapsed() < Duration::from_millis(500));
            assert!(!child_lock.is_held_by_current_task().await.unwrap());
            assert_eq!(child_lock.hold_count().await.unwrap(), 0);
            assert!(child_lock.is_locked().await.unwrap());
        })
        .await;
        assert_eq!(lock.hold_count().await.unwrap(), 1, "parent hold unchanged");
        assert_eq!(
            hget::<String>(&mut conn, &key, &parent_owner)
                .await
                .as_deref(),
            Some("1")
        );
        assert_eq!(
            owner_fields(&mut conn, &key).await.len(),
            1,
            "child wrote no field"
        );
        g.unlock().await.unwrap();

        // Now the child can take it, under its own owner id; the parent is then excluded.
        let child_lock = lock.clone();
        let (tx_held, rx_held) = tokio::sync::oneshot::channel::<String>();
        let (tx_done, rx_done) = tokio::sync::oneshot::channel::<()>();
        let child = tokio::spawn(async move {
            let g = child_lock
                .try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
                .expect("free lock");
            tx_held.send(g.owner().to_string()).unwrap();
            rx_done.await.unwrap();
            g.unlock().await.unwrap();
        });
        let child_owner = within(5, rx_held).await.unwrap();
        assert_ne!(child_owner, parent_owner, "distinct tasks, distinct owners");
        assert!(
            lock.try_lock(Duration::ZERO, None)
                .await
                .or_none()
                .unwrap()
                .is_none(),
            "parent must not enter the child's lock"
        );
        assert!(!lock.is_held_by_current_task().await.unwrap());
        tx_done.send(()).unwrap();
        within(5, child).await.unwrap();
        assert!(!exists(&mut conn, &key).await);
    })
    .await;

    // A different Client in the very same task is a different owner too.
    let (l, ol) = (lock.clone(), other_client.lock("owned"));
    in_task(async move {
        let g = l.lock().await.unwrap();
        assert!(ol
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        assert!(!ol.is_held_by_current_task().await.unwrap());
        assert_eq!(ol.hold_count().await.unwrap(), 0);
        g.unlock().await.unwrap();
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_and_unlock_work_in_the_test_body_outside_spawned_tasks() {
    // The test body runs under `block_on` (tokio::task::try_id() is None there): the
    // library must still lock, re-enter and unlock there, without panicking.
    let server = RedisServer::start();
    let client = fresh_client(&server, "blockon").await;
    let mut conn = server.conn().await;
    let lock = client.lock("blockon");
    let g = within(5, lock.lock()).await.unwrap();
    assert!(lock.is_held_by_current_task().await.unwrap());
    let g2 = within(5, lock.try_lock(Duration::ZERO, None))
        .await
        .or_none()
        .unwrap()
        .expect("re-entry in the same (block_on) context");
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert_eq!(
        hget::<String>(&mut conn, lock.key(), g.owner())
            .await
            .as_deref(),
        Some("2")
    );
    // A spawned task is still a different owner.
    let l = lock.clone();
    in_task(async move {
        assert!(l
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
    })
    .await;
    g2.unlock().await.unwrap();
    g.unlock().await.unwrap();
    assert!(!exists(&mut conn, lock.key()).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moved_to_another_task_unlocks_there() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "moved").await;
    let mut conn = server.conn().await;
    let lock = client.lock("moved");

    let (l, c) = (lock.clone(), conn.clone());
    in_task(async move {
        let (lock, mut conn) = (l, c);
        let g1 = lock.lock().await.unwrap();
        let g2 = lock.lock().await.unwrap();
        let owner = g1.owner().to_string();
        assert_eq!(
            hget::<String>(&mut conn, lock.key(), &owner)
                .await
                .as_deref(),
            Some("2")
        );

        // Unlock one hold from a different task (possibly another worker thread).
        in_task(async move { g2.unlock().await }).await.unwrap();
        assert_eq!(
            hget::<String>(&mut conn, lock.key(), &owner)
                .await
                .as_deref(),
            Some("1")
        );
        assert_eq!(lock.hold_count().await.unwrap(), 1, "owner keeps one hold");
        assert!(lock.is_held_by_current_task().await.unwrap());

        // And the last one, too.
        in_task(async move { g1.unlock().await }).await.unwrap();
        assert!(!exists(&mut conn, lock.key()).await);
        assert_eq!(lock.hold_count().await.unwrap(), 0);
    })
    .await;

    // A guard taken in one task, moved to another that outlives the first.
    let l = lock.clone();
    let guard = in_task(async move { l.lock().await.unwrap() }).await;
    assert!(lock.is_locked().await.unwrap());
    in_task(async move { guard.unlock().await }).await.unwrap();
    assert!(!exists(&mut conn, lock.key()).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_returns_true_then_false_and_old_guard_is_not_held() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "force").await;
    let mut conn = server.conn().await;
    let lock = client.lock("force");

    assert!(!lock.force_unlock().await.unwrap(), "nothing to delete");

    let (l, c) = (lock.clone(), conn.clone());
    in_task(async move {
        let (lock, mut conn) = (l, c);
        let g = lock.lock().await.unwrap();
        let g2 = lock.lock().await.unwrap();
        assert!(exists(&mut conn, lock.key()).await);
        assert!(lock.force_unlock().await.unwrap(), "existed: true");
        assert!(!exists(&mut conn, lock.key()).await);
        assert!(!lock.force_unlock().await.unwrap(), "already gone: false");
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.hold_count().await.unwrap(), 0);
        assert_eq!(lock.remaining_ttl().await.unwrap(), None);

        assert_not_held(g2.unlock().await, "force");
        assert_not_held(g.unlock().await, "force");
        assert!(
            !exists(&mut conn, lock.key()).await,
            "failed unlocks write nothing"
        );
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_by_another_client_wakes_a_waiter() {
    let server = RedisServer::start();
    // Holder with the default 30 s watchdog: only the force unlock can free it quickly.
    let holder = client_with(&server, "force-wake", Duration::from_secs(30)).await;
    let waiter = peer(&server, &holder).await;
    let admin = peer(&server, &holder).await;
    let mut conn = server.conn().await;
    let hl = holder.lock("contended");
    let (wl, al) = (waiter.lock("contended"), admin.lock("contended"));
    assert_eq!(wl.key(), hl.key());

    let l = hl.clone();
    let held = in_task(async move { l.lock().await.unwrap() }).await;
    let holder_owner = held.owner().to_string();

    let w = wl.clone();
    let waiting = tokio::spawn(async move {
        let g = w.lock().await.unwrap();
        let got_at = Instant::now();
        let owner = g.owner().to_string();
        (g, got_at, owner)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "waiter must wait while the lock is held"
    );

    let forced_at = Instant::now();
    assert!(al.force_unlock().await.unwrap());
    let (g, got_at, waiter_owner) = within(5, waiting).await.unwrap();
    let woke_after = got_at.saturating_duration_since(forced_at);
    assert!(
        woke_after < Duration::from_secs(1),
        "waiter took {woke_after:?} after force_unlock (holder's TTL was 30 s)"
    );
    assert_ne!(waiter_owner, holder_owner);
    assert_eq!(
        hget::<String>(&mut conn, wl.key(), &waiter_owner)
            .await
            .as_deref(),
        Some("1")
    );

    // The old holder's guard no longer has a hold, and its unlock leaves the new holder alone.
    assert_not_held(held.unlock().await, "contended");
    assert_eq!(
        hget::<String>(&mut conn, wl.key(), &waiter_owner)
            .await
            .as_deref(),
        Some("1")
    );
    g.unlock().await.unwrap();
    assert!(!exists(&mut conn, wl.key()).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_queries_reflect_the_lock_state() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "status").await;
    let other = peer(&server, &client).await;
    let mut conn = server.conn().await;
    let lock = client.lock("status");
    let other_lock = other.lock("status");

    // Free.
    assert!(!lock.is_locked().await.unwrap());
    assert!(!lock.is_held_by_current_task().await.unwrap());
    assert_eq!(lock.hold_count().await.unwrap(), 0);
    assert_eq!(lock.remaining_ttl().await.unwrap(), None);
    assert!(
        suite::keys_with_pttl(&mut conn).await.is_empty(),
        "queries write nothing"
    );

    let lease = Duration::from_secs(5);
    let (l, ol) = (lock.clone(), other_lock.clone());
    in_task(async move {
        let (lock, other_lock) = (l, ol);
        let g = lock.lock_with_lease(lease).await.unwrap();
        assert_eq!(g.lease(), Some(lease));
        assert!(lock.is_locked().await.unwrap());
        assert!(lock.is_held_by_current_task().await.unwrap());
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        let ttl = lock.remaining_ttl().await.unwrap().expect("held: Some");
        assert!(
            ttl <= lease && ttl > lease - Duration::from_secs(1),
            "remaining_ttl {ttl:?} vs lease {lease:?}"
        );

        // Seen from another task of the same client and from another client.
        let l2 = lock.clone();
        in_task(async move {
            assert!(l2.is_locked().await.unwrap());
            assert!(!l2.is_held_by_current_task().await.unwrap());
            assert_eq!(l2.hold_count().await.unwrap(), 0);
            assert!(l2.remaining_ttl().await.unwrap().is_some());
        })
        .await;
        assert!(other_lock.is_locked().await.unwrap());
        assert!(!other_lock.is_held_by_current_task().await.unwrap());
        let seen = other_lock.remaining_ttl().await.unwrap().expect("Some");
        assert!(seen <= lease);

        g.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.remaining_ttl().await.unwrap(), None);
        assert_eq!(other_lock.remaining_ttl().await.unwrap(), None);

        // Watchdog mode: TTL bounded by the watchdog timeout and kept alive past it.
        let g = lock.lock().await.unwrap();
        assert_eq!(g.lease(), None);
        let ttl = lock.remaining_ttl().await.unwrap().expect("Some");
        assert!(ttl <= WATCHDOG && ttl > Duration::ZERO, "{ttl:?}");
        tokio::time::sleep(WATCHDOG + WATCHDOG / 2).await;
        assert!(
            lock.is_held_by_current_task().await.unwrap(),
            "watchdog keeps the lock past its timeout"
        );
        let ttl = lock.remaining_ttl().await.unwrap().expect("still Some");
        assert!(ttl <= WATCHDOG, "{ttl:?}");
        g.unlock().await.unwrap();
        assert_eq!(lock.remaining_ttl().await.unwrap(), None);
        assert!(!lock.is_held_by_current_task().await.unwrap());
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_names_are_independent_locks() {
    let server = RedisServer::start();
    let a = fresh_client(&server, "names").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let (x, y) = (a.lock("x"), b.lock("y"));
    let g = in_task({
        let x = x.clone();
        async move { x.lock_with_lease(Duration::from_secs(5)).await.unwrap() }
    })
    .await;
    let h = in_task({
        let y = y.clone();
        async move {
            y.try_lock(Duration::ZERO, Some(Duration::from_secs(5)))
                .await
                .or_none()
                .unwrap()
                .expect("another name is free")
        }
    })
    .await;
    assert!(exists(&mut conn, x.key()).await && exists(&mut conn, y.key()).await);
    assert!(b.lock("x").is_locked().await.unwrap());
    g.unlock().await.unwrap();
    assert!(y.is_locked().await.unwrap(), "unlocking x leaves y held");
    h.unlock().await.unwrap();
    assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
}
