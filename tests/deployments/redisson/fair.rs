//! `FairLock` in Redisson's layout against the peer's RFairLock: one queue for both sides,
//! served in order; each head woken on its own channel by the other side's release; a
//! waiter that gives up hands the waiters behind it their wait back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use suite::checker::{assert_clean, History};
use suite::kit::within;
use suite::redisson::{fair_channel, fair_queue, fair_timeouts, now_ms, RedissonPeer};
use suite::RedisServer;

use super::{client, keys_without_ttl, TTL, TTL_MS, WOKEN};

/// Redisson's default `fairLockWaitTimeout`, which both sides queue with here.
const FAIR_WAIT_MS: u64 = 300_000;

async fn queue(conn: &mut suite::Conn, name: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(fair_queue(name))
        .arg(0)
        .arg(-1)
        .query_async(conn)
        .await
        .unwrap()
}

async fn deadline(conn: &mut suite::Conn, name: &str, owner: &str) -> Option<f64> {
    redis::cmd("ZSCORE")
        .arg(fair_timeouts(name))
        .arg(owner)
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_queue_served_in_order_across_both_sides() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    // Java holds; then lockwise A, Java B and lockwise C queue, in that order.
    assert_eq!(
        peer.fair_try_lock("q", 1, TTL_MS, FAIR_WAIT_MS, now_ms())
            .await,
        None
    );
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (tx_a, rx_a) = tokio::sync::oneshot::channel::<()>();
    let a = {
        let (lock, order) = (c.fair_lock("q"), order.clone());
        tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(("A", Instant::now()));
            let owner = g.owner().to_string();
            rx_a.await.unwrap();
            g.unlock().await.unwrap();
            owner
        })
    };
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 1
        })
        .await
    );
    let a_owner = queue(&mut conn, "q").await[0].clone();
    assert!(
        a_owner.starts_with(&c.id().to_string()),
        "an owner field: {a_owner}"
    );
    // Its deadline: the holder's PTTL + the wait, on the client's clock.
    let due = deadline(&mut conn, "q", &a_owner).await.unwrap() as i64;
    let expected = now_ms() + TTL_MS as i64 + FAIR_WAIT_MS as i64;
    assert!(
        (due - expected).abs() < 2_000,
        "deadline {due}, expected about {expected}"
    );
    // It listens on its own channel, as a Java fair waiter does.
    assert!(suite::numsub_until(&conn, &fair_channel("q", &a_owner), WOKEN, |n| n == 1).await);
    let b = {
        let (peer, order) = (peer.clone(), order.clone());
        tokio::spawn(async move {
            let ok = peer
                .fair_lock("q", 2, TTL_MS, Duration::from_secs(20), FAIR_WAIT_MS)
                .await;
            order.lock().unwrap().push(("B", Instant::now()));
            assert!(ok);
            assert_eq!(peer.fair_unlock("q", 2, TTL_MS).await, Some(1));
        })
    };
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 2
        })
        .await
    );
    let cw = {
        let (lock, order) = (c.fair_lock("q"), order.clone());
        tokio::spawn(async move {
            let g = lock.lock().await.unwrap();
            order.lock().unwrap().push(("C", Instant::now()));
            g.unlock().await.unwrap();
        })
    };
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 3
        })
        .await
    );
    let released = Instant::now();
    assert_eq!(peer.fair_unlock("q", 1, TTL_MS).await, Some(1));
    assert!(suite::eventually(WOKEN, || async { !order.lock().unwrap().is_empty() }).await);
    assert!(order.lock().unwrap()[0].1 - released < WOKEN);
    tx_a.send(()).unwrap();
    within(20, a).await.unwrap();
    within(20, b).await.unwrap();
    within(20, cw).await.unwrap();
    let names: Vec<&str> = order.lock().unwrap().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["A", "B", "C"], "served in queue order");
    assert!(queue(&mut conn, "q").await.is_empty());
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_and_gives_its_wait_back() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    assert_eq!(
        peer.fair_try_lock("q", 1, TTL_MS, FAIR_WAIT_MS, now_ms())
            .await,
        None
    );
    // lockwise queues with a 1.5 s wait, then a Java waiter queues behind it.
    let lock = c.fair_lock("q");
    let timed = tokio::spawn(async move { lock.try_lock(Duration::from_millis(1500), None).await });
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 1
        })
        .await
    );
    assert_eq!(
        peer.fair_try_lock("q", 2, TTL_MS, FAIR_WAIT_MS, now_ms())
            .await
            .map(|t| t > 0),
        Some(true)
    );
    let java = peer.owner(2);
    let before = deadline(&mut conn, "q", &java).await.unwrap();
    assert!(within(10, timed).await.unwrap().unwrap_err().is_timeout());
    assert_eq!(
        queue(&mut conn, "q").await,
        vec![java.clone()],
        "the lockwise entry left"
    );
    let after = deadline(&mut conn, "q", &java).await.unwrap();
    assert!(
        (before - after - 1500.0).abs() < 200.0,
        "moved forward by the leaver's wait: {before} -> {after}"
    );
    // A dropped lockwise waiter leaves too.
    let lock = c.fair_lock("q");
    let dropped = tokio::spawn(async move { lock.lock().await.map(drop) });
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 2
        })
        .await
    );
    dropped.abort();
    assert!(
        suite::eventually(WOKEN, || async {
            queue(&mut server.conn().await, "q").await.len() == 1
        })
        .await
    );
    peer.fair_acquire_failed("q", 2, FAIR_WAIT_MS).await;
    assert_eq!(peer.fair_unlock("q", 1, TTL_MS).await, Some(1));
    assert!(!suite::exists(&mut conn, &fair_queue("q")).await);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_contention_never_overlaps() {
    let server = RedisServer::start();
    let history = Arc::new(History::new());
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let mut tasks = Vec::new();
    for t in 0..2 {
        let (lock, history) = (c.fair_lock("shared"), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..12 {
                let id = history.invoke(&format!("lockwise-{t}"), "shared");
                let g = lock.lock().await.unwrap();
                history.ok(&id, g.owner(), None, None);
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.release(&id);
                g.unlock().await.unwrap();
            }
        }));
    }
    for thread in 1..=2u64 {
        let (peer, history) = (peer.clone(), history.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..12 {
                let id = history.invoke(&format!("redisson-{thread}"), "shared");
                let wait = Duration::from_secs(30);
                assert!(
                    peer.fair_lock("shared", thread, TTL_MS, wait, FAIR_WAIT_MS)
                        .await
                );
                history.ok(&id, &peer.owner(thread), None, None);
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.release(&id);
                assert_eq!(peer.fair_unlock("shared", thread, TTL_MS).await, Some(1));
            }
        }));
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    assert_clean(&history.check());
    let mut conn = server.conn().await;
    assert!(!suite::exists(&mut conn, "shared").await);
    assert!(!suite::exists(&mut conn, &fair_queue("shared")).await);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}
