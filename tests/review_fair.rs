//! Review tests for FairLock against a real redis-server.
mod support;

use support::in_task;

use std::time::{Duration, Instant};

use lockwise::{Client, FairLock};
use support::RedisServer;

async fn client(url: &str, ns: &str, watchdog: Duration) -> Client {
    Client::builder(url)
        .namespace(ns)
        .watchdog_timeout(watchdog)
        .build()
        .await
        .expect("build client")
}

async fn queue_reaches(lock: &FairLock, n: usize) {
    let ok = support::eventually(Duration::from_secs(5), || async {
        lock.queue_len().await.unwrap() == n
    })
    .await;
    assert!(
        ok,
        "queue length stayed {} (wanted {n})",
        lock.queue_len().await.unwrap()
    );
}

/// Two lock calls of one task (joined futures) queue behind another holder. The second call
/// is granted by re-entry once the first one holds; its queue entry must go too, or it stays
/// head of the queue with nobody behind it listening: the next waiter then sleeps until that
/// entry's deadline although the lock is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_of_a_queued_call_leaves_no_queue_entry_behind() {
    let server = RedisServer::start();
    let ns = support::unique_ns("review-fair-reentry");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let lock = c.fair_lock("re");
    in_task(async move {
        let holder = lock.lock().await.unwrap();
        let l = lock.clone();
        let joined = tokio::spawn(async move {
            let (a, b) = tokio::join!(l.lock(), l.lock());
            (a.unwrap(), b.unwrap())
        });
        queue_reaches(&lock, 2).await;
        let l = lock.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<Instant>();
        let last = tokio::spawn(async move {
            let g = l.lock().await.unwrap();
            let at = Instant::now();
            let released: Instant = rx.await.unwrap();
            g.unlock().await.unwrap();
            at.saturating_duration_since(released)
        });
        queue_reaches(&lock, 3).await;
        holder.unlock().await.unwrap();
        let (a, b) = tokio::time::timeout(Duration::from_secs(5), joined)
            .await
            .expect("both calls of the task get the lock")
            .unwrap();
        let left = lock.queue_len().await.unwrap();
        a.unlock().await.unwrap();
        b.unlock().await.unwrap();
        let released = Instant::now();
        // `last` sends its acquisition time only after it got the lock; give it the release
        // instant meanwhile through the channel.
        let _ = tx.send(released);
        let waited = tokio::time::timeout(Duration::from_secs(10), last)
            .await
            .expect("the last waiter gets the lock")
            .unwrap();
        assert!(
            left == 1 && waited < Duration::from_secs(1),
            "queue entries left once the task held both holds: {left} (want 1: the last \
             waiter); the last waiter got the free lock {waited:?} after the release"
        );
    })
    .await;
}

/// The counterpart of the RedLock stale-guard bug: a fair lease guard whose hold expired must
/// not release the hold its task took afterwards; its unlock is NotHeld.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_lease_guard_does_not_release_the_next_hold_of_its_task() {
    let server = RedisServer::start();
    let ns = support::unique_ns("review-fair-stale");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let c2 = client(server.url(), &ns, Duration::from_secs(30)).await;
    let lock = c.fair_lock("stale");
    let other = c2.fair_lock("stale");
    in_task(async move {
        let old = lock
            .try_lock(Duration::ZERO, Some(Duration::from_millis(200)))
            .await
            .unwrap()
            .expect("first hold");
        tokio::time::sleep(Duration::from_millis(400)).await;
        let new = lock
            .try_lock(Duration::ZERO, Some(Duration::from_secs(8)))
            .await
            .unwrap()
            .expect("second hold");
        let stale = old.unlock().await;
        assert!(
            matches!(&stale, Err(e) if e.is_not_held()),
            "stale unlock answered {stale:?}"
        );
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        let intruder = other
            .try_lock(Duration::ZERO, Some(Duration::from_secs(1)))
            .await
            .unwrap();
        assert!(intruder.is_none(), "another owner got in");
        new.unlock().await.unwrap();
        assert!(!lock.is_locked().await.unwrap());
    })
    .await;
}

/// A waiter cancelled while its attempt is stuck on a frozen server (DEBUG SLEEP), an attempt
/// that will find the lock free (the holder's lease ran out meanwhile) and take it for
/// nobody: afterwards the lock is free, the queue is empty, and a newcomer gets in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_with_a_granting_attempt_in_flight_leaves_nothing() {
    let server = RedisServer::start();
    support::init_tracing();
    let ns = support::unique_ns("review-fair-inflight");
    let c = client(server.url(), &ns, Duration::from_secs(30)).await;
    let lock = c.fair_lock("inflight");
    let mut admin = server.conn().await;
    in_task(async move {
        let holder = lock
            .lock_with_lease(Duration::from_millis(400))
            .await
            .unwrap();
        let l = lock.clone();
        let waiter = tokio::spawn(async move { l.lock().await.map(|g| g.owner().to_string()) });
        queue_reaches(&lock, 1).await;
        // Freeze the server; the waiter's next attempt (at the holder's pttl) is sent into it.
        let sleeper = tokio::spawn(async move {
            // The test connection's own response timeout may fire first: ignore the reply.
            let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(1.0)
                .query_async(&mut admin)
                .await;
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        sleeper.await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        std::mem::forget(holder); // its lease ran out; nothing to release
        let clean = support::eventually(Duration::from_secs(2), || async {
            !lock.is_locked().await.unwrap() && lock.queue_len().await.unwrap() == 0
        })
        .await;
        assert!(
            clean,
            "locked: {}, queue: {}",
            lock.is_locked().await.unwrap(),
            lock.queue_len().await.unwrap()
        );
        let l = lock.clone();
        let newcomer = tokio::spawn(async move {
            match l.try_lock(Duration::ZERO, None).await.unwrap() {
                Some(g) => g.unlock().await.is_ok(),
                None => false,
            }
        });
        assert!(newcomer.await.unwrap(), "a newcomer takes the free lock");
    })
    .await;
}
