//! A release belongs to its own run of holds (invariant 12): one owner's holds from the first
//! grant until the server forgets them (last release, expiry, force unlock) are one run, and
//! nothing of an ended run (a stale guard's unlock or drop, a lost run's signal, an abandoned
//! acquire) may touch a hold of a later run of the same owner.
//!
//! | scenario | what must hold |
//! |---|---|
//! | stale unlock joined with a re-acquire in one task (`join!`, both orders), every hash kind, both layouts | the stale unlock is `NotHeld`; the new guard holds, is not lost and is the only hold; another client cannot take the lock; the new unlock is `Ok` |
//! | stale guard dropped while the same task re-acquires | the same |
//! | `select!` of the stale unlock and a re-acquire (the loser cancelled), then a re-acquire | the same |
//! | a re-entry polled once and dropped after the lock was force-unlocked and re-taken by another client | the old guard is told lost (not adopted); its unlock is `NotHeld`; the abandoned hold is released |
//! | a leased guard outlives every `Client` clone | its `lost()` fires by the lease's end |

use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use lockwise::{Client, Error, KeyLayout, Lock, LockGuard};
use suite::{exists, in_task, RedisServer};

const STALE_LEASE: Duration = Duration::from_millis(100);
const PAST_LEASE: Duration = Duration::from_millis(250);
const LONG_LEASE: Duration = Duration::from_secs(30);

async fn client(server: &RedisServer, ns: &str, layout: KeyLayout) -> Client {
    Client::builder(server.url())
        .namespace(ns)
        .key_layout(layout)
        .watchdog_timeout(Duration::from_secs(3))
        .build()
        .await
        .expect("build client")
}

/// Two clients of one lock in lockwise's layout, then two in Redisson's.
async fn four_clients(server: &RedisServer, ns: &str) -> [Client; 4] {
    let redisson = format!("{ns}r");
    [
        client(server, ns, KeyLayout::Lockwise).await,
        client(server, ns, KeyLayout::Lockwise).await,
        client(server, &redisson, KeyLayout::Redisson).await,
        client(server, &redisson, KeyLayout::Redisson).await,
    ]
}

/// How the stale guard meets the re-acquire in one task.
#[derive(Clone, Copy, Debug)]
enum Race {
    /// `join!(lock.lock_with_lease(..), stale.unlock())`.
    ReacquireFirst,
    /// `join!(stale.unlock(), lock.lock_with_lease(..))`.
    UnlockFirst,
    /// `join!(lock.lock_with_lease(..), async { drop(stale) })`.
    Dropped,
    /// `select!` of a re-acquire and the stale unlock (the loser is cancelled: an abandoned
    /// acquire, or an unlock finished in the background), then a re-acquire.
    Selected,
}

/// One round of the race on `lock` (owned by the calling task), with `other` (another
/// client's handle on the same name) checking that nobody else can take the lock.
async fn stale_release_races_reacquire<L: Lock>(lock: &L, other: &L, race: Race, round: usize) {
    let stale = lock.lock_with_lease(STALE_LEASE).await.unwrap();
    tokio::time::sleep(PAST_LEASE).await;
    let (fresh, stale_unlock) = match race {
        Race::ReacquireFirst => {
            let (g, u) = tokio::join!(lock.lock_with_lease(LONG_LEASE), stale.unlock());
            (g, Some(u))
        }
        Race::UnlockFirst => {
            let (u, g) = tokio::join!(stale.unlock(), lock.lock_with_lease(LONG_LEASE));
            (g, Some(u))
        }
        Race::Dropped => {
            let (g, ()) = tokio::join!(lock.lock_with_lease(LONG_LEASE), async { drop(stale) });
            (g, None)
        }
        Race::Selected => {
            let unlocked = tokio::select! {
                u = stale.unlock() => Some(u),
                g = lock.lock_with_lease(LONG_LEASE) => {
                    drop(g); // released in the background
                    None
                }
            };
            (lock.lock_with_lease(LONG_LEASE).await, unlocked)
        }
    };
    let fresh = fresh.unwrap_or_else(|e| panic!("{race:?} round {round}: re-acquire failed: {e}"));
    if let Some(u) = stale_unlock {
        assert!(
            matches!(u, Err(Error::NotHeld { .. })),
            "{race:?} round {round}: the stale unlock answered {u:?}"
        );
    }
    // Let a background release (the dropped guard's) or a settlement run.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !fresh.is_lost(),
        "{race:?} round {round}: the new guard inherited the stale run's loss"
    );
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "{race:?} round {round}: the server does not count exactly the new hold"
    );
    let taken = other.try_lock(Duration::ZERO, None).await;
    assert!(
        matches!(taken, Err(ref e) if e.is_timeout()),
        "{race:?} round {round}: another client took the lock the new guard holds: {:?}",
        taken.map(|_| ())
    );
    fresh
        .unlock()
        .await
        .unwrap_or_else(|e| panic!("{race:?} round {round}: the new unlock failed: {e}"));
    assert!(!lock.is_locked().await.unwrap(), "{race:?} round {round}");
}

async fn every_race<L: Lock>(lock: L, other: L) {
    in_task(async move {
        for round in 0..3 {
            for race in [
                Race::ReacquireFirst,
                Race::UnlockFirst,
                Race::Dropped,
                Race::Selected,
            ] {
                stale_release_races_reacquire(&lock, &other, race, round).await;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_release_never_takes_a_reacquired_hold_of_the_same_task() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("runs-race");
    let [a, b, ra, rb] = four_clients(&server, &ns).await;
    tokio::join!(
        every_race(a.lock("plain"), b.lock("plain")),
        every_race(a.fenced_lock("fenced"), b.fenced_lock("fenced")),
        every_race(a.fair_lock("fair"), b.fair_lock("fair")),
        every_race(ra.lock("plain"), rb.lock("plain")),
        every_race(ra.fenced_lock("fenced"), rb.fenced_lock("fenced")),
        every_race(ra.fair_lock("fair"), rb.fair_lock("fair")),
    );
    let mut conn = server.conn().await;
    for (key, pttl) in suite::keys_with_pttl(&mut conn).await {
        assert!(
            pttl > 0 || key.contains(":fence:") || key.starts_with("redisson_lock_token:"),
            "{key} has no TTL ({pttl})"
        );
    }
}

/// Polls `fut` once, then drops it.
async fn poll_once_and_drop<F: Future>(fut: F) {
    let mut fut = pin!(fut);
    let polled = futures::poll!(fut.as_mut());
    assert!(
        polled.is_pending(),
        "the acquire finished on its first poll"
    );
}

async fn abandoned_reentry_is_not_adopted<L: Lock>(
    lock: L,
    other: L,
    key: String,
    conn: suite::Conn,
) {
    let mut admin = conn;
    let old = lock.lock().await.unwrap();
    let lost = old.lost();
    // Another client force-unlocks the lock, takes it and releases it.
    assert!(other.force_unlock().await.unwrap());
    other.lock().await.unwrap().unlock().await.unwrap();
    // The same task starts a re-entry, polls it once (the script is sent) and drops it.
    poll_once_and_drop(lock.lock()).await;
    // The abandoned grant is a new run: the old guard is lost (the server forgot its
    // hold), long before its watchdog deadline (3 s), and the new hold is undone.
    let started = Instant::now();
    tokio::time::timeout(Duration::from_millis(1500), lost.cancelled())
        .await
        .expect("the old guard's lost() never fired: the abandoned re-entry was adopted");
    let told = started.elapsed();
    assert!(
        matches!(old.unlock().await, Err(Error::NotHeld { .. })),
        "the old guard's unlock claimed a hold it lost"
    );
    assert!(
        suite::eventually(Duration::from_secs(2), || {
            let (mut admin, key) = (admin.clone(), key.clone());
            async move { !exists(&mut admin, &key).await }
        })
        .await,
        "the abandoned re-entry's hold was left behind"
    );
    let g = other.try_lock(Duration::ZERO, None).await.unwrap();
    g.unlock().await.unwrap();
    assert!(!exists(&mut admin, &key).await);
    eprintln!("lost() fired {told:?} after the abandoned re-entry");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_reentry_after_a_force_unlock_is_not_adopted_as_the_old_hold() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("runs-abandoned");
    let [a, b, ra, rb] = four_clients(&server, &ns).await;
    let conn = server.conn().await;
    let (l, f, rl) = (a.lock("plain"), a.fenced_lock("fenced"), ra.lock("plain"));
    let (lk, fk, rk) = (
        l.key().to_string(),
        f.key().to_string(),
        rl.key().to_string(),
    );
    let (c1, c2, c3) = (conn.clone(), conn.clone(), conn.clone());
    let (lb, fb, rlb) = (b.lock("plain"), b.fenced_lock("fenced"), rb.lock("plain"));
    tokio::join!(
        in_task(abandoned_reentry_is_not_adopted(l, lb, lk, c1)),
        in_task(abandoned_reentry_is_not_adopted(f, fb, fk, c2)),
        in_task(abandoned_reentry_is_not_adopted(rl, rlb, rk, c3)),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leased_guard_outliving_its_client_is_told_lost_by_the_lease_end() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("runs-dropped-client");
    let a = client(&server, &ns, KeyLayout::Lockwise).await;
    let b = client(&server, &ns, KeyLayout::Lockwise).await;
    let lease = Duration::from_millis(500);
    let (guard, lost, started) = in_task(async move {
        let started = Instant::now();
        let guard = a.lock("x").lock_with_lease(lease).await.unwrap();
        let lost = guard.lost();
        drop(a); // the last clone of the client
        (guard, lost, started)
    })
    .await;
    tokio::time::timeout(Duration::from_secs(2), lost.cancelled())
        .await
        .expect("lost() never fired for a guard whose client was dropped");
    let told = started.elapsed();
    assert!(
        told <= lease + Duration::from_millis(300),
        "told at {told:?}"
    );
    assert!(guard.is_lost());
    // The lock really is free by the lease's end: another client takes it.
    let g = b
        .lock("x")
        .try_lock(Duration::from_secs(2), None)
        .await
        .unwrap();
    g.unlock().await.unwrap();
    drop(guard);
    eprintln!("lost() fired {told:?} after a lease of {lease:?}");
}
