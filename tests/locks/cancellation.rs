//! Cancel safety: dropping a lock()/try_lock() future at any point (before the first poll,
//! while waiting, right after the script was sent) leaves no hold and no subscription
//! behind, and a dropped guard releases its hold promptly, even after its runtime shut down.

use suite::in_task;
use suite::OrNone;
use suite::{client, exists, numsub_until, Conn};

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use lockwise::RLock;
use suite::RedisServer;

const WATCHDOG: Duration = Duration::from_secs(30);

async fn hgetall(conn: &mut Conn, key: &str) -> HashMap<String, String> {
    let mut all: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    // The waiter mark (a waiter found the lock taken) is not a hold.
    all.remove(suite::WAITER_MARK);
    all
}

/// Eventually (within `timeout`) the database has no key and no channel is subscribed.
async fn assert_clean_within(conn: &Conn, timeout: Duration, context: &str) {
    let clean = suite::eventually(timeout, || {
        let mut c = conn.clone();
        async move {
            suite::keys_with_pttl(&mut c).await.is_empty()
                && suite::active_channels(&mut c).await.is_empty()
        }
    })
    .await;
    if !clean {
        let mut c = conn.clone();
        panic!(
            "{context}: not clean after {timeout:?}: keys {:?}, channels {:?}",
            suite::keys_with_pttl(&mut c).await,
            suite::active_channels(&mut c).await
        );
    }
}

/// The key stays absent for `period` (nothing acquires behind our back).
async fn assert_stays_absent(conn: &mut Conn, key: &str, period: Duration) {
    let t = Instant::now();
    while t.elapsed() < period {
        assert!(
            !exists(conn, key).await,
            "{key} appeared {:?} after everything was released/cancelled",
            t.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// lock(), lock_with_lease() and try_lock() futures dropped before their first poll send
/// nothing: no script call, no key, no channel; the lock is then free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_before_acquire() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("cx-before"), WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("never");
        let before = suite::script_calls(&mut conn).await;
        drop(lock.lock());
        drop(lock.lock_with_lease(Duration::from_secs(1)));
        drop(lock.try_lock(Duration::from_secs(1), None));
        drop(lock.try_lock(Duration::ZERO, Some(Duration::from_secs(1))));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(suite::script_calls(&mut conn).await - before, 0);
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
        assert!(suite::active_channels(&mut conn).await.is_empty());
        let g = lock
            .try_lock(Duration::ZERO, None)
            .await
            .or_none()
            .unwrap()
            .expect("lock free after unpolled futures were dropped");
        g.unlock().await.unwrap();
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
}

/// Which way the waiting B call is cancelled.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    LockTimeout,
    TryLockTimeout,
    AbortSpawnedLock,
}

async fn cancel_while_waiting_by(how: Cancel) {
    let server = RedisServer::start();
    let ns = suite::unique_ns("cx-wait");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let la = a.lock("contended");
        let lb = b.lock("contended");
        let channel = la.channel().to_string();
        let guard = la.lock().await.expect("holder lock");
        assert_eq!(la.hold_count().await.unwrap(), 1);
        let before = hgetall(&mut conn, la.key()).await;
        assert_eq!(
            before,
            HashMap::from([(guard.owner().to_string(), "1".to_string())]),
            "lock hash should map the holder's owner to its hold count"
        );

        match how {
            Cancel::LockTimeout => {
                let r = tokio::time::timeout(Duration::from_millis(200), lb.lock()).await;
                assert!(r.is_err(), "B acquired a held lock");
            }
            Cancel::TryLockTimeout => {
                let r = tokio::time::timeout(
                    Duration::from_millis(200),
                    lb.try_lock(Duration::from_secs(10), None),
                )
                .await;
                assert!(
                    r.is_err(),
                    "B's try_lock returned early: {:?}",
                    r.map(|x| x.map(|g| g.owner().to_string()))
                );
            }
            Cancel::AbortSpawnedLock => {
                let lb2 = lb.clone();
                let h =
                    tokio::spawn(async move { lb2.lock().await.map(|g| g.owner().to_string()) });
                assert!(
                    numsub_until(&conn, &channel, Duration::from_secs(3), |n| n >= 1).await,
                    "the spawned waiter never subscribed"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
                h.abort();
                let e = h
                    .await
                    .expect_err("waiter finished although the lock is held");
                assert!(e.is_cancelled());
            }
        }

        // A is still the only holder with an unchanged hold count; B holds nothing.
        assert_eq!(hgetall(&mut conn, la.key()).await, before, "{how:?}");
        assert_eq!(la.hold_count().await.unwrap(), 1);
        assert_eq!(lb.hold_count().await.unwrap(), 0);
        assert!(!lb.is_held_by_current_task().await.unwrap());
        assert!(!guard.is_lost());
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "{how:?}: cancelled waiter left {channel} subscribed"
        );
        guard.unlock().await.expect("holder unlock");
        assert!(!exists(&mut conn, la.key()).await);
        // The cancelled waiter must not acquire afterwards (no zombie retry loop).
        assert_stays_absent(&mut conn, la.key(), Duration::from_millis(500)).await;
        assert!(suite::active_channels(&mut conn).await.is_empty());
    })
    .await;
}

/// A holds; B's lock() times out after 200 ms -> B holds nothing, A's hold count is
/// unchanged, NUMSUB drops to 0, A's unlock deletes the key and nothing re-acquires it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_waiting() {
    cancel_while_waiting_by(Cancel::LockTimeout).await;
}

/// Same with try_lock(10 s) cancelled after 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_try_lock_while_waiting() {
    cancel_while_waiting_by(Cancel::TryLockTimeout).await;
}

/// Same with a spawned waiting task aborted via JoinHandle::abort.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_waiting_task() {
    cancel_while_waiting_by(Cancel::AbortSpawnedLock).await;
}

/// Polls `fut` up to `polls` times (yielding in between) and drops it if still pending:
/// with `polls == 1` the script has been sent but its answer is never awaited.
/// Returns the output if it completed.
async fn poll_then_drop<F: Future>(fut: F, polls: u32) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    for _ in 0..polls {
        if let std::task::Poll::Ready(out) = futures::poll!(fut.as_mut()) {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}

async fn lock_or_try_lock(lock: &RLock, use_try: bool) -> lockwise::Result<lockwise::RLockGuard> {
    if use_try {
        lock.try_lock(Duration::from_secs(1), None)
            .await
            .or_none()
            .map(|g| {
                g.expect("try_lock(1 s) timed out: a cancelled attempt's hold was not released")
            })
    } else {
        lock.lock().await
    }
}

/// One attempt on an uncontended lock, cancelled at a random point: a timeout of 0-3 ms,
/// JoinHandle::abort after 0-15 yields, or a drop after 1-3 manual polls (script sent,
/// answer pending). Returns true if the call completed (its guard is then unlocked).
async fn random_cancel_once(lock: &RLock, i: usize) -> bool {
    let use_try = (i / 3).is_multiple_of(2);
    let outcome = match i % 3 {
        0 => {
            let d = if rand::random_range(0..4u32) == 0 {
                Duration::ZERO
            } else {
                Duration::from_micros(rand::random_range(0..3000u64))
            };
            tokio::time::timeout(d, lock_or_try_lock(lock, use_try))
                .await
                .ok()
        }
        1 => {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let l = lock.clone();
            let h = tokio::spawn(async move {
                let r = lock_or_try_lock(&l, use_try).await;
                let _ = tx.send(r);
            });
            for _ in 0..rand::random_range(0..16u32) {
                tokio::task::yield_now().await;
            }
            h.abort();
            let _ = h.await;
            // Ok: completed before the abort took effect; it is released from this task.
            rx.await.ok()
        }
        _ => poll_then_drop(lock_or_try_lock(lock, use_try), rand::random_range(1..4u32)).await,
    };
    match outcome {
        Some(r) => {
            r.expect("lock").unlock().await.expect("unlock");
            true
        }
        None => false,
    }
}

/// ~300 lock()/try_lock() calls on an uncontended lock cancelled at random points (before
/// the script, while it is in flight, right after it answered): after each batch of 50 the
/// key is gone and no channel is subscribed within 1 s. Prints completed vs cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_right_after_script() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("cx-rand"), WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("uncontended");
        let (mut completed, mut cancelled) = (0, 0);
        for batch in 0..6 {
            for i in 0..50 {
                // A fresh task per attempt: every attempt is its own owner, so this probes
                // cancellation alone (same-task re-entry is covered separately below).
                let l = lock.clone();
                let attempt =
                    tokio::spawn(async move { random_cancel_once(&l, batch * 50 + i).await });
                let done = tokio::time::timeout(Duration::from_secs(5), attempt)
                    .await
                    .unwrap_or_else(|_| {
                        panic!("attempt {} stuck for 5 s (leftover hold?)", batch * 50 + i)
                    })
                    .unwrap();
                if done {
                    completed += 1;
                } else {
                    cancelled += 1;
                }
            }
            assert_clean_within(&conn, Duration::from_secs(1), &format!("batch {batch}")).await;
        }
        println!("random cancellation: {completed} completed, {cancelled} cancelled");
        assert!(
            cancelled > 0,
            "no call was cancelled; the test proved nothing"
        );
        // And the lock still works normally afterwards. A cancelled call's script may still
        // be on its way when the batch looked clean (queued behind another call on the
        // connection); a hold it took is released in the background, soon: wait for that,
        // well below the watchdog timeout that a leaked hold would live for.
        let g = lock
            .try_lock(Duration::from_secs(2), None)
            .await
            .or_none()
            .unwrap()
            .expect("lock free within 2 s: nothing leaked");
        g.unlock().await.unwrap();
        assert_clean_within(&conn, Duration::from_secs(1), "after the last unlock").await;
    })
    .await;
}

/// The common retry pattern `timeout(d, lock.lock())` then `lock()` again in the SAME task
/// (here: the first lock() is polled once, so its script is sent, and dropped):
/// the cancelled attempt's hold (same owner) must still be released, so after the second
/// hold is unlocked nothing is left. 50 rounds, each checked within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_then_relocked_in_same_task() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("cx-lockwise"), WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("relocked");
        let mut cancelled = 0;
        for round in 0..50 {
            // Poll once (the lock script is sent), then drop: its answer is never awaited.
            match poll_then_drop(lock.lock(), 1).await {
                Some(r) => r.expect("lock").unlock().await.expect("unlock"),
                None => cancelled += 1,
            }
            let g = lock.lock().await.expect("re-lock in the same task");
            g.unlock().await.expect("unlock");
            let gone = suite::eventually(Duration::from_secs(1), || {
                let mut c = conn.clone();
                let key = lock.key().to_string();
                async move { !exists(&mut c, &key).await }
            })
            .await;
            if !gone {
                let mut c = conn.clone();
                panic!(
                    "round {round}: hold left behind after a cancelled lock() and a re-lock + \
                     unlock in the same task: {:?} (PTTL {:?})",
                    hgetall(&mut c, lock.key()).await,
                    lock.remaining_ttl().await
                );
            }
        }
        println!("same-task cancel + re-lock: {cancelled} of 50 first attempts cancelled");
        assert_clean_within(&conn, Duration::from_secs(1), "after 50 rounds").await;
    })
    .await;
}

/// A contended variant: A releases after a random 0-4 ms while B's lock() is cancelled
/// after a random 0-4 ms, so B is cancelled while subscribing, waiting, retrying, or right
/// after winning. 150 rounds; each round A re-acquires within 5 s (TTL 30 s) and at the
/// end nothing is held or subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_future_racing_unlock() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("cx-race");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let la = a.lock("raced");
        let lb = b.lock("raced");
        let (mut completed, mut cancelled) = (0, 0);
        for round in 0..150 {
            let g = tokio::time::timeout(Duration::from_secs(5), la.lock())
                .await
                .unwrap_or_else(|_| {
                    panic!("round {round}: A could not re-acquire within 5 s (leftover hold?)")
                })
                .expect("A lock");
            let release_after = Duration::from_micros(rand::random_range(0..4000u64));
            let releaser = tokio::spawn(async move {
                tokio::time::sleep(release_after).await;
                g.unlock().await.expect("A unlock");
            });
            let cancel_after = Duration::from_micros(rand::random_range(0..4000u64));
            match tokio::time::timeout(cancel_after, lb.lock()).await {
                Ok(r) => {
                    completed += 1;
                    r.expect("B lock").unlock().await.expect("B unlock");
                }
                Err(_) => cancelled += 1,
            }
            releaser.await.unwrap();
        }
        println!("racing cancellation: B completed {completed}, cancelled {cancelled}");
        assert_clean_within(&conn, Duration::from_secs(2), "after 150 rounds").await;
    })
    .await;
}

/// W1 and W2 (one client) wait; the holder unlocks and W1 is aborted at once, so W1 may be
/// the one notified: the wakeup must pass on and W2 acquires within 2 s (TTL 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_waiter_passes_wakeup_on() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("cx-pass");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        for round in 0..20 {
            let name = format!("pass-{round}");
            let la = a.lock(&name);
            let guard = la.lock().await.expect("holder lock");
            let l1 = b.lock(&name);
            let w1 = tokio::spawn(async move {
                let g = l1.lock().await.expect("w1 lock");
                g.unlock().await.expect("w1 unlock");
            });
            assert!(numsub_until(&conn, la.channel(), Duration::from_secs(3), |n| n >= 1).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
            let l2 = b.lock(&name);
            let w2 = tokio::spawn(async move {
                let g = l2.lock().await.expect("w2 lock");
                g.unlock().await.expect("w2 unlock");
            });
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await.expect("holder unlock");
            w1.abort();
            let _ = w1.await;
            tokio::time::timeout(Duration::from_secs(2), w2)
                .await
                .unwrap_or_else(|_| panic!("round {round}: W2 not woken after W1 was aborted"))
                .unwrap();
        }
        assert_clean_within(&conn, Duration::from_secs(2), "after 20 rounds").await;
    })
    .await;
}

/// A guard dropped without unlock() at the end of its task releases promptly: the key is
/// gone within 1 s and a waiter in another client (TTL 30 s) acquires within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_guard_in_ended_task_releases() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("cx-drop");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let la = a.lock("dropped");
        let key = la.key().to_string();
        let (held_tx, held_rx) = tokio::sync::oneshot::channel();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let holder = tokio::spawn(async move {
            let _guard = la.lock().await.expect("lock");
            let _ = held_tx.send(());
            let _ = go_rx.await;
            // _guard dropped here without unlock(), then the task ends.
        });
        held_rx.await.unwrap();
        let lb = b.lock("dropped");
        let channel = lb.channel().to_string();
        let waiter = tokio::spawn(async move {
            let g = lb.lock().await.expect("waiter lock");
            let t = Instant::now();
            g.unlock().await.expect("waiter unlock");
            t
        });
        assert!(numsub_until(&conn, &channel, Duration::from_secs(3), |n| n >= 1).await);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let t0 = Instant::now();
        go_tx.send(()).unwrap();
        holder.await.unwrap();
        let acquired = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("waiter not woken within 1 s of the guard drop (TTL 30 s)")
            .unwrap();
        println!(
            "dropped guard released; waiter acquired {:?} after the drop",
            acquired.saturating_duration_since(t0)
        );
        let mut c = conn.clone();
        assert!(!exists(&mut c, &key).await);
        // Without a waiter: drop -> key gone within 1 s.
        let la = a.lock("dropped-alone");
        let key = la.key().to_string();
        tokio::spawn(async move {
            let _g = la.lock().await.expect("lock");
        })
        .await
        .unwrap();
        let t = Instant::now();
        assert!(
            suite::eventually(Duration::from_secs(1), || {
                let mut c = conn.clone();
                let key = key.clone();
                async move { !exists(&mut c, &key).await }
            })
            .await,
            "dropped guard's hold still there after 1 s"
        );
        println!("dropped guard (no waiter) released in {:?}", t.elapsed());
    })
    .await;
}

/// Dropping the inner guard of a re-entrant pair releases exactly one hold (the background
/// release uses the guard's owner, not the dropping task's): count 2 -> 1, key alive;
/// then unlock of the outer guard deletes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_reentrant_guard_releases_one_hold() {
    let server = RedisServer::start();
    let c = client(&server, &suite::unique_ns("cx-reent"), WATCHDOG).await;
    let mut conn = server.conn().await;
    in_task(async move {
        let lock = c.lock("reentrant");
        let outer = lock.lock().await.expect("outer");
        let inner = lock.lock().await.expect("inner");
        assert_eq!(lock.hold_count().await.unwrap(), 2);
        assert_eq!(inner.owner(), outer.owner());
        // Drop the inner guard in another task.
        tokio::spawn(async move { drop(inner) }).await.unwrap();
        let owner = outer.owner().to_string();
        let key = lock.key().to_string();
        assert!(
            suite::eventually(Duration::from_secs(1), || {
                let mut c = conn.clone();
                let key = key.clone();
                let owner = owner.clone();
                async move {
                    hgetall(&mut c, &key).await == HashMap::from([(owner, "1".to_string())])
                }
            })
            .await,
            "after dropping one of two holds: {:?}",
            hgetall(&mut conn, &key).await
        );
        assert_eq!(lock.hold_count().await.unwrap(), 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            lock.hold_count().await.unwrap(),
            1,
            "more than one hold released"
        );
        outer.unlock().await.expect("outer unlock");
        assert!(!exists(&mut conn, lock.key()).await);
    })
    .await;
}

/// Guards and the client dropped after their runtime shut down (e.g. stored in a static,
/// or a runtime built per request): no panic, and the watchdog lock expires by its TTL.
#[test]
fn guard_dropped_after_runtime_shutdown_does_not_panic() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("rc-rtdown");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (c, lock, guard, lease_guard) = rt.block_on(async {
        let c = client(&server, &ns, Duration::from_millis(600)).await;
        let lock = c.lock("rtdown");
        let (guard, lease_guard) = tokio::spawn({
            let lock = lock.clone();
            let lease = c.lock("rtdown-lease");
            async move {
                let g = lock.lock().await.unwrap();
                let l = lease.lock_with_lease(Duration::from_secs(1)).await.unwrap();
                (g, l)
            }
        })
        .await
        .unwrap();
        (c, lock, guard, lease_guard)
    });
    let key = lock.key().to_string();
    drop(rt);
    drop(guard);
    drop(lease_guard);
    drop(lock);
    drop(c);
    let mut sync = server.sync_conn();
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query(&mut sync).unwrap();
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the lock never expired");
        std::thread::sleep(Duration::from_millis(50));
    }
}
