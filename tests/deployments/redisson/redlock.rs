//! `RedLockSet` over clients in Redisson's layout: on each independent master the lock is
//! Redisson's RLock of the name, so a Java `RedissonRedLock` (or plain RLocks on those
//! masters) and lockwise's Redlock exclude and wake each other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockwise::{Client, RedLockSet};
use suite::kit::within;
use suite::redisson::RedissonPeer;
use suite::RedisServer;

use super::{client, fields, keys_without_ttl};

const TTL_MS: u64 = 30_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_nodes_hold_redissons_rlock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients: Vec<Client> = Vec::new();
    let mut peers = Vec::new();
    for s in &servers {
        clients.push(client(s, Duration::from_secs(30)).await);
        peers.push(Arc::new(RedissonPeer::connect(s.url()).await));
    }
    let set = RedLockSet::new(&clients);
    let lock = set.lock("job");
    assert_eq!(lock.key(0), Some("job"));
    // Java holds the name on two of the three masters: no quorum for lockwise.
    assert_eq!(peers[0].try_lock("job", 1, TTL_MS).await, None);
    assert_eq!(peers[1].try_lock("job", 1, TTL_MS).await, None);
    assert!(lock
        .try_lock(Duration::ZERO, None)
        .await
        .unwrap_err()
        .is_timeout());
    // The hold it took on the third master is given back (in the background).
    let third = servers[2].conn().await;
    assert!(
        suite::eventually(Duration::from_secs(3), || {
            let mut conn = third.clone();
            async move { !suite::exists(&mut conn, "job").await }
        })
        .await,
        "nothing left behind"
    );
    // Waiting: Java's releases wake it (on the masters whose channels it listens to).
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await.map(|g| (g, Instant::now())) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert_eq!(peers[0].unlock("job", 1, TTL_MS).await, Some(1));
    assert_eq!(peers[1].unlock("job", 1, TTL_MS).await, Some(1));
    let (guard, at) = within(25, waiter).await.unwrap().unwrap();
    assert!(
        at - released < Duration::from_secs(3),
        "{:?}",
        at - released
    );
    // Each master holds Redisson's hash with the same owner field; Java is excluded there.
    for (s, peer) in servers.iter().zip(&peers) {
        let held = fields(&mut s.conn().await, "job").await;
        assert_eq!(held, vec![(guard.owner().to_string(), "1".to_string())]);
        assert!(peer.try_lock("job", 2, TTL_MS).await.is_some());
    }
    guard.unlock().await.unwrap();
    for (s, peer) in servers.iter().zip(&peers) {
        assert_eq!(peer.try_lock("job", 2, TTL_MS).await, None);
        assert_eq!(peer.unlock("job", 2, TTL_MS).await, Some(1));
        assert!(keys_without_ttl(&mut s.conn().await).await.is_empty());
        assert!(peer.bad_payloads().is_empty());
    }
}
