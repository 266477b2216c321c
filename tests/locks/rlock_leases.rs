//! `RLock` leases and timing against a real redis-server: a lease frees the lock for another
//! client and makes a late unlock `NotHeld`, `try_lock` makes one fast attempt or waits its
//! full time, a dropped guard releases promptly, and renewals never cut short a longer lease
//! mixed into the same hold.
//!
//! Every scenario ends by checking that each key the library left behind has a TTL.

use suite::kit::*;
use suite::OrNone;

use suite::hget;

use suite::exists;

use std::time::{Duration, Instant};

use suite::RedisServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_after_lease_expiry_is_not_held() {
    let server = RedisServer::start();
    let client = fresh_client(&server, "expired").await;
    let mut conn = server.conn().await;
    let lock = client.lock("expired");

    let (l, c) = (lock.clone(), conn.clone());
    in_task(async move {
        let (lock, mut conn) = (l, c);
        let g = lock
            .lock_with_lease(Duration::from_millis(100))
            .await
            .unwrap();
        assert_eq!(g.lease(), Some(Duration::from_millis(100)));
        let ttl = pttl(&mut conn, lock.key()).await;
        assert!(ttl > 0 && ttl <= 100, "PTTL follows the lease: {ttl}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!exists(&mut conn, lock.key()).await, "lease expired");
        assert!(!lock.is_locked().await.unwrap());
        assert_eq!(lock.hold_count().await.unwrap(), 0);
        assert_not_held(g.unlock().await, "expired");
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expiry_frees_the_lock_for_another_client() {
    let server = RedisServer::start();
    let a = fresh_client(&server, "lease").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let la = a.lock("lease");
    let lb = b.lock("lease");
    let lease = Duration::from_millis(300);

    // 1) Nobody waiting: the key vanishes after about the lease.
    let l = la.clone();
    let (g, t0) = in_task(async move {
        let g = l.lock_with_lease(lease).await.unwrap();
        (g, Instant::now())
    })
    .await;
    assert!(lb
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let key = la.key().to_string();
    let mut c = conn.clone();
    assert!(
        suite::eventually(Duration::from_secs(2), || {
            let (mut c, key) = (c.clone(), key.clone());
            async move { !exists(&mut c, &key).await }
        })
        .await,
        "lease did not expire"
    );
    let gone_after = t0.elapsed();
    assert!(
        gone_after >= Duration::from_millis(250) && gone_after < Duration::from_millis(1500),
        "key vanished after {gone_after:?}, lease was {lease:?}"
    );
    let t = in_task({
        let lb = lb.clone();
        async move {
            let g = lb.try_lock(Duration::ZERO, None).await.or_none().unwrap();
            let g = g.expect("B takes the expired lock");
            let owner = g.owner().to_string();
            g.unlock().await.unwrap();
            owner
        }
    })
    .await;
    assert!(!t.is_empty());
    assert_not_held(g.unlock().await, "lease");

    // 2) B waiting with lock(): it gets the lock once A's lease runs out.
    let l = la.clone();
    let (g, t0) = in_task(async move {
        let g = l.lock_with_lease(lease).await.unwrap();
        (g, Instant::now())
    })
    .await;
    let lb2 = lb.clone();
    let (gb, waited) = in_task(async move {
        let g = lb2.lock().await.unwrap();
        (g, t0.elapsed())
    })
    .await;
    assert!(
        waited >= Duration::from_millis(250) && waited < Duration::from_millis(1500),
        "B acquired {waited:?} after A's {lease:?} lease began"
    );
    assert_eq!(
        hget::<String>(&mut c, lb.key(), gb.owner())
            .await
            .as_deref(),
        Some("1")
    );
    let ttl = pttl(&mut c, lb.key()).await;
    assert!(ttl > 0 && ttl <= WATCHDOG.as_millis() as i64, "{ttl}");
    assert_not_held(g.unlock().await, "lease");
    assert!(
        lb.is_locked().await.unwrap(),
        "A's stale unlock left B alone"
    );
    gb.unlock().await.unwrap();
    assert!(!exists(&mut conn, &key).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_with_zero_wait_is_a_single_fast_attempt() {
    let server = RedisServer::start();
    let a = fresh_client(&server, "zero-wait").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let la = a.lock("zero");
    let lb = b.lock("zero");

    // A holds with a lease (no watchdog traffic during the measurement).
    let l = la.clone();
    let held =
        in_task(async move { l.lock_with_lease(Duration::from_secs(10)).await.unwrap() }).await;
    let owner = held.owner().to_string();

    // Warm-up (script cache etc.), then measure one call.
    assert!(lb
        .try_lock(Duration::ZERO, None)
        .await
        .or_none()
        .unwrap()
        .is_none());
    let scripts_before = suite::script_calls(&mut conn).await;
    let subs_before = suite::command_calls(&mut conn, "subscribe").await;
    let t = Instant::now();
    let got = lb.try_lock(Duration::ZERO, None).await.or_none().unwrap();
    let took = t.elapsed();
    assert!(got.is_none(), "held elsewhere");
    assert!(took < Duration::from_millis(200), "took {took:?}");
    let scripts = suite::script_calls(&mut conn).await - scripts_before;
    let subs = suite::command_calls(&mut conn, "subscribe").await - subs_before;
    assert_eq!(
        scripts, 1,
        "exactly one script call for a zero-wait attempt"
    );
    assert_eq!(subs, 0, "a zero-wait attempt never subscribes");

    // Same with an explicit lease.
    let got = lb
        .try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
        .await
        .or_none()
        .unwrap();
    assert!(got.is_none());

    // The holder is untouched.
    assert_eq!(
        hget::<String>(&mut conn, la.key(), &owner).await.as_deref(),
        Some("1")
    );
    assert_eq!(owner_fields(&mut conn, la.key()).await.len(), 1);
    held.unlock().await.unwrap();

    // On a free lock a zero-wait attempt acquires.
    let l = lb.clone();
    in_task(async move {
        let g = l
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .expect("free");
        g.unlock().await.unwrap();
    })
    .await;
    assert!(!exists(&mut conn, la.key()).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_with_wait_times_out_on_a_held_lock() {
    let server = RedisServer::start();
    let a = fresh_client(&server, "wait").await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let la = a.lock("wait");
    let lb = b.lock("wait");

    let l = la.clone();
    let held = in_task(async move { l.lock().await.unwrap() }).await;
    let owner = held.owner().to_string();

    for lease in [None, Some(Duration::from_secs(2))] {
        let l = lb.clone();
        let (got, took) = in_task(async move {
            let t = Instant::now();
            let got = l
                .try_lock(Duration::from_millis(300), lease)
                .await
                .or_none()
                .unwrap();
            (got.is_some(), t.elapsed())
        })
        .await;
        assert!(!got, "held elsewhere for the whole wait");
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(2),
            "try_lock(300ms) returned after {took:?}"
        );
    }
    // The waiter left no subscription and no trace in the hash.
    let channel = lb.channel().to_string();
    let c = conn.clone();
    assert!(
        suite::eventually(Duration::from_secs(2), || {
            let (mut c, ch) = (c.clone(), channel.clone());
            async move { suite::numsub(&mut c, &ch).await == 0 }
        })
        .await,
        "channel still subscribed after the waiter gave up"
    );
    assert_eq!(
        hget::<String>(&mut conn, la.key(), &owner).await.as_deref(),
        Some("1")
    );
    assert_eq!(owner_fields(&mut conn, la.key()).await.len(), 1);
    held.unlock().await.unwrap();
    assert!(!exists(&mut conn, la.key()).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_releases_promptly() {
    let server = RedisServer::start();
    // Default-like 30 s watchdog: only the drop's background release frees the lock quickly.
    let a = client_with(&server, "drop", Duration::from_secs(30)).await;
    let b = peer(&server, &a).await;
    let mut conn = server.conn().await;
    let la = a.lock("dropped");
    let lb = b.lock("dropped");
    let key = la.key().to_string();

    // 1) Drop with nobody waiting: the key is deleted within ~1 s.
    let (l, c) = (la.clone(), conn.clone());
    in_task(async move {
        let (l, mut c) = (l, c);
        let g = l.lock().await.unwrap();
        let ttl = pttl(&mut c, l.key()).await;
        assert!(ttl > 25_000, "30 s watchdog TTL expected, got {ttl}");
        drop(g);
    })
    .await;
    let c = conn.clone();
    assert!(
        suite::eventually(Duration::from_secs(1), || {
            let (mut c, key) = (c.clone(), key.clone());
            async move { !exists(&mut c, &key).await }
        })
        .await,
        "a dropped guard was not released within 1 s"
    );

    // 2) Drop while another client waits: it gets the lock within ~1 s.
    let (g, l) = (
        in_task({
            let la = la.clone();
            async move { la.lock().await.unwrap() }
        })
        .await,
        lb.clone(),
    );
    let waiter = tokio::spawn(async move {
        let got = l
            .try_lock(Duration::from_secs(5), None)
            .await
            .or_none()
            .unwrap();
        (got, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!waiter.is_finished());
    let dropped_at = Instant::now();
    drop(g);
    let (got, at) = within(6, waiter).await.unwrap();
    let gb = got.expect("waiter acquires after the drop");
    let after = at.saturating_duration_since(dropped_at);
    assert!(
        after < Duration::from_secs(1),
        "waiter acquired {after:?} after the drop"
    );
    gb.unlock().await.unwrap();

    // 3) Dropping one of two re-entrant holds releases exactly one hold.
    let (l, c) = (la.clone(), conn.clone());
    in_task(async move {
        let (l, c) = (l, c);
        let g1 = l.lock().await.unwrap();
        let g2 = l.lock().await.unwrap();
        let owner = g1.owner().to_string();
        drop(g2);
        let key = l.key().to_string();
        assert!(
            suite::eventually(Duration::from_secs(1), || {
                let (mut c, key, owner) = (c.clone(), key.clone(), owner.clone());
                async move { hget::<String>(&mut c, &key, &owner).await.as_deref() == Some("1") }
            })
            .await,
            "dropping one guard must release exactly one hold"
        );
        assert_eq!(l.hold_count().await.unwrap(), 1);
        g1.unlock().await.unwrap();
    })
    .await;
    assert!(!exists(&mut conn, &key).await);
    assert_all_keys_have_ttl(&mut conn).await;
}

/// Re-entry mixing a watchdog hold and a longer lease hold in one task: the TTL must cover
/// the longest live hold. lock.lua already never lowers the TTL on re-entry ("an inner short
/// lease must not cut short an outer watchdog hold"); the watchdog's renewals must not lower
/// it either, or the lease hold silently loses the lock before its lease ends.
async fn mixed_reentry_keeps_the_lease(outer_is_lease: bool) {
    let server = RedisServer::start();
    let client = fresh_client(&server, "mixed-reentry").await;
    let other = peer(&server, &client).await;
    let mut conn = server.conn().await;
    let lock = client.lock("mixed");
    let other_lock = other.lock("mixed");
    let lease = Duration::from_secs(10);

    let (l, ol, c) = (lock.clone(), other_lock.clone(), conn.clone());
    in_task(async move {
        let (lock, other_lock, mut conn) = (l, ol, c);
        let (watch, leased) = if outer_is_lease {
            let leased = lock.lock_with_lease(lease).await.unwrap();
            (lock.lock().await.unwrap(), leased)
        } else {
            let watch = lock.lock().await.unwrap();
            (watch, lock.lock_with_lease(lease).await.unwrap())
        };
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        let ttl = pttl(&mut conn, lock.key()).await;
        assert!(
            ttl > 9_000,
            "TTL after re-entry with a 10 s lease: {ttl} ms"
        );

        // Several watchdog periods (renewals every ~333 ms).
        tokio::time::sleep(WATCHDOG + WATCHDOG / 2).await;
        let ttl = pttl(&mut conn, lock.key()).await;
        assert!(
            ttl > 8_000,
            "a watchdog renewal cut the 10 s lease hold's TTL down to {ttl} ms"
        );

        // Release the watchdog hold; the lease hold must keep the lock for its lease.
        watch.unlock().await.unwrap();
        tokio::time::sleep(WATCHDOG + WATCHDOG / 2).await;
        assert!(
            exists(&mut conn, lock.key()).await,
            "the lock expired although a 10 s lease hold taken 3 s ago is still live"
        );
        assert!(other_lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .is_none());
        leased.unlock().await.unwrap();
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
    assert_all_keys_have_ttl(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_do_not_cut_short_an_inner_longer_lease() {
    mixed_reentry_keeps_the_lease(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_do_not_cut_short_an_outer_longer_lease() {
    mixed_reentry_keeps_the_lease(true).await;
}
