//! The `Admin` API and the `lockwise` CLI (`--layout redisson`) read a mixed fleet's locks:
//! those held by Java services (the peer) and by lockwise clients in Redisson's layout,
//! and force-unlock them (waking a Java waiter).

use std::process::{Command, Stdio};
use std::time::Duration;

use lockwise::LockKind;
use serde_json::Value;
use suite::redisson::{now_ms, RedissonPeer};
use suite::RedisServer;

use super::{client, TTL_MS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_lists_inspects_and_force_unlocks_redisson_locks() {
    let server = RedisServer::start();
    let mut conn = server.conn().await;
    let c = client(&server, Duration::from_secs(30)).await;
    let peer = RedissonPeer::connect(server.url()).await;
    // A Java holder, a Java fenced holder, a lockwise holder, a Java fair holder with a
    // lockwise waiter queued, and an application hash that is no lock.
    assert_eq!(peer.try_lock("java", 3, TTL_MS).await, None);
    let token = peer.try_lock_fenced("ledger", 4, TTL_MS).await.unwrap();
    let guard = c.lock("rust").lock().await.unwrap();
    assert_eq!(
        peer.fair_try_lock("queue", 5, TTL_MS, 300_000, now_ms())
            .await,
        None
    );
    let waiter = {
        let lock = c.fair_lock("queue");
        tokio::spawn(async move { lock.lock().await.map(drop) })
    };
    let _: () = redis::cmd("HSET")
        .arg("user:1")
        .arg("email")
        .arg("a@example.com")
        .query_async(&mut conn)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = c.admin();
    let listing = admin.list().await.unwrap();
    let mut names: Vec<(&str, LockKind)> = listing
        .locks
        .iter()
        .map(|l| (l.name.as_str(), l.kind))
        .collect();
    names.sort_by_key(|(n, _)| *n);
    assert_eq!(
        names,
        [
            ("java", LockKind::Lock),
            ("ledger", LockKind::FencedLock),
            ("queue", LockKind::FairLock),
            ("rust", LockKind::Lock),
        ],
        "every lock hash, and not the application's hash"
    );
    let java = &admin.inspect("java").await.unwrap()[0];
    assert_eq!(java.holders[0].owner, peer.owner(3));
    assert_eq!(java.holders[0].count, 1);
    assert!(java.ttl.is_some_and(|t| t > Duration::from_secs(20)));
    let ledger = &admin.inspect("ledger").await.unwrap()[0];
    assert_eq!(ledger.token, Some(token as u64));
    let queue = &admin.inspect("queue").await.unwrap()[0];
    assert_eq!(queue.queue_len, 1);
    assert!(queue.queue[0].id.starts_with(&c.id().to_string()));
    let rust = &admin.inspect("rust").await.unwrap()[0];
    assert_eq!(rust.holders[0].owner, guard.owner());

    // Force-unlocking the Java fair holder hands the queue on: the lockwise waiter gets it.
    assert_eq!(
        admin.force_unlock("queue").await.unwrap(),
        [LockKind::FairLock]
    );
    suite::kit::within(10, waiter).await.unwrap().unwrap();
    assert_eq!(admin.force_unlock("java").await.unwrap(), [LockKind::Lock]);
    assert!(
        peer.unlock("java", 3, TTL_MS).await.is_none(),
        "no longer held"
    );
    guard.unlock().await.unwrap();
    assert_eq!(peer.unlock("ledger", 4, TTL_MS).await, Some(1));
}

/// Runs `lockwise --url <url> --layout redisson <args> --json`; the parsed document.
fn cli(url: &str, args: &[&str]) -> Value {
    let out = Command::new(suite::child::cli_exe())
        .args(["--url", url, "--layout", "redisson", "--json"])
        .args(args)
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run the lockwise binary");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_and_force_unlocks_a_java_lock() {
    // Built first (on first use it takes longer than the Java lock's 30 s TTL).
    tokio::task::spawn_blocking(suite::child::cli_exe)
        .await
        .unwrap();
    let server = RedisServer::start();
    let peer = RedissonPeer::connect(server.url()).await;
    assert_eq!(peer.try_lock("invoice:42", 9, TTL_MS).await, None);
    let url = server.url().to_string();
    let listing = tokio::task::spawn_blocking({
        let url = url.clone();
        move || cli(&url, &["list"])
    })
    .await
    .unwrap();
    let lock = &listing["locks"][0];
    assert!(lock.is_object(), "{listing}");
    assert_eq!(lock["name"], "invoice:42");
    assert_eq!(lock["holders"][0]["owner"], peer.owner(9));
    // A Java waiter is woken by the CLI's force-unlock (Redisson's `0`).
    let waiter = {
        let peer = std::sync::Arc::new(peer);
        let p = peer.clone();
        (
            peer,
            tokio::spawn(async move {
                p.lock("invoice:42", 10, TTL_MS, Duration::from_secs(20))
                    .await
            }),
        )
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let done =
        tokio::task::spawn_blocking(move || cli(&url, &["force-unlock", "invoice:42", "--yes"]))
            .await
            .unwrap();
    assert_eq!(done["released"], serde_json::json!(["lock"]), "{done}");
    assert!(suite::kit::within(10, waiter.1).await.unwrap());
    assert!(waiter.0.bad_payloads().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reads_and_force_unlocks_a_redisson_read_write_lock() {
    let server = RedisServer::start();
    let c = client(&server, Duration::from_secs(30)).await;
    let peer = std::sync::Arc::new(RedissonPeer::connect(server.url()).await);
    // A Java reader and a lockwise reader share `doc`; a Java writer waits.
    assert_eq!(peer.try_read_lock("doc", 1, TTL_MS).await, None);
    let reader = c.rw_lock("doc").read().lock().await.unwrap();
    let writer = {
        let peer = peer.clone();
        tokio::spawn(async move {
            peer.write_lock("doc", 2, TTL_MS, Duration::from_secs(20))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let admin = c.admin();
    let listing = admin.list().await.unwrap();
    assert_eq!(listing.locks.len(), 1, "{listing:?}");
    let doc = &listing.locks[0];
    assert_eq!((doc.name.as_str(), doc.kind), ("doc", LockKind::RwLock));
    assert!(doc
        .holders
        .iter()
        .all(|h| h.mode == lockwise::HoldMode::Read));
    let mut owners: Vec<&str> = doc.holders.iter().map(|h| h.owner.as_str()).collect();
    owners.sort();
    let mut expected = vec![peer.owner(1), reader.owner().to_string()];
    expected.sort();
    assert_eq!(owners, expected);
    // Force-unlocking it wakes the Java writer (Redisson's `0` on the rwlock channel).
    assert_eq!(admin.force_unlock("doc").await.unwrap(), [LockKind::RwLock]);
    assert!(suite::kit::within(10, writer).await.unwrap());
    assert!(reader.unlock().await.is_err(), "no longer held");
    assert_eq!(peer.write_unlock("doc", 2, TTL_MS).await, Some(1));
    assert!(peer.bad_payloads().is_empty());
}
