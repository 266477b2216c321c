//! Small helpers the single-server test files share: a client with a short watchdog, a peer
//! client in the same namespace, bounded awaits, a spawned task as a lock owner, and checks
//! of what Redis holds.

use std::future::Future;
use std::time::Duration;

use lockwise::{Client, Error};

use super::{Conn, RedisServer};

/// Watchdog timeout used by most tests (short, so TTL effects are quick to observe).
pub const WATCHDOG: Duration = Duration::from_secs(1);

/// Awaits `fut`, panicking if it takes longer than `secs` seconds (tests never hang).
pub async fn within<F: Future>(secs: u64, fut: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("operation did not finish in time")
}

/// Runs `fut` in its own spawned tokio task (a well-defined lock owner); returns its output.
pub async fn in_task<F>(fut: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    within(20, tokio::spawn(fut))
        .await
        .expect("test task panicked")
}

/// A client with its own namespace (from `test`) and the given watchdog timeout.
pub async fn client_with(server: &RedisServer, test: &str, watchdog: Duration) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(super::unique_ns(test))
            .watchdog_timeout(watchdog)
            .build(),
    )
    .await
    .expect("build client")
}

/// A client with its own namespace (from `test`) and the [`WATCHDOG`] timeout.
pub async fn fresh_client(server: &RedisServer, test: &str) -> Client {
    client_with(server, test, WATCHDOG).await
}

/// Another Client (another identity) in the same namespace as `of`, so both see the same locks.
pub async fn peer(server: &RedisServer, of: &Client) -> Client {
    within(
        10,
        Client::builder(server.url())
            .namespace(of.namespace().to_string())
            .watchdog_timeout(WATCHDOG)
            .build(),
    )
    .await
    .expect("build peer client")
}

/// `result` is [`Error::NotHeld`] naming `name` (and, being final, not retryable).
pub fn assert_not_held<T>(result: lockwise::Result<T>, name: &str) {
    match result {
        Err(ref e @ Error::NotHeld { name: ref n }) => {
            assert_eq!(n, name, "NotHeld names the lock");
            assert!(!e.is_retryable(), "NotHeld is final");
        }
        Err(e) => panic!("expected Error::NotHeld for {name:?}, got error {e:?}"),
        Ok(_) => panic!("expected Error::NotHeld for {name:?}, got Ok"),
    }
}

/// `HLEN key`.
pub async fn hlen(conn: &mut Conn, key: &str) -> u64 {
    redis::cmd("HLEN").arg(key).query_async(conn).await.unwrap()
}

/// `PTTL key`.
pub async fn pttl(conn: &mut Conn, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

/// Every key in the database has a TTL (the library never leaves a key without one).
pub async fn assert_all_keys_have_ttl(conn: &mut Conn) {
    for (key, pttl) in super::keys_with_pttl(conn).await {
        assert_ne!(pttl, -1, "key {key:?} was left without a TTL");
    }
}

/// Keys under `ns` with their PTTL (each test owns its server, so KEYS is fine).
pub async fn keys_in(conn: &mut Conn, ns: &str) -> Vec<(String, i64)> {
    super::keys_with_pttl(conn)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with(ns))
        .collect()
}

/// Every key under `ns` has a TTL.
pub async fn assert_ns_clean(conn: &mut Conn, ns: &str) {
    for (key, pttl) in keys_in(conn, ns).await {
        assert_ne!(pttl, -1, "key {key:?} left without a TTL");
    }
}
