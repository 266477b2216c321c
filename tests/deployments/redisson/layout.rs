//! The key and field layout, byte for byte against the contract's tables: what a lockwise
//! client in Redisson's layout writes and publishes is what Redisson 3.45 – 4.7 writes and
//! publishes for the same object.

use std::time::Duration;

use suite::kit::within;
use suite::RedisServer;

use super::{client, fields, is_owner_field, keys_without_ttl, pttl, record};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlock_is_redissons_hash_channel_and_unlock_message() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    // The watchdog timeout Redisson uses by default: the TTL a watchdog lock is written with.
    let c = client(&server, Duration::from_secs(30)).await;
    let lock = c.lock("invoice:42");
    assert_eq!(lock.key(), "invoice:42");
    assert_eq!(lock.channel(), "redisson_lock__channel:{invoice:42}");
    let seen = record(&server, "redisson_lock__channel:{invoice:42}").await;

    let id = c.id().to_string();
    let (lock2, conn2) = (lock.clone(), conn.clone());
    within(
        20,
        tokio::spawn(async move {
            let mut conn = conn2;
            let outer = lock2.lock().await.unwrap();
            let held = fields(&mut conn, "invoice:42").await;
            assert_eq!(held.len(), 1, "one owner field, nothing else: {held:?}");
            assert!(is_owner_field(&held[0].0, &id), "{held:?}");
            assert_eq!(held[0].1, "1");
            let ttl = pttl(&mut conn, "invoice:42").await;
            assert!(
                (25_000..=30_000).contains(&ttl),
                "watchdog lease 30 s: {ttl}"
            );
            let inner = lock2.lock().await.unwrap();
            assert_eq!(
                fields(&mut conn, "invoice:42").await[0].1,
                "2",
                "re-entry counts"
            );
            inner.unlock().await.unwrap();
            assert_eq!(fields(&mut conn, "invoice:42").await[0].1, "1");
            outer.unlock().await.unwrap();
        }),
    )
    .await
    .unwrap();
    assert!(
        !suite::exists(&mut conn, "invoice:42").await,
        "last unlock deletes"
    );
    assert!(
        suite::eventually(Duration::from_secs(2), || async {
            !seen.lock().unwrap().is_empty()
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["0".to_string()],
        "exactly one message, Redisson's UNLOCK_MESSAGE `0`, at the last unlock"
    );

    // A lease is the TTL, as Redisson's `lock(leaseTime)` writes it.
    let guard = lock.lock_with_lease(Duration::from_secs(5)).await.unwrap();
    let ttl = pttl(&mut conn, "invoice:42").await;
    assert!((4_000..=5_000).contains(&ttl), "{ttl}");
    // forceUnlock: DEL and `0`.
    assert!(lock.force_unlock().await.unwrap());
    assert!(guard.unlock().await.is_err(), "no longer held");
    assert!(
        suite::eventually(Duration::from_secs(2), || async {
            seen.lock().unwrap().len() == 2
        })
        .await
    );
    assert_eq!(seen.lock().unwrap()[1], "0");
    assert!(keys_without_ttl(&mut conn).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_hash_tag_keep_it_as_redisson_does() {
    let server = RedisServer::start();
    let c = client(&server, Duration::from_secs(30)).await;
    let lock = c.lock("{orders}:7");
    assert_eq!(lock.key(), "{orders}:7");
    // prefixName: `p:name` when the name contains `{`.
    assert_eq!(lock.channel(), "redisson_lock__channel:{orders}:7");
    let fenced = c.fenced_lock("{orders}:7");
    assert_eq!(fenced.key(), "{orders}:7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_lock_counts_in_redissons_token_key_on_every_acquire() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, Duration::from_secs(30)).await;
    let lock = c.fenced_lock("ledger");
    let (conn2, id) = (conn.clone(), c.id().to_string());
    within(
        20,
        tokio::spawn(async move {
            let mut conn = conn2;
            let first = lock.lock().await.unwrap();
            let counter: u64 = redis::cmd("GET")
                .arg("redisson_lock_token:{ledger}")
                .query_async(&mut conn)
                .await
                .unwrap();
            assert_eq!(first.token(), counter, "the token is the counter's value");
            assert_eq!(pttl(&mut conn, "redisson_lock_token:{ledger}").await, -1);
            // Owner fields only: Redisson reads every field of a lock hash as an owner.
            let held = fields(&mut conn, "ledger").await;
            assert_eq!(held.len(), 1, "{held:?}");
            assert!(is_owner_field(&held[0].0, &id));
            // As RFencedLock: re-entry draws a new token too.
            let again = lock.lock().await.unwrap();
            assert!(again.token() > first.token());
            assert_eq!(fields(&mut conn, "ledger").await[0].1, "2");
            again.unlock().await.unwrap();
            first.unlock().await.unwrap();
        }),
    )
    .await
    .unwrap();
    assert!(!suite::exists(&mut conn, "ledger").await);
    assert!(keys_without_ttl(&mut conn).await.is_empty());
}
