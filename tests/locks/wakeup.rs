//! Waking waiters: an unlock wakes a waiter through pub/sub promptly (far below the TTL),
//! many waiters all get their turn and leave no subscription behind, and a crashed
//! holder's lock is taken within its TTL. A long waiter keeps its subscription while short
//! waiters churn the same channel.

use suite::in_task;
use suite::OrNone;
use suite::{client, exists, numsub_until, Conn};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockwise::Client;
use suite::{Interval, RedisServer};

/// Default watchdog timeout: an expiry can never explain a wakeup in these tests.
const WATCHDOG: Duration = Duration::from_secs(30);

fn summary(label: &str, lat: &mut [Duration]) -> Duration {
    lat.sort();
    let max = *lat.last().unwrap();
    println!(
        "{label}: {} wakeups, min {:?}, median {:?}, max {:?}",
        lat.len(),
        lat[0],
        lat[lat.len() / 2],
        max
    );
    max
}

/// Hold `name` via `holder`, start a waiter on `waiter` in another task, wait until it is
/// subscribed, unlock and return the time from unlock() start to the waiter's acquisition.
async fn one_wakeup(conn: &Conn, holder: &Client, waiter: &Client, name: &str) -> Duration {
    let hl = holder.lock(name);
    let wl = waiter.lock(name);
    let channel = hl.channel().to_string();
    let guard = hl.lock().await.expect("holder lock");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let g = wl.lock().await.expect("waiter lock");
        let _ = tx.send(Instant::now());
        g.unlock().await.expect("waiter unlock");
    });
    assert!(
        numsub_until(conn, &channel, Duration::from_secs(3), |n| n >= 1).await,
        "waiter never subscribed to {channel}"
    );
    // Let the waiter finish its retry after subscribing and park.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let t0 = Instant::now();
    guard.unlock().await.expect("holder unlock");
    let acquired = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("waiter not woken within 5 s of unlock (watchdog TTL is 30 s)")
        .expect("waiter task failed");
    task.await.unwrap();
    acquired.saturating_duration_since(t0)
}

/// Waiter in another Client acquires within 500 ms of the holder's unlock (20 rounds;
/// the holder's TTL is 30 s so only the pub/sub wakeup can explain it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_in_other_client_wakes_promptly() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wake-x");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let mut lat = Vec::new();
        for i in 0..20 {
            lat.push(one_wakeup(&conn, &a, &b, &format!("wake-{i}")).await);
        }
        let max = summary("cross-client", &mut lat);
        assert!(max < Duration::from_millis(500), "slow wakeup: {max:?}");
        let mut c = conn.clone();
        assert!(
            suite::eventually(Duration::from_secs(2), || {
                let mut c = c.clone();
                async move { suite::active_channels(&mut c).await.is_empty() }
            })
            .await,
            "channels still subscribed: {:?}",
            suite::active_channels(&mut c).await
        );
        assert!(suite::keys_with_pttl(&mut c).await.is_empty());
    })
    .await;
}

/// Same, with holder and waiter being two tasks of ONE Client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_in_same_client_wakes_promptly() {
    let server = RedisServer::start();
    let a = client(&server, &suite::unique_ns("wake-s"), WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let mut lat = Vec::new();
        for i in 0..20 {
            lat.push(one_wakeup(&conn, &a, &a, &format!("wake-{i}")).await);
        }
        let max = summary("same-client", &mut lat);
        assert!(max < Duration::from_millis(500), "slow wakeup: {max:?}");
        let mut c = conn.clone();
        assert!(
            suite::eventually(Duration::from_secs(2), || {
                let mut c = c.clone();
                async move { suite::active_channels(&mut c).await.is_empty() }
            })
            .await,
            "channels still subscribed: {:?}",
            suite::active_channels(&mut c).await
        );
        assert!(suite::keys_with_pttl(&mut c).await.is_empty());
    })
    .await;
}

/// 2 Clients x 10 tasks wait on one lock; after the holder (a third Client) releases,
/// each acquires in turn (no overlap), all within 8 s (TTL 30 s), and afterwards NUMSUB
/// of the channel is 0 and no channel is subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_each_acquire_in_turn() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wake-many");
    let holder = client(&server, &ns, WATCHDOG).await;
    let c1 = client(&server, &ns, WATCHDOG).await;
    let c2 = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let hl = holder.lock("crowded");
        let channel = hl.channel().to_string();
        let key = hl.key().to_string();
        let guard = hl.lock().await.expect("holder lock");
        let intervals = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (ci, c) in [&c1, &c2].into_iter().enumerate() {
            for t in 0..10 {
                let l = c.lock("crowded");
                let intervals = intervals.clone();
                tasks.push(tokio::spawn(async move {
                    let g = l.lock().await.expect("waiter lock");
                    let start = Instant::now();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let end = Instant::now();
                    intervals.lock().unwrap().push(Interval {
                        start,
                        end,
                        who: ci * 10 + t,
                    });
                    g.unlock().await.expect("waiter unlock");
                }));
            }
        }
        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(3), |n| n == 2).await,
            "both clients should be subscribed to {channel}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let t0 = Instant::now();
        guard.unlock().await.expect("holder unlock");
        let all = tokio::time::timeout(Duration::from_secs(8), futures::future::join_all(tasks))
            .await
            .expect("not every waiter acquired within 8 s of the unlock (TTL 30 s)");
        for r in all {
            r.unwrap();
        }
        println!("20 waiters acquired in turn within {:?}", t0.elapsed());
        let mut iv = intervals.lock().unwrap().clone();
        assert_eq!(iv.len(), 20);
        suite::assert_no_overlap(&mut iv);

        assert!(
            numsub_until(&conn, &channel, Duration::from_secs(2), |n| n == 0).await,
            "NUMSUB of {channel} did not drop to 0"
        );
        let mut c = conn.clone();
        assert_eq!(suite::active_channels(&mut c).await, Vec::<String>::new());
        assert!(!exists(&mut c, &key).await);
    })
    .await;
}

/// Holder with a 1 s lease never unlocks (guard forgotten): a waiter with try_lock(5 s)
/// gets the lock when the lease runs out (~1 s), bounded by the holder's TTL and not by
/// its own 5 s wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_leased_holder_is_taken_within_its_ttl() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wake-crash");
    let holder = client(&server, &ns, WATCHDOG).await;
    let waiter = client(&server, &ns, WATCHDOG).await;
    in_task(async move {
        let t0 = Instant::now();
        let g = holder
            .lock("crashed")
            .lock_with_lease(Duration::from_secs(1))
            .await
            .expect("holder lock");
        assert_eq!(g.lease(), Some(Duration::from_secs(1)));
        std::mem::forget(g);
        let got = waiter
            .lock("crashed")
            .try_lock(Duration::from_secs(5), None)
            .await
            .or_none()
            .expect("try_lock")
            .expect("waiter did not get the lock within 5 s");
        let took = t0.elapsed();
        println!("waiter took over the crashed holder's 1 s lease after {took:?}");
        assert!(
            took >= Duration::from_millis(900),
            "acquired before the lease ran out: {took:?}"
        );
        assert!(
            took < Duration::from_millis(2000),
            "wait not bounded by the holder's TTL: {took:?}"
        );
        got.unlock().await.expect("unlock");
    })
    .await;
}

/// A holder whose Client is dropped without unlocking (watchdog 1 s): a waiter using plain
/// lock() (no wait bound of its own) gets the lock within the watchdog timeout + slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_watchdog_holder_is_taken_within_its_ttl() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wake-crashwd");
    let holder = client(&server, &ns, Duration::from_secs(1)).await;
    let waiter = client(&server, &ns, WATCHDOG).await;
    in_task(async move {
        let g = holder.lock("crashed").lock().await.expect("holder lock");
        std::mem::forget(g);
        drop(holder);
        let t0 = Instant::now();
        let got = tokio::time::timeout(Duration::from_secs(5), waiter.lock("crashed").lock())
            .await
            .expect("waiter still waiting 5 s after the holder's client died (watchdog 1 s)")
            .expect("lock");
        let took = t0.elapsed();
        println!("waiter took over a dead client's watchdog lock after {took:?}");
        assert!(took < Duration::from_millis(2500), "took {took:?}");
        got.unlock().await.expect("unlock");
    })
    .await;
}

/// Force-unlock wakes waiters too: B waits in lock(), another client force-unlocks,
/// B acquires within 500 ms (TTL 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_waiter() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("wake-force");
    let a = client(&server, &ns, WATCHDOG).await;
    let b = client(&server, &ns, WATCHDOG).await;
    let admin = client(&server, &ns, WATCHDOG).await;
    let conn = server.conn().await;
    in_task(async move {
        let hl = a.lock("forced");
        let guard = hl.lock().await.expect("holder lock");
        let bl = b.lock("forced");
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let g = bl.lock().await.expect("waiter lock");
            let _ = tx.send(Instant::now());
            g.unlock().await.expect("waiter unlock");
        });
        assert!(numsub_until(&conn, hl.channel(), Duration::from_secs(3), |n| n >= 1).await);
        tokio::time::sleep(Duration::from_millis(30)).await;
        let t0 = Instant::now();
        assert!(admin
            .lock("forced")
            .force_unlock()
            .await
            .expect("force_unlock"));
        let at = tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("force_unlock did not wake the waiter within 5 s")
            .unwrap();
        let d = at.saturating_duration_since(t0);
        println!("force_unlock -> waiter acquired in {d:?}");
        assert!(d < Duration::from_millis(500), "{d:?}");
        task.await.unwrap();
        assert!(matches!(
            guard.unlock().await,
            Err(lockwise::Error::NotHeld { .. })
        ));
    })
    .await;
}

/// A long waiter shares its channel with short-lived waiters that come and go (each last
/// one out spawns an UNSUBSCRIBE racing the next SUBSCRIBE). The long waiter's channel must
/// stay subscribed: the unlock wakes it promptly (the holder's TTL is 30 s), and at the end
/// no subscription is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_subscription_churn_on_its_channel() {
    let server = RedisServer::start();
    let ns = suite::unique_ns("rc-churn");
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
                        lock.try_lock(Duration::from_millis(3), None)
                            .await
                            .or_none()
                            .unwrap()
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
        let gone = suite::eventually(Duration::from_secs(2), || {
            let mut c = conn.clone();
            let ch = channel.clone();
            async move { suite::numsub(&mut c, &ch).await == 0 }
        })
        .await;
        assert!(gone, "a subscription was left behind");
        assert!(suite::keys_with_pttl(&mut conn).await.is_empty());
    })
    .await;
}
