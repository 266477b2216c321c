//! Both directions on one server: a lockwise client in Redisson's layout and the
//! Redisson-protocol peer (`suite::redisson`) exclude each other, wake each other within a
//! few round trips (not at the TTL), share fencing tokens, and leave no key without a TTL
//! after contention and faults.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::Client;
use suite::checker::{assert_clean, History};
use suite::kit::within;
use suite::redisson::RedissonPeer;
use suite::RedisServer;

use super::{client, keys_without_ttl, TTL, TTL_MS, WOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_waiter_is_woken_by_a_lockwise_unlock() {
    let server = RedisServer::start();
    let c = client(&server, TTL).await;
    let peer = Arc::new(RedissonPeer::connect(server.url()).await);
    let guard = c.lock("orders").lock().await.unwrap();
    assert_eq!(
        peer.try_lock("orders", 1, TTL_MS).await.map(|p| p > 0),
        Some(true)
    );
    let waiter = {
        let peer = peer.clone();
        tokio::spawn(async move {
            let ok = peer
                .lock("orders", 1, TTL_MS, Duration::from_secs(20))
                .await;
            (ok, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.unlock().await.unwrap();
    let (ok, at) = within(25, waiter).await.unwrap();
    assert!(ok, "the Java-side waiter got the lock");
    assert!(
        at - released < WOKEN,
        "woken by the message, not the TTL: {:?}",
        at - released
    );
    assert!(peer.wakeups(&suite::redisson::lock_channel("orders")) >= 1);
    assert_eq!(peer.unlock("orders", 1, TTL_MS).await, Some(1));
    assert!(peer.bad_payloads().is_empty(), "{:?}", peer.bad_payloads());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockwise_waiter_is_woken_by_a_redisson_unlock() {
    let server = RedisServer::start();
    let c = client(&server, TTL).await;
    let peer = RedissonPeer::connect(server.url()).await;
    assert_eq!(peer.try_lock("orders", 7, TTL_MS).await, None);
    // Held by the Java side: lockwise is excluded and sees it locked.
    let lock = c.lock("orders");
    assert!(lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err()
        .is_timeout());
    assert!(lock.is_locked().await.unwrap());
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            (guard, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(peer.unlock("orders", 7, TTL_MS).await, Some(1));
    let (guard, at) = within(25, waiter).await.unwrap();
    assert!(
        at - released < WOKEN,
        "woken by `0`, not the TTL: {:?}",
        at - released
    );
    // And the other way round: the Java side now waits for lockwise.
    assert!(peer.try_lock("orders", 7, TTL_MS).await.is_some());
    guard.unlock().await.unwrap();
    assert_eq!(peer.try_lock("orders", 7, TTL_MS).await, None);
    assert_eq!(peer.unlock("orders", 7, TTL_MS).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_non_reentrant_and_multi_locks_meet_redisson_holders() {
    let server = RedisServer::start();
    let c = client(&server, TTL).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let zero = Duration::ZERO;
    // A Java holder excludes every lockwise mutex kind of the name...
    assert_eq!(peer.try_lock("a", 1, TTL_MS).await, None);
    assert!(c
        .spin_lock("a")
        .try_lock(zero, None)
        .await
        .unwrap_err()
        .is_timeout());
    assert!(c
        .lock("a")
        .non_reentrant()
        .try_lock(zero, None)
        .await
        .unwrap_err()
        .is_timeout());
    assert!(c
        .multi_lock(["a", "b"])
        .try_lock(zero, None)
        .await
        .unwrap_err()
        .is_timeout());
    assert!(
        !suite::exists(&mut server.conn().await, "b").await,
        "all or nothing"
    );
    assert_eq!(peer.unlock("a", 1, TTL_MS).await, Some(1));
    // ... and each of them excludes a Java acquirer, which its release lets in.
    let spin = c.spin_lock("a").lock().await.unwrap();
    assert!(peer.try_lock("a", 1, TTL_MS).await.is_some());
    spin.unlock().await.unwrap();
    let own = c.lock("a").non_reentrant().lock().await.unwrap();
    assert!(peer
        .try_lock_non_reentrant("a", 1, TTL_MS)
        .await
        .is_ok_and(|r| r.is_some()));
    own.unlock().await.unwrap();
    let multi = c.multi_lock(["a", "b"]).lock().await.unwrap();
    assert!(peer.try_lock("b", 1, TTL_MS).await.is_some());
    multi.unlock().await.unwrap();
    assert_eq!(peer.try_lock("b", 1, TTL_MS).await, None);
    assert_eq!(peer.unlock("b", 1, TTL_MS).await, Some(1));
    assert!(keys_without_ttl(&mut server.conn().await).await.is_empty());
}

/// Some tasks of two lockwise clients and some "threads" of two Redisson peers take one lock
/// in turn; every hold is recorded and checked for overlap, and fencing tokens for order.
async fn contend(server: &RedisServer, fenced: bool) {
    let history = Arc::new(History::new());
    let clients: Vec<Client> = vec![client(server, TTL).await, client(server, TTL).await];
    let peers: Vec<Arc<RedissonPeer>> = vec![
        Arc::new(RedissonPeer::connect(server.url()).await),
        Arc::new(RedissonPeer::connect(server.url()).await),
    ];
    const ROUNDS: usize = 15;
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for t in 0..2 {
            let (c, history) = (c.clone(), history.clone());
            let who = format!("lockwise-{i}-{t}");
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let id = history.invoke(&who, "shared");
                    let (release, owner, token): (_, String, Option<u64>) = if fenced {
                        let g = c.fenced_lock("shared").lock().await.unwrap();
                        let (owner, token) = (g.owner().to_string(), g.token());
                        (futures::FutureExt::boxed(g.unlock()), owner, Some(token))
                    } else {
                        let g = c.lock("shared").lock().await.unwrap();
                        let owner = g.owner().to_string();
                        (futures::FutureExt::boxed(g.unlock()), owner, None)
                    };
                    history.ok(&id, &owner, token, None);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    history.release(&id);
                    release.await.unwrap();
                }
            }));
        }
    }
    for (i, peer) in peers.iter().enumerate() {
        for thread in 1..=2u64 {
            let (peer, history) = (peer.clone(), history.clone());
            let who = format!("redisson-{i}-{thread}");
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    let id = history.invoke(&who, "shared");
                    let wait = Duration::from_secs(20);
                    let token = if fenced {
                        let token = peer.lock_fenced("shared", thread, TTL_MS, wait).await;
                        Some(token.expect("fenced lock within the wait") as u64)
                    } else {
                        assert!(peer.lock("shared", thread, TTL_MS, wait).await);
                        None
                    };
                    history.ok(&id, &peer.owner(thread), token, None);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    history.release(&id);
                    assert_eq!(peer.unlock("shared", thread, TTL_MS).await, Some(1));
                }
            }));
        }
    }
    for t in tasks {
        within(120, t).await.unwrap();
    }
    assert_clean(&history.check());
    if fenced {
        assert_clean(&history.check_tokens());
    }
    for p in &peers {
        assert!(p.bad_payloads().is_empty(), "{:?}", p.bad_payloads());
    }
    let mut conn = server.conn().await;
    assert!(!suite::exists(&mut conn, "shared").await);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockwise_and_redisson_contending_never_overlap() {
    let server = RedisServer::start();
    contend(&server, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_across_both_sides() {
    let server = RedisServer::start();
    contend(&server, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_to_redissons_lease_and_a_dead_java_holder_expires() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    // A short watchdog to watch it work: renewed every third, to the full timeout.
    let c = client(&server, Duration::from_millis(1500)).await;
    let guard = c.lock("w").lock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let pttl: i64 = redis::cmd("PTTL")
        .arg("w")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(pttl > 500, "renewed: {pttl}");
    guard.unlock().await.unwrap();
    // A Java holder that died (no renewal, no unlock): lockwise takes the lock at its TTL.
    let peer = RedissonPeer::connect(server.url()).await;
    assert_eq!(peer.try_lock("w", 1, 800).await, None);
    let started = Instant::now();
    let guard = within(10, c.lock("w").lock()).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "bounded by the holder's TTL: {waited:?}"
    );
    // The peer's batched renewal renews its own holds only, never lockwise's.
    assert_eq!(peer.renew(&[("w", &peer.owner(1))], TTL_MS).await, vec![0]);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_leave_no_key_without_a_ttl_and_lose_no_wakeup() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, TTL).await;
    let peer = RedissonPeer::connect(server.url()).await;
    // The subscription connections are killed while a lockwise waiter waits on a Java holder:
    // the waiter subscribes again and looks again, so the unlock after it is not missed.
    assert_eq!(peer.try_lock("f", 1, TTL_MS).await, None);
    let lock = c.lock("f");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|g| (g, Instant::now())) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(suite::kill_pubsub(&mut conn).await >= 1);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    assert_eq!(peer.unlock("f", 1, TTL_MS).await, Some(1));
    let (guard, at) = within(25, waiter).await.unwrap().unwrap();
    assert!(at - released < WOKEN, "{:?}", at - released);
    // The script cache is flushed under both: each side loads its scripts again.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(peer.try_lock("f", 1, TTL_MS).await.is_some());
    guard.unlock().await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(peer.try_lock("f", 1, TTL_MS).await, None);
    // A lockwise client that shuts down with holds releases them and wakes Java waiters.
    assert_eq!(peer.unlock("f", 1, TTL_MS).await, Some(1));
    let _held = c.lock("g").lock().await.unwrap();
    c.shutdown(Duration::from_secs(5)).await;
    assert!(within(10, peer.lock("g", 1, TTL_MS, Duration::from_secs(5))).await);
    assert_eq!(peer.unlock("g", 1, TTL_MS).await, Some(1));
    assert!(keys_without_ttl(&mut conn).await.is_empty());
    assert!(peer.bad_payloads().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_force_unlock_is_seen_as_a_lost_lock() {
    let server = RedisServer::start();
    let c = client(&server, Duration::from_millis(1500)).await;
    let peer = RedissonPeer::connect(server.url()).await;
    let guard = c.lock("lost").lock().await.unwrap();
    let lost = guard.lost();
    // An operator on the Java side force-unlocks it; a Java thread takes it.
    assert!(peer.force_unlock("lost").await);
    assert_eq!(peer.try_lock("lost", 1, TTL_MS).await, None);
    // The watchdog's next renewal finds the hold gone: the guard says so, and its unlock
    // releases nothing of the Java holder's.
    within(5, lost.cancelled()).await;
    assert!(guard.is_lost());
    assert!(guard.unlock().await.is_err());
    assert_eq!(peer.unlock("lost", 1, TTL_MS).await, Some(1));
}
