//! Review of the core (raw wait loop, guarded calls, holds, watchdog registry, listener):
//! scenarios at the edges of the invariants, each against a real redis-server.
mod support;

use support::hget;

use std::future::Future;

use support::in_task;
use support::{client, exists};

use std::time::{Duration, Instant};

use lockwise::{Client, Error};
use support::RedisServer;

/// Guards and the client dropped after their runtime shut down (e.g. stored in a static,
/// or a runtime built per request): no panic, and the watchdog lock expires by its TTL.
#[test]
fn guard_dropped_after_runtime_shutdown_does_not_panic() {
    let server = RedisServer::start();
    let ns = support::unique_ns("rc-rtdown");
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

/// A long waiter shares its channel with short-lived waiters that come and go (each last
/// one out spawns an UNSUBSCRIBE racing the next SUBSCRIBE). The long waiter's channel must
/// stay subscribed: the unlock wakes it promptly (the holder's TTL is 30 s), and at the end
/// no subscription is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_subscription_churn_on_its_channel() {
    let server = RedisServer::start();
    let ns = support::unique_ns("rc-churn");
    let holder = client(&server, &ns, Duration::from_secs(30)).await;
    let c = client(&server, &ns, Duration::from_secs(30)).await;
    let mut conn = server.conn().await;
    let channel = holder.lock("churn").channel().to_string();
    let hl = holder.lock("churn");
    in_task(async move {
        for round in 0..5 {
            let g = hl.lock().await.unwrap();
            let lock = c.lock("churn");
            let long = tokio::spawn(async move {
                let g = lock.lock().await.unwrap();
                let at = Instant::now();
                g.unlock().await.unwrap();
                at
            });
            // Short waiters, one after another and a few at once, on the same channel.
            for i in 0..40 {
                let lock = c.lock("churn");
                let n = 1 + i % 3;
                let mut short = Vec::new();
                for _ in 0..n {
                    let lock = lock.clone();
                    short.push(tokio::spawn(async move {
                        lock.try_lock(Duration::from_millis(3), None).await.unwrap()
                    }));
                }
                for s in short {
                    assert!(s.await.unwrap().is_none());
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let t0 = Instant::now();
            g.unlock().await.unwrap();
            let at = tokio::time::timeout(Duration::from_secs(3), long)
                .await
                .unwrap_or_else(|_| panic!("round {round}: the long waiter was not woken"))
                .unwrap();
            assert!(
                at.duration_since(t0) < Duration::from_secs(1),
                "round {round}: woken after {:?}",
                at.duration_since(t0)
            );
        }
        let gone = support::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move { support::numsub(&mut c, &ch).await == 0 }
        })
        .await;
        assert!(gone, "a subscription was left behind");
        assert!(support::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}

/// Blocks the server for `secs` from another OS thread (DEBUG SLEEP on a blocking
/// connection), so no tokio runtime is involved.
fn debug_sleep(mut c: redis::Connection, secs: f64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _: redis::RedisResult<String> =
            redis::cmd("DEBUG").arg("SLEEP").arg(secs).query(&mut c);
    })
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
    let ns = support::unique_ns("rc-stale");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_secs(5))
        .build()
        .await
        .expect("build client");
    let other = client(&server, &ns, Duration::from_secs(10)).await;
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
    let ran = support::eventually(Duration::from_secs(1), || {
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

/// A re-entrant `lock()` whose reply comes too late (response timeout) has an unknown
/// outcome: its conditional undo must remove the hold it took. If the caller re-enters
/// again right away, the undo must still reach Redis first (its expected hold count would
/// be stale otherwise): after every guard is unlocked the lock must be free, not held by
/// nobody until its TTL runs out. (Review finding: the undo used to be spawned and raced
/// the caller's next attempt.)
#[tokio::test(flavor = "current_thread")]
async fn timed_out_reentry_then_reentry_leaks_no_hold() {
    let server = RedisServer::start();
    let ns = support::unique_ns("rc-reenter");
    let c = Client::builder(server.url())
        .namespace(ns.clone())
        .watchdog_timeout(Duration::from_secs(10))
        .response_timeout(Duration::from_millis(200))
        .build()
        .await
        .expect("build client");
    let mut conn = server.conn().await;
    let sleeper = server.sync_conn();
    let lock = c.lock("reenter");
    let key = lock.key().to_string();
    in_task(async move {
        let g1 = lock.lock().await.expect("first hold");
        let stall = debug_sleep(sleeper, 0.6);
        tokio::time::sleep(Duration::from_millis(100)).await; // the server sleeps now
        let late = lock.lock().await;
        assert!(late.is_err(), "re-entry during the stall: {late:?}");
        // Keep the runtime busy until the server ran the late script.
        std::thread::sleep(Duration::from_millis(800));
        let g2 = lock.lock().await.expect("re-entry after the stall");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let count = hget::<i64>(&mut conn, &key, g1.owner()).await;
        g2.unlock().await.expect("unlock g2");
        g1.unlock().await.expect("unlock g1");
        let freed = support::eventually(Duration::from_secs(1), || {
            let mut c = conn.clone();
            let key = key.clone();
            async move { !exists(&mut c, &key).await }
        })
        .await;
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            freed,
            "after unlocking both guards the lock is still held (count before unlock \
             {count:?}, pttl {pttl} ms): the timed-out re-entry's hold leaked"
        );
        stall.join().unwrap();
    })
    .await;
}
