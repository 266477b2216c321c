//! Settlements that cannot be fooled by a count (found by the model in `model/`): a re-entry
//! whose reply was lost while the lock was force-unlocked, and a release handed over to a
//! settlement whose hold vanishes before the settlement counts it. `CLIENT PAUSE WRITE`
//! orders the commands on the server: write commands (scripts, `DEL`) wait in the order they
//! came, a connection's later commands wait behind its paused one, reads of other
//! connections go through.
//!
//! | scenario | what must hold |
//! |---|---|
//! | the lock is force-unlocked, then a re-entry whose reply was lost runs and takes a fresh hold of the same count | the old guard's `lost()` fires (the fresh hold is not adopted as its own); its unlock is `NotHeld`; the caller's `lock()` returns a guard of a new run, the only hold |
//! | a re-entry whose reply was lost runs on the run it was sent for | the run is kept: the old guard is not lost, the extra hold is settled away |
//! | a release handed over to a settlement, then the lock force-unlocked before the settlement counted it | the unlock is `NotHeld`, not `Ok` |
//!
//! Both layouts, RLock and FencedLock.

use std::time::Duration;

use lockwise::{Client, KeyLayout, Lock, LockGuard};
use suite::kit::{assert_not_held, within};
use suite::{in_task, RedisServer};

/// Short enough that an attempt sent during the pause times out well inside it, long enough
/// that an unlock sent shortly before the pause ends outlives it.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);
const PAUSE_MS: u64 = 3000;

async fn client(server: &RedisServer, ns: &str, layout: KeyLayout) -> Client {
    Client::builder(server.url())
        .namespace(ns)
        .key_layout(layout)
        .response_timeout(RESPONSE_TIMEOUT)
        .watchdog_timeout(Duration::from_secs(10))
        .build()
        .await
        .expect("build client")
}

async fn conn(url: &str) -> redis::aio::MultiplexedConnection {
    // No response timeout: a DEL waits out the pause.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// `CLIENT PAUSE <ms> WRITE` from an admin connection.
async fn pause_writes(url: &str) {
    let mut admin = conn(url).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(PAUSE_MS)
        .arg("WRITE")
        .query_async(&mut admin)
        .await
        .unwrap();
}

/// Sends `DEL key` (a force unlock by hand) from its own connection; it waits out the pause.
async fn delete_during_pause(url: &str, key: &str) -> tokio::task::JoinHandle<()> {
    let mut conn = conn(url).await;
    let key = key.to_string();
    let sent = tokio::spawn(async move {
        let n: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        eprintln!("{:?} DEL {key} -> {n}", std::time::SystemTime::now());
    });
    // The DEL is queued behind the pause before anything the lockwise client sends.
    tokio::time::sleep(Duration::from_millis(100)).await;
    sent
}

async fn fresh_reentry_after_force_unlock<L: Lock + 'static>(url: String, lock: L, key: String) {
    in_task(async move {
        let old = lock.lock().await.unwrap();
        let lost = old.lost();
        pause_writes(&url).await;
        let deleted = delete_during_pause(&url, &key).await;
        // The re-entry is sent after the DEL, times out during the pause, and runs after the
        // DEL: a fresh hold, count 1, as many as the old run had.
        let (new, lost) = tokio::join!(within(20, lock.lock()), async {
            tokio::time::timeout(Duration::from_secs(10), lost.cancelled_owned()).await
        });
        deleted.await.unwrap();
        let new = new.expect("lock() returned a guard of a new run");
        assert!(
            lost.is_ok(),
            "the old guard was not told it is lost: the re-entry's fresh hold was adopted"
        );
        assert!(!new.is_lost(), "the new guard is not lost");
        assert_eq!(lock.hold_count().await.unwrap(), 1, "only the new hold");
        assert_not_held(old.unlock().await, lock.name());
        new.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    })
    .await;
}

async fn reentry_on_its_own_run_is_kept<L: Lock + 'static>(url: String, lock: L) {
    in_task(async move {
        let old = lock.lock().await.unwrap();
        pause_writes(&url).await;
        // The re-entry times out during the pause, runs after it on the same run (count 2),
        // and the next attempt re-enters once more: the run is kept, its count settled.
        let new = within(20, lock.lock()).await.expect("re-entry");
        assert!(
            !old.is_lost(),
            "a re-entry that ran on its own run gave the run up"
        );
        assert!(!new.is_lost());
        within(10, async {
            while lock.hold_count().await.unwrap() != 2 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        new.unlock().await.unwrap();
        old.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    })
    .await;
}

async fn handed_over_release_of_a_vanished_hold<L: Lock + 'static>(
    url: String,
    lock: L,
    key: String,
) {
    in_task(async move {
        let guard = lock.lock().await.unwrap();
        let paused = tokio::time::Instant::now();
        pause_writes(&url).await;
        let (reentry, unlocked) = tokio::join!(within(20, lock.lock()), async {
            // The re-entry goes first, then the DEL; the re-entry times out during the pause
            // and a settlement starts, its count read queued behind the re-entry.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let deleted = delete_during_pause(&url, &key).await;
            // Shortly before the pause ends, the release is handed over to that settlement:
            // its count (read before the hand-over) runs before the DEL, the next one after.
            tokio::time::sleep_until(
                paused + Duration::from_millis(PAUSE_MS) - RESPONSE_TIMEOUT / 2,
            )
            .await;
            let unlocked = guard.unlock().await;
            deleted.await.unwrap();
            unlocked
        });
        let Err(e) = unlocked else {
            panic!(
                "unlock Ok although the hold was force-unlocked before the settlement released it"
            );
        };
        assert!(e.is_not_held(), "unlock: {e}");
        let reentry = reentry.expect("the re-entry, a new run once settled");
        assert_eq!(lock.hold_count().await.unwrap(), 1, "only the new hold");
        reentry.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_hold_after_a_force_unlock_is_never_adopted_by_a_timed_out_reentry() {
    let server = RedisServer::start();
    for layout in [KeyLayout::Lockwise, KeyLayout::Redisson] {
        let ns = suite::unique_ns("settle-fresh");
        let c = client(&server, &ns, layout).await;
        let l = c.lock("adopt");
        let key = l.key().to_string();
        fresh_reentry_after_force_unlock(server.url().to_string(), l, key).await;
        let f = c.fenced_lock("adopt-fenced");
        let key = f.key().to_string();
        fresh_reentry_after_force_unlock(server.url().to_string(), f, key).await;
        c.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_reentry_that_ran_on_its_own_run_keeps_the_run() {
    let server = RedisServer::start();
    for layout in [KeyLayout::Lockwise, KeyLayout::Redisson] {
        let ns = suite::unique_ns("settle-kept");
        let c = client(&server, &ns, layout).await;
        reentry_on_its_own_run_is_kept(server.url().to_string(), c.lock("kept")).await;
        reentry_on_its_own_run_is_kept(server.url().to_string(), c.fenced_lock("kept-fenced"))
            .await;
        c.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_handed_over_to_a_settlement_is_not_ok_when_its_hold_vanished_first() {
    suite::init_tracing();
    let server = RedisServer::start();
    for layout in [KeyLayout::Lockwise, KeyLayout::Redisson] {
        let ns = suite::unique_ns("settle-verdict");
        let c = client(&server, &ns, layout).await;
        let l = c.lock("verdict");
        let key = l.key().to_string();
        handed_over_release_of_a_vanished_hold(server.url().to_string(), l, key).await;
        let f = c.fenced_lock("verdict-fenced");
        let key = f.key().to_string();
        handed_over_release_of_a_vanished_hold(server.url().to_string(), f, key).await;
        c.shutdown(Duration::from_secs(5)).await;
    }
}
