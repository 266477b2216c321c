//! Small helpers the single-server test files share: a client with a short watchdog, a peer
//! client in the same namespace, bounded awaits, a spawned task as a lock owner, checks of
//! what Redis holds, what `MONITOR` sees, and the README's ACL rules.

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

/// The holders' fields of the lock hash `key`, sorted: every field but a fenced lock's
/// `token` and the waiter mark `waiting`.
pub async fn owner_fields(conn: &mut Conn, key: &str) -> Vec<String> {
    let mut fields: Vec<String> = redis::cmd("HKEYS")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap();
    fields.retain(|f| lockwise_testkit::is_owner_field(f));
    fields.sort();
    fields
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

/// The commands a read-only client may be seen sending (the connection handshake's too).
pub const READ_COMMANDS: &[&str] = &[
    "hello", "auth", "client", "select", "ping", "info", "time", "scan", "exists", "pttl", "get",
    "hget", "hgetall", "llen", "lrange", "zrange", "zcard", "pubsub",
];

/// Every command `MONITOR` saw from now until the returned closure is called (lowercase
/// names, in order).
pub async fn monitor(server: &RedisServer) -> impl FnOnce() -> Vec<String> {
    use futures::StreamExt;
    let client = redis::Client::open(server.url()).unwrap();
    // Sends MONITOR and waits for its OK.
    let monitor = client
        .get_async_monitor()
        .await
        .expect("MONITOR connection");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    let task = tokio::spawn(async move {
        let mut lines = monitor.into_on_message::<String>();
        while let Some(line) = lines.next().await {
            // `<time> [<db> <addr>] "<COMMAND>" ...`
            if let Some(name) = line.split('"').nth(1) {
                into.lock().unwrap().push(name.to_ascii_lowercase());
            }
        }
    });
    move || {
        task.abort();
        std::mem::take(&mut *seen.lock().unwrap())
    }
}

/// The guide's `ACL SETUSER <user> ...` rule (the "ACL" section of `docs/guide/deployments.md`) as arguments after the
/// user name, for namespace `ns` and password `pw`: the tests create the very users the
/// README documents.
pub fn readme_acl_rule(user: &str, ns: &str) -> Vec<String> {
    let readme = include_str!("../../docs/guide/deployments.md");
    let prefix = format!("ACL SETUSER {user} ");
    let line = readme
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("the guide documents `{prefix}...`"));
    line.split_whitespace()
        .skip(3) // ACL SETUSER <user>
        .map(|w| {
            w.replace("lockwise:*", &format!("{ns}:*"))
                .replace(">change-me", ">pw")
        })
        .collect()
}
